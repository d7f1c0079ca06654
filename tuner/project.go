package tuner

import (
	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/tuner/decide"
	"github.com/gatetuner/gatetuner/tuner/source"
)

// estimateOf is the lookback's estimate as the decision reads it.
func estimateOf(e *estimator.Estimates) *decide.Estimate {
	return &decide.Estimate{Traffic: *trafficOf(e), Drain: rateOf(e, &e.DrainRate), Nominal: rateOf(e, &e.Nominal),
		PromptP90: e.Prompt.P90, PromptP99: e.Prompt.P99, StepSeconds: e.InFlight.StepSeconds, Brief: brief(e)}
}

// trafficOf is what e says about its stretch of traffic.
func trafficOf(e *estimator.Estimates) *decide.Traffic {
	tr := &decide.Traffic{RequestRate: e.RequestRate.Value, PromptMean: e.Prompt.Mean, CachedMean: e.Cached.Mean}
	for _, ep := range e.Routing.Endpoints {
		tr.Endpoints = append(tr.Endpoints, ep.Endpoint)
	}
	for _, s := range e.InFlight.Snapshots {
		tr.Snapshots = append(tr.Snapshots, s.Time)
	}
	return tr
}

// rateOf is one of e's rate estimates as the decision reads it.
func rateOf(e *estimator.Estimates, r *estimator.RateEstimate) decide.Rate {
	out := decide.Rate{Value: r.Value, StatusOK: r.Status == estimator.StatusOK, StatusPrior: r.Status == estimator.StatusPrior,
		Inconclusive: r.Status == estimator.StatusInconclusive, Prior: r.Prior, Method: r.Method, Source: r.Source, Confidence: r.Confidence,
		Interval: (*decide.Interval)(r.Interval), PerEndpoint: e.EndpointRates(r)}
	if len(r.Reasons) > 0 {
		out.Reasons = source.ReasonsOf(r.Reasons)
	}
	return out
}

// brief are the estimate values the evidence cites.
func brief(e *estimator.Estimates) decide.EstimatesBrief {
	b := decide.EstimatesBrief{Status: string(e.Status), DrainRate: e.DrainRate.Value, DrainStatus: string(e.DrainRate.Status),
		DrainConfidence: e.DrainRate.Confidence, DrainInterval: (*decide.Interval)(e.DrainRate.Interval), Nominal: e.Nominal.Value,
		PerRequestRate: e.PerRequestRate.Value, PromptP50: e.Prompt.P50, PromptP90: e.Prompt.P90, CachedMean: e.Cached.Mean,
		RequestRate: e.RequestRate.Value}
	for _, r := range e.Reasons {
		b.Reasons = append(b.Reasons, r.Part+":"+string(r.Code))
	}
	return b
}
