package tuner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/exporter"
	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/eppconfig"
	"github.com/gatetuner/gatetuner/tuner/shadow"
	"github.com/gatetuner/gatetuner/tuner/sink"
)

// Estimator estimates a target's live numbers (estimator.Estimator).
type Estimator interface {
	Estimate(ctx context.Context, t estimator.Target, at time.Time) (*estimator.Estimates, error)
}

// Target is one tuning target at run time.
type Target struct {
	Config  config.Target
	Profile gate.Profile
	Sink    sink.Sink
	Est     estimator.Target
	// Records is an exact decision source; nil means the Prometheus model.
	Records DecisionSource
	// Estimator, when set, replaces the Tuner's for this target.
	Estimator Estimator
}

// Tuner runs guarded tuning cycles.
type Tuner struct {
	// Estimator serves targets that have none of their own.
	Estimator Estimator
	// Clock is the time source (time.Now when nil).
	Clock   func() time.Time
	Metrics *exporter.Metrics
	Tracer  trace.Tracer
	Logger  *slog.Logger
	// Seed makes the Prometheus model's draws reproducible.
	Seed uint64

	// counted is, per target, the end of the last window whose decisions
	// went into the shadow counters (windows overlap from cycle to cycle).
	countedMu sync.Mutex
	counted   map[string]time.Time
}

// freshSince returns where this cycle's counter increments start: the end of
// the target's last counted window, or from when there is none.
func (t *Tuner) freshSince(target string, from time.Time) time.Time {
	t.countedMu.Lock()
	defer t.countedMu.Unlock()
	if c, ok := t.counted[target]; ok && c.After(from) {
		return c
	}
	return from
}

func (t *Tuner) markCounted(target string, to time.Time) {
	t.countedMu.Lock()
	defer t.countedMu.Unlock()
	if t.counted == nil {
		t.counted = map[string]time.Time{}
	}
	t.counted[target] = to
}

// subWindows is how many parts the shadow window is split into to judge the
// recommendation's consistency.
const subWindows = 4

// Report is one cycle's decision record: the numbers, the recommendation,
// every guard, and what was done.
type Report struct {
	Target string    `json:"target"`
	At     time.Time `json:"at"`
	Result Result    `json:"result"`
	Hold   *Hold     `json:"hold,omitempty"`
	Mode   string    `json:"mode"`
	// Current are the settings in force.
	Current SettingsView `json:"current"`
	// Recommendation is absent when the cycle stopped before one existed.
	Recommendation *Recommendation `json:"recommendation,omitempty"`
	Guards         []Guard         `json:"guards"`
	// Diff is the exact change the recommendation makes to the EPP config
	// (what was written, or would be).
	Diff string `json:"diff,omitempty"`
	// Changes are the edits the recommendation makes (for --output patch).
	Changes []eppconfig.Change `json:"-"`
	// NewConfig is the edited config text.
	NewConfig []byte               `json:"-"`
	OldConfig []byte               `json:"-"`
	Source    string               `json:"source,omitempty"`
	Estimates *estimator.Estimates `json:"estimates,omitempty"`
	Apply     *ApplyView           `json:"apply,omitempty"`
	Error     string               `json:"error,omitempty"`
	// Shadow are the current and recommended settings' tallies for metrics.
	// shadowCur and shadowRec tally only the decisions no earlier cycle
	// counted (for the counters); shadowScale turns model draws into requests.
	shadowCur, shadowRec *shadow.Counts
	shadowScale          float64
	gateInput            GateInput
	// write is the planned write (set by planCycle when the cycle should
	// write; taken by plan).
	write *writePlan
}

// Hold is why a cycle did not write.
type Hold struct {
	Reason HoldReason `json:"reason"`
	Detail string     `json:"detail"`
}

// Guard is one guard's verdict.
type Guard struct {
	Name   string `json:"name"`
	Pass   bool   `json:"pass"`
	Detail string `json:"detail"`
}

// SettingsView shows settings as the config has them.
type SettingsView struct {
	Mode                  string  `json:"mode"`
	MaxTTFTPenaltyMs      float64 `json:"maxTTFTPenaltyMs"`
	PeakPrefillThroughput float64 `json:"peakPrefillThroughput"`
	PPTSource             string  `json:"pptSource"`
	TTFTSource            string  `json:"ttftSource"`
	AffinityThreshold     float64 `json:"affinityThreshold"`
	// BarTokens is maxTTFTPenaltyMs × peakPrefillThroughput / 1000 (null: no bar).
	BarTokens *float64 `json:"barTokens"`
}

// Recommendation is the settings the tuner would write, with the evidence.
type Recommendation struct {
	Target                string   `json:"target"`
	Mode                  string   `json:"mode"`
	MaxTTFTPenaltyMs      float64  `json:"maxTTFTPenaltyMs"`
	PeakPrefillThroughput float64  `json:"peakPrefillThroughput"`
	EffectiveBarTokens    *float64 `json:"effectiveBarTokens"`
	Confidence            float64  `json:"confidence"`
	Evidence              Evidence `json:"evidence"`
	HoldReason            string   `json:"holdReason,omitempty"`
	candidate             Candidate
}

// Evidence is what the recommendation rests on.
type Evidence struct {
	Source     string         `json:"source"`
	Window     WindowView     `json:"window"`
	Estimates  EstimatesBrief `json:"estimates"`
	Throughput ThroughputNote `json:"throughput"`
	Shadow     ShadowPair     `json:"shadow"`
	// ExcessCost compares current and recommended over the window.
	ExcessCost  CostPair        `json:"excessCost"`
	RestartCost RestartCost     `json:"restartCost"`
	Confidence  ConfidenceParts `json:"confidence"`
	Step        *StepNote       `json:"step,omitempty"`
	GateInput   GateInput       `json:"gateInput"`
	Candidates  int             `json:"candidatesEvaluated"`
	// ReleaseChainFloorTokens is the lowest bar the excess-tokens objective
	// considers (the p99 prompt); 0 with the feedback objective (docs/tuner.md).
	ReleaseChainFloorTokens float64           `json:"releaseChainFloorTokens"`
	BestByMode              map[string]string `json:"bestByMode,omitempty"`
	// Objective is what the recommendation was chosen by.
	Objective ObjectiveView `json:"objective"`
}

// ObjectiveFeedbackTTFTP90 names the tuner's objective: the p90 of the
// estimated time to first token in the feedback replay (docs/tuner.md).
const ObjectiveFeedbackTTFTP90 = "feedback-ttft-p90"

// ObjectiveExcessTokens names the Prometheus model's objective: the
// per-decision excess cost in tokens, with the release-chain floor.
const ObjectiveExcessTokens = "excess-tokens"

// ObjectiveView compares current and recommended settings on the objective.
type ObjectiveView struct {
	Name        string      `json:"name"`
	Current     FeedbackRow `json:"current"`
	Recommended FeedbackRow `json:"recommended"`
	// Ratio is recommended / current estimated TTFT p90 (null when the
	// current one is 0).
	Ratio *float64 `json:"ratio"`
	// SavingOverCooldownTokens is the drop in queued tokens (ahead + own,
	// summed over requests) over a cooldown.
	SavingOverCooldownTokens float64 `json:"savingOverCooldownTokens"`
	// SavingOverCooldownSeconds is the same saving in request-seconds of
	// queueing (tokens ÷ the per-endpoint rate), compared with the restart
	// cost's delay.
	SavingOverCooldownSeconds float64 `json:"savingOverCooldownSeconds"`
	// RateSource is the drain rate that turns tokens into seconds.
	RateSource string `json:"rateSource"`
	// Candidates lists every candidate's numbers, so "why not X?" has an answer.
	Candidates []CandidateView `json:"candidates,omitempty"`
}

