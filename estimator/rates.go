package estimator

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// This file is the estimation half of the drain estimators, in the shape of
// the VPA recommender's estimators: a pure base over the aggregated windows
// (windows.go) and small wrappers — holds, coverage, warnings, confidence,
// the lower bound, the prior — composed once in newRateEstimators.

// evidence is what every rate estimator reads: one target's aggregated
// windows and the facts needed to judge them.
type evidence struct {
	d *drainInputs
	// unreadable hold every part, the per-request rate included: the
	// coverage queries failed or every pod is stale.
	unreadable []Reason
	// unjudgeable hold the window estimators once coverage passed: the
	// window queries failed or the waiting gauge has no series.
	unjudgeable []Reason
	// caveats are the saturation rule's warnings, carried by the drain rate.
	caveats []Reason
	windows windowsResult
	// engines counts each pod's engines.
	engines map[podKey]int
	// perRequest is the per-request rate, the drain rate's lower bound.
	perRequest RateEstimate
}

// rateResult is an estimate with the relative half-width of its interval
// (the confidence formula's hw).
type rateResult struct {
	RateEstimate
	relHalfWidth float64
}

// rateEstimator turns evidence into one rate estimate.
type rateEstimator interface {
	estimate(ev *evidence) rateResult
}

// rateFunc adapts a function to rateEstimator.
type rateFunc func(ev *evidence) rateResult

func (f rateFunc) estimate(ev *evidence) rateResult { return f(ev) }

// rateEstimators are the four rate estimators, built once per Estimator.
type rateEstimators struct {
	drain, perRequest, step, nominal rateEstimator
}

// newRateEstimators composes each part's estimator from its base.
func newRateEstimators(cfg Config) rateEstimators {
	unreadable := func(ev *evidence) []Reason { return ev.unreadable }
	unjudgeable := func(ev *evidence) []Reason { return ev.unjudgeable }
	// windowed wraps a window estimator in the holds and the coverage gate.
	windowed := func(part string, excluded bool, base rateEstimator) rateEstimator {
		return withHolds(part, unreadable,
			withCoverage(part, cfg.MinPodCoverage, excluded,
				withHolds(part, unjudgeable, base)))
	}
	conf := func(base rateEstimator) rateEstimator { return withConfidence(cfg.FreshnessHalfLife, base) }
	return rateEstimators{
		drain: withPrior(withLowerBound(
			windowed(partDrain, true, withCaveats(conf(rateFunc(saturatedWindows)))))),
		perRequest: withHolds(partPerRequest, unreadable, rateFunc(perRequestRate)),
		step:       windowed(partStep, false, withStepInputs(partStep, conf(rateFunc(stepWindows)))),
		nominal: windowed(partNominal, false, withStepInputs(partNominal,
			withFallback(conf(rateFunc(stepCostFit)), conf(rateFunc(stepTimeWindows))))),
	}
}

// blank is part's estimate before any evidence: Inconclusive, with its method and source.
func (ev *evidence) blank(part string) rateResult {
	var r RateEstimate
	switch part {
	case partDrain:
		r = RateEstimate{Method: "saturated-windows"}
		if ev.d.cs != nil {
			r.Source = ev.d.cs.id
		}
	case partPerRequest:
		r = RateEstimate{Method: "per-request"}
		if ev.d.cs != nil {
			r.Source = ev.d.perRequestTokens().id + " / " + mPrefillTime + "_sum"
		}
	case partStep:
		r = RateEstimate{Method: "step-rate"}
	case partNominal:
		r = RateEstimate{Method: "step-time"}
	}
	r.Status = StatusInconclusive
	return rateResult{RateEstimate: r}
}

// inPart returns rs with Part set to part.
func inPart(part string, rs ...Reason) []Reason {
	out := make([]Reason, len(rs))
	for i, r := range rs {
		r.Part = part
		out[i] = r
	}
	return out
}

// withHolds reports part Inconclusive for holds' reasons when there are any,
// else base's estimate.
func withHolds(part string, holds func(*evidence) []Reason, base rateEstimator) rateEstimator {
	return rateFunc(func(ev *evidence) rateResult {
		rs := holds(ev)
		if len(rs) == 0 {
			return base.estimate(ev)
		}
		out := ev.blank(part)
		for _, r := range inPart(part, rs...) {
			out.Reasons = addReason(out.Reasons, r)
		}
		return out
	})
}

