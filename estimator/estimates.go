package estimator

import (
	"sort"
	"time"
)

// Status says whether an estimate is a live measurement, a prior standing in
// for one, or absent for a named reason.
type Status string

// Statuses.
const (
	// StatusOK: measured from live series.
	StatusOK Status = "ok"
	// StatusPrior: live evidence is insufficient and the configured prior
	// (a calibration record or a configured value) is reported, labelled as such.
	StatusPrior Status = "prior"
	// StatusInconclusive: no trustworthy value; Reasons say why.
	StatusInconclusive Status = "inconclusive"
	// StatusNotReported: the target's EPP build does not export this (its
	// build profile says so); not an error (DecisionCounts only).
	StatusNotReported Status = "not-reported"
)

// ReasonCode is a machine-readable cause of an Inconclusive estimate or of a
// warning. The set is closed and documented in docs/estimator.md.
type ReasonCode string

// Reasons that make an estimate Inconclusive.
const (
	// ReasonNoSeries: the selector matches no series of a required metric in the lookback.
	ReasonNoSeries ReasonCode = "no-series"
	// ReasonStaleSeries: series exist in the lookback but none (or not the required
	// ones) has a sample within StaleAfter of the evaluation time.
	ReasonStaleSeries ReasonCode = "stale-series"
	// ReasonNonFinite: a NaN or ±Inf value where a number is needed.
	ReasonNonFinite ReasonCode = "non-finite"
	// ReasonCounterReset: a counter reset inside the evidence; the affected windows
	// were dropped and what is left does not suffice.
	ReasonCounterReset ReasonCode = "counter-reset"
	// ReasonPartialPodCoverage: fewer than MinPodCoverage of the expected pods
	// have every required series, fresh.
	ReasonPartialPodCoverage ReasonCode = "partial-pod-coverage"
	// ReasonNoComputedTokenSource: none of the computed-token sources exists.
	ReasonNoComputedTokenSource ReasonCode = "no-computed-token-source"
	// ReasonNoSaturatedWindows: no window in the lookback met the saturation rule.
	ReasonNoSaturatedWindows ReasonCode = "no-saturated-windows"
	// ReasonTooFewSaturatedWindows: fewer than MinSaturatedWindows windows met it.
	ReasonTooFewSaturatedWindows ReasonCode = "too-few-saturated-windows"
	// ReasonNoRequests: the histogram or counter did not move in the lookback.
	ReasonNoRequests ReasonCode = "no-requests"
	// ReasonMaxNumBatchedTokensUnknown: the step rate and the nominal estimate
	// need the target's max_num_batched_tokens, which no metric exposes.
	ReasonMaxNumBatchedTokensUnknown ReasonCode = "max-num-batched-tokens-unknown"
	// ReasonNoStepMetrics: neither vllm:iteration_tokens_total nor an
	// inter-token-latency histogram exists, so the step time is unknown.
	ReasonNoStepMetrics ReasonCode = "no-step-metrics"
	// ReasonPrometheusUnavailable: Prometheus could not be reached (network, 5xx, 429).
	ReasonPrometheusUnavailable ReasonCode = "prometheus-unavailable"
	// ReasonPrometheusTimeout: a query timed out.
	ReasonPrometheusTimeout ReasonCode = "prometheus-timeout"
	// ReasonBadQuery: Prometheus refused to evaluate a query (parse or execution error).
	ReasonBadQuery ReasonCode = "bad-query"
	// ReasonPrometheusRejected: Prometheus refused the request itself (401, 403, 404, ...).
	ReasonPrometheusRejected ReasonCode = "prometheus-rejected"
	// ReasonBadResponse: the answer was not a valid Prometheus API response.
	ReasonBadResponse ReasonCode = "bad-response"
	// ReasonCanceled: the caller canceled the estimation.
	ReasonCanceled ReasonCode = "canceled"
	// ReasonEndpointNamesUnmatched: fewer than MinPodCoverage of the routed
	// (or vLLM) pods have an in-flight endpoint named as the pod or
	// <pod>-rank-<i>; the detail names both sides.
	ReasonEndpointNamesUnmatched ReasonCode = "endpoint-names-unmatched"
	// ReasonInFlightProducerAmbiguous: the in-flight series come from several
	// producers and the target does not name the one the gate reads.
	ReasonInFlightProducerAmbiguous ReasonCode = "in-flight-producer-ambiguous"
	// ReasonInFlightProducerNotFound: the target's in-flight producer is not
	// among the series' producer_name values.
	ReasonInFlightProducerNotFound ReasonCode = "in-flight-producer-not-found"
	// ReasonSelectorMatchesNothing: the EPP selector matches no EPP series
	// although the vLLM selector matches; the detail says where they are.
	ReasonSelectorMatchesNothing ReasonCode = "selector-matches-nothing"
	// ReasonPodLabelMissing: the vLLM series carry no pod label (a raw
	// kubernetes_sd job with only instance and job), so nothing joins them
	// to the EPP's endpoints.
	ReasonPodLabelMissing ReasonCode = "pod-label-missing"
	// ReasonSeriesEmpty: a series detected in the lookback came back empty
	// from the query that reads it (e.g. under the in-flight producer filter).
	ReasonSeriesEmpty ReasonCode = "series-empty"
	// ReasonPDGateProfileUnknown: a P/D pool, and neither the target's
	// pdGateProfile nor the gate's decision count says which scheduling
	// profile (prefill or decode) carries the gate.
	ReasonPDGateProfileUnknown ReasonCode = "pd-gate-profile-unknown"
	// ReasonPDGateProfileMismatch: the target's pdGateProfile contradicts
	// the gate's decision count.
	ReasonPDGateProfileMismatch ReasonCode = "pd-gate-profile-mismatch"
	// ReasonPDPrefillPodsUnselected: the gate sits in the prefill profile
	// but the vLLM selector matches no prefill pod.
	ReasonPDPrefillPodsUnselected ReasonCode = "pd-prefill-pods-unselected"
	// ReasonPDGateOnDecodeProfile: the gate sits in the decode profile,
	// whose in-flight tokens count prompts the decode pods receive by KV
	// transfer and never compute: no pod's drain rate is what the bar divides.
	ReasonPDGateOnDecodeProfile ReasonCode = "pd-gate-on-decode-profile"
	// ReasonPDCachedFromDecode: the EPP's cached-token histogram reports the
	// decode pods' cached tokens (KV received by transfer, nearly the whole
	// prompt), not the prefill pods' prefix hits.
	ReasonPDCachedFromDecode ReasonCode = "pd-cached-tokens-from-decode"
	// ReasonDecisionCounterAbsent: no series of the decision counter match
	// the EPP selector in the span, and the target's build exports it (or
	// its build is not known).
	ReasonDecisionCounterAbsent ReasonCode = "decision-counter-absent"
	// ReasonDecisionCounterStale: the decision counter has series in the
	// span but none (of the target's plugin) is fresh at its end.
	ReasonDecisionCounterStale ReasonCode = "decision-counter-stale"
	// ReasonDecisionPluginNotFound: the target's plugin is not among the
	// decision counter's plugin_name values.
	ReasonDecisionPluginNotFound ReasonCode = "decision-plugin-not-found"
	// ReasonDecisionOutcomeUnexpected: the counter has an outcome the
	// target's build does not record (missing_signal under a v1 profile) or
	// gatetuner does not model (request_load_override).
	ReasonDecisionOutcomeUnexpected ReasonCode = "decision-outcome-unexpected"
)

