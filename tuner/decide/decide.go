package decide

import (
	"fmt"
	"math"
	"time"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/eppconfig"
	"github.com/gatetuner/gatetuner/tuner/policy"
	"github.com/gatetuner/gatetuner/tuner/shadow"
)

// Halt ends a cycle before the write: the result (held, pending or
// error), the reason and why.
type Halt struct {
	Result Result
	Reason HoldReason
	Detail string
}

func held(reason HoldReason, detail string) *Halt {
	return &Halt{Result: ResultHeld, Reason: reason, Detail: detail}
}

func failed(detail string) *Halt {
	return &Halt{Result: ResultError, Reason: HoldTargetError, Detail: detail}
}

// Write is what a cycle whose guards passed writes: the changes, and the
// history entry's reason, evidence and recommendation hash.
type Write struct {
	Changes  []eppconfig.Change
	Reason   string
	Evidence string
	Hash     string
}

// Outcome is what a cycle decided: the recommendation with its evidence,
// every guard's verdict, the edit, and the write — or the halt that ends
// the cycle without one. Fields a stage did not reach are zero.
type Outcome struct {
	// Source is the decision source's kind ("" before one was chosen).
	Source         string
	Recommendation *Recommendation
	Guards         []Guard
	// Changes are the edits the recommendation makes; NewConfig and Diff
	// the config text they produce and its diff.
	Changes   []eppconfig.Change
	NewConfig []byte
	Diff      string
	Approval  *ApprovalView
	// Result is ResultRecommended (mode off) or, with Write, the write to
	// make; Halt is set instead when the cycle stops.
	Result Result
	Halt   *Halt
	Write  *Write
	// Shadow is what the replay tallied, for the metrics (nil before it ran).
	Shadow *ShadowTally
}

// ShadowTally is the replay's tally for the metrics: the current and
// recommended settings over the decisions no earlier cycle counted, the
// factor that turns model draws into requests, the gate-input distribution
// and how many decisions the cycle replayed.
type ShadowTally struct {
	Current, Recommended *shadow.Counts
	Scale                float64
	GateInput            GateInput
	Replayed             int64
	Candidates           int
}

// Admit is the first decision, on the config alone: a target whose gate
// compares predicted milliseconds (ttftSource latencyPredictor) is reported
// only, unless the token bar is its only gate.
func Admit(prof gate.Profile, cur gate.Settings) *Halt {
	if cur.Source == gate.SourceLatencyPredictor && !TokenBarOnly(prof, cur) {
		return held(HoldUnsupportedTTFTSource, latencyPredictorDetail(prof))
	}
	return nil
}

// Weighed is the weigh stage's result: the recommendation and its evidence
// up to the restart's price now, which needs the last minutes' estimate.
type Weighed struct {
	in *Input
	d  *Outcome
	// rc is the candidate recommended; rp, obj, ch and ppt the replay, the
	// objective, the choice and the throughput note behind the evidence;
	// plan and priced the apply window and the restart's price there.
	rc     Candidate
	rp     *replayed
	obj    objective
	ch     choice
	ppt    ThroughputNote
	plan   applyPlan
	priced RestartCost
}

// RecentSpan is the stretch of the latest traffic whose estimate prices a
// restart now, when the write would happen now (ok false: none is needed).
func (w *Weighed) RecentSpan() (from, to time.Time, ok bool) {
	if w.d.Halt != nil || !w.plan.view.Open || w.plan.view.Unknown != "" {
		return time.Time{}, time.Time{}, false
	}
	return w.in.Now.Add(-RecentSpan(w.in.Target.Policy)), w.in.Now, true
}

// Weigh decides everything but the restart's price now: the decision
// source, the throughput written, the candidates, the shadow replay (the
// decisions consumed from in.Source), the day-level choice, the evidence
// and the apply window. It continues and updates the target's carried
// replay (c).
func Weigh(in *Input, c *Carry) *Weighed {
	w := &Weighed{in: in, d: &Outcome{}}
	w.d.Halt = w.weigh(c)
	return w
}