// withCoverage holds part when fewer than least of the expected pods are
// covered; above it, with excluded, it notes the pods left out.
func withCoverage(part string, least float64, excluded bool, base rateEstimator) rateEstimator {
	return rateFunc(func(ev *evidence) rateResult {
		d := ev.d
		if d.coverageFrac < least {
			out := ev.blank(part)
			if excluded && len(d.missing) == 0 && len(d.stale) > 0 {
				out.Reasons = append(out.Reasons, Reason{Code: ReasonStaleSeries, Part: part, Detail: fmt.Sprintf("%d pods stale", len(d.stale))})
			}
			out.Reasons = addReason(out.Reasons, Reason{Code: ReasonPartialPodCoverage, Part: part, Detail: d.partialCoverageDetail(least)})
			return out
		}
		out := base.estimate(ev)
		if excluded && d.coverageFrac < 1 {
			out.Reasons = append([]Reason{{Code: ReasonPodsExcluded, Part: part,
				Detail: fmt.Sprintf("%d of %d expected pods covered", d.covered, d.expectedPods)}}, out.Reasons...)
		}
		return out
	})
}

// partialCoverageDetail names every missing and stale pod.
func (d *drainInputs) partialCoverageDetail(least float64) string {
	var details []string
	for _, k := range sortedPods(keysOf(d.missing)) {
		details = append(details, fmt.Sprintf("%s lacks %s", k, strings.Join(d.missing[k], ", ")))
	}
	for _, k := range sortedPods(d.stale) {
		details = append(details, fmt.Sprintf("%s is stale", k))
	}
	return fmt.Sprintf("%d of %d expected pods covered (minimum %.0f%%): %s",
		d.covered, d.expectedPods, least*100, strings.Join(details, "; "))
}

// withCaveats puts the saturation rule's warnings before base's reasons.
func withCaveats(base rateEstimator) rateEstimator {
	return rateFunc(func(ev *evidence) rateResult {
		out := base.estimate(ev)
		if len(ev.caveats) > 0 {
			out.Reasons = append(append([]Reason(nil), ev.caveats...), out.Reasons...)
		}
		return out
	})
}

// withStepInputs holds part unless the budget and a step metric are known.
func withStepInputs(part string, base rateEstimator) rateEstimator {
	return rateFunc(func(ev *evidence) rateResult {
		d := ev.d
		var r *Reason
		switch {
		case d.t.MaxNumBatchedTokens <= 0:
			r = &Reason{Code: ReasonMaxNumBatchedTokensUnknown, Detail: "set the target's maxNumBatchedTokens (vLLM --max-num-batched-tokens)"}
		case d.f.StepCount == "" && d.f.InterTokenLatency == "":
			r = &Reason{Code: ReasonNoStepMetrics, Detail: "neither " + mIterationTokens + " nor an inter-token-latency histogram exists"}
		case d.stepsUnobserved() && d.f.InterTokenLatency == "":
			r = &Reason{Code: ReasonNoStepMetrics, Detail: d.unobservedDetail() + "; no inter-token-latency histogram exists to count steps by"}
		}
		if r == nil {
			out := base.estimate(ev)
			if d.stepsUnobserved() {
				out.Reasons = append(out.Reasons, Reason{Code: ReasonIterationStepsUnobserved, Part: part,
					Detail: d.unobservedDetail() + "; steps are counted from the inter-token latency"})
			}
			return out
		}
		out := ev.blank(part)
		out.Reasons = inPart(part, *r)
		return out
	})
}

// withConfidence sets a conclusive estimate's confidence by the documented formula.
func withConfidence(halfLife time.Duration, base rateEstimator) rateEstimator {
	return rateFunc(func(ev *evidence) rateResult {
		out := base.estimate(ev)
		if out.Status != StatusOK || out.NewestWindowEnd == nil {
			return out
		}
		out.Confidence = confidence(out.Windows, out.relHalfWidth, out.Pods, ev.d.covered, ev.d.at.Sub(*out.NewestWindowEnd), halfLife)
		return out
	})
}

// withFallback is primary's estimate when conclusive, else fallback's.
func withFallback(primary, fallback rateEstimator) rateEstimator {
	return rateFunc(func(ev *evidence) rateResult {
		if out := primary.estimate(ev); out.Status == StatusOK {
			return out
		}
		return fallback.estimate(ev)
	})
}

// withLowerBound reports the per-request rate as an Inconclusive estimate's lower bound.
func withLowerBound(base rateEstimator) rateEstimator {
	return rateFunc(func(ev *evidence) rateResult {
		out := base.estimate(ev)
		if out.Status != StatusOK && ev.perRequest.Status == StatusOK && ev.perRequest.Value != nil {
			out.LowerBound = ptr(*ev.perRequest.Value)
		}
		return out
	})
}