// CandidateView is one candidate's standing.
type CandidateView struct {
	Label string `json:"label"`
	Mode  string `json:"mode"`
	// BarTokens is null for no bar.
	BarTokens       *float64 `json:"barTokens"`
	ExcessTokens    float64  `json:"excessTokens"`
	FeedbackP90     float64  `json:"feedbackTTFTP90Seconds"`
	Excluded        string   `json:"excluded,omitempty"`
	ProfileRejected string   `json:"profileRejected,omitempty"`
}

// FeedbackRow is one settings variant's outcome in the feedback replay.
type FeedbackRow struct {
	Settings string `json:"settings"`
	shadow.FeedbackOutcome
}

// WindowView is the shadow window.
type WindowView struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// CutAtApply: the window starts at the last apply's effective time
	// (windows spanning an apply are discarded).
	CutAtApply bool  `json:"cutAtApply"`
	Decisions  int64 `json:"decisions"`
	Known      int64 `json:"known"`
}

// EstimatesBrief are the estimate values the evidence cites.
type EstimatesBrief struct {
	Status          string              `json:"status"`
	DrainRate       *float64            `json:"drainRate"`
	DrainStatus     string              `json:"drainStatus"`
	DrainConfidence float64             `json:"drainConfidence"`
	DrainInterval   *estimator.Interval `json:"drainInterval,omitempty"`
	Nominal         *float64            `json:"nominal"`
	PerRequestRate  *float64            `json:"perRequestRate"`
	PromptP50       *float64            `json:"promptP50"`
	PromptP90       *float64            `json:"promptP90"`
	CachedMean      *float64            `json:"cachedMean"`
	RequestRate     *float64            `json:"requestRate"`
	Reasons         []string            `json:"reasons,omitempty"`
}

// ThroughputNote says what happens to peakPrefillThroughput.
type ThroughputNote struct {
	// Write: the recommendation writes the drain-rate estimate.
	Write bool    `json:"write"`
	Value float64 `json:"value"`
	Note  string  `json:"note"`
}

// ShadowPair are the shadow tallies of current and recommended settings.
type ShadowPair struct {
	Current     ShadowRow `json:"current"`
	Recommended ShadowRow `json:"recommended"`
}

// ShadowRow is one settings variant's shadow result.
type ShadowRow struct {
	Settings string               `json:"settings"`
	Verdicts shadow.VerdictCounts `json:"verdicts"`
	Outcomes shadow.OutcomeCounts `json:"outcomes"`
	Rates    shadow.Rates         `json:"rates"`
	// ExcessTokens is per the window's real decisions (the model's draws scaled).
	ExcessTokens float64 `json:"excessTokens"`
}

// CostPair compares excess cost (tokens over the window, and tokens/s).
type CostPair struct {
	Current            float64  `json:"current"`
	Recommended        float64  `json:"recommended"`
	Ratio              *float64 `json:"ratio"`
	SavingPerSecond    float64  `json:"savingTokensPerSecond"`
	SavingOverCooldown float64  `json:"savingOverCooldownTokens"`
	// Seconds of prefill at the rate used (null when no rate is known).
	CurrentSeconds     *float64 `json:"currentSeconds"`
	RecommendedSeconds *float64 `json:"recommendedSeconds"`
}

// RestartCost is the estimated price of applying (the EPP loses its prefix
// index): the re-prefilled tokens and the queueing they cause.
type RestartCost struct {
	// Tokens is the re-prefill backlog B the restart creates.
	Tokens        float64 `json:"tokens"`
	WarmupSeconds float64 `json:"warmupSeconds"`
	// CapacityTokensPerSecond is the pool's prefill capacity C (the rate
	// that turns tokens into seconds, over all endpoints).
	CapacityTokensPerSecond float64 `json:"capacityTokensPerSecond"`
	// Utilization is the pool's computed prefill over C (null: unknown).
	Utilization *float64 `json:"utilization"`
	// DrainSeconds is how long the backlog takes to drain on the spare
	// capacity, B / (C·(1−ρ)) (null: unknown).
	DrainSeconds *float64 `json:"drainSeconds"`
	// DelaySeconds is the extra queueing the backlog causes, summed over
	// the requests that meet it (request-seconds): λ·B² / (2·C²·(1−ρ)).
	DelaySeconds *float64 `json:"delaySeconds"`
	Formula      string   `json:"formula"`
	// Unknown says what is missing when the cost cannot be estimated at
	// all; the restart-cost guard then holds.
	Unknown string `json:"unknown,omitempty"`
}

// maxRestartUtilization caps ρ in the restart cost: at or past saturation
// the backlog would never drain and the cost would be infinite.
const maxRestartUtilization = 0.95

// ConfidenceParts is the documented confidence formula's factors.
type ConfidenceParts struct {
	Value       float64 `json:"value"`
	Rate        float64 `json:"rate"`
	Source      float64 `json:"source"`
	Sample      float64 `json:"sample"`
	Consistency float64 `json:"consistency"`
}

// StepNote says the recommendation was clamped by the step limit.
type StepNote struct {
	WantedBarTokens  *float64 `json:"wantedBarTokens"`
	ClampedBarTokens *float64 `json:"clampedBarTokens"`
	MaxStep          float64  `json:"maxStep"`
}

// GateInput is the current settings' gate-input distribution.
type GateInput struct {
	PenaltyMs             shadow.Quantiles `json:"penaltyMs"`
	GapMinusMatchedTokens shadow.Quantiles `json:"gapMinusMatchedTokens"`
}

// ApplyView is what the sink did.
type ApplyView struct {
	Outcome    string `json:"outcome"`
	Pending    bool   `json:"pending"`
	Attempts   int    `json:"attempts"`
	Recomputed bool   `json:"recomputed"`
	Seq        int    `json:"seq,omitempty"`
	Hold       string `json:"hold,omitempty"`
}

func (t *Tuner) now() time.Time {
	if t.Clock != nil {
		return t.Clock()
	}
	return time.Now()
}

func (t *Tuner) tracer() trace.Tracer {
	if t.Tracer != nil {
		return t.Tracer
	}
	return noop.NewTracerProvider().Tracer(exporter.TracerName)
}

func (t *Tuner) log() *slog.Logger {
	if t.Logger != nil {
		return t.Logger
	}
	return slog.Default()
}

// Cycle runs one tuning cycle for a target: read, estimate, shadow,
// recommend, guard and — in configmap or rollout mode — write.
func (t *Tuner) Cycle(ctx context.Context, tg *Target) *Report {
	return t.CycleGroup(ctx, []*Target{tg}, nil)[0]
}

