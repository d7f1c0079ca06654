package decide

import (
	"fmt"
	"math"
	"time"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/policy"
	"github.com/gatetuner/gatetuner/tuner/shadow"
	"github.com/gatetuner/gatetuner/tuner/sink/state"
)

// guardContext is everything a guard judges: the policy, the target's
// state, the current settings and the recommendation with its evidence.
type guardContext struct {
	now        time.Time
	pol        policy.Policy
	state      *state.State
	params     gate.Params
	cur        gate.Settings
	rc         Candidate
	rec        *Recommendation
	est        *Estimate
	diff       string
	allowCalib bool
	// belowFloor: the current bar is below the release-chain floor.
	belowFloor bool
	// apply is the apply window the day evidence chose (nil: none computed).
	apply *ApplyWindowView
}

// verdict is one guard's judgement; skip leaves it out of the report.
type verdict struct {
	name   string
	pass   bool
	reason HoldReason
	detail string
	skip   bool
}

// guardFunc is one guard.
type guardFunc func(*guardContext) verdict

// stateGuards judge the target's state (pause, failure hold, pending
// restart); they come before any data reason (docs/holds.md).
var stateGuards = []guardFunc{pauseGuard, failureHoldGuard, pendingRestartGuard}

// recommendationGuards judge the recommendation, in the documented order;
// the release-chain hazard bypasses the ones it names (releaseChainBypass).
var recommendationGuards = []guardFunc{
	dataGuard, confidenceGuard, changeGuard, deadbandGuard,
	releaseChainBypass(gainShareGuard, belowFloor, nil),
	releaseChainBypass(gainGuard, belowFloor, floorDetail),
	releaseChainBypass(restartCostGuard, belowFloor, floorDetail),
	calibrationGuard,
	releaseChainBypass(cooldownGuard, raisingOutOfHazard, func(g *guardContext) string {
		return fmt.Sprintf("a raise out of the release-chain hazard is not delayed (last change %s ago)", g.now.Sub(lastChange(g.state)).Round(time.Second))
	}),
	releaseChainBypass(budgetGuard, raisingOutOfHazard, func(g *guardContext) string {
		return fmt.Sprintf("a raise out of the release-chain hazard is not delayed (%d applies in the last %s)", g.applies(), g.pol.BudgetWindow)
	}),
}

// runGuards runs guards in order, records each verdict on the outcome, and
// returns the first hold.
func runGuards(out *Outcome, g *guardContext, guards []guardFunc) *Hold {
	var first *Hold
	for _, gf := range guards {
		v := gf(g)
		if v.skip {
			continue
		}
		out.Guards = append(out.Guards, Guard{Name: v.name, Pass: v.pass, Detail: v.detail})
		if !v.pass && first == nil {
			first = &Hold{Reason: v.reason, Detail: v.detail}
		}
	}
	return first
}

// releaseChainBypass wraps a guard the release-chain hazard overrides:
// when applies holds, the guard passes with bypassed's detail instead of
// judging (a nil bypassed leaves the guard out).
func releaseChainBypass(gf guardFunc, applies func(*guardContext) bool, bypassed func(*guardContext) string) guardFunc {
	return func(g *guardContext) verdict {
		if !applies(g) {
			return gf(g)
		}
		if bypassed == nil {
			return verdict{skip: true}
		}
		v := gf(g)
		v.pass, v.detail = true, bypassed(g)
		return v
	}
}

// belowFloor: the current bar is below the release-chain floor.
func belowFloor(g *guardContext) bool { return g.belowFloor }

// raisingOutOfHazard: the recommendation raises a bar below the
// release-chain floor to or above it.
func raisingOutOfHazard(g *guardContext) bool {
	return g.belowFloor && g.rc.Bar >= g.rec.Evidence.ReleaseChainFloorTokens
}

func floorDetail(g *guardContext) string {
	return fmt.Sprintf("the current bar is below the release-chain floor (%.0f tokens, the p99 prompt): raised regardless of the shadow's per-decision cost", g.rec.Evidence.ReleaseChainFloorTokens)
}

func (g *guardContext) applies() int { return g.state.AppliesSince(g.now.Add(-g.pol.BudgetWindow)) }