// Reasons that are only warnings: the estimate stands, with a caveat.
const (
	// ReasonKVUsageUnknown: no KV-usage gauge, so the saturation rule skips its KV condition.
	ReasonKVUsageUnknown ReasonCode = "kv-usage-unknown"
	// ReasonPreemptionsUnknown: no preemption counter, so the rule skips its preemption condition.
	ReasonPreemptionsUnknown ReasonCode = "preemptions-unknown"
	// ReasonMaxNumSeqsUnknown: max_num_seqs not configured, so the rule skips its running-set condition.
	ReasonMaxNumSeqsUnknown ReasonCode = "max-num-seqs-unknown"
	// ReasonWindowShort: the window is shorter than 10× the p99 prefill time.
	ReasonWindowShort ReasonCode = "window-short-for-prefill"
	// ReasonStepRateDisagrees: the step rate C differs from the drain rate B by more than 15 %.
	ReasonStepRateDisagrees ReasonCode = "step-rate-disagrees"
	// ReasonTopBucket: a reported quantile lies in the histogram's +Inf bucket;
	// its upper edge is inferred.
	ReasonTopBucket ReasonCode = "quantile-in-top-bucket"
	// ReasonPriorInUse: the drain rate reported is the prior, not a measurement.
	ReasonPriorInUse ReasonCode = "prior-in-use"
	// ReasonPodsExcluded: some pods' evidence was left out (missing or stale
	// series) while coverage stayed above MinPodCoverage.
	ReasonPodsExcluded ReasonCode = "pods-excluded"
	// ReasonWindowsDropped: windows that met the rule were dropped for a counter
	// reset or a non-finite value.
	ReasonWindowsDropped ReasonCode = "windows-dropped"
	// ReasonNominalFromStepTime: the step-cost fit was not possible; the
	// nominal estimate is B × steps/s on saturated windows.
	ReasonNominalFromStepTime ReasonCode = "nominal-from-step-time"
	// ReasonSnapshotsSkipped: in-flight snapshots skipped because every EPP
	// replica's sample was stale at that time.
	ReasonSnapshotsSkipped ReasonCode = "snapshots-skipped"
	// ReasonEndpointsUnjoined: in-flight endpoints left out of the snapshots
	// because no routed or vLLM pod is named like them (departed pods).
	ReasonEndpointsUnjoined ReasonCode = "endpoints-unjoined"
	// ReasonCachedHistogramPartial: the EPP's cached-token histogram
	// observed fewer than 90 % of the requests (only responses carrying
	// usage); below 50 % vLLM's prefix-cache counters replace it when they exist.
	ReasonCachedHistogramPartial ReasonCode = "cached-histogram-partial"
	// ReasonIterationStepsUnobserved: vllm:iteration_tokens_total misses
	// steps (vLLM does not observe prefill-only steps), so the step count is
	// read from the inter-token latency instead.
	ReasonIterationStepsUnobserved ReasonCode = "iteration-steps-unobserved"
	// ReasonPDNominalFromDrain: the gate's pool is prefill pods, which decode
	// nothing: their saturated drain rate is their nominal rate.
	ReasonPDNominalFromDrain ReasonCode = "pd-nominal-from-drain"
	// ReasonPDCachedMixed: the EPP's cached-token histogram also counts the
	// decode-only requests the prefill profile's gate never decides.
	ReasonPDCachedMixed ReasonCode = "pd-cached-mixed"
	// ReasonEndpointsDeparted: in-flight endpoints left out of the snapshots
	// taken after their pod's vLLM series ended (the EPP keeps a departed
	// endpoint's gauge forever).
	ReasonEndpointsDeparted ReasonCode = "endpoints-departed"
	// ReasonDecisionCounterUnexpected: the decision counter has series
	// although the target's build profile says its build does not export
	// it (the profile names an older build); the counts stand.
	ReasonDecisionCounterUnexpected ReasonCode = "decision-counter-unexpected"
)

