package main

import (
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gatetuner/gatetuner/tuner"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// writeReport prints a decision record for a terminal.
func writeReport(w io.Writer, r *tuner.Report) {
	var b strings.Builder
	fmt.Fprintf(&b, "target %s — %s", r.Target, r.Result)
	if r.Hold != nil {
		fmt.Fprintf(&b, " (%s)", r.Hold.Reason)
	}
	b.WriteString("\n")
	if r.Error != "" {
		fmt.Fprintf(&b, "  error        %s\n", r.Error)
	}
	if r.Hold != nil {
		fmt.Fprintf(&b, "  why          %s\n", r.Hold.Detail)
	}
	c := r.Current
	if c.Mode != "" {
		fmt.Fprintf(&b, "  current      %-13s maxTTFTPenaltyMs %-9s peakPrefillThroughput %s (%s)  bar %s tokens\n",
			c.Mode, num(c.MaxTTFTPenaltyMs), num(c.PeakPrefillThroughput), c.PPTSource, bar(c.BarTokens))
	}
	rec := r.Recommendation
	if rec == nil {
		io.WriteString(w, b.String()+"\n")
		return
	}
	ev := rec.Evidence
	fmt.Fprintf(&b, "  recommended  %-13s maxTTFTPenaltyMs %-9s peakPrefillThroughput %s  bar %s tokens\n",
		rec.Mode, num(rec.MaxTTFTPenaltyMs), num(rec.PeakPrefillThroughput), bar(rec.EffectiveBarTokens))
	if ev.Step != nil {
		fmt.Fprintf(&b, "               (wanted a bar of %s tokens; each apply moves it at most ×/÷%s)\n", bar(ev.Step.WantedBarTokens), num(ev.Step.MaxStep))
	}
	fmt.Fprintf(&b, "  throughput   %s\n", ev.Throughput.Note)
	obj := ev.Objective
	fmt.Fprintf(&b, "  objective    %s: estimated TTFT p90 %.3gs → %.3gs (feedback replay, %s)\n", obj.Name,
		obj.Current.P90TTFTSeconds, obj.Recommended.P90TTFTSeconds, obj.RateSource)
	cp := ev.Confidence
	fmt.Fprintf(&b, "  confidence   %.2f = rate %.2f × source %.2f × sample %.2f × consistency %.2f\n", cp.Value, cp.Rate, cp.Source, cp.Sample, cp.Consistency)
	fmt.Fprintf(&b, "  evidence     %s over %s → %s%s: %d decisions, %d with a known verdict\n", ev.Source,
		ev.Window.From.UTC().Format("15:04:05"), ev.Window.To.UTC().Format("15:04:05"), ifStr(ev.Window.CutAtApply, " (cut at the last apply)"),
		ev.Window.Decisions, ev.Window.Known)
	fmt.Fprintf(&b, "               wrongly held %s → %s, forfeited %s → %s\n",
		pctp(ev.Shadow.Current.Rates.WronglyHeld), pctp(ev.Shadow.Recommended.Rates.WronglyHeld),
		pctp(ev.Shadow.Current.Rates.Forfeited), pctp(ev.Shadow.Recommended.Rates.Forfeited))
	ec := ev.ExcessCost
	fmt.Fprintf(&b, "               excess %s → %s tokens", num(ec.Current), num(ec.Recommended))
	if ec.CurrentSeconds != nil {
		fmt.Fprintf(&b, " (%s → %s s of prefill)", num(*ec.CurrentSeconds), num(*ec.RecommendedSeconds))
	}
	fmt.Fprintf(&b, "; restart cost %s tokens", num(ev.RestartCost.Tokens))
	if rc := ev.RestartCost; rc.Unknown != "" {
		fmt.Fprintf(&b, " — unknown: %s", rc.Unknown)
	} else if rc.DelaySeconds != nil {
		fmt.Fprintf(&b, ", %s request-seconds of queueing (drains in %ss at %.0f %% utilization)", num(*rc.DelaySeconds), num(*rc.DrainSeconds), 100**rc.Utilization)
	}
	fmt.Fprintf(&b, " (%s)\n", ev.RestartCost.Formula)
	if ev.RestartCost.PricedAt != "" {
		fmt.Fprintf(&b, "               restart priced at %s\n", ev.RestartCost.PricedAt)
	}
	writeDay(&b, ev.Day, obj.Name)
	e := ev.Estimates
	fmt.Fprintf(&b, "  estimates    drain rate %s (%s, confidence %.2f)", nump(e.DrainRate), e.DrainStatus, e.DrainConfidence)
	if e.DrainInterval != nil {
		fmt.Fprintf(&b, " [%s–%s]", num(e.DrainInterval.Low), num(e.DrainInterval.High))
	}
	fmt.Fprintf(&b, ", nominal %s, per-request %s tok/s\n", nump(e.Nominal), nump(e.PerRequestRate))
	fmt.Fprintf(&b, "               prompt p50 %s p90 %s, cached mean %s tokens, %s req/s; release-chain floor %s tokens (0: none)\n",
		nump(e.PromptP50), nump(e.PromptP90), nump(e.CachedMean), nump(e.RequestRate), num(ev.ReleaseChainFloorTokens))
	gi := ev.GateInput
	fmt.Fprintf(&b, "  gate input   penalty ms p50 %s p90 %s p99 %s; gap−matched tokens p50 %s p90 %s p99 %s\n",
		nump(gi.PenaltyMs.P50), nump(gi.PenaltyMs.P90), nump(gi.PenaltyMs.P99),
		nump(gi.GapMinusMatchedTokens.P50), nump(gi.GapMinusMatchedTokens.P90), nump(gi.GapMinusMatchedTokens.P99))
	if len(e.Reasons) > 0 {
		fmt.Fprintf(&b, "  data notes   %s\n", strings.Join(e.Reasons, ", "))
	}
	b.WriteString("  guards      ")
	for i, g := range r.Guards {
		mark := "✓"
		if !g.Pass {
			mark = "✗"
		}
		if i > 0 && i%6 == 0 {
			b.WriteString("\n              ")
		}
		fmt.Fprintf(&b, " %s %s", mark, g.Name)
	}
	b.WriteString("\n")
	if r.Diff != "" {
		b.WriteString("  diff (what would be written):\n")
		for _, l := range strings.Split(strings.TrimRight(r.Diff, "\n"), "\n") {
			b.WriteString("    " + l + "\n")
		}
	}
	io.WriteString(w, b.String()+"\n")
}

// writeDay prints the day-level choice: the rule, every window's table row
// (so "why not X at 9:00?" has an answer) and the apply window.
func writeDay(b *strings.Builder, d *tuner.DayView, objective string) {
	if d == nil {
		return
	}
	unit, f := "s TTFT p90", func(v *float64) string {
		if v == nil {
			return "—"
		}
		return strconv.FormatFloat(*v, 'f', 3, 64)
	}
	if objective == tuner.ObjectiveExcessTokens {
		unit, f = "excess tokens", func(v *float64) string {
			if v == nil {
				return "—"
			}
			return num(*v)
		}
	}
	fmt.Fprintf(b, "  day          %s windows of %s over a %s history; score %s → %s (%s)\n", num(float64(len(d.Windows))),
		time.Duration(d.WindowWidthSeconds*float64(time.Second)), time.Duration(d.HistorySeconds*float64(time.Second)),
		f(d.CurrentScore), f(d.RecommendedScore), unit)
	fmt.Fprintf(b, "               rule: %s\n", d.Rule)
	fmt.Fprintf(b, "    %-15s %4s %10s %12s %12s  %-28s %12s %-6s %s\n", "window", "days", "requests", "current", "recommended", "window's best", "best score", "10 %", "restart s")
	for _, w := range d.Windows {
		rule := "pass"
		switch {
		case w.Decisions == 0:
			rule = "—"
		case !w.Judged:
			rule = "thin"
		case !w.Pass:
			rule = "FAIL"
		}
		fmt.Fprintf(b, "    %-15s %4d %10s %12s %12s  %-28s %12s %-6s %s\n", w.Label, w.Days, num(w.Requests), f(w.Current), f(w.Recommended),
			w.Best, f(w.BestScore), rule, nump(w.RestartCost))
	}
	if d.Note != "" {
		fmt.Fprintf(b, "               note: %s\n", d.Note)
	}
	q := d.Queries
	fmt.Fprintf(b, "               window estimates: %d queried (%d Prometheus queries, %d failed), %d cached%s\n",
		q.SpansQueried, q.Queries, q.Failed, q.SpansCached, ifStr(q.Note != "", "; "+q.Note))
	if len(d.Skipped) > 0 {
		fmt.Fprintf(b, "               spans the model skipped: %s\n", strings.Join(d.Skipped, "; "))
	}
	if a := d.ApplyWindow; a != nil {
		fmt.Fprintf(b, "  apply window %s: %s\n", a.Kind, a.Detail)
	}
}

func ifStr(c bool, s string) string {
	if c {
		return s
	}
	return ""
}

func bar(v *float64) string {
	if v == nil {
		return "none"
	}
	return num(*v)
}

func nump(v *float64) string {
	if v == nil {
		return "n/a"
	}
	return num(*v)
}

func pctp(v *float64) string {
	if v == nil {
		return "n/a"
	}
	return strconv.FormatFloat(*v*100, 'f', 1, 64) + "%"
}

// num formats a number for people: thousands separators for large values.
func num(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return strconv.FormatFloat(v, 'g', -1, 64)
	case math.Abs(v) >= 1e9:
		return strconv.FormatFloat(v, 'g', 3, 64)
	case math.Abs(v) >= 100:
		s := strconv.FormatFloat(math.Round(v), 'f', 0, 64)
		neg := strings.HasPrefix(s, "-")
		s = strings.TrimPrefix(s, "-")
		var out []string
		for len(s) > 3 {
			out = append([]string{s[len(s)-3:]}, out...)
			s = s[:len(s)-3]
		}
		out = append([]string{s}, out...)
		r := strings.Join(out, ",")
		if neg {
			r = "-" + r
		}
		return r
	case v == math.Trunc(v):
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}
