package tuner

import (
	"context"
	"fmt"
	"time"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/decide"
	"github.com/gatetuner/gatetuner/tuner/sink"
	"github.com/gatetuner/gatetuner/tuner/source"
)

// targetRead is the read stage's result: the config snapshot, the target's
// filter instance, its parameters and the settings in force.
type targetRead struct {
	snap   *sink.Snapshot
	inst   sink.InstanceState
	params gate.Params
	cur    gate.Settings
}

// readTarget reads the target's EPP config and finds its filter instance.
func (t *Tuner) readTarget(ctx context.Context, tg *Target) (*targetRead, *decide.Halt) {
	sctx, span := t.stage(ctx, "read")
	snap, err := tg.Sink.Read(sctx)
	span.End()
	if err != nil {
		return nil, failed(err.Error())
	}
	inst, ok := snap.Instance(tg.Config.Plugin)
	if !ok {
		return nil, failed(fmt.Sprintf("%s: plugin %q not found", snap.Source, tg.Config.Plugin))
	}
	return &targetRead{snap: snap, inst: inst, params: inst.Params, cur: inst.Params.Settings(tg.Profile.MissingSignal)}, nil
}

// failed is a halt for a read that could not be made (target-error).
func failed(detail string) *decide.Halt {
	return &decide.Halt{Result: ResultError, Reason: HoldTargetError, Detail: detail}
}

// gathered is the evidence stage's result: the lookback's estimates (as
// read, for the report, and as the decision reads them), the history's
// spans, the decision stream, and the Prometheus queries they took.
type gathered struct {
	est     *estimator.Estimates
	input   decide.Input
	queries int
}

// gatherEvidence reads what the decision weighs: the lookback's estimates,
// each span of the history's own (day.go) and the decisions' source.
func (t *Tuner) gatherEvidence(ctx context.Context, tg *Target, mem *Memory, read *targetRead, now time.Time) (*gathered, *decide.Halt) {
	est, err := t.estimate(ctx, tg, read.params, now)
	if err != nil {
		return nil, failed(fmt.Sprintf("estimate: %v", err))
	}
	pol := tg.Config.Policy
	g := &gathered{est: est}
	window := decide.HistoryWindow(now, pol, &read.snap.State)
	lookback := estimateOf(est)
	day, raws := t.daySpans(ctx, tg, mem, read.params, est, lookback, window, now)
	g.queries = est.Queries.Queries + day.Queries.Queries
	src, down := t.decisionStream(ctx, tg, est, day, raws, now)
	snap := read.snap
	g.input = decide.Input{Now: now, Lookback: lookback, Window: window, Day: day, Source: src, SourceDown: down,
		Target: decide.Target{Name: tg.Config.Name, Profile: tg.Profile, Policy: pol, TTFTSLOMs: tg.Config.TTFTSLOMs,
			AllowCalibrationOverride: tg.Config.AllowCalibrationOverride},
		Config: decide.Config{Instance: read.inst.Target(), Params: read.params, Current: read.cur, State: &snap.State, Preview: snap.Preview,
			ApproveCommand: func(hash string) string { return ApproveCommand(snap.Target, hash) }},
	}
	return g, nil
}

// estimate runs the target's estimator (or the Tuner's).
func (t *Tuner) estimate(ctx context.Context, tg *Target, params gate.Params, now time.Time) (*estimator.Estimates, error) {
	ectx, span := t.stage(ctx, "estimate")
	defer span.End()
	return t.estimatorFor(tg).Estimate(ectx, estimatorTarget(tg, params), now)
}

// estimatorTarget is the target's estimator target, reading the in-flight
// series of the gate's own producer (inFlightLoadProducerName) unless the
// target names one.
func estimatorTarget(tg *Target, params gate.Params) estimator.Target {
	et := tg.Est
	if et.InFlightProducer == "" {
		et.InFlightProducer = params.InFlightLoadProducerName
	}
	return et
}

// healthReporter is a decision source that can say it is down (a records stream).
type healthReporter interface{ Err() error }

// decisionStream is the stream of the history's decisions: the target's
// records, or the Prometheus model over the estimates (each span drawn from
// its own when the estimator has span estimates); down says why a records
// stream is down.
func (t *Tuner) decisionStream(ctx context.Context, tg *Target, est *estimator.Estimates, day *decide.Day, raws []*estimator.Estimates, now time.Time) (decide.Decisions, string) {
	if src := tg.Records; src != nil {
		if hr, ok := src.(healthReporter); ok {
			if err := hr.Err(); err != nil {
				return streamOf(ctx, src), err.Error()
			}
		}
		return streamOf(ctx, src), ""
	}
	pol := tg.Config.Policy
	m := &Model{Est: est, BlockSizeTokens: *pol.BlockSizeTokens, Seed: t.Seed ^ uint64(now.Unix()), EndpointBudget: *pol.ModelEndpointBudget}
	if day.PerWindow {
		// Each span draws from its own seed (the Tuner's and its start): a
		// later cycle redraws a completed window's decisions exactly.
		m.Seed = t.Seed
		for i, s := range day.Spans {
			m.Spans = append(m.Spans, source.Span{From: s.From, To: s.To, Est: raws[i]})
		}
	}
	return streamOf(ctx, m), ""
}

// recentEstimate is the gather stage's estimate of the last minutes'
// traffic and the queries it took.
type recentEstimate struct {
	recent  *decide.Recent
	queries int
}

// decided is the estimate as the decision reads it (nil: none).
func (r *recentEstimate) decided() *decide.Recent {
	if r == nil {
		return nil
	}
	return r.recent
}

// gatherRecent estimates the last minutes' traffic when the decision prices
// a restart now (w.RecentSpan) and the estimator gives span estimates;
// nil otherwise.
func (t *Tuner) gatherRecent(ctx context.Context, tg *Target, read *targetRead, w *decide.Weighed) *recentEstimate {
	from, to, ok := w.RecentSpan()
	if !ok {
		return nil
	}
	se, ok := t.estimatorFor(tg).(SpanEstimator)
	if !ok {
		return nil
	}
	r := &recentEstimate{recent: &decide.Recent{From: from, To: to}}
	e, err := se.EstimateSpan(ctx, estimatorTarget(tg, read.params), from, to)
	if err != nil {
		r.recent.Err = err.Error()
		return r
	}
	r.recent.Est, r.queries = trafficOf(e), e.Queries.Queries
	return r
}