// Reason is one cause with the part of the estimate it concerns.
type Reason struct {
	Code ReasonCode `json:"code"`
	// Part names the estimate: "drainRate", "perRequestRate", "stepRate",
	// "nominal", "promptTokens", "cachedTokens", "requestRate", "inFlight",
	// "routing", "decisions", "coverage" or "features".
	Part   string `json:"part"`
	Detail string `json:"detail,omitempty"`
}

// Interval is a two-sided interval around a value.
type Interval struct {
	Low  float64 `json:"low"`
	High float64 `json:"high"`
}

// PodRate is one pod's (EPP endpoint's) rate, the sum over its data-parallel engines.
type PodRate struct {
	Pod     string  `json:"pod"`
	Value   float64 `json:"value"`
	Windows int     `json:"windows"`
	Engines int     `json:"engines"`
}

// RateEstimate is a throughput in tokens per second.
type RateEstimate struct {
	Status Status `json:"status"`
	// Value is the estimate; null when Inconclusive.
	Value *float64 `json:"value"`
	// Interval is a 90 % interval around Value (see docs/estimator.md).
	Interval *Interval `json:"interval,omitempty"`
	// Confidence in [0,1] by the documented formula; 0 when Inconclusive.
	Confidence float64 `json:"confidence"`
	// Method names the estimator: "saturated-windows" (B), "per-request" (A),
	// "step-rate" (C), "step-time" (nominal), or "prior".
	Method string `json:"method"`
	// Source is the metric expression the value came from, or the prior's origin.
	Source string `json:"source,omitempty"`
	// Prior is true when Value is the prior, not a measurement.
	Prior bool `json:"prior"`
	// LowerBound, when set, is a value the true rate is not below (A when B is
	// Inconclusive).
	LowerBound *float64 `json:"lowerBound,omitempty"`
	// Windows counts the saturated windows used (all pods).
	Windows int `json:"windows"`
	// Pods counts the pods that contributed.
	Pods int `json:"pods"`
	// NewestWindowEnd is the end of the most recent window used.
	NewestWindowEnd *time.Time `json:"newestWindowEnd,omitempty"`
	PerPod          []PodRate  `json:"perPod,omitempty"`
	Reasons         []Reason   `json:"reasons,omitempty"`
}