func pauseGuard(g *guardContext) verdict {
	p := g.state.Paused
	return verdict{name: "pause", pass: !p, reason: HoldPaused, detail: ifElse(p, "the ConfigMap carries gatetuner.dev/paused: \"true\"", "not paused")}
}

func failureHoldGuard(g *guardContext) verdict {
	if h := g.state.Hold; h != nil {
		return verdict{name: "failure-hold", reason: h.Reason, detail: h.String() + " (remove the gatetuner.dev/hold annotation to resume)"}
	}
	return verdict{name: "failure-hold", pass: true, detail: "no failure hold"}
}

func pendingRestartGuard(g *guardContext) verdict {
	p := g.state.Pending != nil
	return verdict{name: "pending-restart", pass: !p, reason: HoldPendingRestart, detail: ifElse(p,
		"the last write is not running in the EPP yet (restart the EPP to apply it)", "the EPP runs the config on the target")}
}

func dataGuard(g *guardContext) verdict {
	w := g.rec.Evidence.Window
	pass := w.Known >= int64(*g.pol.MinDecisions)
	detail := fmt.Sprintf("%d decisions with a known verdict in the window (minimum %d)", w.Known, *g.pol.MinDecisions)
	if !pass {
		detail += unknownWhy(g.rec.Evidence.Source, w, g.rec.Evidence.Shadow.Current.Outcomes, g.params.AffinityThreshold)
	}
	return verdict{name: "data", pass: pass, reason: HoldNoDecisions, detail: detail}
}

// unknownWhy says where the window's decisions without a known verdict
// went: no sticky endpoint (and, for the Prometheus model, why that is
// likely), one endpoint or the filter off, or no usable signal.
func unknownWhy(source string, w WindowView, o shadow.OutcomeCounts, threshold float64) string {
	if w.Decisions == 0 {
		return ": the source yielded no decision at all"
	}
	s := fmt.Sprintf(" of %d decided: %d found no sticky endpoint (no_match), %d had one endpoint or the filter off (not_applicable), %d lacked a usable signal (missing_signal)",
		w.Decisions, o[gate.OutcomeNoMatch], o[gate.OutcomeNotApplicable], o[gate.OutcomeMissingSignal])
	if source == SourceKindModel && o[gate.OutcomeNoMatch]*2 > w.Decisions {
		s += fmt.Sprintf("; the Prometheus model pins a drawn request to its home endpoint only when its drawn cached share of the prompt reaches affinityThreshold %.2f, "+
			"which on this traffic few draws do (the cached-token distribution is far below the prompt's): the model cannot judge this pool, gate records can (records.file or records.stream)", threshold)
	}
	return s
}

func confidenceGuard(g *guardContext) verdict {
	c := g.rec.Evidence.Confidence
	return verdict{name: "confidence", pass: g.rec.Confidence >= *g.pol.MinConfidence, reason: HoldLowConfidence,
		detail: fmt.Sprintf("confidence %.2f (rate %.2f × source %.2f × sample %.2f × consistency %.2f), minimum %.2f",
			g.rec.Confidence, c.Rate, c.Source, c.Sample, c.Consistency, *g.pol.MinConfidence)}
}

func changeGuard(g *guardContext) verdict {
	same := g.rc.Current || g.diff == ""
	return verdict{name: "change", pass: !same, reason: HoldNoGain,
		detail: ifElse(same, "the current settings are the best candidate", "the recommendation differs from the current settings")}
}

func deadbandGuard(g *guardContext) verdict {
	db := deadband(g.cur, g.rc, *g.pol.Deadband)
	return verdict{name: "deadband", pass: db == "", reason: HoldDeadband,
		detail: ifElse(db != "", db, "the decisive bar moves beyond the deadband or the mode changes")}
}

// gainShareGuard (the Prometheus model's objective only) is materiality:
// the saving must be felt by the pool.
func gainShareGuard(g *guardContext) verdict {
	if g.rec.Evidence.Objective.Name != ObjectiveExcessTokens {
		return verdict{skip: true}
	}
	work := computedTokenRate(&g.est.Traffic)
	saving := g.rec.Evidence.ExcessCost.SavingPerSecond
	detail := fmt.Sprintf("excess saved %.4g tokens/s vs the pool's computed prefill %.4g tokens/s (%.1f %%, must be ≥ %.0f %%)",
		saving, work, 100*saving/math.Max(work, 1e-9), 100**g.pol.MinGainShare)
	if work <= 0 {
		detail = "the pool's computed prefill rate is unknown (request rate, prompt and cached-token means)"
	}
	return verdict{name: "gain-share", pass: work > 0 && saving >= *g.pol.MinGainShare*work, reason: HoldNoGain, detail: detail}
}

