package tuner

import (
	"time"

	"github.com/gatetuner/gatetuner/tuner/decide"
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