// Bucket is one histogram bucket's increase over the lookback.
type Bucket struct {
	Lower float64 `json:"lower"`
	// Upper is the bucket's upper bound; for the +Inf bucket it is the
	// inferred edge (see Distribution.TopBucketInferred).
	Upper float64 `json:"upper"`
	Count float64 `json:"count"`
}

// Distribution is a per-request token distribution over the lookback.
type Distribution struct {
	Status Status `json:"status"`
	// Source is the histogram (or counter) it was computed from.
	Source string `json:"source,omitempty"`
	// Count is the number of requests observed in the lookback.
	Count float64  `json:"count"`
	Mean  *float64 `json:"mean"`
	P50   *float64 `json:"p50"`
	P90   *float64 `json:"p90"`
	P99   *float64 `json:"p99"`
	// Buckets are non-cumulative counts in ascending order, usable for
	// drawing samples (Distribution.Quantile with a uniform draw).
	Buckets []Bucket `json:"buckets,omitempty"`
	// TopBucketInferred is true when the last bucket's upper edge is inferred
	// (Prometheus' +Inf bucket).
	TopBucketInferred bool `json:"topBucketInferred,omitempty"`
	// HitRate is cached over prompt tokens, when the source is a pair of
	// counters rather than a histogram (then only Mean is given).
	HitRate *float64 `json:"hitRate,omitempty"`
	Reasons []Reason `json:"reasons,omitempty"`
}

// Scalar is a single measured value.
type Scalar struct {
	Status  Status   `json:"status"`
	Value   *float64 `json:"value"`
	Source  string   `json:"source,omitempty"`
	Reasons []Reason `json:"reasons,omitempty"`
}

// EndpointLoad is one endpoint's in-flight load in a snapshot.
type EndpointLoad struct {
	Endpoint string `json:"endpoint"`
	// Pod is the pod the endpoint joined to, when its name differs
	// (<pod>-rank-<i>).
	Pod    string  `json:"pod,omitempty"`
	Tokens float64 `json:"tokens"`
	// Requests is null when llm_d_epp_inflight_requests is absent.
	Requests *float64 `json:"requests"`
	// Routed is the scheduling attempts to the endpoint in the snapshot's
	// step (null when unknown): where requests were pinned at that time.
	Routed *float64 `json:"routed,omitempty"`
}

// Snapshot is the EPP's in-flight view at one time, from one EPP replica.
type Snapshot struct {
	Time time.Time `json:"time"`
	// Replica identifies the EPP replica the values came from.
	Replica   string         `json:"replica"`
	Endpoints []EndpointLoad `json:"endpoints"`
}

