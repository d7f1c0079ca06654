package tuner

import (
	"context"
	"fmt"
	"time"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/source"
)

// dayClock splits time into the windows of the daily cycle: the window of t
// is ⌊((t − UTC midnight) mod length) / width⌋.
type dayClock struct{ length, width time.Duration }

// dayClockOf is the policy's daily cycle (24 h of 1 h windows when unset).
func dayClockOf(pol config.Policy) dayClock {
	c := dayClock{length: pol.DayLength, width: pol.WindowWidth}
	if c.length <= 0 || c.width <= 0 || c.length%c.width != 0 {
		c = dayClock{length: 24 * time.Hour, width: time.Hour}
	}
	return c
}

// windows is the number of windows in a day.
func (c dayClock) windows() int { return int(c.length / c.width) }

// offset is t's offset into its day: (t − UTC midnight) mod length.
func (c dayClock) offset(t time.Time) time.Duration {
	u := t.UTC()
	midnight := time.Date(u.Year(), u.Month(), u.Day(), 0, 0, 0, 0, time.UTC)
	return u.Sub(midnight) % c.length
}

// index is t's window.
func (c dayClock) index(t time.Time) int { return int(c.offset(t) / c.width) }

// start is the start of the window t falls in.
func (c dayClock) start(t time.Time) time.Time { return t.Add(-(c.offset(t) % c.width)) }

// next is the first start of window k at or after t.
func (c dayClock) next(t time.Time, k int) time.Time {
	s := c.start(t)
	for i := 0; i <= c.windows(); i++ {
		if c.index(s) == k && !s.Before(t) {
			return s
		}
		s = s.Add(c.width)
	}
	return s
}

// label names window k: "09:00–10:00" for a 24 h day, else the offsets
// into the (simulated) day, "+00:20–+00:40".
func (c dayClock) label(k int) string {
	hm := func(d time.Duration) string { return fmt.Sprintf("%02d:%02d", int(d.Hours()), int(d.Minutes())%60) }
	from, to := time.Duration(k)*c.width, time.Duration(k+1)*c.width
	if c.length == 24*time.Hour {
		return hm(from) + "–" + hm(to)
	}
	return "+" + hm(from) + "–+" + hm(to)
}

// daySpan is a stretch of the evidence inside one window of one day.
type daySpan struct {
	from, to time.Time
	index    int
}

// spans splits [from, to) at the window boundaries.
func (c dayClock) spans(from, to time.Time) []daySpan {
	var out []daySpan
	for s := from; s.Before(to); {
		e := c.start(s).Add(c.width)
		if e.After(to) {
			e = to
		}
		out = append(out, daySpan{from: s, to: e, index: c.index(s)})
		s = e
	}
	return out
}

// SpanEstimator estimates over an explicit span (estimator.Estimator's
// EstimateSpan): each window of the day gets its own estimates.
type SpanEstimator interface {
	EstimateSpan(ctx context.Context, t estimator.Target, from, to time.Time) (*estimator.Estimates, error)
}

// spanEstimate is one span's estimates, or why it has none.
type spanEstimate struct {
	daySpan
	est *estimator.Estimates
	err string
	// final: the span is complete and its estimates are cached (later
	// cycles get the same ones).
	final bool
}

// spanKey identifies a span in the cache.
type spanKey struct{ from, to int64 }

// dayCache holds a target's completed spans' estimates (bounded by the
// history); the open window and spans never seen are queried each cycle.
type dayCache struct {
	spans map[spanKey]spanEstimate
}

// dayEvidence is the day stage's result: every span's estimates over the
// evidence window and what it cost to get them.
type dayEvidence struct {
	clock dayClock
	spans []spanEstimate
	// perWindow: the estimator has span estimates (else the lookback's are
	// used for every window, and the evidence says so).
	perWindow bool
	queries   DayQueries
}