// CycleGroup runs one cycle for targets that share one EPP config (filter
// instances of one ConfigMap or file): each target is planned on its own —
// read, estimate, shadow, recommend, guard — and the edits of every target
// that passes all guards are written together through joint, in one write
// and, in rollout mode, one EPP restart. joint must manage all the targets'
// plugins (sink.Merge); it is used only when two or more targets write.
func (t *Tuner) CycleGroup(ctx context.Context, tgs []*Target, joint sink.Sink) []*Report {
	reps := make([]*Report, len(tgs))
	plans := make([]*writePlan, len(tgs))
	starts := make([]time.Time, len(tgs))
	spans := make([]trace.Span, len(tgs))
	ctxs := make([]context.Context, len(tgs))
	finished := false
	defer func() {
		if !finished { // a panic: end the spans before it propagates
			for _, sp := range spans {
				if sp != nil {
					sp.End()
				}
			}
		}
	}()
	var ready []int
	for i, tg := range tgs {
		starts[i] = t.now()
		ctxs[i], spans[i] = t.tracer().Start(ctx, "gatetuner.cycle", trace.WithAttributes(attribute.String("gatetuner.target", tg.Config.Name)))
		reps[i], plans[i] = t.plan(ctxs[i], tg)
		if plans[i] != nil {
			ready = append(ready, i)
		}
	}
	switch {
	case len(ready) == 1 || len(ready) > 1 && joint == nil:
		for _, i := range ready {
			t.apply(ctxs[i], tgs[i].Sink, reps[i], plans[i])
		}
	case len(ready) > 1:
		t.applyJoint(ctx, joint, reps, plans, ready)
	}
	for i, rep := range reps {
		span := spans[i]
		span.SetAttributes(attribute.String("gatetuner.result", string(rep.Result)))
		if rep.Hold != nil {
			span.SetAttributes(attribute.String("gatetuner.hold", string(rep.Hold.Reason)))
		}
		if rep.Result == ResultError {
			span.SetStatus(codes.Error, rep.Error)
		}
		span.End()
		t.record(rep, t.now().Sub(starts[i]))
	}
	finished = true
	return reps
}

// writePlan is a planned write: the guards passed, the mode writes and the
// apply window is open.
type writePlan struct {
	snap    *sink.Snapshot
	changes []eppconfig.Change
	meta    sink.Meta
}

func (t *Tuner) stage(ctx context.Context, name string) (context.Context, trace.Span) {
	return t.tracer().Start(ctx, "gatetuner."+name)
}

// plan runs a cycle up to the write: it returns the report and, when the
// cycle should write, what to write.
func (t *Tuner) plan(ctx context.Context, tg *Target) (*Report, *writePlan) {
	rep := t.planCycle(ctx, tg)
	w := rep.write
	rep.write = nil
	return rep, w
}