// priorCodes are the reasons a prior may stand in for: evidence not there yet.
var priorCodes = map[ReasonCode]bool{
	ReasonNoSaturatedWindows: true, ReasonTooFewSaturatedWindows: true, ReasonCounterReset: true,
}

// withPrior reports the target's prior when base lacks evidence (never
// when the data is broken or Prometheus failed).
func withPrior(base rateEstimator) rateEstimator {
	return rateFunc(func(ev *evidence) rateResult {
		out := base.estimate(ev)
		p := ev.d.t.Prior
		if p == nil || out.Status == StatusOK {
			return out
		}
		usable := false
		for _, r := range out.Reasons {
			if r.Code.fatal() && !priorCodes[r.Code] {
				return out
			}
			usable = usable || priorCodes[r.Code]
		}
		if !usable {
			return out
		}
		out.Status = StatusPrior
		out.Value = ptr(p.Value)
		out.Prior = true
		out.Method = "prior"
		out.Source = p.Origin
		if p.Detail != "" {
			out.Source += ": " + p.Detail
		}
		out.Confidence = p.confidence()
		out.Interval = nil
		out.Reasons = append(out.Reasons, Reason{Code: ReasonPriorInUse, Part: partDrain,
			Detail: fmt.Sprintf("%s prior %.0f tok/s until %d saturated windows are seen", p.Origin, p.Value, ev.d.cfg.MinSaturatedWindows)})
		return out
	})
}

// pooledRate is a window pool as an estimate: conclusive with at least
// minWindows windows, else the no- or too-few-saturated-windows reason.
func pooledRate(part string, p pooled, minWindows int, tooFew string) rateResult {
	out := rateResult{RateEstimate: RateEstimate{Status: StatusInconclusive}}
	if p.windows >= minWindows {
		fillRate(&out.RateEstimate, p)
		out.relHalfWidth = p.hw
		return out
	}
	code := ReasonNoSaturatedWindows
	if p.windows > 0 {
		code = ReasonTooFewSaturatedWindows
	}
	out.Reasons = []Reason{{Code: code, Part: part, Detail: tooFew}}
	return out
}

// saturatedWindows is the drain rate's base: the pooled computed-token
// rate over saturated windows.
func saturatedWindows(ev *evidence) rateResult {
	d, res := ev.d, ev.windows
	out := ev.blank(partDrain)
	if d.cs == nil {
		out.Reasons = []Reason{{Code: ReasonNoComputedTokenSource, Part: partDrain,
			Detail: "none of the computed-token sources exists (see docs/estimator.md)"}}
		return out
	}
	var head []Reason
	if res.droppedReset+res.droppedNaN > 0 {
		head = append(head, Reason{Code: ReasonWindowsDropped, Part: partDrain,
			Detail: fmt.Sprintf("%d windows dropped for a counter reset, %d for a non-finite rate", res.droppedReset, res.droppedNaN)})
	}
	b := pool(res.perPod, func(w winVal) (float64, bool) { return w.drain, w.hasDrain }, ev.engines)
	minWindows := d.cfg.MinSaturatedWindows
	tooFew := fmt.Sprintf("no %v window in the lookback had a backlog throughout (and met the KV, running-set and preemption conditions)", d.cfg.Window)
	if b.windows > 0 {
		tooFew = fmt.Sprintf("%d saturated windows, minimum %d", b.windows, minWindows)
	}
	p := pooledRate(partDrain, b, minWindows, tooFew)
	p.Method, p.Source = out.Method, out.Source
	if p.Status != StatusOK {
		p.Windows, p.Pods = b.windows, b.pods
		if res.droppedReset > 0 {
			p.Reasons = append(p.Reasons, Reason{Code: ReasonCounterReset, Part: partDrain,
				Detail: fmt.Sprintf("%d saturated windows dropped for a counter reset", res.droppedReset)})
		}
		if res.droppedNaN > 0 || res.nonFinite > 0 {
			p.Reasons = append(p.Reasons, Reason{Code: ReasonNonFinite, Part: partDrain,
				Detail: fmt.Sprintf("%d windows had a NaN or Inf value", res.droppedNaN+res.nonFinite)})
		}
	}
	p.Reasons = append(head, p.Reasons...)
	return p
}