// InFlight holds in-flight snapshots over the lookback for the shadow's
// Prometheus model.
type InFlight struct {
	Status      Status  `json:"status"`
	Source      string  `json:"source,omitempty"`
	StepSeconds float64 `json:"stepSeconds"`
	// ReplicaRule says how one EPP replica was chosen per snapshot.
	ReplicaRule string     `json:"replicaRule"`
	Replicas    []string   `json:"replicas,omitempty"`
	Snapshots   []Snapshot `json:"snapshots"`
	Reasons     []Reason   `json:"reasons,omitempty"`
	// Departed are the endpoints left out after their pod left (also in Shape).
	Departed []DepartedEndpoint `json:"-"`
}

// EndpointShare is one endpoint's share of the EPP's routing.
type EndpointShare struct {
	Endpoint string `json:"endpoint"`
	// Pod is the pod whose attempts the share comes from, when the
	// endpoint is named after the in-flight gauges (<pod>-rank-<i>).
	Pod      string  `json:"pod,omitempty"`
	Attempts float64 `json:"attempts"`
	Share    float64 `json:"share"`
}

// Routing is the EPP's routing share per endpoint over the lookback.
type Routing struct {
	Status    Status          `json:"status"`
	Source    string          `json:"source,omitempty"`
	Endpoints []EndpointShare `json:"endpoints"`
	Reasons   []Reason        `json:"reasons,omitempty"`
}

// Features reports which metric names exist for the target and which one
// each estimate uses.
type Features struct {
	// ComputedTokens names the computed-token source in use (see
	// docs/estimator.md), "" when none exists.
	ComputedTokens string `json:"computedTokens"`
	// ComputedTokensRank is its position in the reference order (1 = newest).
	ComputedTokensRank int    `json:"computedTokensRank"`
	KVUsage            string `json:"kvUsage,omitempty"`
	InterTokenLatency  string `json:"interTokenLatency,omitempty"`
	StepCount          string `json:"stepCount,omitempty"`
	Preemptions        string `json:"preemptions,omitempty"`
	Running            string `json:"running,omitempty"`
	PrefillTime        string `json:"prefillTime,omitempty"`
	PromptHistogram    string `json:"promptHistogram,omitempty"`
	CachedTokens       string `json:"cachedTokens,omitempty"`
	InFlightTokens     string `json:"inFlightTokens,omitempty"`
	InFlightRequests   string `json:"inFlightRequests,omitempty"`
	Routing            string `json:"routing,omitempty"`
	// WaitingCapacity is the waiting gauge the saturation rule reads when
	// vLLM splits it by reason (requests deferred for a KV transfer, a LoRA
	// budget or a grammar are not a backlog of prefill work).
	WaitingCapacity string `json:"waitingCapacity,omitempty"`
	// EPPInputTokens is the EPP's input-token histogram, PrefixCacheHits
	// vLLM's prefix-cache hit counter (with its queries counter), when they exist.
	EPPInputTokens  string `json:"eppInputTokens,omitempty"`
	PrefixCacheHits string `json:"prefixCacheHits,omitempty"`
	// Legacy lists the deprecated names in use (e.g. vllm:gpu_cache_usage_perc).
	Legacy []string `json:"legacy,omitempty"`
	// Present lists every probed name seen in the lookback.
	Present []string `json:"present"`
}

// Coverage is which pods the estimate expected and which it could use.
type Coverage struct {
	// Expected: pods with vLLM series at the evaluation time, plus EPP
	// endpoints routed to in the last window.
	Expected []string `json:"expected"`
	// Covered: expected pods with every required series, fresh.
	Covered []string `json:"covered"`
	// Missing: expected pods lacking a required series (detail in Reasons).
	Missing []string `json:"missing,omitempty"`
	// Stale: expected pods whose newest sample is older than StaleAfter.
	Stale    []string `json:"stale,omitempty"`
	Fraction float64  `json:"fraction"`
}

// QueryStats count the PromQL queries of one estimation.
type QueryStats struct {
	Queries int `json:"queries"`
	Failed  int `json:"failed"`
	// MaxPoints is the largest number of points per series any range query asked for.
	MaxPoints int     `json:"maxPoints"`
	Seconds   float64 `json:"seconds"`
}

