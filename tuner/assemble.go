package tuner

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/gatetuner/gatetuner/tuner/decide"
	"github.com/gatetuner/gatetuner/tuner/eppconfig"
	"github.com/gatetuner/gatetuner/tuner/sink"
)

// cycle is one target's cycle up to the write: each stage's typed result,
// as far as the cycle got, and the halt that ended it.
type cycle struct {
	now      time.Time
	read     *targetRead
	evidence *gathered
	recent   *recentEstimate
	outcome  *decide.Outcome
	halt     *decide.Halt
}

// assemble builds the cycle's report from what it gathered and decided.
func (c *cycle) assemble(tg *Target) *Report {
	rep := &Report{Target: tg.Config.Name, At: c.now, Mode: tg.Config.Policy.Mode}
	if c.read != nil {
		rep.OldConfig = c.read.snap.Text
		rep.Current = decide.SettingsOf(c.read.cur, c.read.params)
	}
	if ev := c.evidence; ev != nil {
		rep.Estimates = ev.est
		rep.cost = &cycleCost{queries: ev.queries}
	}
	h := c.halt
	if d := c.outcome; d != nil {
		rep.Source, rep.Recommendation, rep.Guards, rep.Approval = d.Source, d.Recommendation, d.Guards, d.Approval
		rep.Changes, rep.NewConfig, rep.Diff = d.Changes, d.NewConfig, d.Diff
		if s := d.Shadow; s != nil {
			rep.shadowCur, rep.shadowRec, rep.shadowScale, rep.gateInput = s.Current, s.Recommended, s.Scale, s.GateInput
			rep.cost.replayed = s.Replayed
		}
		if c.recent != nil {
			rep.cost.queries += c.recent.queries
		}
		rep.Result, h = d.Result, d.Halt
	}
	if h != nil {
		rep.stop(h.Result, h.Reason, h.Detail)
	}
	return rep
}

// writePlan is what the cycle writes (nil: nothing).
func (c *cycle) writePlan() *writePlan {
	if c.outcome == nil || c.outcome.Write == nil {
		return nil
	}
	w := c.outcome.Write
	return &writePlan{snap: c.read.snap, changes: w.Changes, meta: sink.Meta{Kind: sink.KindApply, Reason: w.Reason, Evidence: w.Evidence,
		RecommendationHash: w.Hash}}
}

// writePlan is a planned write: the guards passed, the mode writes and the
// apply window is open.
type writePlan struct {
	snap    *sink.Snapshot
	changes []eppconfig.Change
	meta    sink.Meta
}

// apply writes one target's plan through sk and records the outcome on rep.
func (t *Tuner) apply(ctx context.Context, sk sink.Sink, rep *Report, p *writePlan) {
	actx, span := t.stage(ctx, "apply")
	defer span.End()
	res, err := sk.Apply(actx, p.snap, p.changes, p.meta)
	applied(rep, res, err)
}

// applyJoint writes the plans of several targets sharing one EPP config in
// one write through joint, over the config read again with each plan's
// instance as that plan read it (Snapshot.AsRead): if a key one of the plans
// owns changed since, the sink writes nothing (changed-externally) and the
// next cycle plans on the fresh content.
func (t *Tuner) applyJoint(ctx context.Context, joint sink.Sink, reps []*Report, plans []*writePlan, ready []int) {
	actx, span := t.stage(ctx, "apply")
	defer span.End()
	var names []string
	for _, i := range ready {
		names = append(names, reps[i].Target)
	}
	span.SetAttributes(attribute.StringSlice("gatetuner.targets", names))
	snap, err := joint.Read(actx)
	if err != nil {
		for _, i := range ready {
			reps[i].stop(ResultError, HoldTargetError, fmt.Sprintf("joint write with %s: %v", strings.Join(names, ", "), err))
		}
		return
	}
	var changes []eppconfig.Change
	var reads []*sink.Snapshot
	var reasons, evidence, hashes []string
	for _, i := range ready {
		p := plans[i]
		changes = append(changes, p.changes...)
		reads = append(reads, p.snap)
		reasons = append(reasons, reps[i].Target+": "+p.meta.Reason)
		evidence = append(evidence, reps[i].Target+": "+p.meta.Evidence)
		hashes = append(hashes, p.meta.RecommendationHash)
	}
	// The entry records every target's recommendation hash (approve mode
	// never writes one twice: sink.State.WrittenHash).
	res, err := joint.Apply(actx, snap.AsRead(reads...), changes, sink.Meta{Kind: sink.KindApply, Reason: strings.Join(reasons, " | "),
		Evidence: strings.Join(evidence, " | "), RecommendationHash: strings.Join(hashes, "+")})
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
