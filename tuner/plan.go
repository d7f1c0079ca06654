package tuner

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/shadow"
	"github.com/gatetuner/gatetuner/tuner/sink"
)

// halt ends a cycle before the write: the result (held or error), the
// reason and why (Report.stop records it).
type halt struct {
	result Result
	reason HoldReason
	detail string
}

func held(reason HoldReason, detail string) *halt {
	return &halt{result: ResultHeld, reason: reason, detail: detail}
}

func failed(detail string) *halt {
	return &halt{result: ResultError, reason: HoldTargetError, detail: detail}
}

// plan runs one target's cycle up to the write and returns the report and,
// when the cycle should write, what to write.
func (t *Tuner) plan(ctx context.Context, tg *Target) (*Report, *writePlan) {
	now := t.now()
	rep := &Report{Target: tg.Config.Name, At: now, Mode: tg.Config.Policy.Mode}
	w, h := t.planStages(ctx, tg, rep, now)
	if h != nil {
		rep.stop(h.result, h.reason, h.detail)
		return rep, nil
	}
	return rep, w
}

// planStages runs the stages in order — readTarget, estimate,
// decisionSource, replay, choose (the objective and the choice), evidence,
// confidence, edit, guards, writePlan — recording each stage's result on
// rep; the first halt ends the cycle.
func (t *Tuner) planStages(ctx context.Context, tg *Target, rep *Report, now time.Time) (*writePlan, *halt) {
	pol := tg.Config.Policy
	tr, h := t.readTarget(ctx, tg)
	if h != nil {
		return nil, h
	}
	rep.OldConfig = tr.snap.Text
	rep.Current = viewOf(tr.cur, tr.params)
	if tr.cur.Source == gate.SourceLatencyPredictor && !TokenBarOnly(tg.Profile, tr.cur) {
		return nil, held(HoldUnsupportedTTFTSource, latencyPredictorDetail(tg.Profile))
	}
	est, h := t.estimate(ctx, tg, tr.params, now)
	if h != nil {
		return nil, h
	}
	rep.Estimates = est
	// A data reason yields to the target's state (docs/holds.md's order).
	dataHold := func(h *halt) *halt { return stateFirst(rep, &tr.snap.State, now, h) }

	window := shadowWindow(now, pol.History, &tr.snap.State, dayClockOf(pol))
	day := t.daySpans(ctx, tg, tr.params, est, window, now)
	rep.cost = &cycleCost{queries: est.Queries.Queries + day.queries.Queries}
	src, h := t.decisionSource(tg, est, day, now)
	if h != nil {
		return nil, dataHold(h)
	}
	rep.Source = src.Kind()
	drain, ppt := chooseThroughputFor(est, tr.params, tg.Config, tg.Profile)
	if drain <= 0 {
		return nil, dataHold(held(HoldInconclusive, ppt.Note))
	}
	in, ratesHeld := t.replayRates(tg.Config.Name, est, tr.params, drain, &ppt)
	cands := BuildCandidates(CandidateSpec{Current: tr.params, Profile: tg.Profile, DrainRate: in.drain, TTFTSLOMs: tg.Config.TTFTSLOMs})
	drain = in.drain
	for _, c := range cands {
		in.settings = append(in.settings, c.Settings)
	}
	rp, h := t.replay(ctx, tg, src, day, window, &in)
	if h != nil {
		if h.reason == HoldInconclusive {
			h = dataHold(h)
		}
		return nil, h
	}
	rep.gateInput = rp.gateInput
	rep.cost.replayed = rp.replay.Decisions

	obj := objectiveFor(src.Kind(), est, *pol.BlockSizeTokens)
	ch := choose(cands, obj, rp, *pol.MaxStep, *pol.MinDecisions)
	rec := evidence(tg, src.Kind(), est, drain, ppt, cands, rp, obj, ch)
	rec.Evidence.Day = dayView(pol, cands, rp, obj, ch, day)
	rec.Evidence.Replay = rp.replay
	rec.Evidence.Replay.RatesHeld = ratesHeld
	applyWindowEvidence(pol, now, rec, day, rp, func() *recentEstimate {
		r := t.recentEstimate(ctx, tg, tr.params, now)
		if r != nil && r.est != nil {
			rep.cost.queries += r.est.Queries.Queries
		}
		return r
	})
	rep.Recommendation = rec
	rep.shadowCur, rep.shadowRec, rep.shadowScale = rp.fresh.Counts(0), rp.fresh.Counts(ch.rec), rp.scale
	rec.Evidence.Confidence = confidence(pol, day.coverageOf(est), src.Kind(), ppt, rp, obj, ch)
	rec.Confidence = rec.Evidence.Confidence.Value

	if h := edit(rep, tr, cands[ch.rec], ppt.Write); h != nil {
		return nil, h
	}
	g := &guardContext{now: now, pol: pol, state: &tr.snap.State, params: tr.params, cur: tr.cur, rc: cands[ch.rec], rec: rec,
		est: est, diff: rep.Diff, allowCalib: tg.Config.AllowCalibrationOverride, belowFloor: ch.belowFloor, apply: rec.Evidence.Day.ApplyWindow}
	if h := t.guards(ctx, rep, g); h != nil {
		return nil, h
	}
	return writePlanFor(rep, tr.snap, g)
}