func gainGuard(g *guardContext) verdict {
	ev := &g.rec.Evidence
	obj := &ev.Objective
	ratio := math.Inf(1)
	if obj.Ratio != nil {
		ratio = *obj.Ratio
	}
	detail := fmt.Sprintf("recommended estimated TTFT p90 %.3gs vs current %.3gs (ratio %.2f, must be ≤ %.2f)",
		obj.Recommended.P90TTFTSeconds, obj.Current.P90TTFTSeconds, ratio, *g.pol.GainRatio)
	if d := ev.Day; d != nil && d.CurrentScore != nil && d.RecommendedScore != nil {
		detail = fmt.Sprintf("recommended estimated TTFT p90 over the day (request-weighted over its windows) %.3gs vs current %.3gs (ratio %.2f, must be ≤ %.2f)",
			*d.RecommendedScore, *d.CurrentScore, ratio, *g.pol.GainRatio)
	}
	if obj.Name == ObjectiveExcessTokens {
		detail = fmt.Sprintf("recommended excess cost %.4g tokens vs current %.4g (ratio %.2f, must be ≤ %.2f)",
			ev.ExcessCost.Recommended, ev.ExcessCost.Current, ratio, *g.pol.GainRatio)
	}
	return verdict{name: "gain", pass: ratio <= *g.pol.GainRatio, reason: HoldNoGain, detail: detail}
}

func restartCostGuard(g *guardContext) verdict {
	name, pass, reason, detail := restartGuard(&g.rec.Evidence.Objective, &g.rec.Evidence.RestartCost, savingHorizon(g.pol))
	return verdict{name: name, pass: pass, reason: reason, detail: detail}
}

func calibrationGuard(g *guardContext) verdict {
	calibrated := g.params.PPTSource() == gate.PPTCalibrated && !g.allowCalib
	return verdict{name: "calibration", pass: !calibrated, reason: HoldCalibrated, detail: ifElse(calibrated,
		fmt.Sprintf("peakPrefillThroughput comes from calibration file %q and its value is unknown here; set allowCalibrationOverride to let gatetuner write it", g.params.PrefillCalibrationFile),
		"no calibrated throughput is overridden")}
}

func cooldownGuard(g *guardContext) verdict {
	eff := lastChange(g.state)
	cooling := !eff.IsZero() && g.now.Sub(eff) < g.pol.Cooldown
	return verdict{name: "cooldown", pass: !cooling, reason: HoldCooldown, detail: ifElse(cooling,
		fmt.Sprintf("the last change took effect %s ago (cooldown %s)", g.now.Sub(eff).Round(time.Second), g.pol.Cooldown), "no change within the cooldown")}
}

func budgetGuard(g *guardContext) verdict {
	n := g.applies()
	return verdict{name: "budget", pass: n < *g.pol.DailyBudget, reason: HoldBudget,
		detail: fmt.Sprintf("%d applies in the last %s (budget %d)", n, g.pol.BudgetWindow, *g.pol.DailyBudget)}
}

// windowGuard holds (result pending) while the apply window is closed; it
// runs after every other guard, only when the mode writes. With auto, the
// window is the day evidence's (its detail says why that window); auto
// without one holds apply-window-unknown.
func windowGuard(g *guardContext) verdict {
	w := g.pol.ApplyWindow
	if w == nil || w.Always {
		return verdict{name: "window", pass: true, detail: "no apply window"}
	}
	if w.Auto {
		return autoWindowGuard(g.apply)
	}
	if open, next := windowOpen(w, g.now); !open {
		return verdict{name: "window", reason: HoldOutsideWindow, detail: fmt.Sprintf("the apply window opens at %s", next.UTC().Format(time.RFC3339))}
	}
	return verdict{name: "window", pass: true, detail: "the apply window is open"}
}