func (w *Weighed) weigh(c *Carry) *Halt {
	in, pol := w.in, w.in.Target.Policy
	// A data reason yields to the target's state (docs/holds.md's order).
	if h := sourceHalt(in); h != nil {
		return w.stateFirst(h)
	}
	kind := in.Source.Kind()
	w.d.Source = kind
	drain, ppt := chooseThroughputFor(in.Lookback, in.Config.Params, in.Target)
	if drain <= 0 {
		return w.stateFirst(held(HoldInconclusive, ppt.Note))
	}
	ri, ratesHeld := replayRates(c.stream, in.Lookback, in.Config.Params, drain, &ppt)
	cands := BuildCandidates(CandidateSpec{Current: in.Config.Params, Profile: in.Target.Profile, DrainRate: ri.drain, TTFTSLOMs: in.Target.TTFTSLOMs})
	drain = ri.drain
	for _, cd := range cands {
		ri.settings = append(ri.settings, cd.Settings)
	}
	rp, h := replay(in, c, &ri)
	if h != nil {
		if h.Reason == HoldInconclusive {
			h = w.stateFirst(h)
		}
		return h
	}
	w.rp, w.ppt = rp, ppt
	w.d.Shadow = &ShadowTally{GateInput: rp.gateInput, Replayed: rp.replay.Decisions, Candidates: len(cands)}
	w.obj = objectiveFor(kind, in.Lookback, *pol.BlockSizeTokens)
	w.ch = choose(cands, w.obj, rp, *pol.MaxStep, *pol.MinDecisions)
	w.rc = cands[w.ch.rec]
	rec := evidence(in.Target, kind, in.Lookback, drain, ppt, cands, rp, w.obj, w.ch)
	rec.Evidence.Day = dayView(pol, cands, rp, w.obj, w.ch, in.Day)
	rec.Evidence.Replay = rp.replay
	rec.Evidence.Replay.RatesHeld = ratesHeld
	w.plan, w.priced = applyWindow(pol, in.Now, rec, in.Day, rp)
	w.d.Recommendation = rec
	w.d.Shadow.Current, w.d.Shadow.Recommended, w.d.Shadow.Scale = rp.fresh.Counts(0), rp.fresh.Counts(w.ch.rec), rp.scale
	return nil
}

// sourceHalt holds when the decision source cannot give the history's
// decisions: a records stream that is down, a model that cannot draw.
func sourceHalt(in *Input) *Halt {
	if in.SourceDown != "" {
		return held(HoldRecordsUnavailable, in.SourceDown)
	}
	if m, ok := in.Source.(Model); ok {
		if err := m.Usable(); err != nil {
			return held(HoldInconclusive, err.Error())
		}
	}
	return nil
}

// stateFirst returns the target-state guards' hold in place of a data
// stage's h when one of them holds (recording their verdicts), else h.
func (w *Weighed) stateFirst(h *Halt) *Halt {
	probe := &Outcome{}
	if first := runGuards(probe, &guardContext{now: w.in.Now, state: w.in.Config.State}, stateGuards); first != nil {
		w.d.Guards = append(w.d.Guards, probe.Guards...)
		return held(first.Reason, first.Detail)
	}
	return h
}

// Settle ends the decision: it prices a restart now on the last minutes'
// traffic (recent, nil when not needed or not estimated), then the
// confidence, the edit, the guards, and the write or why not.
func Settle(w *Weighed, recent *Recent) *Outcome {
	if w.d.Halt != nil {
		return w.d
	}
	w.d.Halt = w.settle(recent)
	return w.d
}

func (w *Weighed) settle(recent *Recent) *Halt {
	in, pol, rec := w.in, w.in.Target.Policy, w.d.Recommendation
	rec.Evidence.RestartCost = w.priceNow(recent)
	rec.Evidence.Confidence = confidence(pol, in.Lookback, in.Day, w.d.Source, w.ppt, w.rp, w.obj, w.ch)
	rec.Confidence = rec.Evidence.Confidence.Value
	if h := w.edit(); h != nil {
		return h
	}
	g := &guardContext{now: in.Now, pol: pol, state: in.Config.State, params: in.Config.Params, cur: in.Config.Current, rc: w.rc, rec: rec,
		est: in.Lookback, diff: w.d.Diff, allowCalib: in.Target.AllowCalibrationOverride, belowFloor: w.ch.belowFloor, apply: rec.Evidence.Day.ApplyWindow}
	if first := runGuards(w.d, g, append(append([]guardFunc(nil), stateGuards...), recommendationGuards...)); first != nil {
		return held(first.Reason, first.Detail)
	}
	return w.writeOrHold(g)
}

// priceNow is the restart's price where the write will happen: when that
// is now, the larger of the window's usual price and the price on the last
// minutes' traffic.
func (w *Weighed) priceNow(recent *Recent) RestartCost {
	rc := w.priced
	if recent == nil || recent.Est == nil {
		return rc
	}
	pol, rp := w.in.Target.Policy, w.rp
	arrivals := recent.Est
	if s := w.in.Day.usual(w.plan.index, w.in.Now); w.in.Day.PerWindow && s != nil {
		arrivals = s.Est
	}
	return priceNow(rc, PriceRestart(recent.Est, arrivals, pol.RestartWarmup, rp.fbRate, rp.fbRates), recent, w.plan.view)
}

// edit computes the change the recommendation makes and previews it; a
// refused edit holds (target-error).
func (w *Weighed) edit() *Halt {
	d, cfg := w.d, &w.in.Config
	d.Changes = changesFor(cfg.Instance, cfg.Params, w.rc, w.ppt.Write)
	d.Recommendation.Hash = recHash(w.in.Target.Name, d.Changes)
	if len(d.Changes[0].Set) == 0 && len(d.Changes[0].Remove) == 0 {
		return nil
	}
	out, diff, err := cfg.Preview(d.Changes)
	if err != nil {
		return held(HoldTargetError, fmt.Sprintf("the recommended edit is refused: %v", err))
	}
	d.NewConfig, d.Diff = out, diff
	return nil
}

