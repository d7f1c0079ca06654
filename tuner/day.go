package tuner

import (
	"context"
	"time"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/decide"
	"github.com/gatetuner/gatetuner/tuner/source"
)

// spanKey identifies a span in a Memory's cache.
type spanKey struct{ from, to int64 }

// cachedSpan is a completed span's estimates, as read and as the decision
// reads them.
type cachedSpan struct {
	span decide.Span
	est  *estimator.Estimates
}

// daySpans gets each span of the history's own estimates: cached in mem
// when complete and seen by an earlier cycle, else from the estimator
// (EstimateSpan). raws are the spans' estimates as read (the model draws
// from them), in the order of the day's spans.
func (t *Tuner) daySpans(ctx context.Context, tg *Target, mem *Memory, params gate.Params, est *estimator.Estimates, lookback *decide.Estimate,
	window decide.WindowView, now time.Time) (*decide.Day, []*estimator.Estimates) {
	clock := decide.ClockOf(tg.Config.Policy)
	d := &decide.Day{Clock: clock}
	var raws []*estimator.Estimates
	se, ok := t.estimatorFor(tg).(SpanEstimator)
	spans := clock.Spans(window.From, window.To)
	if !ok {
		for _, s := range spans {
			s.Est, s.Unusable = &lookback.Traffic, unusable(est)
			d.Spans, raws = append(d.Spans, s), append(raws, est)
		}
		d.Queries.Note = "the estimator gives no per-window estimates: every window uses the lookback's"
		return d, raws
	}
	if q := est.Queries; q.Queries > 0 && q.Failed == q.Queries {
		d.Queries.Note = "every query of the lookback's estimate failed: no window was asked for its own"
		return d, raws
	}
	d.PerWindow = true
	sctx, span := t.stage(ctx, "day-estimates")
	defer span.End()
	et := estimatorTarget(tg, params)
	keep := map[spanKey]cachedSpan{}
	for _, s := range spans {
		key := spanKey{s.From.UnixNano(), s.To.UnixNano()}
		if c, hit := mem.days[key]; hit {
			c.span.Final = true
			d.Queries.SpansCached++
			d.Spans, raws = append(d.Spans, c.span), append(raws, c.est)
			keep[key] = c
			continue
		}
		e, err := se.EstimateSpan(sctx, et, s.From, s.To)
		d.Queries.SpansQueried++
		if err != nil {
			s.Err, e = err.Error(), nil
		} else {
			s.Est = trafficOf(e)
			d.Queries.Queries += e.Queries.Queries
			d.Queries.Failed += e.Queries.Failed
		}
		s.Unusable = unusable(e)
		if clock.Complete(s, now) && (e == nil || e.Queries.Failed == 0) {
			s.Final = true
			keep[key] = cachedSpan{span: s, est: e}
		}
		d.Spans, raws = append(d.Spans, s), append(raws, e)
	}
	// Only spans still inside the history are kept: memory stays bounded.
	mem.days = keep
	return d, raws
}

// unusable says why the Prometheus model cannot draw from e ("" when it can).
func unusable(e *estimator.Estimates) string {
	if err := source.SpanUsable(e); err != nil {
		return err.Error()
	}
	return ""
}