// LastGood is the most recent conclusive estimate, aged.
type LastGood struct {
	At         time.Time `json:"at"`
	AgeSeconds float64   `json:"ageSeconds"`
	// DrainRate is the estimate as it was, with its confidence aged by the
	// freshness half-life: confidence × 2^(−age/half-life).
	DrainRate      RateEstimate `json:"drainRate"`
	Nominal        RateEstimate `json:"nominal"`
	Prompt         Distribution `json:"promptTokens"`
	Cached         Distribution `json:"cachedTokens"`
	AgedConfidence float64      `json:"agedConfidence"`
}

// Estimates are everything the estimator learned about one target at one time.
type Estimates struct {
	Target          string    `json:"target"`
	At              time.Time `json:"at"`
	LookbackSeconds float64   `json:"lookbackSeconds"`
	WindowSeconds   float64   `json:"windowSeconds"`
	// Status is ok when the drain rate and the prompt distribution are
	// measured, prior when the drain rate is the prior, else inconclusive.
	Status Status `json:"status"`
	// Reasons are every part's inconclusive reasons; Warnings the caveats.
	Reasons  []Reason `json:"reasons"`
	Warnings []Reason `json:"warnings"`
	Features Features `json:"features"`
	Coverage Coverage `json:"coverage"`
	// DrainRate is B, the answer for peakPrefillThroughput.
	DrainRate RateEstimate `json:"drainRate"`
	// PerRequestRate is A, a lower bound (reads low by the prefill concurrency).
	PerRequestRate RateEstimate `json:"perRequestRate"`
	// StepRate is C, a cross-check of B from the step count.
	StepRate RateEstimate `json:"stepRate"`
	// Nominal is the idle full-chunk rate estimated from the step time.
	Nominal     RateEstimate `json:"nominal"`
	Prompt      Distribution `json:"promptTokens"`
	Cached      Distribution `json:"cachedTokens"`
	RequestRate Scalar       `json:"requestRate"`
	InFlight    InFlight     `json:"inFlight"`
	Routing     Routing      `json:"routing"`
	LastGood    *LastGood    `json:"lastGood,omitempty"`
	Queries     QueryStats   `json:"queries"`
	// Shape is what was inferred about the exporters and how their names joined.
	Shape Shape `json:"shape"`
	// Decisions are the EPP's own counts of the filter's decisions over
	// the lookback (the span, for EstimateSpan), per plugin and outcome.
	Decisions *DecisionCounts `json:"decisions,omitempty"`
}

// Inconclusive reports whether the estimates must not be acted on.
func (e *Estimates) Inconclusive() bool { return e.Status == StatusInconclusive }

// HasReason reports whether any part is inconclusive for code.
func (e *Estimates) HasReason(code ReasonCode) bool {
	for _, r := range e.Reasons {
		if r.Code == code {
			return true
		}
	}
	return false
}

// QueryFailed reports whether the reason says Prometheus could not be
// asked, as opposed to data that says too little.
func (c ReasonCode) QueryFailed() bool {
	switch c {
	case ReasonPrometheusUnavailable, ReasonPrometheusTimeout, ReasonPrometheusRejected, ReasonBadResponse, ReasonBadQuery:
		return true
	}
	return false
}

// QueryFailure returns the first reason that says Prometheus could not be
// asked (nil when none does, or e is nil).
func (e *Estimates) QueryFailure() *Reason {
	if e == nil {
		return nil
	}
	for i, r := range e.Reasons {
		if r.Code.QueryFailed() {
			return &e.Reasons[i]
		}
	}
	return nil
}

// HasWarning reports whether any part carries the warning code.
func (e *Estimates) HasWarning(code ReasonCode) bool {
	for _, r := range e.Warnings {
		if r.Code == code {
			return true
		}
	}
	return false
}

