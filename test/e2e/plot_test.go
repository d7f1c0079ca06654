package e2e

import (
	"fmt"
	"math"
	"strings"
)

// plotSVG draws the run: the bar in force, TTFT p90 and the true
// wrongly-held rate over time, with applies, the daemon restart and the
// Prometheus outage marked.
func plotSVG(res *loopResult) string {
	const w, panelH, left, right, top, gap = 760, 150, 70, 20, 46, 40
	h := top + 3*panelH + 2*gap + 40
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%d" y="18" font-size="13">gatetuner closed loop, profile %s (prompt-shift evening+late compressed %.2gx; x: minutes)</text>`+"\n", left, res.Profile, timeScale)
	tmax := 0.0
	for _, s := range res.Samples {
		tmax = math.Max(tmax, s.T)
	}
	if tmax == 0 {
		tmax = 1
	}
	x := func(t float64) float64 { return left + (w-left-right)*t/tmax }
	type series struct {
		title string
		get   func(sample) *float64
		log   bool
		unit  string
	}
	panels := []series{
		{"bar in force (tokens; matchedTokens: ceiling)", func(s sample) *float64 { return s.Bar }, true, ""},
		{"TTFT p90 over 30 s (s)", func(s sample) *float64 { return s.TTFTP90 }, true, "s"},
		{"wrongly-held rate (simulator truth, per 10 s)", func(s sample) *float64 {
			if s.Held == nil {
				return nil
			}
			v := *s.Held * 100
			return &v
		}, false, "%"},
	}
	for i, p := range panels {
		y0 := float64(top + i*(panelH+gap))
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, s := range res.Samples {
			if v := p.get(s); v != nil && (!p.log || *v > 0) {
				lo, hi = math.Min(lo, *v), math.Max(hi, *v)
			}
		}
		if math.IsInf(lo, 1) {
			lo, hi = 0, 1
		}
		if p.log {
			lo, hi = math.Log10(lo), math.Log10(hi)
		} else {
			lo = 0
		}
		if hi-lo < 1e-9 {
			hi = lo + 1
		}
		y := func(v float64) float64 {
			if p.log {
				v = math.Log10(v)
			}
			return y0 + panelH - panelH*(v-lo)/(hi-lo)
		}
		fmt.Fprintf(&b, `<text x="%d" y="%.0f">%s</text>`+"\n", left, y0-6, p.title)
		fmt.Fprintf(&b, `<rect x="%d" y="%.0f" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", left, y0, w-left-right, panelH)
		for _, tick := range []float64{lo, (lo + hi) / 2, hi} {
			v := tick
			if p.log {
				v = math.Pow(10, tick)
			}
			fmt.Fprintf(&b, `<text x="%d" y="%.0f" text-anchor="end">%s%s</text>`+"\n", left-4, y0+panelH-panelH*(tick-lo)/(hi-lo)+4, short(v), p.unit)
		}
		if !res.OutageStart.IsZero() {
			a, z := res.OutageStart.Sub(res.Start).Seconds(), res.OutageEnd.Sub(res.Start).Seconds()
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.0f" width="%.1f" height="%d" fill="#fdd" opacity="0.6"/>`+"\n", x(a), y0, x(z)-x(a), panelH)
		}
		if !res.Restarted.IsZero() {
			r := res.Restarted.Sub(res.Start).Seconds()
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.0f" y2="%.0f" stroke="#a0a" stroke-dasharray="2,3"/>`+"\n", x(r), x(r), y0, y0+panelH)
		}
		for _, e := range res.Applies {
			a := e.At.Sub(res.Start).Seconds()
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.0f" y2="%.0f" stroke="#0a0" stroke-width="1.5"/>`+"\n", x(a), x(a), y0, y0+panelH)
		}
		var pts []string
		for _, s := range res.Samples {
			v := p.get(s)
			if v == nil || (p.log && *v <= 0) {
				if len(pts) > 0 {
					fmt.Fprintf(&b, `<polyline fill="none" stroke="#1f5fbf" stroke-width="1.5" points="%s"/>`+"\n", strings.Join(pts, " "))
				}
				pts = pts[:0]
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s.T), y(*v)))
		}
		if len(pts) > 0 {
			fmt.Fprintf(&b, `<polyline fill="none" stroke="#1f5fbf" stroke-width="1.5" points="%s"/>`+"\n", strings.Join(pts, " "))
		}
	}
	yb := float64(top + 3*panelH + 2*gap + 15)
	for m := 0.0; m <= tmax/60; m += 2 {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%.0f</text>`+"\n", x(m*60), yb-20+12, m)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%.0f">green: applies · purple dashed: daemon killed and restarted · red band: Prometheus down</text>`+"\n", left, yb+12)
	b.WriteString("</svg>\n")
	return b.String()
}

func short(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.0fk", v/1e3)
	case v >= 10:
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2g", v)
}
