package decide

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/gatetuner/gatetuner/tuner/policy"
)

// allowedPerWindow is the most a candidate may score in each window: the
// current settings' score × (1 + windowTolerance) plus the objective's
// absolute slack; +Inf where the window has fewer than minDecisions
// decisions (too few to judge) or the current settings are excluded there.
func allowedPerWindow(obj objective, r *replayed, ws [][]float64, minDecisions int) []float64 {
	out := make([]float64, len(ws))
	for k := range ws {
		cur := ws[k][0]
		if r.n[k] < int64(minDecisions) || math.IsInf(cur, 1) || math.IsNaN(cur) {
			out[k] = math.Inf(1)
			continue
		}
		out[k] = cur*(1+windowTolerance) + obj.slack(r, k)
	}
	return out
}

// withinRule: candidate i scores no more than allowed in every window.
func withinRule(ws [][]float64, allowed []float64, i int) bool {
	for k := range ws {
		if ws[k][i] > allowed[k] {
			return false
		}
	}
	return true
}

// finite is x, or nil when it is infinite or NaN (JSON has neither).
func finite(x float64) *float64 {
	if math.IsInf(x, 0) || math.IsNaN(x) {
		return nil
	}
	return &x
}

// dayView is the evidence's per-window table: for every window of the day,
// its requests, the current and recommended settings' scores, the window's
// own best candidate and whether the rule passed.
func dayView(pol policy.Policy, cands []Candidate, r *replayed, obj objective, ch choice, day *Day) *DayView {
	v := &DayView{DayLengthSeconds: r.clock.Length.Seconds(), WindowWidthSeconds: r.clock.Width.Seconds(), HistorySeconds: pol.History.Seconds(),
		Rule: ruleText(obj, pol), CurrentScore: finite(ch.scores[0]), RecommendedScore: finite(ch.scores[ch.rec]), Note: ch.note, Queries: day.Queries}
	if obj.name() == ObjectiveExcessTokens {
		v.Skipped = day.skipped()
	}
	for k := range ch.windows {
		w := DayWindow{Index: k, Label: r.clock.Label(k), Days: r.days[k], Requests: r.reqs[k], Decisions: r.n[k], Pass: true}
		row := ch.windows[k]
		if r.n[k] > 0 {
			w.Current, w.Recommended = finite(row[0]), finite(row[ch.rec])
			best := 0
			for i := range row {
				if row[i] < row[best] {
					best = i
				}
			}
			w.Best, w.BestScore = cands[best].Label, finite(row[best])
			w.Allowed = finite(ch.allowed[k])
			w.Judged = w.Allowed != nil
			w.Pass = row[ch.rec] <= ch.allowed[k]
		}
		v.Windows = append(v.Windows, w)
	}
	return v
}

// ruleText states the day rule with the objective's absolute tolerance.
func ruleText(obj objective, pol policy.Policy) string {
	slack := fmt.Sprintf("%.0f ms", ttftSlackSeconds*1000)
	if obj.name() == ObjectiveExcessTokens {
		slack = fmt.Sprintf("%.1f block (%d tokens) per request", excessSlackBlocks, *pol.BlockSizeTokens)
	}
	return fmt.Sprintf("lowest request-weighted day score among candidates no window estimates worse than the current settings by more than %.0f %% + %s; windows with fewer than %d decisions are not judged; the current settings win ties",
		100*windowTolerance, slack, *pol.MinDecisions)
}

// windowCost is a restart's price in request-seconds (0 for a restart with
// nothing cached to lose), or false when it cannot be priced.
func windowCost(rc RestartCost) (float64, bool) {
	switch {
	case rc.Unknown != "":
		return 0, false
	case rc.DelaySeconds != nil:
		return *rc.DelaySeconds, true
	case rc.Tokens == 0:
		return 0, true
	}
	return 0, false
}

// applyPlan is when the write may happen and the restart cost priced there.
type applyPlan struct {
	view *ApplyWindowView
	// index is the window of the day the write will happen in.
	index int
}

