package doctor

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/tuner/config"
)

// findReason returns the estimate's reason (or warning) with the code, on
// one of the parts when parts are given.
func findReason(est *estimator.Estimates, code estimator.ReasonCode, parts ...string) *estimator.Reason {
	for _, list := range [][]estimator.Reason{est.Reasons, est.Warnings} {
		for i, r := range list {
			if r.Code != code {
				continue
			}
			if len(parts) == 0 || slices.Contains(parts, r.Part) {
				return &list[i]
			}
		}
	}
	return nil
}

func failCheck(name string, r *estimator.Reason, fix string) Result {
	return Result{Name: name, Status: StatusFail, Reason: string(r.Code), Detail: r.Detail, Fix: fix}
}

// seriesChecks turn the estimate's shape diagnostics into checks, each
// failure under the estimator's own reason; without an estimate the
// series check says why.
func seriesChecks(ctx context.Context, e *env) []Result {
	switch {
	case e.promErr != nil:
		return []Result{{Name: checkSeries, Status: StatusSkip, Detail: "Prometheus cannot be queried: no series checked"}}
	case e.estErr != nil:
		return []Result{{Name: checkSeries, Status: StatusFail, Detail: "estimate: " + e.estErr.Error()}}
	}
	ct, est := e.target, e.est
	out := []Result{vllmSeriesCheck(ctx, e)}
	noVLLM := out[0].Status == StatusFail && out[0].Reason == string(estimator.ReasonNoSeries)
	if r := findReason(est, estimator.ReasonPodLabelMissing); r != nil {
		out = append(out, failCheck(checkPodLabel, r, "scrape vLLM with a PodMonitor (it sets pod from the pod's name), or relabel __meta_kubernetes_pod_name to pod in the scrape job"))
	} else if noVLLM {
		out = append(out, Result{Name: checkPodLabel, Status: StatusSkip, Detail: "no vLLM series"})
	} else {
		out = append(out, Result{Name: checkPodLabel, Status: StatusPass, Detail: "vLLM series carry the pod label"})
	}
	epp := eppSeriesCheck(ct, est)
	if l := seriesLabels(ctx, e, "llm_d_epp_inflight_tokens", ct.Selector.EPP); l != "" && epp.Status == StatusPass {
		epp.Detail += "; in-flight series labelled " + l
	}
	out = append(out, epp)
	inflight := inFlightChecks(est)
	if ct.DecisionSource == config.SourceRecords {
		modelOnly(inflight)
	}
	out = append(out, inflight...)
	out = append(out, replicasCheck(ct, est), estimateCheck(est))
	return out
}

// modelOnly turns the in-flight checks' failures into warnings: with
// decisionSource records the Prometheus model, the only reader of the
// in-flight series, does not run, so they do not stop tuning.
func modelOnly(cs []Result) {
	for i := range cs {
		if cs[i].Status == StatusFail {
			cs[i].Status = StatusWarn
			cs[i].Detail = "decisionSource is records, so only the Prometheus model would need these series: " + cs[i].Detail
		}
	}
}

// vllmSeriesCheck: the vLLM selector finds series, fresh ones.
func vllmSeriesCheck(ctx context.Context, e *env) Result {
	ct, est := e.target, e.est
	if r := findReason(est, estimator.ReasonNoSeries); r != nil && strings.HasPrefix(r.Detail, "no vLLM series match") {
		c := failCheck(checkVLLMSeries, r, "set selector.vllm to label matchers of the vLLM pods' series, e.g. namespace=\"llm-d\",pod=~\"<model>-decode-.*\"; "+
			"if none exist anywhere, Prometheus does not scrape vLLM: add a PodMonitor for the vLLM pods (docs/doctor.md)")
		c.Detail += "; " + whereVLLM(ctx, e)
		return c
	}
	if r := findReason(est, estimator.ReasonStaleSeries); r != nil {
		return failCheck(checkVLLMSeries, r, "the vLLM series stopped: check that Prometheus still scrapes the pods (its targets page) and that the selector names the running pods")
	}
	pods := est.Coverage.Expected
	detail := fmt.Sprintf("%d pods with vLLM series (%s); vLLM generation %s", len(pods), examples(pods), orUnknown(est.Shape.VLLM))
	if l := seriesLabels(ctx, e, "vllm:num_requests_waiting", ct.Selector.VLLM); l != "" {
		detail += "; labelled " + l
	}
	if n := est.Shape.EnginesPerPod; n > 1 {
		detail += fmt.Sprintf("; %d engines per pod (internal data parallelism)", n)
	}
	if len(est.Features.Legacy) > 0 {
		detail += "; deprecated names in use: " + strings.Join(est.Features.Legacy, ", ")
	}
	return Result{Name: checkVLLMSeries, Status: StatusPass, Detail: detail}
}

