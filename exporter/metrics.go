// Package exporter defines gatetuner's own Prometheus metrics (prefix
// gatetuner_, listed in docs/metrics.md) and its OpenTelemetry tracing setup.
// It holds no estimates of its own: the tuner reports into it.
package exporter

import (
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Settings label values: which settings a shadow series describes.
const (
	SettingsCurrent     = "current"
	SettingsRecommended = "recommended"
)

// StatisticLabel names the label of the gauges that carry a distribution's
// statistics (p50, p90, p99, mean). It is not "quantile": Prometheus reserves
// that label for summaries (promlint, promtool check metrics).
const StatisticLabel = "statistic"

// Metrics are gatetuner's metrics, registered on one registry.
type Metrics struct {
	Registry *prometheus.Registry

	// Estimates.
	DrainRate          *prometheus.GaugeVec // {target}
	DrainRateLow       *prometheus.GaugeVec // {target}
	DrainRateHigh      *prometheus.GaugeVec // {target}
	NominalRate        *prometheus.GaugeVec // {target}
	PerRequestRate     *prometheus.GaugeVec // {target}
	EstimateConfidence *prometheus.GaugeVec // {target}
	EstimateConclusive *prometheus.GaugeVec // {target}
	EstimateReason     *prometheus.GaugeVec // {target, reason}
	JoinProblems       *prometheus.GaugeVec // {target, reason}
	PromptTokens       *prometheus.GaugeVec // {target, statistic}
	CachedTokens       *prometheus.GaugeVec // {target, statistic}
	RequestRate        *prometheus.GaugeVec // {target}
	DataAge            *prometheus.GaugeVec // {target, source}

	// Shadow.
	ShadowDecisions   *prometheus.CounterVec // {target, settings, verdict}
	ShadowOutcomes    *prometheus.CounterVec // {target, settings, outcome}
	ShadowExcessTok   *prometheus.CounterVec // {target, settings}
	ShadowExcessSec   *prometheus.CounterVec // {target, settings}
	WronglyHeldRatio  *prometheus.GaugeVec   // {target, settings}
	ForfeitedRatio    *prometheus.GaugeVec   // {target, settings}
	GateInputPenalty  *prometheus.GaugeVec   // {target, statistic}; seconds
	GateInputGap      *prometheus.GaugeVec   // {target, statistic}
	DecisionSource    *prometheus.GaugeVec   // {target, source}
	ShadowWindowStart *prometheus.GaugeVec   // {target}
	RestartCost       *prometheus.GaugeVec   // {target}
	RestartSaving     *prometheus.GaugeVec   // {target}

	// Parameters.
	Parameter   *prometheus.GaugeVec // {target, settings, parameter}
	PenaltyMode *prometheus.GaugeVec // {target, settings, mode}

	// The loop.
	Cycles        *prometheus.CounterVec // {target, result}
	Holds         *prometheus.CounterVec // {target, reason}
	HoldActive    *prometheus.GaugeVec   // {target, reason}
	Applies       *prometheus.CounterVec // {target, result}
	Rollbacks     *prometheus.CounterVec // {target, trigger}
	LastCycle     *prometheus.GaugeVec   // {target}
	LastApply     *prometheus.GaugeVec   // {target}
	CycleDuration *prometheus.HistogramVec
	// CycleQueries and CycleReplayed are what the last cycle cost: its
	// Prometheus queries and the decisions it replayed in shadow.
	CycleQueries  *prometheus.GaugeVec // {target}
	CycleReplayed *prometheus.GaugeVec // {target}
	Leader        prometheus.Gauge
	TargetUp      *prometheus.GaugeVec // {target}
	StreamUp      *StreamHealth        // gatetuner_records_stream_up{target}

	// Approval (mode approve): 1 for the recommendation hash that awaits an
	// operator's approval.
	RecommendationPending *prometheus.GaugeVec // {target, hash}

	// Queries.
	QueryDuration *prometheus.HistogramVec // {querier}
	QueryErrors   *prometheus.CounterVec   // {querier, kind}
}

// New creates the metrics on a fresh registry (with Go and process
// collectors and gatetuner_build_info).
func New(version, commit string) *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	g := func(name, help string, labels ...string) *prometheus.GaugeVec {
		v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gatetuner_" + name, Help: help}, labels)
		reg.MustRegister(v)
		return v
	}
	c := func(name, help string, labels ...string) *prometheus.CounterVec {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gatetuner_" + name, Help: help}, labels)
		reg.MustRegister(v)
		return v
	}
	m := &Metrics{Registry: reg}
	m.DrainRate = g("drain_rate_tokens_per_second", "Estimated per-endpoint prefill drain rate under load (pooled median over the target's pods); absent while inconclusive.", "target")
	m.DrainRateLow = g("drain_rate_low_tokens_per_second", "Lower end of the drain-rate estimate's interval.", "target")
	m.DrainRateHigh = g("drain_rate_high_tokens_per_second", "Upper end of the drain-rate estimate's interval.", "target")
	m.NominalRate = g("nominal_rate_tokens_per_second", "Estimated nominal (idle, full-chunk) prefill rate, when max_num_batched_tokens is known.", "target")
	m.PerRequestRate = g("per_request_rate_tokens_per_second", "Per-request prefill rate: a lower bound of the drain rate.", "target")
	m.EstimateConfidence = g("estimate_confidence", "Confidence in [0,1] of the drain-rate estimate (docs/estimator.md).", "target")
	m.EstimateConclusive = g("estimate_conclusive", "1 when the target's estimate is conclusive, 0 when Inconclusive.", "target")
	m.EstimateReason = g("estimate_inconclusive", "1 for each reason the target's estimate is Inconclusive.", "target", "reason")
	m.JoinProblems = g("estimator_join_problems", "Names that failed to join or be found, per join reason of the target's last estimate (docs/estimator.md, \"Joins\"); absent when none.", "target", "reason")
	m.PromptTokens = g("prompt_tokens", "Prompt-length statistics estimated from vLLM histograms (statistic p50, p90, p99, mean).", "target", StatisticLabel)
	m.CachedTokens = g("cached_tokens", "Cached-prefix statistics estimated from histograms (statistic p50, p90, p99, mean).", "target", StatisticLabel)
	m.RequestRate = g("request_rate", "Requests per second over the lookback.", "target")
	m.DataAge = g("data_age_seconds", "Age of the newest sample the last cycle used, per data source.", "target", "source")

	m.ShadowDecisions = c("shadow_decisions_total", "Shadow decisions by verdict for the current and the recommended settings.", "target", "settings", "verdict")
	m.ShadowOutcomes = c("shadow_outcomes_total", "Shadow decisions by gate outcome for the current and the recommended settings.", "target", "settings", "outcome")
	m.ShadowExcessTok = c("shadow_excess_cost_tokens_total", "Excess cost of wrongly-held and wrongly-released pins, in tokens.", "target", "settings")
	m.ShadowExcessSec = c("shadow_excess_cost_seconds_total", "Excess cost in seconds of prefill at the drain-rate estimate.", "target", "settings")
	m.WronglyHeldRatio = g("shadow_wrongly_held_ratio", "held_wrong / decisions with a known verdict, last shadow window.", "target", "settings")
	m.ForfeitedRatio = g("shadow_forfeited_ratio", "released_wrong / decisions with a known verdict, last shadow window.", "target", "settings")
	m.GateInputPenalty = g("gate_input_penalty_seconds", "Quantiles (statistic p50, p90, p99) of the gate input bestStickyTTFT − bestNonStickyTTFT in seconds, last shadow window.", "target", StatisticLabel)
	m.GateInputGap = g("gate_input_gap_minus_matched_tokens", "Quantiles (statistic p50, p90, p99) of gap − matched tokens over decisions with a known verdict.", "target", StatisticLabel)
	m.DecisionSource = g("decision_source", "1 for the decision source the last shadow used (records or prometheus-model).", "target", "source")
	m.ShadowWindowStart = g("shadow_window_start_timestamp_seconds", "Start of the last shadow window (windows spanning an apply are discarded).", "target")
	m.RestartCost = g("restart_cost_request_seconds", "Estimated queueing an EPP restart would cause (request-seconds; absent when not priced): the restart-cost guard's cost side.", "target")
	m.RestartSaving = g("restart_saving_request_seconds", "The recommendation's queueing saving over a cooldown (request-seconds): the restart-cost guard's saving side.", "target")

	m.Parameter = g("parameter", "Gate parameter values, current and recommended (maxTTFTPenaltyMs, peakPrefillThroughput, barTokens).", "target", "settings", "parameter")
	m.PenaltyMode = g("penalty_mode", "1 for the penalty mode in force (current) or recommended.", "target", "settings", "mode")

	m.Cycles = c("cycles_total", "Tuning cycles by result (applied, held, pending, recommended, error).", "target", "result")
	m.Holds = c("holds_total", "Cycles held, by reason (docs/holds.md).", "target", "reason")
	m.HoldActive = g("hold_active", "1 for the reason the target is held now.", "target", "reason")
	m.RecommendationPending = g("recommendation_pending", "1 for the recommendation hash awaiting approval (mode approve: kubectl annotate configmap NAME gatetuner.dev/approve=HASH).", "target", "hash")
	m.Applies = c("applies_total", "Writes of new gate settings, by result (ok, failed, rolled_back).", "target", "result")
	m.Rollbacks = c("rollbacks_total", "Automatic and manual rollbacks, by trigger.", "target", "trigger")
	m.LastCycle = g("last_cycle_timestamp_seconds", "When the target's last cycle finished.", "target")
	m.LastApply = g("last_apply_timestamp_seconds", "When the target's settings were last applied (from its annotations).", "target")
	m.CycleDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gatetuner_cycle_duration_seconds", Help: "Duration of a tuning cycle.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}}, []string{"target"})
	reg.MustRegister(m.CycleDuration)
	m.CycleQueries = g("cycle_prometheus_queries", "Prometheus queries the target's last cycle ran: the lookback estimate's, the windows' of the day not cached and the last minutes' that price a restart now.", "target")
	m.CycleReplayed = g("cycle_replayed_decisions", "Decisions the target's last cycle replayed in shadow: those new since the cycle before, or the whole history when the replay was rebuilt.", "target")
	m.Leader = prometheus.NewGauge(prometheus.GaugeOpts{Name: "gatetuner_leader", Help: "1 when this replica holds the leader lease (or runs without election)."})
	reg.MustRegister(m.Leader)
	m.TargetUp = g("target_up", "1 when the target's last cycle completed without error.", "target")
	m.StreamUp = newStreamHealth()
	reg.MustRegister(m.StreamUp)

	m.QueryDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gatetuner_query_duration_seconds", Help: "Prometheus query latency.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2.5, 9)}, []string{"querier"})
	reg.MustRegister(m.QueryDuration)
	m.QueryErrors = c("query_errors_total", "Prometheus query errors by kind (unavailable, timeout, canceled, bad-query, rejected, bad-response).", "querier", "kind")

	info := g("build_info", "Build information; value 1.", "version", "commit", "goversion")
	info.WithLabelValues(version, commit, runtime.Version()).Set(1)
	return m
}

// ObserveQuery records one query's latency and, when errKind is not empty,
// an error of that kind (a prom.Kind's name; label value QueryErrorKind(errKind)).
func (m *Metrics) ObserveQuery(querier string, d time.Duration, errKind string) {
	m.QueryDuration.WithLabelValues(querier).Observe(d.Seconds())
	if errKind != "" {
		m.QueryErrors.WithLabelValues(querier, QueryErrorKind(errKind)).Inc()
	}
}

// QueryErrorKind is the kind label value of a query error kind's name: words
// joined by "-" ("bad query" → "bad-query"), as the estimator's reason codes spell them.
func QueryErrorKind(name string) string {
	return strings.Join(strings.Fields(name), "-")
}
