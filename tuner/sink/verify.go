package sink

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// TTFT histograms read by the verification, in order of preference.
const (
	// MetricEPPTTFT is the router-observed TTFT histogram.
	MetricEPPTTFT = "llm_d_epp_request_ttft_seconds"
	// MetricVLLMTTFT is vLLM's TTFT histogram, used when the EPP's has no data.
	MetricVLLMTTFT = "vllm:time_to_first_token_seconds"
)

// ttftSample is one TTFT quantile measurement.
type ttftSample struct {
	metric   string
	selector string
	value    float64 // seconds
}

// quantileQuery returns the PromQL of a TTFT quantile over rng ending at the
// evaluation time.
func quantileQuery(q float64, metric, selector string, rng time.Duration) string {
	return fmt.Sprintf(`histogram_quantile(%s, sum by (le) (rate(%s_bucket{%s}[%s])))`,
		strconv.FormatFloat(q, 'g', -1, 64), metric, selector, promDuration(rng))
}

// promDuration renders a range in whole seconds (at least 1s).
func promDuration(d time.Duration) string {
	s := int64(math.Ceil(d.Seconds()))
	if s < 1 {
		s = 1
	}
	return strconv.FormatInt(s, 10) + "s"
}

// measure reads the TTFT quantile over rng ending at ts, from metric (or,
// when metric is "", the EPP histogram, else vLLM's). A nil sample means no
// usable data; why says what was seen. err is only the context ending.
func (e *engine) measure(ctx context.Context, ts time.Time, rng time.Duration, metric string) (*ttftSample, string, error) {
	v := e.opts.Verify
	candidates := []struct{ metric, selector string }{{MetricEPPTTFT, v.Selector}, {MetricVLLMTTFT, v.VLLMSelector}}
	var whys []string
	for _, c := range candidates {
		if metric != "" && c.metric != metric {
			continue
		}
		q := quantileQuery(v.Quantile, c.metric, c.selector, rng)
		vec, _, err := v.Querier.Query(ctx, q, ts)
		if ctx.Err() != nil {
			return nil, "", ctx.Err()
		}
		switch {
		case err != nil:
			whys = append(whys, fmt.Sprintf("%s: query failed: %v", c.metric, err))
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return nil, "", err
			}
			continue
		case len(vec) == 0:
			whys = append(whys, fmt.Sprintf("%s{%s}: no samples over %s", c.metric, c.selector, promDuration(rng)))
			continue
		case len(vec) > 1:
			whys = append(whys, fmt.Sprintf("%s: %d series where one was expected", c.metric, len(vec)))
			continue
		}
		val := float64(vec[0].Value)
		if math.IsNaN(val) || math.IsInf(val, 0) || val < 0 {
			whys = append(whys, fmt.Sprintf("%s{%s}: quantile is %v (no requests over %s)", c.metric, c.selector, val, promDuration(rng)))
			continue
		}
		return &ttftSample{metric: c.metric, selector: c.selector, value: val}, "", nil
	}
	why := "no TTFT histogram configured"
	if len(whys) > 0 {
		why = whys[0]
		for _, w := range whys[1:] {
			why += "; " + w
		}
	}
	return nil, why, nil
}

// measureBaseline reads the TTFT quantile over the window before now.
func (e *engine) measureBaseline(ctx context.Context) (*ttftSample, string, error) {
	return e.measure(ctx, e.opts.Clock.Now(), e.opts.Verify.Window, "")
}

// verifyAfter watches TTFT from the end of the warm-up after the config took
// effect at `at` until the window is over; it fails (returns a failure
// message) on a regression beyond the margin. When nothing could be measured
// (Prometheus down, no traffic) the result is "inconclusive" and the new
// config stays: the EPP is available, no regression was seen, and a rollback
// would cost another restart on no evidence.
func (e *engine) verifyAfter(ctx context.Context, at time.Time, before *ttftSample) (*Verification, string, error) {
	v := e.opts.Verify
	clk := e.opts.Clock
	res := &Verification{Metric: before.metric, Quantile: v.Quantile, Before: before.value, Margin: v.Margin}
	start := at.Add(v.Warmup)
	end := start.Add(v.Window)
	judgeAfter := max(v.Window/4, v.Interval)
	limit := before.value * (1 + v.Margin)
	measured := false
	var lastWhy string
	for {
		wait := v.Interval
		now := clk.Now()
		if now.Before(start) {
			wait = min(wait, start.Sub(now)+v.Interval)
		}
		if rest := end.Sub(now); rest < wait {
			wait = rest
		}
		if wait > 0 {
			select {
			case <-ctx.Done():
				return res, "", ctx.Err()
			case <-clk.After(wait):
			}
		}
		now = clk.Now()
		if span := now.Sub(start); span >= judgeAfter || !now.Before(end) {
			if span > v.Window {
				span = v.Window
			}
			s, why, err := e.measure(ctx, now, span, before.metric)
			if err != nil {
				return res, "", err
			}
			if s == nil {
				lastWhy = why
			} else {
				measured = true
				res.After = s.value
				if s.value > limit {
					res.Result = "failed"
					return res, fmt.Sprintf("TTFT p%g %.3fs over the %s after the rollout exceeds %.3fs before the apply by more than %g%% (%s)",
						v.Quantile*100, s.value, promDuration(span), before.value, v.Margin*100, before.metric), nil
				}
			}
		}
		if !now.Before(end) {
			break
		}
	}
	if !measured {
		res.Result = "inconclusive"
		e.log.Warn("TTFT could not be measured after the rollout; keeping the new config unverified", "why", lastWhy)
		return res, "", nil
	}
	res.Result = "passed"
	return res, "", nil
}