// autoWindowGuard judges the auto apply window the day evidence chose.
func autoWindowGuard(av *ApplyWindowView) verdict {
	switch {
	case av == nil:
		return verdict{name: "window", reason: HoldApplyWindowUnknown, detail: "auto apply window: no day evidence to choose it from"}
	case av.Unknown != "":
		return verdict{name: "window", reason: HoldApplyWindowUnknown, detail: "auto apply window: " + av.Unknown}
	case !av.Open:
		when := "later"
		if av.Opens != nil {
			when = "at " + av.Opens.UTC().Format(time.RFC3339)
		}
		return verdict{name: "window", reason: HoldOutsideWindow, detail: fmt.Sprintf("the apply window opens %s; %s", when, av.Detail)}
	case av.Settling != "":
		return verdict{name: "window", reason: HoldOutsideWindow, detail: "the apply window is open but " + av.Settling + "; " + av.Detail}
	}
	return verdict{name: "window", pass: true, detail: "the apply window is open; " + av.Detail}
}

func ifElse(c bool, a, b string) string {
	if c {
		return a
	}
	return b
}

// lastChange is when the newest write took effect, or — while it is
// pending — when it was written.
func lastChange(st *state.State) time.Time {
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
	if gate.IsNoBar(a) || gate.IsNoBar(b) {
		if gate.IsNoBar(a) && gate.IsNoBar(b) {
			return "no bar before or after"
		}
		return ""
	}
	if rel := math.Abs(b/a - 1); rel < band {
		return fmt.Sprintf("the bar moves %.0f → %.0f tokens (%.1f %%), inside the %.0f %% deadband", a, b, rel*100, band*100)
	}
	return ""
}

// restartGuard compares the saving over a cooldown with the restart's
// cost: in request-seconds of queueing when the delay is priced, else (the
// pool's utilization unknown) in tokens; it holds when the cost is unknown.
func restartGuard(obj *ObjectiveView, rc *RestartCost, cooldown time.Duration) (string, bool, HoldReason, string) {
	name, pass, reason, detail := restartVerdict(obj, rc, cooldown)
	if rc.PricedAt != "" {
		detail += "; priced at " + rc.PricedAt
	}
	return name, pass, reason, detail
}

func restartVerdict(obj *ObjectiveView, rc *RestartCost, cooldown time.Duration) (string, bool, HoldReason, string) {
	if rc.Unknown != "" {
		return "restart-cost", false, HoldRestartCost, fmt.Sprintf("the restart cost cannot be estimated (%s): nothing is written without it", rc.Unknown)
	}
	if rc.DelaySeconds != nil {
		return "restart-cost", obj.SavingOverCooldownSeconds > *rc.DelaySeconds, HoldRestartCost,
			fmt.Sprintf("saving over %s in force %.4g request-seconds vs restart cost %.4g request-seconds (backlog %.4g tokens drains in %.0fs at utilization %.0f %%)",
				cooldown, obj.SavingOverCooldownSeconds, *rc.DelaySeconds, rc.Tokens, *rc.DrainSeconds, 100**rc.Utilization)
	}
	return "restart-cost", obj.SavingOverCooldownTokens > rc.Tokens, HoldRestartCost,
		fmt.Sprintf("saving over %s in force %.4g tokens vs restart cost %.4g tokens (utilization unknown: the queueing is not priced)", cooldown, obj.SavingOverCooldownTokens, rc.Tokens)
}

// savingHorizon is how long an applied setting is in force at least, over
// which its saving is weighed against a restart: the day it was chosen for,
// or the cooldown when that is longer.
func savingHorizon(pol policy.Policy) time.Duration {
	return max(pol.Cooldown, ClockOf(pol).Length)
}

// windowOpen reports whether now falls in an apply window, and when the
// next opens.
func windowOpen(w *policy.ApplyWindow, now time.Time) (bool, time.Time) {
	sched, err := policy.ParseSchedule(w.Schedule)
	if err != nil {
		return false, time.Time{}
	}
	// The latest activation at or before now is the first one after now−duration, if ≤ now.
	if act := sched.Next(now.Add(-w.Duration)); !act.After(now) {
		return true, act
	}
	return false, sched.Next(now)
}