// whereVLLM names where vLLM series exist under any selector (up to three).
func whereVLLM(ctx context.Context, e *env) string {
	q := fmt.Sprintf(`group by (job, namespace, pod, instance) (last_over_time({__name__=~"vllm:num_requests_waiting|vllm:num_requests_running"}[%ds]))`,
		int(e.target.Lookback.Seconds()))
	v, _, err := e.q.Query(ctx, q, e.at)
	switch {
	case err != nil:
		return "where vLLM series are could not be asked: " + err.Error()
	case len(v) == 0:
		return "no vLLM series exist under any selector"
	}
	var where []string
	for _, s := range v[:min(len(v), 3)] {
		where = append(where, s.Metric.String())
	}
	return "vLLM series exist as " + strings.Join(where, ", ")
}

// seriesLabels are the labels of one series of metric under the selector
// (the name dropped), "" when there is none or the query fails.
func seriesLabels(ctx context.Context, e *env, metric, sel string) string {
	q := fmt.Sprintf(`topk(1, last_over_time(%s{%s}[%ds]))`, metric, sel, int(e.target.Lookback.Seconds()))
	v, _, err := e.q.Query(ctx, q, e.at)
	if err != nil || len(v) == 0 {
		return ""
	}
	m := v[0].Metric.Clone()
	delete(m, "__name__")
	return m.String()
}

// eppSeriesCheck: the EPP selector finds the EPP's series.
func eppSeriesCheck(ct config.Target, est *estimator.Estimates) Result {
	if r := findReason(est, estimator.ReasonSelectorMatchesNothing); r != nil {
		return failCheck(checkEPPSeries, r, "set selector.epp to label matchers of the EPP's series (the detail lists where they are); under the chart's ServiceMonitor the EPP's own namespace label is exported_namespace")
	}
	if est.Shape.EPP == "" {
		return Result{Name: checkEPPSeries, Status: StatusFail, Reason: string(estimator.ReasonNoSeries),
			Detail: "no EPP series (llm_d_epp_* or inference_extension_*) match {" + ct.Selector.EPP + "}",
			Fix:    "scrape the EPP's metrics port (the chart's ServiceMonitor, port http-metrics) and set selector.epp to its series' labels"}
	}
	detail := "EPP generation " + est.Shape.EPP
	if len(est.Shape.Replicas) > 0 {
		detail += fmt.Sprintf("; %d replica(s) report in-flight series (%s)", len(est.Shape.Replicas), examples(est.Shape.Replicas))
	}
	if l := est.Shape.EndpointNamespaceLabel; l != "" {
		detail += "; the EPP's own namespace is in label " + l
	}
	return Result{Name: checkEPPSeries, Status: StatusPass, Detail: detail}
}

// inFlightChecks: in-flight series exist, their producer is found and
// unambiguous, they are not empty, and their endpoints join the pods.
func inFlightChecks(est *estimator.Estimates) []Result {
	if r := findReason(est, estimator.ReasonSelectorMatchesNothing); r != nil {
		skip := "the EPP selector matches nothing"
		return []Result{{Name: checkInFlightSeries, Status: StatusSkip, Detail: skip}, {Name: checkProducer, Status: StatusSkip, Detail: skip},
			{Name: checkSeriesEmpty, Status: StatusSkip, Detail: skip}, {Name: checkEndpointJoin, Status: StatusSkip, Detail: skip}}
	}
	var out []Result
	if r := findReason(est, estimator.ReasonNoSeries, "inFlight"); r != nil {
		out = append(out, failCheck(checkInFlightSeries, r, "the gate's in-flight gauges (llm_d_epp_inflight_*) come with llm-d-router >= 0.10 and an inflight-load-producer in the EPP config; "+
			"on an older EPP use decisionSource: records"))
	} else {
		out = append(out, Result{Name: checkInFlightSeries, Status: StatusPass, Detail: fmt.Sprintf("%d in-flight endpoints, %d snapshots", len(est.Shape.Endpoints), len(est.InFlight.Snapshots))})
	}
	out = append(out, producerCheck(est))
	if r := findReason(est, estimator.ReasonSeriesEmpty); r != nil {
		out = append(out, failCheck(checkSeriesEmpty, r, "the series exist but hold no samples in the lookback: check that the scrape is current (Prometheus' targets page) and the in-flight producer"))
	} else {
		out = append(out, Result{Name: checkSeriesEmpty, Status: StatusPass, Detail: "every series found holds samples in the lookback"})
	}
	return append(out, joinCheck(est))
}