func (t *Tuner) planCycle(ctx context.Context, tg *Target) *Report {
	pol := tg.Config.Policy
	now := t.now()
	rep := &Report{Target: tg.Config.Name, At: now, Mode: pol.Mode}

	sctx, span := t.stage(ctx, "read")
	snap, err := tg.Sink.Read(sctx)
	span.End()
	if err != nil {
		rep.Result, rep.Error = ResultError, err.Error()
		rep.Hold = &Hold{Reason: HoldTargetError, Detail: err.Error()}
		return rep
	}
	inst, ok := snap.Instance(tg.Config.Plugin)
	if !ok {
		rep.Result, rep.Error = ResultError, fmt.Sprintf("%s: plugin %q not found", snap.Source, tg.Config.Plugin)
		rep.Hold = &Hold{Reason: HoldTargetError, Detail: rep.Error}
		return rep
	}
	rep.OldConfig = snap.Text
	params := inst.Params
	cur := params.Settings(tg.Profile.MissingSignal)
	rep.Current = viewOf(cur, params)

	held := func(reason HoldReason, detail string) *Report {
		rep.stop(ResultHeld, reason, detail)
		return rep
	}
	if cur.Source == gate.SourceLatencyPredictor {
		return held(HoldUnsupportedTTFTSource, "ttftSource is latencyPredictor: the gate compares predicted milliseconds, which gatetuner neither estimates nor writes; reported only")
	}

	ectx, span := t.stage(ctx, "estimate")
	estr := tg.Estimator
	if estr == nil {
		estr = t.Estimator
	}
	est, err := estr.Estimate(ectx, tg.Est, now)
	span.End()
	if err != nil {
		rep.Result, rep.Error = ResultError, fmt.Sprintf("estimate: %v", err)
		rep.Hold = &Hold{Reason: HoldTargetError, Detail: rep.Error}
		return rep
	}
	rep.Estimates = est

	// The shadow window: the lookback, cut at the last change that took
	// effect (a window spanning an apply mixes two configs).
	from := now.Add(-pol.Lookback)
	window := WindowView{From: from, To: now}
	if eff := lastChange(&snap.State); eff.After(from) {
		window.From, window.CutAtApply = eff, true
	}
	src := tg.Records
	if src == nil {
		m := &Model{Est: est, BlockSizeTokens: *pol.BlockSizeTokens, Seed: t.Seed ^ uint64(now.Unix())}
		if err := m.Usable(); err != nil {
			return held(HoldInconclusive, err.Error())
		}
		src = m
	}
	rep.Source = src.Kind()

	drain, ppt := chooseThroughput(est, params, tg.Config)
	cands := BuildCandidates(CandidateSpec{Current: params, Profile: tg.Profile, DrainRate: drain, TTFTSLOMs: tg.Config.TTFTSLOMs})
	if drain <= 0 {
		return held(HoldInconclusive, ppt.Note)
	}
	settings := make([]gate.Settings, len(cands))
	for i, c := range cands {
		settings[i] = c.Settings
	}

	sctx, span = t.stage(ctx, "shadow")
	parts := make([]*shadow.Accumulator, subWindows)
	for i := range parts {
		parts[i] = shadow.NewAccumulator(settings, drain)
	}
	// The objective's feedback replay runs over the same decisions, in time
	// order, carrying each candidate's own load forward (docs/tuner.md).
	fbRate, fbRates, fbRateSource := feedbackRates(est, params)
	fb := shadow.NewFeedback(settings, shadow.FeedbackOptions{Rate: fbRate, Rates: fbRates, Parts: subWindows,
		PrefixReplicas: src.Kind() == SourceKindRecords})
	span.SetAttributes(attribute.Int("gatetuner.candidates", len(cands)))
	width := window.To.Sub(window.From)
	var fd shadow.FeedbackDecision
	since := t.freshSince(tg.Config.Name, window.From)
	fresh := shadow.NewAccumulator(settings, drain)
	err = src.Replay(sctx, window.From, window.To, func(d *Decision) error {
		if !d.TS.Before(since) {
			fresh.Add(d.Endpoints)
		}
		k := int(float64(subWindows) * float64(d.TS.Sub(window.From)) / float64(width))
		k = min(max(k, 0), subWindows-1)
		ds := parts[k].Add(d.Endpoints)
		parts[k].Observe(&ds[0], d.Observed)
		fd = shadow.FeedbackDecision{At: d.TS.Sub(window.From).Seconds(), Weight: d.Weight, Endpoints: d.Endpoints, Names: d.Names,
			PromptTokens: d.PromptTokens, Chosen: d.Chosen, Part: k}
		fb.Add(&fd)
		return nil
	})
	span.End()
	if err != nil {
		if errors.Is(err, ErrModelData) {
			return held(HoldInconclusive, err.Error())
		}
		rep.Result, rep.Error = ResultError, fmt.Sprintf("shadow: %v", err)
		rep.Hold = &Hold{Reason: HoldTargetError, Detail: rep.Error}
		return rep
	}
	total := make([]shadow.Counts, len(cands))
	var penalty, gap shadow.Sketch
	for _, p := range parts {
		for i := range total {
			total[i].Add(p.Counts(i))
		}
		penalty.Merge(p.PenaltyMs())
		gap.Merge(p.GapMinusMatched())
	}
	window.Decisions, window.Known = total[0].Decisions(), total[0].Known()
	gi := GateInput{PenaltyMs: shadow.QuantilesOf(&penalty), GapMinusMatchedTokens: shadow.QuantilesOf(&gap)}
	rep.gateInput = gi

	// Model draws stand for the window's real requests: scale their excess.
	scale := 1.0
	if src.Kind() == SourceKindModel && window.Decisions > 0 && est.RequestRate.Value != nil {
		scale = *est.RequestRate.Value * width.Seconds() / float64(window.Decisions)
	}
	costs := make([]float64, len(cands))
	for i := range total {
		costs[i] = total[i].ExcessTokens * scale
	}
	// The objective. With gate records: the feedback replay's estimated
	// TTFT p90, which sees the load each candidate's own releases cause
	// (release chains and their queueing) where the per-decision excess
	// cost cannot. With the Prometheus model, which knows where a request's
	// prefix is cached only on its home endpoint, the feedback replay sees
	// every release forfeit the whole prefix and is too pessimistic to act
	// (docs/tuner.md): there the objective is the per-decision excess cost,
	// with the release-chain floor — bars below the p99 prompt length are
	// not recommended, because a released request lands its whole prompt on
	// another endpoint and makes it look over such a bar to the next request.
	outcomes := make([]shadow.FeedbackOutcome, len(cands))
	objective := make([]float64, len(cands))
	for i := range cands {
		outcomes[i] = fb.Outcome(i)
		objective[i] = outcomes[i].P90TTFTSeconds
	}
	objName, floor := ObjectiveFeedbackTTFTP90, 0.0
	if src.Kind() == SourceKindModel {
		objName = ObjectiveExcessTokens
		switch {
		case est.Prompt.P99 != nil:
			floor = *est.Prompt.P99
		case est.Prompt.P90 != nil:
			floor = *est.Prompt.P90
		}
		for i := range cands {
			objective[i] = costs[i]
			if cands[i].Bar < floor {
				objective[i] = math.Inf(1)
			}
		}
	}
	belowFloor := cands[0].Bar < floor
	choice := Choose(cands, objective)
	recIdx, step := clampStep(cands, choice.Best, *pol.MaxStep, floor)
	rc := cands[recIdx]

	rec := &Recommendation{
		Target: tg.Config.Name, Mode: rc.Settings.Mode.String(), MaxTTFTPenaltyMs: rc.Settings.MaxTTFTPenaltyMs,
		PeakPrefillThroughput: rc.Settings.PeakPrefillThroughput, EffectiveBarTokens: barPtr(rc.Bar), candidate: rc,
	}
	rep.Recommendation = rec
	ev := &rec.Evidence
	ev.Source, ev.Window, ev.Estimates, ev.Throughput, ev.Step, ev.GateInput = src.Kind(), window, brief(est), ppt, step, gi
	ev.Candidates = len(cands)
	ev.Objective = objectiveView(cands, outcomes, recIdx, width, pol.Cooldown, fbRateSource)
	ev.ReleaseChainFloorTokens = floor
	for i, c := range cands {
		cv := CandidateView{Label: c.Label, Mode: c.Settings.Mode.String(), BarTokens: barPtr(c.Bar), ExcessTokens: costs[i],
			FeedbackP90: outcomes[i].P90TTFTSeconds, ProfileRejected: c.Invalid}
		if math.IsInf(objective[i], 1) {
			cv.Excluded = "below the release-chain floor"
		}
		ev.Objective.Candidates = append(ev.Objective.Candidates, cv)
	}
	if objName == ObjectiveExcessTokens {
		ev.Objective.Name = objName
		ev.Objective.Ratio = nil
		if costs[0] > 0 {
			r := costs[recIdx] / costs[0]
			ev.Objective.Ratio = &r
		}
		ev.Objective.SavingOverCooldownTokens = costPair(costs[0], costs[recIdx], width, pol.Cooldown, 0).SavingOverCooldown
	}
	ev.BestByMode = map[string]string{}
	if choice.BestStatic >= 0 {
		ev.BestByMode["static"] = cands[choice.BestStatic].Label
	}
	if choice.BestMatched >= 0 {
		ev.BestByMode["matchedTokens"] = cands[choice.BestMatched].Label
	}
	rate := drain
	ev.Shadow = ShadowPair{Current: row(cands[0], &total[0], scale), Recommended: row(rc, &total[recIdx], scale)}
	rep.shadowCur, rep.shadowRec, rep.shadowScale = fresh.Counts(0), fresh.Counts(recIdx), scale
	t.markCounted(tg.Config.Name, window.To)
	ev.ExcessCost = costPair(costs[0], costs[recIdx], width, pol.Cooldown, rate)
	ev.RestartCost = restartCost(est, pol.RestartWarmup, fbRate, fbRates)
	if fbRate > 0 {
		ev.Objective.SavingOverCooldownSeconds = ev.Objective.SavingOverCooldownTokens / fbRate
	}

	// Confidence (docs/tuner.md): rate × source × sample × consistency.
	cp := ConfidenceParts{Rate: 1, Source: 1, Sample: 1, Consistency: 1}
	if ppt.Write {
		cp.Rate = est.DrainRate.Confidence
	}
	if src.Kind() == SourceKindModel {
		cp.Source = 0.9 * snapshotCoverage(est, window)
	}
	cp.Sample = math.Min(1, float64(window.Known)/float64(5**pol.MinDecisions))
	if objName == ObjectiveExcessTokens {
		cp.Consistency = consistencyExcess(parts, recIdx)
	} else {
		cp.Consistency = consistency(fb, recIdx)
	}
	if belowFloor {
		cp.Consistency = 1 // a safety correction, not a bet on the shadow
	}
	cp.Value = cp.Rate * cp.Source * cp.Sample * cp.Consistency
	ev.Confidence = cp
	rec.Confidence = cp.Value

	// The edit the recommendation makes.
	changes := changesFor(inst, params, rc, ppt.Write)
	rep.Changes = changes
	if len(changes[0].Set) > 0 || len(changes[0].Remove) > 0 {
		if out, diff, err := snap.Preview(changes); err == nil {
			rep.NewConfig, rep.Diff = out, diff
		} else {
			return held(HoldTargetError, fmt.Sprintf("the recommended edit is refused: %v", err))
		}
	}

	_, span = t.stage(ctx, "guards")
	hold := t.guard(rep, tg, snap, params, cur, rc, belowFloor, now)
	span.End()
	if hold != nil {
		return held(hold.Reason, hold.Detail)
	}
	if pol.Mode == config.ModeOff {
		rep.Result = ResultRecommended
		return rep
	}
	if w := pol.ApplyWindow; w != nil {
		if open, next := windowOpen(w, now); !open {
			rep.Result = ResultPending
			rep.Hold = &Hold{Reason: HoldOutsideWindow, Detail: fmt.Sprintf("the apply window opens at %s", next.UTC().Format(time.RFC3339))}
			rec.HoldReason = string(HoldOutsideWindow)
			return rep
		}
	}

	rep.write = &writePlan{snap: snap, changes: changes, meta: sink.Meta{
		Kind: sink.KindApply, Reason: applyReason(rep), Evidence: evidenceLine(rep), RecommendationHash: recHash(rec),
	}}
	return rep
}