// fatal reports whether code makes an estimate Inconclusive (as opposed to a warning).
func (c ReasonCode) fatal() bool {
	switch c {
	case ReasonKVUsageUnknown, ReasonPreemptionsUnknown, ReasonMaxNumSeqsUnknown, ReasonWindowShort,
		ReasonStepRateDisagrees, ReasonTopBucket, ReasonPriorInUse, ReasonPodsExcluded,
		ReasonWindowsDropped, ReasonSnapshotsSkipped, ReasonNominalFromStepTime,
		ReasonEndpointsUnjoined, ReasonIterationStepsUnobserved, ReasonCachedHistogramPartial,
		ReasonPDNominalFromDrain, ReasonPDCachedMixed, ReasonEndpointsDeparted, ReasonDecisionCounterUnexpected:
		return false
	}
	return true
}

// AllReasonCodes lists every reason code, fatal ones first; docs/estimator.md
// documents each.
func AllReasonCodes() []ReasonCode {
	return []ReasonCode{
		ReasonNoSeries, ReasonStaleSeries, ReasonNonFinite, ReasonCounterReset, ReasonPartialPodCoverage,
		ReasonNoComputedTokenSource, ReasonNoSaturatedWindows, ReasonTooFewSaturatedWindows, ReasonNoRequests,
		ReasonMaxNumBatchedTokensUnknown, ReasonNoStepMetrics,
		ReasonPrometheusUnavailable, ReasonPrometheusTimeout, ReasonBadQuery, ReasonPrometheusRejected,
		ReasonBadResponse, ReasonCanceled,
		ReasonEndpointNamesUnmatched, ReasonInFlightProducerAmbiguous, ReasonInFlightProducerNotFound,
		ReasonSelectorMatchesNothing, ReasonPodLabelMissing, ReasonSeriesEmpty,
		ReasonPDGateProfileUnknown, ReasonPDGateProfileMismatch, ReasonPDPrefillPodsUnselected,
		ReasonPDGateOnDecodeProfile, ReasonPDCachedFromDecode,
		ReasonDecisionCounterAbsent, ReasonDecisionCounterStale, ReasonDecisionPluginNotFound, ReasonDecisionOutcomeUnexpected,
		ReasonKVUsageUnknown, ReasonPreemptionsUnknown, ReasonMaxNumSeqsUnknown, ReasonWindowShort,
		ReasonStepRateDisagrees, ReasonTopBucket, ReasonPriorInUse, ReasonPodsExcluded, ReasonWindowsDropped,
		ReasonNominalFromStepTime, ReasonSnapshotsSkipped, ReasonEndpointsUnjoined, ReasonIterationStepsUnobserved,
		ReasonCachedHistogramPartial, ReasonPDNominalFromDrain, ReasonPDCachedMixed, ReasonEndpointsDeparted,
		ReasonDecisionCounterUnexpected,
	}
}

// addReason appends r to list unless the same code and part are already there.
func addReason(list []Reason, r Reason) []Reason {
	for _, x := range list {
		if x.Code == r.Code && x.Part == r.Part {
			return list
		}
	}
	return append(list, r)
}

// collect gathers every part's reasons into the top-level lists, sorted.
func (e *Estimates) collect() {
	fatal, warn := []Reason{}, []Reason{}
	add := func(rs []Reason) {
		for _, r := range rs {
			if r.Code.fatal() {
				fatal = addReason(fatal, r)
			} else {
				warn = addReason(warn, r)
			}
		}
	}
	add(e.DrainRate.Reasons)
	add(e.PerRequestRate.Reasons)
	add(e.StepRate.Reasons)
	add(e.Nominal.Reasons)
	add(e.Prompt.Reasons)
	add(e.Cached.Reasons)
	add(e.RequestRate.Reasons)
	add(e.InFlight.Reasons)
	add(e.Routing.Reasons)
	add(e.Reasons)
	add(e.Warnings)
	less := func(l []Reason) func(i, j int) bool {
		return func(i, j int) bool {
			if l[i].Part != l[j].Part {
				return l[i].Part < l[j].Part
			}
			return l[i].Code < l[j].Code
		}
	}
	sort.SliceStable(fatal, less(fatal))
	sort.SliceStable(warn, less(warn))
	e.Reasons, e.Warnings = fatal, warn
}