func producerCheck(est *estimator.Estimates) Result {
	if r := findReason(est, estimator.ReasonInFlightProducerAmbiguous); r != nil {
		return failCheck(checkProducer, r, "set the filter's inFlightLoadProducerName in the EPP config to the producer the gate reads (one of those found)")
	}
	if r := findReason(est, estimator.ReasonInFlightProducerNotFound); r != nil {
		return failCheck(checkProducer, r, "inFlightLoadProducerName must name an inflight-load-producer instance of the EPP config whose series Prometheus has")
	}
	if est.Shape.Producer == "" && len(est.Shape.Producers) == 0 {
		return Result{Name: checkProducer, Status: StatusPass, Detail: "the in-flight series carry no producer_name (one producer)"}
	}
	return Result{Name: checkProducer, Status: StatusPass, Detail: fmt.Sprintf("producer %q read (found: %s)", est.Shape.Producer, strings.Join(est.Shape.Producers, ", "))}
}

func joinCheck(est *estimator.Estimates) Result {
	if r := findReason(est, estimator.ReasonEndpointNamesUnmatched); r != nil {
		return failCheck(checkEndpointJoin, r, "in-flight endpoints join as the pod or <pod>-rank-<i>: select the EPP and the vLLM pods of one pool (the routed pods must be the vLLM pods)")
	}
	var joins []string
	for _, j := range est.Shape.Joins {
		joins = append(joins, fmt.Sprintf("%s ↔ %s %d/%d", j.Left, j.Right, j.Matched, j.RightNames))
	}
	pods := map[string]bool{}
	for _, e := range est.Shape.Endpoints {
		if e.Pod != "" {
			pods[e.Pod] = true
		}
	}
	detail := fmt.Sprintf("%d in-flight endpoints joined to %d pods (naming %s, up to %d ranks per pod); %s",
		len(est.Shape.Endpoints), len(pods), orUnknown(est.Shape.EndpointNaming), est.Shape.RanksPerPod, strings.Join(joins, "; "))
	if r := findReason(est, estimator.ReasonEndpointsUnjoined); r != nil {
		return Result{Name: checkEndpointJoin, Status: StatusWarn, Reason: string(r.Code), Detail: r.Detail + "; " + detail,
			Fix: "nothing to do when those pods were removed (the EPP keeps a departed pod's gauges until it restarts); otherwise select their vLLM series too"}
	}
	return Result{Name: checkEndpointJoin, Status: StatusPass, Detail: detail}
}

// replicasCheck: several EPP replicas are read as the target's
// syncedEPPReplicas setting says (metrics cannot tell synced ones apart).
func replicasCheck(ct config.Target, est *estimator.Estimates) Result {
	n := len(est.Shape.Replicas)
	switch {
	case n > 1 && !ct.SyncedEPPReplicas:
		return Result{Name: checkEPPReplicas, Status: StatusWarn, Reason: "replicas-unsynced",
			Detail: fmt.Sprintf("%d EPP replicas report in-flight series (%s); each snapshot reads one replica, as the gate of an unsynced replica sees only its own load", n, examples(est.Shape.Replicas)),
			Fix:    "if the replicas sync in-flight load across replicas (each gauge its own share, the gate the sum), set syncedEPPReplicas: true"}
	case n <= 1 && ct.SyncedEPPReplicas:
		return Result{Name: checkEPPReplicas, Status: StatusWarn, Reason: "replicas-synced-single",
			Detail: fmt.Sprintf("syncedEPPReplicas is set but %d EPP replica reports in-flight series", n),
			Fix:    "check that every EPP replica is scraped and matched by selector.epp, or drop syncedEPPReplicas"}
	}
	return Result{Name: checkEPPReplicas, Status: StatusPass, Detail: fmt.Sprintf("%d EPP replica(s); syncedEPPReplicas %v", n, ct.SyncedEPPReplicas)}
}