// apply writes one target's plan through sk and records the outcome on rep.
func (t *Tuner) apply(ctx context.Context, sk sink.Sink, rep *Report, p *writePlan) {
	actx, span := t.stage(ctx, "apply")
	defer span.End()
	res, err := sk.Apply(actx, p.snap, p.changes, p.meta)
	applied(rep, res, err)
}

// applyJoint writes the plans of several targets sharing one EPP config in
// one write through joint. The config is read again; if a key one of the
// plans owns changed since that plan read it, nothing is written
// (changed-externally) — the next cycle plans on the fresh content.
func (t *Tuner) applyJoint(ctx context.Context, joint sink.Sink, reps []*Report, plans []*writePlan, ready []int) {
	actx, span := t.stage(ctx, "apply")
	defer span.End()
	var names []string
	for _, i := range ready {
		names = append(names, reps[i].Target)
	}
	span.SetAttributes(attribute.StringSlice("gatetuner.targets", names))
	fail := func(result Result, reason HoldReason, detail string) {
		for _, i := range ready {
			reps[i].stop(result, reason, detail)
		}
	}
	snap, err := joint.Read(actx)
	if err != nil {
		fail(ResultError, HoldTargetError, fmt.Sprintf("joint write with %s: %v", strings.Join(names, ", "), err))
		return
	}
	var changes []eppconfig.Change
	var reasons, evidence, hashes []string
	for _, i := range ready {
		p := plans[i]
		for _, ch := range p.changes {
			before, _ := p.snap.Instance(ch.Plugin)
			now, ok := snap.Instance(ch.Plugin)
			if !ok || !slices.Equal(before.Owned, now.Owned) {
				fail(ResultHeld, HoldChangedExternally, fmt.Sprintf("%s: the settings of %s changed between the cycle's read and the joint write with %s; the next cycle plans on the fresh content",
					snap.Source, ch.Target, strings.Join(names, ", ")))
				return
			}
		}
		changes = append(changes, p.changes...)
		reasons = append(reasons, reps[i].Target+": "+p.meta.Reason)
		evidence = append(evidence, reps[i].Target+": "+p.meta.Evidence)
		hashes = append(hashes, p.meta.RecommendationHash)
	}
	sum := sha256.Sum256([]byte(strings.Join(hashes, "+")))
	res, err := joint.Apply(actx, snap, changes, sink.Meta{Kind: sink.KindApply, Reason: strings.Join(reasons, " | "),
		Evidence: strings.Join(evidence, " | "), RecommendationHash: hex.EncodeToString(sum[:8])})
	for _, i := range ready {
		applied(reps[i], res, err)
	}
}

// applied records a sink write's outcome on rep.
func applied(rep *Report, res *sink.Result, err error) {
	if err != nil {
		rep.Result, rep.Error = ResultError, fmt.Sprintf("apply: %v", err)
		return
	}
	rep.Apply = &ApplyView{Outcome: string(res.Outcome), Pending: res.Pending, Attempts: res.Attempts, Recomputed: res.Recomputed}
	if res.Entry != nil {
		rep.Apply.Seq = res.Entry.Seq
	}
	if res.Diff != "" {
		rep.Diff = res.Diff
	}
	switch res.Outcome {
	case sink.OutcomeApplied, sink.OutcomeUnchanged:
		rep.Result = ResultApplied
	case sink.OutcomeRolledBack:
		rep.Result = ResultRolledBack
		if res.Hold != nil {
			rep.Hold = &Hold{Reason: HoldReason(res.Hold.Reason), Detail: res.Hold.Message}
			rep.Apply.Hold = res.Hold.String()
		}
	case sink.OutcomeHeld:
		h := res.Hold
		if h == nil {
			h = &sink.Hold{Reason: "unknown"}
		}
		rep.Apply.Hold = h.String()
		rep.stop(ResultHeld, HoldReason(h.Reason), h.Message)
	}
}

// stop ends the report with result (held or error) for reason.
func (rep *Report) stop(result Result, reason HoldReason, detail string) {
	rep.Result, rep.Hold = result, &Hold{Reason: reason, Detail: detail}
	if result == ResultError {
		rep.Error = detail
	}
	if rep.Recommendation != nil {
		rep.Recommendation.HoldReason = string(reason)
	}
}