// targetRead is the read stage's result: the config snapshot, the target's
// filter instance, its parameters and the settings in force.
type targetRead struct {
	snap   *sink.Snapshot
	inst   sink.InstanceState
	params gate.Params
	cur    gate.Settings
}

// readTarget reads the target's EPP config and finds its filter instance.
func (t *Tuner) readTarget(ctx context.Context, tg *Target) (*targetRead, *halt) {
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

// estimate runs the target's estimator (or the Tuner's). The in-flight
// series are read for the producer the gate itself reads
// (inFlightLoadProducerName) unless the target names one.
func (t *Tuner) estimate(ctx context.Context, tg *Target, params gate.Params, now time.Time) (*estimator.Estimates, *halt) {
	ectx, span := t.stage(ctx, "estimate")
	defer span.End()
	estr := tg.Estimator
	if estr == nil {
		estr = t.Estimator
	}
	est, err := estr.Estimate(ectx, estimatorTarget(tg, params), now)
	if err != nil {
		return nil, failed(fmt.Sprintf("estimate: %v", err))
	}
	return est, nil
}

// estimatorTarget is the target's estimator target, reading the in-flight
// series of the gate's own producer unless the target names one.
func estimatorTarget(tg *Target, params gate.Params) estimator.Target {
	et := tg.Est
	if et.InFlightProducer == "" {
		et.InFlightProducer = params.InFlightLoadProducerName
	}
	return et
}

// healthReporter is a decision source that can say it is down (a records stream).
type healthReporter interface{ Err() error }

// decisionSource picks the shadow window's decisions: the target's records,
// or the Prometheus model over the estimates.
func (t *Tuner) decisionSource(tg *Target, est *estimator.Estimates, day *dayEvidence, now time.Time) (DecisionSource, *halt) {
	if src := tg.Records; src != nil {
		if hr, ok := src.(healthReporter); ok {
			if err := hr.Err(); err != nil {
				return nil, held(HoldRecordsUnavailable, err.Error())
			}
		}
		return src, nil
	}
	m := &Model{Est: est, BlockSizeTokens: *tg.Config.Policy.BlockSizeTokens, Seed: t.Seed ^ uint64(now.Unix()), EndpointBudget: *tg.Config.Policy.ModelEndpointBudget}
	if day.perWindow {
		// Each span draws from its own seed (the Tuner's and its start): a
		// later cycle redraws a completed window's decisions exactly.
		m.Spans, m.Seed = day.modelSpans(), t.Seed
	}
	if err := m.Usable(); err != nil {
		return nil, held(HoldInconclusive, err.Error())
	}
	return m, nil
}

// stateFirst returns the target-state guards' hold in place of a data
// stage's h when one of them holds (recording their verdicts), else h.
func stateFirst(rep *Report, st *sink.State, now time.Time, h *halt) *halt {
	probe := &Report{}
	if first := runGuards(probe, &guardContext{now: now, state: st}, stateGuards); first != nil {
		rep.Guards = append(rep.Guards, probe.Guards...)
		return held(first.Reason, first.Detail)
	}
	return h
}

// shadowWindow is the history — from the start of the window of the day
// that now − history falls in, so the evidence holds whole windows and a
// later cycle can reuse them — cut at the last change that took effect (a
// window spanning an apply mixes two configs).
func shadowWindow(now time.Time, history time.Duration, st *sink.State, clock dayClock) WindowView {
	from := clock.start(now.Add(-history))
	w := WindowView{From: from, To: now}
	if eff := lastChange(st); eff.After(from) {
		w.From, w.CutAtApply = eff, true
	}
	return w
}

// replayed is the replay stage's result: every candidate's shadow tallies
// (whole window, per window of the day and the decisions no earlier cycle
// counted) and feedback outcomes over the window's decisions.
type replayed struct {
	window WindowView
	width  time.Duration
	clock  dayClock
	// parts are the windows of the day by index (a window seen on several
	// days merges); reqs, n and scale are each window's real requests,
	// decisions and the factor that scales its draws' excess to requests;
	// days counts the days that contributed.
	parts    []*shadow.Accumulator
	reqs     []float64
	n        []int64
	partScal []float64
	days     []int
	fb       *shadow.Feedback
	fresh    *shadow.Accumulator
	total    []shadow.Counts
	outcomes []shadow.FeedbackOutcome
	// replay is what the cycle replayed and reused.
	replay ReplayView
	// costs are the candidates' excess tokens, scaled to the window's real
	// requests (scale: the model's draws stand for several); windowCosts
	// the same per window of the day ([window][candidate]).
	costs       []float64
	windowCosts [][]float64
	scale       float64
	gateInput   GateInput
	// fbRate, fbRates and fbRateSource turn the feedback's tokens into seconds.
	fbRate       float64
	fbRates      map[string]float64
	fbRateSource string
}

// boolWeight is 1 for a decision without a weight (it stands for one request).
func boolWeight(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// tally sums the windows into the whole-evidence counts, the gate-input
// distribution and every candidate's scaled excess and feedback outcome.
// The model's draws stand for each window's real requests: their excess is
// scaled per window.
func (r *replayed) tally(kind string, ncands int) {
	r.total = make([]shadow.Counts, ncands)
	var penalty, gap shadow.Sketch
	var reqs float64
	var n int64
	for k, p := range r.parts {
		for i := range r.total {
			r.total[i].Add(p.Counts(i))
		}
		penalty.Merge(p.PenaltyMs())
		gap.Merge(p.GapMinusMatched())
		r.partScal[k] = 1
		if kind == SourceKindModel && r.n[k] > 0 {
			r.partScal[k] = r.reqs[k] / float64(r.n[k])
		}
		reqs += r.reqs[k]
		n += r.n[k]
	}
	r.window.Decisions, r.window.Known = r.total[0].Decisions(), r.total[0].Known()
	r.gateInput = GateInput{PenaltyMs: shadow.QuantilesOf(&penalty), GapMinusMatchedTokens: shadow.QuantilesOf(&gap)}
	r.scale = 1.0
	if kind == SourceKindModel && n > 0 {
		r.scale = reqs / float64(n)
	}
	r.costs = make([]float64, ncands)
	r.windowCosts = make([][]float64, len(r.parts))
	for k, p := range r.parts {
		r.windowCosts[k] = make([]float64, ncands)
		for i := range r.costs {
			r.windowCosts[k][i] = p.Counts(i).ExcessTokens * r.partScal[k]
			r.costs[i] += r.windowCosts[k][i]
		}
	}
	r.outcomes = make([]shadow.FeedbackOutcome, ncands)
	for i := range r.outcomes {
		r.outcomes[i] = r.fb.Outcome(i)
	}
}

// choice is the choose stage's result: the recommended candidate (after
// the step limit and the day rule), the objective's day scores, each
// window's scores and what the rule allows there, and the release-chain floor.
type choice struct {
	rec  int
	step *StepNote
	best Choice
	// scores are the candidates' day scores; windows their window scores
	// ([window][candidate]); allowed the most a candidate may score in a
	// window (+Inf: the window is not judged); eligible: within it in every window.
	scores   []float64
	windows  [][]float64
	allowed  []float64
	eligible []bool
	floor    float64
	// belowFloor: the current bar is below the release-chain floor.
	belowFloor bool
	// note says why the step-limited pick was given up for the current settings.
	note string
}

// choose scores the candidates in every window of the day, keeps those no
// window estimates worse than the current settings by more than the rule
// allows, picks the lowest day score (the current settings win ties) and
// clamps the move to the step limit.
func choose(cands []Candidate, obj objective, r *replayed, maxStep float64, minDecisions int) choice {
	c := choice{windows: obj.windowScores(cands, r), floor: obj.floor()}
	c.belowFloor = cands[0].Bar < c.floor
	c.scores = make([]float64, len(cands))
	col := make([]float64, len(c.windows))
	for i := range cands {
		for k := range c.windows {
			col[k] = c.windows[k][i]
		}
		c.scores[i] = obj.dayScore(col, r)
	}
	c.allowed = allowedPerWindow(obj, r, c.windows, minDecisions)
	masked := make([]float64, len(cands))
	c.eligible = make([]bool, len(cands))
	for i := range cands {
		c.eligible[i] = i == 0 || withinRule(c.windows, c.allowed, i)
		masked[i] = c.scores[i]
		if !c.eligible[i] {
			masked[i] = math.Inf(1)
		}
	}
	c.best = Choose(cands, masked)
	c.rec, c.step = clampStep(cands, c.best.Best, maxStep, c.floor)
	if !c.eligible[c.rec] {
		c.note = fmt.Sprintf("the step-limited candidate %s is worse than the current settings by more than the rule allows in some window: the current settings are kept", cands[c.rec].Label)
		c.rec, c.step = 0, nil
	}
	return c
}

// evidence builds the recommendation with what it rests on.
func evidence(tg *Target, kind string, est *estimator.Estimates, drain float64, ppt ThroughputNote, cands []Candidate, r *replayed, obj objective, ch choice) *Recommendation {
	pol := tg.Config.Policy
	rc := cands[ch.rec]
	rec := &Recommendation{
		Target: tg.Config.Name, Mode: rc.Settings.Mode.String(), MaxTTFTPenaltyMs: rc.Settings.MaxTTFTPenaltyMs,
		PeakPrefillThroughput: rc.Settings.PeakPrefillThroughput, EffectiveBarTokens: barPtr(rc.Bar), candidate: rc,
	}
	rec.MaxTokensInFlightPenalty = rc.Settings.MaxTokensInFlightPenalty
	ev := &rec.Evidence
	ev.Source, ev.Window, ev.Estimates, ev.Throughput, ev.Step, ev.GateInput = kind, r.window, brief(est), ppt, ch.step, r.gateInput
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
	ev.RestartCost = restartCost(est, pol.RestartWarmup, r.fbRate, r.fbRates)
	if r.fbRate > 0 {
		ev.Objective.SavingOverCooldownSeconds = ev.Objective.SavingOverCooldownTokens / r.fbRate
	}
	return rec
}

// confidence is the documented formula (docs/tuner.md): rate × source ×
// sample × consistency.
func confidence(pol config.Policy, est *dayCoverage, kind string, ppt ThroughputNote, r *replayed, obj objective, ch choice) ConfidenceParts {
	cp := ConfidenceParts{Rate: 1, Source: 1, Sample: 1, Consistency: 1}
	if ppt.Write {
		cp.Rate = est.lookback.DrainRate.Confidence
	}
	if kind == SourceKindModel {
		cp.Source = 0.9 * est.snapshotCoverage(r.window)
	}
	cp.Sample = math.Min(1, float64(r.window.Known)/float64(5**pol.MinDecisions))
	cp.Consistency = obj.consistency(r, ch.rec)
	if ch.belowFloor {
		cp.Consistency = 1 // a safety correction, not a bet on the shadow
	}
	cp.Value = cp.Rate * cp.Source * cp.Sample * cp.Consistency
	return cp
}

// edit computes the change the recommendation makes and previews it; a
// refused edit holds (target-error).
func edit(rep *Report, tr *targetRead, rc Candidate, writePPT bool) *halt {
	changes := changesFor(tr.inst, tr.params, rc, writePPT)
	rep.Changes = changes
	if rep.Recommendation != nil {
		rep.Recommendation.Hash = recHash(rep.Target, changes)
	}
	if len(changes[0].Set) == 0 && len(changes[0].Remove) == 0 {
		return nil
	}
	out, diff, err := tr.snap.Preview(changes)
	if err != nil {
		return held(HoldTargetError, fmt.Sprintf("the recommended edit is refused: %v", err))
	}
	rep.NewConfig, rep.Diff = out, diff
	return nil
}

// guards runs the target-state and recommendation guards in order.
func (t *Tuner) guards(ctx context.Context, rep *Report, g *guardContext) *halt {
	_, span := t.stage(ctx, "guards")
	defer span.End()
	if first := runGuards(rep, g, append(append([]guardFunc(nil), stateGuards...), recommendationGuards...)); first != nil {
		return held(first.Reason, first.Detail)
	}
	return nil
}

// writePlanFor ends a cycle whose guards passed: mode off recommends, a
// closed apply window leaves it pending, else it plans the write.
func writePlanFor(rep *Report, snap *sink.Snapshot, g *guardContext) (*writePlan, *halt) {
	if g.pol.Mode == config.ModeOff {
		rep.Result = ResultRecommended
		return nil, nil
	}
	if g.pol.Mode == config.ModeApprove {
		if h := approvalHalt(rep, snap); h != nil {
			return nil, h
		}
	}
	if v := windowGuard(g); !v.pass {
		if v.reason == HoldApplyWindowUnknown {
			return nil, held(v.reason, v.detail)
		}
		return nil, &halt{result: ResultPending, reason: v.reason, detail: v.detail}
	}
	return &writePlan{snap: snap, changes: rep.Changes, meta: sink.Meta{
		Kind: sink.KindApply, Reason: applyReason(rep), Evidence: evidenceLine(rep), RecommendationHash: rep.Recommendation.Hash,
	}}, nil
}