// planApply decides the apply window: a configured cron window or always
// as configured, or auto — the window of least mean restart cost over the
// history (each window priced from its own estimates) — and fills each
// window's restart cost into the day table.
func planApply(pol policy.Policy, now time.Time, v *DayView, day *Day, costOf func(*Traffic) RestartCost) applyPlan {
	clock := day.Clock
	n := clock.Windows()
	sum, cnt := make([]float64, n), make([]int, n)
	if day.PerWindow {
		// The span still open prices its window only when the history holds
		// no closed span of it: it shows what the window began with (the
		// previous window's tail), not the window.
		for _, open := range []bool{false, true} {
			for _, s := range day.Spans {
				if s.Est == nil || s.To.Before(now) == open || (open && cnt[s.Index] > 0) {
					continue
				}
				if c, ok := windowCost(costOf(s.Est)); ok {
					sum[s.Index] += c
					cnt[s.Index]++
				}
			}
		}
	}
	for k := range v.Windows {
		if cnt[k] > 0 {
			v.Windows[k].RestartCost = finite(sum[k] / float64(cnt[k]))
		}
	}
	w := pol.ApplyWindow
	switch {
	case w == nil || w.Always:
		return applyPlan{view: &ApplyWindowView{Kind: policy.ApplyWindowAlways, Open: true, Detail: "no apply window: writes at any time"}, index: clock.Index(now)}
	case !w.Auto:
		open, next := windowOpen(w, now)
		av := &ApplyWindowView{Kind: "cron", Open: open, Detail: "the configured window " + w.String()}
		at := now
		if !open {
			av.Opens, at = &next, next
		}
		return applyPlan{view: av, index: clock.Index(at)}
	}
	return autoWindow(now, clock, sum, cnt, day.PerWindow)
}

// autoWindow picks the window of least mean restart cost; with a window of
// the day unpriced it cannot choose, and says which.
func autoWindow(now time.Time, clock Clock, sum []float64, cnt []int, perWindow bool) applyPlan {
	av := &ApplyWindowView{Kind: policy.ApplyWindowAuto}
	if !perWindow {
		av.Unknown = "the estimator gives no per-window estimates, so no window's restart cost can be priced"
		av.Detail = av.Unknown
		return applyPlan{view: av, index: clock.Index(now)}
	}
	var missing []string
	best, total, worst := -1, 0.0, 0.0
	for k := range sum {
		if cnt[k] == 0 {
			missing = append(missing, clock.Label(k))
			continue
		}
		c := sum[k] / float64(cnt[k])
		total += c
		worst = math.Max(worst, c)
		if best < 0 || c < sum[best]/float64(cnt[best]) {
			best = k
		}
	}
	if len(missing) > 0 {
		av.Unknown = fmt.Sprintf("%d of %d windows of the day have no priced restart cost in the history (%s): auto cannot choose the cheapest yet",
			len(missing), len(sum), strings.Join(missing, ", "))
		av.Detail = av.Unknown
		return applyPlan{view: av, index: clock.Index(now)}
	}
	cost, mean := sum[best]/float64(cnt[best]), total/float64(len(sum))
	av.Detail = fmt.Sprintf("auto: window %s has the least restart cost over the history, %.4g request-seconds vs the day's mean %.4g (worst %.4g)",
		clock.Label(best), cost, mean, worst)
	if k := clock.Index(now); k != best && sum[k]/float64(cnt[k]) <= (1+autoTolerance)*cost {
		av.Detail = fmt.Sprintf("auto: window %s, open now, is within %.0f %% of the least restart cost over the history (%.4g vs %.4g request-seconds at %s; the day's mean %.4g, worst %.4g): the estimates cannot tell them apart, and waiting would delay the gain",
			clock.Label(k), 100*autoTolerance, sum[k]/float64(cnt[k]), cost, clock.Label(best), mean, worst)
		best, cost = k, sum[k]/float64(cnt[k])
	}
	av.Window, av.Label = best, clock.Label(best)
	av.CostSeconds, av.DayMeanSeconds, av.DayMaxSeconds = finite(cost), finite(mean), finite(worst)
	av.Open = clock.Index(now) == best
	if !av.Open {
		opens := clock.Next(now, best)
		av.Opens = &opens
	}
	return applyPlan{view: av, index: best}
}

// autoTolerance: the window open now is as good as the cheapest when its
// restart cost is within this fraction of it (the formula's precision is
// coarser: restarts in the simulator measured 0.3–0.7 × its price,
// docs/tuner.md).
const autoTolerance = 0.25