// guard checks every guard in order, records each, and returns the first hold.
func (t *Tuner) guard(rep *Report, tg *Target, snap *sink.Snapshot, params gate.Params, cur gate.Settings, rc Candidate, belowFloor bool, now time.Time) *Hold {
	pol := tg.Config.Policy
	ev := &rep.Recommendation.Evidence
	var first *Hold
	check := func(name string, pass bool, reason HoldReason, detail string) {
		rep.Guards = append(rep.Guards, Guard{Name: name, Pass: pass, Detail: detail})
		if !pass && first == nil {
			first = &Hold{Reason: reason, Detail: detail}
		}
	}
	st := &snap.State
	check("pause", !st.Paused, HoldPaused, ifElse(st.Paused, "the ConfigMap carries gatetuner.dev/paused: \"true\"", "not paused"))
	if st.Hold != nil {
		check("failure-hold", false, HoldReason(st.Hold.Reason), st.Hold.String()+" (remove the gatetuner.dev/hold annotation to resume)")
	} else {
		check("failure-hold", true, "", "no failure hold")
	}
	check("pending-restart", st.Pending == nil, HoldPendingRestart, ifElse(st.Pending != nil,
		"the last write is not running in the EPP yet (restart the EPP to apply it)", "the EPP runs the config on the target"))
	check("data", ev.Window.Known >= int64(*pol.MinDecisions), HoldNoDecisions,
		fmt.Sprintf("%d decisions with a known verdict in the window (minimum %d)", ev.Window.Known, *pol.MinDecisions))
	check("confidence", rep.Recommendation.Confidence >= *pol.MinConfidence, HoldLowConfidence,
		fmt.Sprintf("confidence %.2f (rate %.2f × source %.2f × sample %.2f × consistency %.2f), minimum %.2f",
			rep.Recommendation.Confidence, ev.Confidence.Rate, ev.Confidence.Source, ev.Confidence.Sample, ev.Confidence.Consistency, *pol.MinConfidence))
	check("change", !rc.Current && rep.Diff != "", HoldNoGain, ifElse(rc.Current || rep.Diff == "", "the current settings are the best candidate", "the recommendation differs from the current settings"))
	db := deadband(cur, rc, *pol.Deadband)
	check("deadband", db == "", HoldDeadband, ifElse(db != "", db, "the decisive bar moves beyond the deadband or the mode changes"))
	obj := &ev.Objective
	ratio := math.Inf(1)
	if obj.Ratio != nil {
		ratio = *obj.Ratio
	}
	gainDetail := fmt.Sprintf("recommended estimated TTFT p90 %.3gs vs current %.3gs (ratio %.2f, must be ≤ %.2f)",
		obj.Recommended.P90TTFTSeconds, obj.Current.P90TTFTSeconds, ratio, *pol.GainRatio)
	if obj.Name == ObjectiveExcessTokens {
		gainDetail = fmt.Sprintf("recommended excess cost %.4g tokens vs current %.4g (ratio %.2f, must be ≤ %.2f)",
			ev.ExcessCost.Recommended, ev.ExcessCost.Current, ratio, *pol.GainRatio)
	}
	if belowFloor {
		// A bar below the release-chain floor is a hazard, not a matter of degree.
		detail := fmt.Sprintf("the current bar is below the release-chain floor (%.0f tokens, the p99 prompt): raised regardless of the shadow's per-decision cost", ev.ReleaseChainFloorTokens)
		check("gain", true, HoldNoGain, detail)
		check("restart-cost", true, HoldRestartCost, detail)
	} else {
		if obj.Name == ObjectiveExcessTokens {
			// Materiality: the saving must be felt by the pool.
			work := computedTokenRate(rep.Estimates)
			saving := ev.ExcessCost.SavingPerSecond
			pass := work > 0 && saving >= *pol.MinGainShare*work
			detail := fmt.Sprintf("excess saved %.4g tokens/s vs the pool's computed prefill %.4g tokens/s (%.1f %%, must be ≥ %.0f %%)",
				saving, work, 100*saving/math.Max(work, 1e-9), 100**pol.MinGainShare)
			if work <= 0 {
				detail = "the pool's computed prefill rate is unknown (request rate, prompt and cached-token means)"
			}
			check("gain-share", pass, HoldNoGain, detail)
		}
		check("gain", ratio <= *pol.GainRatio, HoldNoGain, gainDetail)
		check(restartGuard(obj, &ev.RestartCost, pol.Cooldown))
	}
	calibrated := params.PPTSource() == gate.PPTCalibrated && !tg.Config.AllowCalibrationOverride
	check("calibration", !calibrated, HoldCalibrated, ifElse(calibrated,
		fmt.Sprintf("peakPrefillThroughput comes from calibration file %q and its value is unknown here; set allowCalibrationOverride to let gatetuner write it", params.PrefillCalibrationFile),
		"no calibrated throughput is overridden"))
	eff := lastChange(st)
	cooling := !eff.IsZero() && now.Sub(eff) < pol.Cooldown
	applies := st.AppliesSince(now.Add(-pol.BudgetWindow))
	if belowFloor && rc.Bar >= ev.ReleaseChainFloorTokens {
		// Raising a bar out of the release-chain hazard does not wait.
		detail := "a raise out of the release-chain hazard is not delayed"
		check("cooldown", true, HoldCooldown, detail+fmt.Sprintf(" (last change %s ago)", now.Sub(eff).Round(time.Second)))
		check("budget", true, HoldBudget, detail+fmt.Sprintf(" (%d applies in the last %s)", applies, pol.BudgetWindow))
		return first
	}
	check("cooldown", !cooling, HoldCooldown, ifElse(cooling,
		fmt.Sprintf("the last change took effect %s ago (cooldown %s)", now.Sub(eff).Round(time.Second), pol.Cooldown), "no change within the cooldown"))
	check("budget", applies < *pol.DailyBudget, HoldBudget, fmt.Sprintf("%d applies in the last %s (budget %d)", applies, pol.BudgetWindow, *pol.DailyBudget))
	return first
}

// computedTokenRate is the pool's computed (uncached) prefill tokens per
// second: request rate × (mean prompt − mean cached); 0 when unknown.
func computedTokenRate(e *estimator.Estimates) float64 {
	if e == nil || e.RequestRate.Value == nil || e.Prompt.Mean == nil || e.Cached.Mean == nil {
		return 0
	}
	return *e.RequestRate.Value * math.Max(0, *e.Prompt.Mean-*e.Cached.Mean)
}

func ifElse(c bool, a, b string) string {
	if c {
		return a
	}
	return b
}

// lastChange is when the newest write took effect, or — while it is
// pending — when it was written.
func lastChange(st *sink.State) time.Time {
	t := st.EffectiveAt
	if st.Pending != nil && st.Pending.Since.After(t) {
		t = st.Pending.Since
	}
	for _, e := range st.History {
		if e.EffectiveAt != nil && e.EffectiveAt.After(t) {
			t = *e.EffectiveAt
		}
	}
	return t
}

// deadband returns why the change is inside the deadband ("" when it is not).
func deadband(cur gate.Settings, rc Candidate, band float64) string {
	if rc.Settings.Mode != cur.Mode {
		return ""
	}
	a, b := CurrentBar(cur), rc.Bar
	if math.IsInf(a, 1) || math.IsInf(b, 1) {
		if math.IsInf(a, 1) && math.IsInf(b, 1) {
			return "no bar before or after"
		}
		return ""
	}
	if rel := math.Abs(b/a - 1); rel < band {
		return fmt.Sprintf("the bar moves %.0f → %.0f tokens (%.1f %%), inside the %.0f %% deadband", a, b, rel*100, band*100)
	}
	return ""
}

// clampStep moves the recommendation at most ×/÷ maxStep from the current
// bar (clamped, not held): the candidate of the same mode nearest to the
// clamped bar.
func clampStep(cands []Candidate, best int, maxStep, floor float64) (int, *StepNote) {
	cur := cands[0].Bar
	want := cands[best].Bar
	if best == 0 || math.IsInf(cur, 1) || maxStep <= 1 {
		return best, nil
	}
	lo, hi := cur/maxStep, cur*maxStep
	target := want
	switch {
	case math.IsInf(want, 1) || want > hi*(1+1e-9):
		target = hi
	case want < lo*(1-1e-9):
		target = lo
	default:
		return best, nil
	}
	idx, bestD := best, math.Inf(1)
	for i, c := range cands[1:] {
		if c.Settings.Mode != cands[best].Settings.Mode || math.IsInf(c.Bar, 1) || (c.Bar < floor && c.Bar < lo) {
			continue
		}
		if d := barDistance(c.Bar, target); d < bestD {
			idx, bestD = i+1, d
		}
	}
	return idx, &StepNote{WantedBarTokens: barPtr(want), ClampedBarTokens: barPtr(cands[idx].Bar), MaxStep: maxStep}
}

func barPtr(b float64) *float64 {
	if math.IsInf(b, 1) {
		return nil
	}
	return &b
}

