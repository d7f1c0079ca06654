package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/gatetuner/gatetuner/test/fleetsim/truth"
	"github.com/gatetuner/gatetuner/tuner"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/sink"
)

// cycleWhy says in a platform engineer's words why a cycle applied or held.
func cycleWhy(r *tuner.Report, pol config.Policy) string {
	rec := r.Recommendation
	switch {
	case r.Result == tuner.ResultError:
		return "error: " + r.Error
	case r.Result == tuner.ResultApplied && rec != nil:
		return appliedWhy(r)
	case r.Hold == nil:
		return ""
	}
	h := r.Hold
	why := string(h.Reason) + ": "
	switch h.Reason {
	case tuner.HoldLowConfidence:
		why += "too little evidence to act on yet"
		if rec != nil {
			why += fmt.Sprintf(" (confidence %.2f, %.2f needed; %s)", rec.Confidence, *pol.MinConfidence, weakestFactor(rec.Evidence.Confidence))
		}
	case tuner.HoldDeadband:
		why += fmt.Sprintf("the better bar is within %.0f %% of the current one: not worth an EPP restart", 100**pol.Deadband)
	case tuner.HoldNoGain:
		if failed("change", r.Guards) {
			why += "the current bar is already the best candidate"
		} else {
			why += "the better bar saves too little queueing to act on"
		}
	case tuner.HoldRestartCost:
		why += "the saving would not pay for the restart (the EPP loses its prefix index)"
	case tuner.HoldCooldown:
		why += "the last change is too recent to judge; waiting out the cooldown"
	case tuner.HoldBudget:
		why += "today's apply budget is spent"
	case tuner.HoldPendingRestart:
		why += "the last write is not running in the EPP yet"
	case tuner.HoldNoDecisions:
		why += "too few requests in the window: " + h.Detail
	default:
		why += h.Detail
	}
	return why
}

// appliedWhy: what the applied change is for.
func appliedWhy(r *tuner.Report) string {
	rec, ev := r.Recommendation, &r.Recommendation.Evidence
	cur, next := r.Current.BarTokens, rec.EffectiveBarTokens
	var why string
	switch {
	case rec.Mode != r.Current.Mode && rec.Mode == "matchedTokens":
		why = "switched to matchedTokens: a request now leaves its cached pod exactly when the extra queue there exceeds the prefix it would reuse (break-even), with the bar as a ceiling on top"
	case rec.Mode != r.Current.Mode:
		why = "switched to " + rec.Mode + ": back to the plain bar"
	case cur != nil && ev.ReleaseChainFloorTokens > 0 && *cur < ev.ReleaseChainFloorTokens:
		why = fmt.Sprintf("raised out of the release-chain hazard: the bar was below the p99 prompt (%s tokens), so a long prompt released off its cached pod lands on another, pushes it over the bar for the next request, and so on", num(ev.ReleaseChainFloorTokens))
	case cur != nil && next != nil && *next < *cur:
		why = fmt.Sprintf("lowered: requests queue behind too much pinned prefill work (estimated excess %s → %s tokens)", tokensShort(ev.ExcessCost.Current), tokensShort(ev.ExcessCost.Recommended))
	case cur != nil && next != nil:
		why = fmt.Sprintf("raised: releases forfeit more cached prefix than the queueing they save (estimated excess %s → %s tokens)", tokensShort(ev.ExcessCost.Current), tokensShort(ev.ExcessCost.Recommended))
	default:
		why = "applied"
	}
	if s := ev.Step; s != nil && s.WantedBarTokens != nil {
		why += fmt.Sprintf("; moved ×/÷%s at most per apply (wanted %s)", num(s.MaxStep), num(*s.WantedBarTokens))
	}
	if w, n := ev.Shadow.Current.Rates.WronglyHeld, ev.Shadow.Recommended.Rates.WronglyHeld; w != nil && n != nil && *n > *w {
		why += "; its own wrongly-held rate rises because judging each decision alone cannot see release chains (docs/tuner.md)"
	}
	return why
}

func failed(guard string, gs []tuner.Guard) bool {
	for _, g := range gs {
		if g.Name == guard {
			return !g.Pass
		}
	}
	return false
}

// weakestFactor names the smallest part of the confidence in plain words.
func weakestFactor(c tuner.ConfidenceParts) string {
	parts := []struct {
		v    float64
		what string
	}{
		{c.Sample, "few decisions since the last change"},
		{c.Consistency, "the best bar moves from one stretch of the window to the next"},
		{c.Rate, "the drain-rate estimate is uncertain"},
		{c.Source, "the in-flight snapshots cover the window thinly"},
	}
	best := parts[0]
	for _, p := range parts[1:] {
		if p.v < best.v {
			best = p
		}
	}
	return best.what
}

// barFormula relates the table's bar in tokens to the diff's milliseconds.
func barFormula(ms, ppt float64) string {
	return fmt.Sprintf("%s ms × %s tok/s / 1000 = %s tokens", num(ms), num(ppt), num(ms*ppt/1000))
}