// usual returns window k's newest closed span with estimates (one that
// ended before now), else its newest with estimates (nil: none).
func (d *Day) usual(k int, now time.Time) *Span {
	for i := len(d.Spans) - 1; i >= 0; i-- {
		if s := &d.Spans[i]; s.Index == k && s.Est != nil && s.To.Before(now) {
			return s
		}
	}
	return d.latest(k)
}

// restartAt prices the restart at the window the write will happen in: its
// newest closed span with estimates (else its newest), else (saying so) the
// lookback's.
func restartAt(p applyPlan, day *Day, now time.Time, lookback RestartCost, costOf func(*Traffic) RestartCost) RestartCost {
	label := day.Clock.Label(p.index)
	if day.PerWindow {
		if s := day.usual(p.index, now); s != nil {
			rc := costOf(s.Est)
			rc.PricedAt = fmt.Sprintf("window %s (its estimates of %s–%s)", label, s.From.UTC().Format(time.RFC3339), s.To.UTC().Format("15:04:05"))
			return rc
		}
	}
	lookback.PricedAt = fmt.Sprintf("now, on the lookback's estimates (window %s, where the write would happen, has no estimates of its own)", label)
	return lookback
}

// settleFactor: inside an open auto window, a restart now priced above this
// multiple of the window's usual price waits for the pool to settle.
const settleFactor = 2

// priceNow prices a restart that would happen now: the sessions of the last
// minutes come back after it (their cached tokens are the backlog) while the
// window's traffic arrives. Right after a shift in traffic — heavy long-context
// sessions ending as a light window begins — that costs more than the window
// usually does; the larger price stands, and an open auto window whose
// restart now costs more than settleFactor × its usual price waits.
func priceNow(usual RestartCost, now RestartCost, recent *Recent, av *ApplyWindowView) RestartCost {
	u, uok := windowCost(usual)
	n, nok := windowCost(now)
	if !nok || (uok && n <= u) {
		return usual
	}
	now.PricedAt = fmt.Sprintf("now: the backlog of the last %s of traffic (%s–%s) queueing the window's arrivals", recent.To.Sub(recent.From).Round(time.Second),
		recent.From.UTC().Format("15:04:05"), recent.To.UTC().Format("15:04:05"))
	if uok {
		now.UsualDelaySeconds = finite(u)
		now.PricedAt += fmt.Sprintf(", more than the window's usual %.4g request-seconds (%s)", u, usual.PricedAt)
		if av != nil && av.Kind == policy.ApplyWindowAuto && n > settleFactor*u {
			av.Settling = fmt.Sprintf("a restart now would cost %.4g request-seconds, more than %d× the window's usual %.4g: the last %s still carry heavier traffic than the window's; waiting inside the window",
				n, settleFactor, u, recent.To.Sub(recent.From).Round(time.Second))
		}
	}
	return now
}

// applyWindow records the apply window in the day table and prices the
// restart at the window the write will happen in (priceNow adds the last
// minutes' traffic when that is now).
func applyWindow(pol policy.Policy, now time.Time, rec *Recommendation, day *Day, r *replayed) (applyPlan, RestartCost) {
	costOf := func(e *Traffic) RestartCost {
		return restartCost(e, pol.RestartWarmup, r.fbRate, r.fbRates)
	}
	p := planApply(pol, now, rec.Evidence.Day, day, costOf)
	rec.Evidence.Day.ApplyWindow = p.view
	return p, restartAt(p, day, now, rec.Evidence.RestartCost, costOf)
}

// skipped lists the spans the model cannot draw from, with why.
func (d *Day) skipped() []string {
	var out []string
	for _, s := range d.Spans {
		why := s.Err
		if why == "" {
			why = s.Unusable
		}
		if why != "" {
			out = append(out, fmt.Sprintf("%s–%s: %s", s.From.UTC().Format(time.RFC3339), s.To.UTC().Format("15:04:05"), why))
		}
	}
	return out
}

// latest returns the newest span of window k that has estimates.
func (d *Day) latest(k int) *Span {
	for i := len(d.Spans) - 1; i >= 0; i-- {
		if s := &d.Spans[i]; s.Index == k && s.Est != nil {
			return s
		}
	}
	return nil
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