// chooseThroughput returns the rate written as peakPrefillThroughput and a
// note. The drain-rate estimate is written when conclusive (or a labelled
// prior); otherwise the configured value is kept — the token bar the gate
// decides on does not depend on it — and the note says why.
func chooseThroughput(est *estimator.Estimates, params gate.Params, t config.Target) (float64, ThroughputNote) {
	d := est.DrainRate
	calibrated := params.PPTSource() == gate.PPTCalibrated
	if d.Value != nil && (d.Status == estimator.StatusOK || d.Status == estimator.StatusPrior) && !calibrated {
		note := fmt.Sprintf("drain-rate estimate (%s, confidence %.2f)", d.Method, d.Confidence)
		if d.Prior {
			note = fmt.Sprintf("prior %s (%s), live evidence insufficient", d.Source, d.Method)
		}
		return math.Round(*d.Value), ThroughputNote{Write: true, Value: math.Round(*d.Value), Note: note}
	}
	why := "drain rate inconclusive"
	if len(d.Reasons) > 0 {
		why += " (" + reasonsOf(d.Reasons) + ")"
	}
	if calibrated {
		if t.AllowCalibrationOverride && d.Value != nil && d.Status == estimator.StatusOK {
			return math.Round(*d.Value), ThroughputNote{Write: true, Value: math.Round(*d.Value), Note: "drain-rate estimate over the calibrated value (allowCalibrationOverride)"}
		}
		return 0, ThroughputNote{Note: "peakPrefillThroughput is calibrated and its value unknown here; " + why}
	}
	return params.PeakPrefillThroughput, ThroughputNote{Value: params.PeakPrefillThroughput,
		Note: fmt.Sprintf("kept the configured %.0f tok/s (%s): only maxTTFTPenaltyMs moves, which sets the token bar exactly", params.PeakPrefillThroughput, why)}
}

// changesFor is the edit that turns the current parameters into the candidate's.
func changesFor(inst sink.InstanceState, params gate.Params, rc Candidate, writePPT bool) []eppconfig.Change {
	ch := eppconfig.Change{Target: inst.Target(), Set: map[gate.Key]eppconfig.Value{}}
	s := rc.Settings
	if s.MaxTTFTPenaltyMs != params.MaxTTFTPenaltyMs || !params.Present.Has(gate.KeyMaxTTFTPenaltyMs) {
		ch.Set[gate.KeyMaxTTFTPenaltyMs] = eppconfig.Number(s.MaxTTFTPenaltyMs)
	}
	if writePPT && (s.PeakPrefillThroughput != params.PeakPrefillThroughput || !params.Present.Has(gate.KeyPeakPrefillThroughput)) {
		ch.Set[gate.KeyPeakPrefillThroughput] = eppconfig.Number(s.PeakPrefillThroughput)
	}
	if s.Mode != params.PenaltyMode {
		if s.Mode == gate.ModeStatic && params.Present.Has(gate.KeyPenaltyMode) {
			ch.Set[gate.KeyPenaltyMode] = eppconfig.String("static")
		} else if s.Mode == gate.ModeMatchedTokens {
			ch.Set[gate.KeyPenaltyMode] = eppconfig.String("matchedTokens")
		}
	}
	if rc.Current {
		ch.Set = map[gate.Key]eppconfig.Value{}
	}
	return []eppconfig.Change{ch}
}

func viewOf(s gate.Settings, p gate.Params) SettingsView {
	v := SettingsView{Mode: s.Mode.String(), MaxTTFTPenaltyMs: s.MaxTTFTPenaltyMs, PeakPrefillThroughput: s.PeakPrefillThroughput,
		PPTSource: p.PPTSource().String(), TTFTSource: s.Source.String(), AffinityThreshold: s.AffinityThreshold}
	v.BarTokens = barPtr(CurrentBar(s))
	return v
}

func brief(e *estimator.Estimates) EstimatesBrief {
	b := EstimatesBrief{Status: string(e.Status), DrainRate: e.DrainRate.Value, DrainStatus: string(e.DrainRate.Status),
		DrainConfidence: e.DrainRate.Confidence, DrainInterval: e.DrainRate.Interval, Nominal: e.Nominal.Value,
		PerRequestRate: e.PerRequestRate.Value, PromptP50: e.Prompt.P50, PromptP90: e.Prompt.P90, CachedMean: e.Cached.Mean,
		RequestRate: e.RequestRate.Value}
	for _, r := range e.Reasons {
		b.Reasons = append(b.Reasons, r.Part+":"+string(r.Code))
	}
	return b
}

func row(c Candidate, counts *shadow.Counts, scale float64) ShadowRow {
	return ShadowRow{Settings: c.Settings.String(), Verdicts: counts.Verdicts, Outcomes: counts.Outcomes,
		Rates: shadow.RatesOf(counts), ExcessTokens: counts.ExcessTokens * scale}
}

func costPair(cur, rec float64, width, cooldown time.Duration, rate float64) CostPair {
	c := CostPair{Current: cur, Recommended: rec}
	if cur > 0 {
		r := rec / cur
		c.Ratio = &r
	}
	if width > 0 {
		c.SavingPerSecond = (cur - rec) / width.Seconds()
		c.SavingOverCooldown = c.SavingPerSecond * cooldown.Seconds()
	}
	if rate > 0 {
		a, b := cur/rate, rec/rate
		c.CurrentSeconds, c.RecommendedSeconds = &a, &b
	}
	return c
}

// restartCost estimates what an EPP restart costs. For the warm-up,
// requests land without affinity, and on N endpoints a request finds its
// prefix on the endpoint it lands on with probability 1/N: B = requestRate ×
// mean cached × warm-up × (N−1)/N tokens are prefilled again. That backlog
// drains only on the pool's spare capacity C·(1−ρ), and every request that
// arrives meanwhile queues behind what is left of it (spread over the
// endpoints, B(t)/C seconds), so the delay summed over requests is
// ∫λ·B(t)/C dt = λ·B² / (2·C²·(1−ρ)) request-seconds — quadratic in the
// backlog and steep near saturation, which is what the closed loop measured
// (docs/tuner.md). rate and rates are the per-endpoint prefill rates the
// objective uses.
func restartCost(e *estimator.Estimates, warmup time.Duration, rate float64, rates map[string]float64) RestartCost {
	rc := RestartCost{WarmupSeconds: warmup.Seconds(),
		Formula: "backlog B = requestRate × mean cached × warm-up × (N−1)/N; delay = λ·B² / (2·C²·(1−ρ))"}
	n := float64(len(e.Routing.Endpoints))
	var missing []string
	if e.RequestRate.Value == nil {
		missing = append(missing, "request rate")
	}
	if e.Cached.Mean == nil {
		missing = append(missing, "mean cached tokens")
	}
	if n < 1 {
		missing = append(missing, "routed endpoints")
	}
	if len(missing) > 0 {
		rc.Unknown = strings.Join(missing, ", ") + " unknown"
		return rc
	}
	lambda := *e.RequestRate.Value
	rc.Tokens = lambda * *e.Cached.Mean * warmup.Seconds() * (n - 1) / n
	for _, ep := range e.Routing.Endpoints {
		r, ok := rates[ep.Endpoint]
		if !ok {
			r = rate
		}
		rc.CapacityTokensPerSecond += r
	}
	work := computedTokenRate(e)
	if rc.CapacityTokensPerSecond <= 0 || work <= 0 {
		rc.Formula += " (capacity or computed prefill unknown: delay not priced)"
		return rc
	}
	rho := work / rc.CapacityTokensPerSecond
	rc.Utilization = &rho
	spare := rc.CapacityTokensPerSecond * (1 - math.Min(rho, maxRestartUtilization))
	drain := rc.Tokens / spare
	delay := lambda * rc.Tokens * rc.Tokens / (2 * rc.CapacityTokensPerSecond * spare)
	rc.DrainSeconds, rc.DelaySeconds = &drain, &delay
	return rc
}