// writeApplied prints an applied diff with the unit story and, when an
// edited line carries the user's own comment, who set the value.
func writeApplied(w io.Writer, r *tuner.Report, path string) {
	for _, l := range strings.Split(strings.TrimRight(r.Diff, "\n"), "\n") {
		fmt.Fprintf(w, "           %s\n", l)
	}
	if rec := r.Recommendation; rec != nil && rec.EffectiveBarTokens != nil {
		name := "bar"
		if rec.Mode == "matchedTokens" {
			name = "bar (the matchedTokens ceiling)"
		}
		fmt.Fprintf(w, "           %s = maxTTFTPenaltyMs × peakPrefillThroughput / 1000 = %s\n", name, barFormula(rec.MaxTTFTPenaltyMs, rec.PeakPrefillThroughput))
	}
	for _, l := range strings.Split(r.Diff, "\n") {
		if strings.HasPrefix(l, "+ ") || (strings.HasPrefix(l, "+") && !strings.HasPrefix(l, "+++")) {
			if _, comment, ok := strings.Cut(l, "#"); ok {
				seq := ""
				if r.Apply != nil && r.Apply.Seq > 0 {
					seq = fmt.Sprintf(" (history entry %d in %s)", r.Apply.Seq, sink.SidecarPath(path))
				}
				fmt.Fprintf(w, "           gatetuner set this value%s; the comment %q is yours, kept as written\n", seq, "#"+comment)
				break
			}
		}
	}
}

// phaseChange is a bar the EPP started running, for the summary.
type phaseChange struct {
	at    time.Duration
	phase string
	bar   float64
	why   string
}

// writeCosts says plainly where the tuned day did worse than the default
// and why, from the bars that were in force.
func writeCosts(w io.Writer, base, tuned *truth.Truth, defBar float64, changes []phaseChange) {
	var lines []string
	inForce := defBar
	ci := 0
	judged := map[string]bool{}
	for _, p := range base.Phases {
		judged[p.Name] = true
	}
	for ci < len(changes) && !judged[changes[ci].phase] { // earlier days set the bar the judged one starts on
		inForce = changes[ci].bar
		ci++
	}
	for _, p := range base.Phases {
		tp := tuned.Phase(p.Name)
		var during []phaseChange
		for ci < len(changes) && changes[ci].phase == p.Name {
			during = append(during, changes[ci])
			ci++
		}
		start := inForce
		if len(during) > 0 {
			inForce = during[len(during)-1].bar
		}
		if tp == nil || tp.TTFT.P90 <= p.TTFT.P90*1.1 {
			continue
		}
		bars := []string{num(start)}
		for _, c := range during {
			bars = append(bars, fmt.Sprintf("%s from %s", num(c.bar), clockOf(c.at)))
		}
		line := fmt.Sprintf("  %s: TTFT p90 %.2f → %.2f s on bars %s (default %s). ", p.Name, p.TTFT.P90, tp.TTFT.P90, strings.Join(bars, ", then "), num(defBar))
		if math.Min(start, inForce) < defBar {
			line += "A lower bar releases more requests off their cached pod; each re-prefills its whole prompt elsewhere, and that extra work queues everyone."
		} else {
			line += "A higher bar keeps more requests waiting behind their cached pod's queue."
		}
		if len(during) > 0 {
			line += " The bar changed inside the phase: the tuner moves it at most ×/÷4 per apply, after a restart and fresh evidence, so part of the phase ran on the previous one's bar."
		}
		lines = append(lines, line)
	}
	if len(lines) == 0 {
		fmt.Fprintln(w, "no phase ran more than 10 % slower (TTFT p90) tuned than on the default")
		return
	}
	fmt.Fprintln(w, "where tuning cost something:")
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}

func clockOf(d time.Duration) string {
	return fmt.Sprintf("%02d:%02d", int(d.Hours()), int(d.Minutes())%60)
}

// tokensShort writes a large token count in words ("1.5 billion").
func tokensShort(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e9:
		return fmt.Sprintf("%.1f billion", v/1e9)
	case a >= 1e6:
		return fmt.Sprintf("%.0f million", v/1e6)
	}
	return num(v)
}

// overallVerdict is the summary's last word on the whole run.
func overallVerdict(base, tuned truth.OverallTruth) string {
	d, t := base.TTFT.P90, tuned.TTFT.P90
	switch {
	case d <= 0:
		return "overall: no finished request to compare"
	case t > d*1.02:
		return fmt.Sprintf("overall: the tuned day was slower — TTFT p90 %.2f s against %.2f s on the default (+%.0f %%); wrongly held %s against %s", t, d, 100*(t/d-1), pctp(tuned.WronglyHeldRate), pctp(base.WronglyHeldRate))
	case t < d*0.98:
		return fmt.Sprintf("overall: the tuned day was faster — TTFT p90 %.2f s against %.2f s on the default (−%.0f %%); wrongly held %s against %s", t, d, 100*(1-t/d), pctp(tuned.WronglyHeldRate), pctp(base.WronglyHeldRate))
	}
	return fmt.Sprintf("overall: no real difference — TTFT p90 %.2f s against %.2f s on the default; wrongly held %s against %s", t, d, pctp(tuned.WronglyHeldRate), pctp(base.WronglyHeldRate))
}
