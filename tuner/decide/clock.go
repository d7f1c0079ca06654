package decide

import (
	"fmt"
	"time"

	"github.com/gatetuner/gatetuner/tuner/policy"
	"github.com/gatetuner/gatetuner/tuner/sink/state"
)

// Clock splits time into the windows of the daily cycle: the window of t
// is ⌊((t − UTC midnight) mod Length) / Width⌋.
type Clock struct{ Length, Width time.Duration }

// ClockOf is the policy's daily cycle (24 h of 1 h windows when unset).
func ClockOf(pol policy.Policy) Clock {
	c := Clock{Length: pol.DayLength, Width: pol.WindowWidth}
	if c.Length <= 0 || c.Width <= 0 || c.Length%c.Width != 0 {
		c = Clock{Length: 24 * time.Hour, Width: time.Hour}
	}
	return c
}

// Windows is the number of windows in a day.
func (c Clock) Windows() int { return int(c.Length / c.Width) }

// Offset is t's offset into its day: (t − UTC midnight) mod Length.
func (c Clock) Offset(t time.Time) time.Duration {
	u := t.UTC()
	midnight := time.Date(u.Year(), u.Month(), u.Day(), 0, 0, 0, 0, time.UTC)
	return u.Sub(midnight) % c.Length
}

// Index is t's window.
func (c Clock) Index(t time.Time) int { return int(c.Offset(t) / c.Width) }

// Start is the start of the window t falls in.
func (c Clock) Start(t time.Time) time.Time { return t.Add(-(c.Offset(t) % c.Width)) }

// Next is the first start of window k at or after t.
func (c Clock) Next(t time.Time, k int) time.Time {
	s := c.Start(t)
	for i := 0; i <= c.Windows(); i++ {
		if c.Index(s) == k && !s.Before(t) {
			return s
		}
		s = s.Add(c.Width)
	}
	return s
}

// Label names window k: "09:00–10:00" for a 24 h day, else the offsets
// into the (simulated) day, "+00:20–+00:40".
func (c Clock) Label(k int) string {
	hm := func(d time.Duration) string { return fmt.Sprintf("%02d:%02d", int(d.Hours()), int(d.Minutes())%60) }
	from, to := time.Duration(k)*c.Width, time.Duration(k+1)*c.Width
	if c.Length == 24*time.Hour {
		return hm(from) + "–" + hm(to)
	}
	return "+" + hm(from) + "–+" + hm(to)
}

// Spans splits [from, to) at the window boundaries (spans without estimates).
func (c Clock) Spans(from, to time.Time) []Span {
	var out []Span
	for s := from; s.Before(to); {
		e := c.Start(s).Add(c.Width)
		if e.After(to) {
			e = to
		}
		out = append(out, Span{From: s, To: e, Index: c.Index(s)})
		s = e
	}
	return out
}

// Complete reports whether s is a whole window that ended by now.
func (c Clock) Complete(s Span, now time.Time) bool {
	return s.To.Equal(c.Start(s.From).Add(c.Width)) && !s.To.After(now)
}

// HistoryWindow is the history the evidence holds — from the start of the
// window of the day that now − history falls in, so the evidence holds
// whole windows and a later cycle can reuse them — cut at the last change
// that took effect (a window spanning an apply mixes two configs).
func HistoryWindow(now time.Time, pol policy.Policy, st *state.State) WindowView {
	from := ClockOf(pol).Start(now.Add(-pol.History))
	w := WindowView{From: from, To: now}
	if eff := lastChange(st); eff.After(from) {
		w.From, w.CutAtApply = eff, true
	}
	return w
}

// RecentSpan is how much of the latest traffic prices a restart now: a
// quarter of a window of the day, within [1m, 15m].
func RecentSpan(pol policy.Policy) time.Duration {
	return min(max(pol.WindowWidth/4, time.Minute), 15*time.Minute)
}