// daySpans gets each span's estimates: cached when complete and seen by an
// earlier cycle, else from the estimator (EstimateSpan).
func (t *Tuner) daySpans(ctx context.Context, tg *Target, params gate.Params, est *estimator.Estimates, window WindowView, now time.Time) *dayEvidence {
	clock := dayClockOf(tg.Config.Policy)
	d := &dayEvidence{clock: clock}
	estr := tg.Estimator
	if estr == nil {
		estr = t.Estimator
	}
	se, ok := estr.(SpanEstimator)
	spans := clock.spans(window.From, window.To)
	if !ok {
		for _, s := range spans {
			d.spans = append(d.spans, spanEstimate{daySpan: s, est: est})
		}
		d.queries.Note = "the estimator gives no per-window estimates: every window uses the lookback's"
		return d
	}
	if q := est.Queries; q.Queries > 0 && q.Failed == q.Queries {
		d.queries.Note = "every query of the lookback's estimate failed: no window was asked for its own"
		return d
	}
	d.perWindow = true
	sctx, span := t.stage(ctx, "day-estimates")
	defer span.End()
	et := estimatorTarget(tg, params)
	cache := t.dayCacheFor(tg.Config.Name)
	keep := map[spanKey]spanEstimate{}
	for _, s := range spans {
		key := spanKey{s.from.UnixNano(), s.to.UnixNano()}
		complete := s.to.Equal(clock.start(s.from).Add(clock.width)) && !s.to.After(now)
		t.dayMu.Lock()
		c, hit := cache.spans[key]
		t.dayMu.Unlock()
		if hit {
			c.final = true
			d.queries.SpansCached++
			d.spans = append(d.spans, c)
			keep[key] = c
			continue
		}
		sp := spanEstimate{daySpan: s}
		e, err := se.EstimateSpan(sctx, et, s.from, s.to)
		d.queries.SpansQueried++
		switch {
		case err != nil:
			sp.err = err.Error()
		default:
			sp.est = e
			d.queries.Queries += e.Queries.Queries
			d.queries.Failed += e.Queries.Failed
		}
		if complete && (sp.est == nil || sp.est.Queries.Failed == 0) {
			sp.final = true
			keep[key] = sp
		}
		d.spans = append(d.spans, sp)
	}
	// Only spans still inside the history are kept: memory stays bounded.
	t.dayMu.Lock()
	cache.spans = keep
	t.dayMu.Unlock()
	return d
}

// dayCacheFor returns the target's cache (created on first use).
func (t *Tuner) dayCacheFor(target string) *dayCache {
	t.dayMu.Lock()
	defer t.dayMu.Unlock()
	if t.days == nil {
		t.days = map[string]*dayCache{}
	}
	c, ok := t.days[target]
	if !ok {
		c = &dayCache{spans: map[spanKey]spanEstimate{}}
		t.days[target] = c
	}
	return c
}

// modelSpans are the spans the Prometheus model draws from.
func (d *dayEvidence) modelSpans() []source.Span {
	out := make([]source.Span, 0, len(d.spans))
	for _, s := range d.spans {
		out = append(out, source.Span{From: s.from, To: s.to, Est: s.est})
	}
	return out
}

// skipped lists the spans the model cannot draw from, with why.
func (d *dayEvidence) skipped() []string {
	var out []string
	for _, s := range d.spans {
		why := s.err
		if why == "" {
			if err := source.SpanUsable(s.est); err != nil {
				why = err.Error()
			}
		}
		if why != "" {
			out = append(out, fmt.Sprintf("%s–%s: %s", s.from.UTC().Format(time.RFC3339), s.to.UTC().Format("15:04:05"), why))
		}
	}
	return out
}

// latest returns the newest span of window k that has estimates.
func (d *dayEvidence) latest(k int) *spanEstimate {
	for i := len(d.spans) - 1; i >= 0; i-- {
		if s := &d.spans[i]; s.index == k && s.est != nil {
			return s
		}
	}
	return nil
}