// stepSource names the step metric the step estimators read.
func (d *drainInputs) stepSource() string {
	if d.f.StepCount != "" && !d.stepsUnobserved() {
		return d.f.StepCount
	}
	return d.f.InterTokenLatency + "_sum / _count"
}

// stepWindows is the step rate's base: budget × steps/s − decode tokens/s
// pooled over saturated windows.
func stepWindows(ev *evidence) rateResult {
	d := ev.d
	c := pool(ev.windows.perPod, func(w winVal) (float64, bool) { return w.step, w.hasStep }, ev.engines)
	out := pooledRate(partStep, c, d.cfg.MinSaturatedWindows,
		fmt.Sprintf("%d saturated windows with step metrics, minimum %d", c.windows, d.cfg.MinSaturatedWindows))
	out.Method = "step-rate"
	out.Source = fmt.Sprintf("%d x rate(%s) - rate(%s_count)", d.t.MaxNumBatchedTokens, d.stepSource(), d.f.InterTokenLatency)
	return out
}

// stepCostFit is the nominal's base: budget / (overhead + budget ×
// per-prefill-token) from the step-cost fit over busy windows; Inconclusive
// without reasons when the fit cannot separate the costs.
func stepCostFit(ev *evidence) rateResult {
	d, rows := ev.d, ev.windows.rows
	out := ev.blank(partNominal)
	if d.f.Running == "" || d.cs == nil {
		return out
	}
	sc, ok := fitStepCost(rows)
	if !ok || len(rows) < d.cfg.MinSaturatedWindows {
		return out
	}
	budget := float64(d.t.MaxNumBatchedTokens)
	perEngine, sd := sc.nominal(budget)
	hw := 1.645 * sd / perEngine
	if !finite(perEngine) || !(perEngine > 0) || !(hw < 0.10) {
		return out
	}
	pods := map[podKey]bool{}
	var newest time.Time
	for _, r := range rows {
		pods[r.pod] = true
		if r.end.After(newest) {
			newest = r.end
		}
	}
	keys := sortedPods(pods)
	names := podNames(keys)
	var vals []float64
	for i, k := range keys {
		ne := max(ev.engines[k], 1)
		v := perEngine * float64(ne)
		vals = append(vals, v)
		out.PerPod = append(out.PerPod, PodRate{Pod: names[i], Value: v, Engines: ne})
	}
	v := median(vals)
	hwf := math.Max(hw, minRelHalfWidth)
	out.Status, out.Value = StatusOK, ptr(v)
	out.Interval = &Interval{Low: v * (1 - hwf), High: v * (1 + hwf)}
	out.relHalfWidth = hwf
	out.Method = "step-cost-fit"
	out.Source = fmt.Sprintf("B_tok=%d / (overhead + B_tok x per-prefill-token), fitted on busy windows: 1 = overhead x rate(%s) + per-prefill-token x rate(%s) + per-decode-token x rate(%s_count)",
		d.t.MaxNumBatchedTokens, d.stepSource(), d.fit.id, d.f.InterTokenLatency)
	out.Windows, out.Pods = len(rows), len(keys)
	out.NewestWindowEnd = &newest
	return out
}

// stepTimeWindows is the nominal's fallback: budget × steps/s over
// saturated windows (low when a decode token costs more than a prefill token).
func stepTimeWindows(ev *evidence) rateResult {
	d := ev.d
	nom := pool(ev.windows.perPod, func(w winVal) (float64, bool) { return w.full, w.hasFull }, ev.engines)
	out := pooledRate(partNominal, nom, d.cfg.MinSaturatedWindows,
		fmt.Sprintf("the step-cost fit failed and %d saturated windows have step metrics, minimum %d", nom.windows, d.cfg.MinSaturatedWindows))
	out.Method = "step-time"
	out.Source = fmt.Sprintf("%d x rate(%s)", d.t.MaxNumBatchedTokens, d.stepSource())
	if out.Status == StatusOK {
		out.Reasons = append(out.Reasons, Reason{Code: ReasonNominalFromStepTime, Part: partNominal,
			Detail: "busy windows did not separate step overhead, prefill and decode costs; B_tok x steps/s reads low when decode tokens cost more than prefill tokens"})
	}
	return out
}

// unobservedDetail quantifies the iteration histogram's missing steps.
func (d *drainInputs) unobservedDetail() string {
	return fmt.Sprintf("%s_count counts %.1f%% of the steps the inter-token latency implies on busy windows: vLLM does not observe prefill-only steps",
		mIterationTokens, 100*d.stepShare)
}