// estimateFixes are the fixes of the estimate reasons no other check covers.
func estimateFixes() map[estimator.ReasonCode]string {
	return map[estimator.ReasonCode]string{
		estimator.ReasonMaxNumBatchedTokensUnknown: "set maxNumBatchedTokens to vLLM's --max-num-batched-tokens",
		estimator.ReasonNoSaturatedWindows:         "the pool was not saturated in the lookback; the daemon holds until it is (priorPPT or calibrationFile stand in meanwhile)",
		estimator.ReasonTooFewSaturatedWindows:     "too few saturated windows in the lookback; a longer lookback or busier hours give more",
		estimator.ReasonPartialPodCoverage:         "some pods lack a required series (the estimate's coverage.missing names them): scrape every pod of the pool",
		estimator.ReasonNoRequests:                 "no requests in the lookback: the pool is idle",
		estimator.ReasonNoComputedTokenSource:      "vLLM exports no computed-token counter: use a vLLM of 2026 (docs/estimator.md, Feature detection)",
		estimator.ReasonPDGateOnDecodeProfile:      "move the prefix-cache-affinity-filter to the prefill profile and set pdGateProfile: prefill",
		estimator.ReasonPDCachedFromDecode:         "upgrade llm-d's routing sidecar (llm-d-router PR #916 reports the prefill pod's cached tokens)",
	}
}

// pdSetupFixes are the P/D reasons a setting or a selector fixes: the
// estimate check fails with them (no other check names them all).
func pdSetupFixes() map[estimator.ReasonCode]string {
	return map[estimator.ReasonCode]string{
		estimator.ReasonPDGateProfileUnknown:    "set pdGateProfile: prefill (or decode), the profile whose plugins include the filter in the EPP config (see pd-roles)",
		estimator.ReasonPDGateProfileMismatch:   "set pdGateProfile to the profile the EPP config puts the filter in (see pd-roles)",
		estimator.ReasonPDPrefillPodsUnselected: "widen selector.vllm to the prefill pods (llm-d.ai/role: prefill), e.g. pod=~\"<name>-(decode|prefill)-[0-9]+\"",
	}
}

// estimateCheck: what the estimate concludes, beyond the setup checks.
func estimateCheck(est *estimator.Estimates) Result {
	covered := map[estimator.ReasonCode]bool{estimator.ReasonNoSeries: true, estimator.ReasonStaleSeries: true}
	for _, c := range estimator.JoinReasonCodes() {
		covered[c] = true
	}
	pdFixes, fixOf := pdSetupFixes(), estimateFixes()
	var rest, fixes []string
	var first estimator.ReasonCode
	for _, r := range est.Reasons {
		if r.Code.QueryFailed() {
			return failCheck(checkEstimate, &r, "Prometheus failed a query: check its load and limits (query timeout, max samples)")
		}
		if fix, ok := pdFixes[r.Code]; ok {
			return failCheck(checkEstimate, &r, fix)
		}
		if covered[r.Code] {
			continue
		}
		if first == "" {
			first = r.Code
		}
		rest = append(rest, fmt.Sprintf("%s (%s): %s", r.Code, r.Part, r.Detail))
		if f := fixOf[r.Code]; f != "" && !slices.Contains(fixes, f) {
			fixes = append(fixes, f)
		}
	}
	drain := "drain rate inconclusive"
	if v := est.DrainRate.Value; v != nil {
		drain = fmt.Sprintf("drain rate %.0f tok/s (confidence %.2f)", *v, est.DrainRate.Confidence)
	}
	switch {
	case len(rest) > 0:
		if len(fixes) == 0 {
			fixes = append(fixes, "see the reason enum in docs/estimator.md")
		}
		return Result{Name: checkEstimate, Status: StatusWarn, Reason: string(first),
			Detail: drain + "; " + strings.Join(rest, "; "), Fix: strings.Join(fixes, "; ")}
	case est.Status == estimator.StatusOK && est.DrainRate.Value != nil:
		return Result{Name: checkEstimate, Status: StatusPass, Detail: drain}
	case est.Status == estimator.StatusInconclusive:
		return Result{Name: checkEstimate, Status: StatusSkip, Detail: "inconclusive for the reasons failed above"}
	}
	return Result{Name: checkEstimate, Status: StatusPass, Detail: "status " + string(est.Status)}
}

func examples(names []string) string {
	if len(names) > 3 {
		return strings.Join(names[:3], ", ") + ", …"
	}
	return strings.Join(names, ", ")
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