// writeOrHold ends a cycle whose guards passed: mode off recommends, mode
// approve writes only an approved hash, a closed apply window leaves it
// pending, else it is the write.
func (w *Weighed) writeOrHold(g *guardContext) *Halt {
	d := w.d
	if g.pol.Mode == policy.ModeOff {
		d.Result = ResultRecommended
		return nil
	}
	if g.pol.Mode == policy.ModeApprove {
		if h := w.approval(); h != nil {
			return h
		}
	}
	if v := windowGuard(g); !v.pass {
		if v.reason == HoldApplyWindowUnknown {
			return held(v.reason, v.detail)
		}
		return &Halt{Result: ResultPending, Reason: v.reason, Detail: v.detail}
	}
	rec := d.Recommendation
	d.Write = &Write{Changes: d.Changes, Reason: applyReason(SettingsOf(w.in.Config.Current, w.in.Config.Params).BarTokens, rec),
		Evidence: evidenceLine(rec), Hash: rec.Hash}
	return nil
}

// evidence builds the recommendation with what it rests on.
func evidence(tg Target, kind string, est *Estimate, drain float64, ppt ThroughputNote, cands []Candidate, r *replayed, obj objective, ch choice) *Recommendation {
	pol := tg.Policy
	rc := cands[ch.rec]
	rec := &Recommendation{
		Target: tg.Name, Mode: rc.Settings.Mode.String(), MaxTTFTPenaltyMs: rc.Settings.MaxTTFTPenaltyMs,
		PeakPrefillThroughput: rc.Settings.PeakPrefillThroughput, EffectiveBarTokens: barPtr(rc.Bar), Candidate: rc,
	}
	rec.MaxTokensInFlightPenalty = rc.Settings.MaxTokensInFlightPenalty
	ev := &rec.Evidence
	ev.Source, ev.Window, ev.Estimates, ev.Throughput, ev.Step, ev.GateInput = kind, r.window, est.Brief, ppt, ch.step, r.gateInput
	ev.Candidates = len(cands)
	ev.Objective = objectiveView(cands, r.outcomes, ch.rec, r.width, savingHorizon(pol), r.fbRateSource)
	ev.ReleaseChainFloorTokens = ch.floor
	for i, c := range cands {
		cv := CandidateView{Label: c.Label, Mode: c.Settings.Mode.String(), BarTokens: barPtr(c.Bar), ExcessTokens: r.costs[i],
			FeedbackP90: r.outcomes[i].P90TTFTSeconds, ProfileRejected: c.Invalid}
		switch {
		case math.IsInf(ch.scores[i], 1):
			cv.Excluded = "below the release-chain floor"
		case !ch.eligible[i]:
			cv.Excluded = "worse than the current settings by more than 10 % in some window of the day"
		}
		ev.Objective.Candidates = append(ev.Objective.Candidates, cv)
	}
	obj.amend(&ev.Objective, r, ch, savingHorizon(pol))
	ev.BestByMode = map[string]string{}
	if ch.best.BestStatic >= 0 {
		ev.BestByMode["static"] = cands[ch.best.BestStatic].Label
	}
	if ch.best.BestMatched >= 0 {
		ev.BestByMode["matchedTokens"] = cands[ch.best.BestMatched].Label
	}
	ev.Shadow = ShadowPair{Current: row(cands[0], &r.total[0], r.scale), Recommended: row(rc, &r.total[ch.rec], r.scale)}
	ev.ExcessCost = costPair(r.costs[0], r.costs[ch.rec], r.width, savingHorizon(pol), drain)
	ev.RestartCost = restartCost(&est.Traffic, pol.RestartWarmup, r.fbRate, r.fbRates)
	if r.fbRate > 0 {
		ev.Objective.SavingOverCooldownSeconds = ev.Objective.SavingOverCooldownTokens / r.fbRate
	}
	return rec
}

// confidence is the documented formula (docs/tuner.md): rate × source ×
// sample × consistency.
func confidence(pol policy.Policy, lookback *Estimate, day *Day, kind string, ppt ThroughputNote, r *replayed, obj objective, ch choice) ConfidenceParts {
	cp := ConfidenceParts{Rate: 1, Source: 1, Sample: 1, Consistency: 1}
	if ppt.Write {
		cp.Rate = lookback.Drain.Confidence
	}
	if kind == SourceKindModel {
		cp.Source = 0.9 * snapshotCoverage(lookback, day, r.window)
	}
	cp.Sample = math.Min(1, float64(r.window.Known)/float64(5**pol.MinDecisions))
	cp.Consistency = obj.consistency(r, ch.rec)
	if ch.belowFloor {
		cp.Consistency = 1 // a safety correction, not a bet on the shadow
	}
	cp.Value = cp.Rate * cp.Source * cp.Sample * cp.Consistency
	return cp
}

// Tally returns the replay's tally (nil when the cycle halted before it).
func (w *Weighed) Tally() *ShadowTally { return w.d.Shadow }