// restartGuard compares the saving over a cooldown with the restart's
// cost: in request-seconds of queueing when the delay is priced, else (the
// pool's utilization unknown) in tokens; it holds when the cost is unknown.
func restartGuard(obj *ObjectiveView, rc *RestartCost, cooldown time.Duration) (string, bool, HoldReason, string) {
	if rc.Unknown != "" {
		return "restart-cost", false, HoldRestartCost, fmt.Sprintf("the restart cost cannot be estimated (%s): nothing is written without it", rc.Unknown)
	}
	if rc.DelaySeconds != nil {
		return "restart-cost", obj.SavingOverCooldownSeconds > *rc.DelaySeconds, HoldRestartCost,
			fmt.Sprintf("saving over a %s cooldown %.4g request-seconds vs restart cost %.4g request-seconds (backlog %.4g tokens drains in %.0fs at utilization %.0f %%)",
				cooldown, obj.SavingOverCooldownSeconds, *rc.DelaySeconds, rc.Tokens, *rc.DrainSeconds, 100**rc.Utilization)
	}
	return "restart-cost", obj.SavingOverCooldownTokens > rc.Tokens, HoldRestartCost,
		fmt.Sprintf("saving over a %s cooldown %.4g tokens vs restart cost %.4g tokens (utilization unknown: the queueing is not priced)", cooldown, obj.SavingOverCooldownTokens, rc.Tokens)
}

// snapshotCoverage is the fraction of the window's expected snapshots present.
func snapshotCoverage(e *estimator.Estimates, w WindowView) float64 {
	step := e.InFlight.StepSeconds
	if step <= 0 {
		return 0
	}
	want := w.To.Sub(w.From).Seconds() / step
	got := 0
	for _, s := range e.InFlight.Snapshots {
		if !s.Time.Before(w.From) && s.Time.Before(w.To) {
			got++
		}
	}
	if want <= 0 {
		return 0
	}
	return math.Min(1, float64(got)/math.Floor(want))
}

// consistencyExcess is the fraction of sub-windows (with known verdicts) in
// which the recommendation costs no more than the current settings.
func consistencyExcess(parts []*shadow.Accumulator, rec int) float64 {
	n, ok := 0, 0
	for _, p := range parts {
		if p.Counts(0).Known() == 0 {
			continue
		}
		n++
		if p.Counts(rec).ExcessTokens <= p.Counts(0).ExcessTokens {
			ok++
		}
	}
	if n == 0 {
		return 0
	}
	return float64(ok) / float64(n)
}

// consistency is the fraction of sub-windows (with decisions) in which the
// recommendation's objective is no worse than the current settings'.
func consistency(fb *shadow.Feedback, rec int) float64 {
	n, ok := 0, 0
	for p := 0; p < fb.Parts(); p++ {
		cur := fb.PartOutcome(p, 0)
		if cur.Decisions == 0 {
			continue
		}
		n++
		if fb.PartOutcome(p, rec).P90TTFTSeconds <= cur.P90TTFTSeconds {
			ok++
		}
	}
	if n == 0 {
		return 0
	}
	return float64(ok) / float64(n)
}

// feedbackRates returns the drain rates the feedback replay turns tokens
// into seconds with: the drain-rate estimate (per endpoint where measured),
// else the nominal estimate, else the configured peakPrefillThroughput; and
// which one it used.
func feedbackRates(est *estimator.Estimates, params gate.Params) (float64, map[string]float64, string) {
	perPod := func(r *estimator.RateEstimate) map[string]float64 {
		m := map[string]float64{}
		for _, p := range r.PerPod {
			if p.Value > 0 && !math.IsInf(p.Value, 0) {
				m[p.Pod] = p.Value
			}
		}
		return m
	}
	for _, c := range []struct {
		r    *estimator.RateEstimate
		name string
	}{{&est.DrainRate, "drain-rate estimate"}, {&est.Nominal, "nominal estimate"}} {
		if c.r.Value != nil && *c.r.Value > 0 && !math.IsInf(*c.r.Value, 0) && c.r.Status != estimator.StatusInconclusive {
			return *c.r.Value, perPod(c.r), c.name
		}
	}
	return params.PeakPrefillThroughput, nil, "configured peakPrefillThroughput"
}

// objectiveView is the evidence of the objective for current and recommended.
func objectiveView(cands []Candidate, outcomes []shadow.FeedbackOutcome, rec int, width, cooldown time.Duration, rateSource string) ObjectiveView {
	v := ObjectiveView{Name: ObjectiveFeedbackTTFTP90, RateSource: rateSource,
		Current:     FeedbackRow{Settings: cands[0].Settings.String(), FeedbackOutcome: outcomes[0]},
		Recommended: FeedbackRow{Settings: cands[rec].Settings.String(), FeedbackOutcome: outcomes[rec]}}
	if c := outcomes[0].P90TTFTSeconds; c > 0 {
		r := outcomes[rec].P90TTFTSeconds / c
		v.Ratio = &r
	}
	if width > 0 {
		v.SavingOverCooldownTokens = (outcomes[0].QueueTokens - outcomes[rec].QueueTokens) / width.Seconds() * cooldown.Seconds()
	}
	return v
}

func applyReason(rep *Report) string {
	r := rep.Recommendation
	return fmt.Sprintf("%s: bar %s → %s tokens; wrongly held %s → %s", r.Mode, barText(rep.Current.BarTokens), barText(r.EffectiveBarTokens),
		pctText(r.Evidence.Shadow.Current.Rates.WronglyHeld), pctText(r.Evidence.Shadow.Recommended.Rates.WronglyHeld))
}

func evidenceLine(rep *Report) string {
	ev := rep.Recommendation.Evidence
	parts := []string{
		fmt.Sprintf("source %s, %d decisions (%d known)", ev.Source, ev.Window.Decisions, ev.Window.Known),
		fmt.Sprintf("excess %.3g → %.3g tokens", ev.ExcessCost.Current, ev.ExcessCost.Recommended),
		fmt.Sprintf("confidence %.2f", rep.Recommendation.Confidence),
		"ppt: " + ev.Throughput.Note,
	}
	return strings.Join(parts, "; ")
}

func barText(b *float64) string {
	if b == nil {
		return "none"
	}
	return fmt.Sprintf("%.0f", *b)
}

func pctText(v *float64) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", *v*100)
}

func recHash(r *Recommendation) string {
	b, _ := json.Marshal([]any{r.Target, r.Mode, r.MaxTTFTPenaltyMs, r.PeakPrefillThroughput})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// windowOpen reports whether now falls in an apply window, and when the
// next opens.
func windowOpen(w *config.ApplyWindow, now time.Time) (bool, time.Time) {
	sched, err := config.ParseSchedule(w.Schedule)
	if err != nil {
		return false, time.Time{}
	}
	// The latest activation at or before now is the first one after now−duration, if ≤ now.
	if act := sched.Next(now.Add(-w.Duration)); !act.After(now) {
		return true, act
	}
	return false, sched.Next(now)
}
