package estimator

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The EPP names an endpoint three ways: its in-flight gauges use the
// endpoint ID, <pod>-rank-<i> (one endpoint per data-parallel rank), its
// scheduler attempts the bare pod, and vLLM's series carry the pod as
// Prometheus' pod label. This file joins them (docs/estimator.md, "Joins").

// Shape is what the estimator inferred about a target's exporters and how
// their names joined: the data behind the join reasons.
type Shape struct {
	// VLLM is the vLLM generation inferred from the names present:
	// "<=0.11", "2026" or "2026-03+" (waiting_by_reason), "" when unknown.
	VLLM string `json:"vllm,omitempty"`
	// EPP is the EPP generation: ">=0.10" (llm_d_epp_*) or "<0.10"
	// (inference_extension_* / inference_objective_*), "" when none.
	EPP string `json:"epp,omitempty"`
	// EndpointNaming is how in-flight endpoints are named: "pod" or "pod-rank".
	EndpointNaming string `json:"endpointNaming,omitempty"`
	// RanksPerPod is the most in-flight endpoints joined to one pod.
	RanksPerPod int `json:"ranksPerPod,omitempty"`
	// EnginesPerPod is the most vLLM engines (engine label values) of one pod.
	EnginesPerPod int `json:"enginesPerPod,omitempty"`
	// Producers are the in-flight producer_name values found; Producer the one read.
	Producers []string `json:"producers,omitempty"`
	Producer  string   `json:"producer,omitempty"`
	// Replicas are the EPP replicas reporting in-flight series; Synced
	// whether their gauges are added up (the target's setting).
	Replicas []string `json:"replicas,omitempty"`
	Synced   bool     `json:"synced"`
	// EndpointNamespaceLabel is the label holding the EPP's own namespace
	// label on its series: "exported_namespace" when the scrape does not
	// honour labels, else "namespace".
	EndpointNamespaceLabel string `json:"endpointNamespaceLabel,omitempty"`
	// Requests counts the requests over the lookback (the larger of vLLM's
	// prompt histogram count and the EPP's input histogram count: each
	// sees a subset); CachedCoverage is the EPP cached-token histogram's
	// share of them.
	Requests       float64  `json:"requests,omitempty"`
	CachedCoverage *float64 `json:"cachedCoverage,omitempty"`
	// StepCountShare is the iteration histogram's step count over the steps
	// the inter-token latency implies on busy windows (below 0.9: it
	// misses steps, and steps are counted from the latency).
	StepCountShare *float64 `json:"stepCountShare,omitempty"`
	// Joins are the name matches made, each with what did not match.
	Joins []Join `json:"joins"`
	// Endpoints are the in-flight endpoints and the pod each joined to.
	Endpoints []EndpointJoin `json:"endpoints,omitempty"`
	// PD describes a P/D-disaggregated pool (nil: none seen).
	PD *PD `json:"pd,omitempty"`
	// Departed are in-flight endpoints whose pod's vLLM series ended in the
	// lookback, with when (left out of later snapshots).
	Departed []DepartedEndpoint `json:"departed,omitempty"`
}

// DepartedEndpoint is an in-flight endpoint whose pod left.
type DepartedEndpoint struct {
	Endpoint string    `json:"endpoint"`
	Pod      string    `json:"pod"`
	LastSeen time.Time `json:"lastSeen"`
}

// Join is one match between two sides' endpoint names.
type Join struct {
	// Left and Right name the two sides (series and label).
	Left  string `json:"left"`
	Right string `json:"right"`
	// LeftNames and RightNames count each side's distinct names.
	LeftNames  int `json:"leftNames"`
	RightNames int `json:"rightNames"`
	// Matched counts the right side's names matched by a left name.
	Matched int `json:"matched"`
	// LeftUnmatched and RightUnmatched are examples (at most 3) of names
	// without a counterpart.
	LeftUnmatched  []string `json:"leftUnmatched,omitempty"`
	RightUnmatched []string `json:"rightUnmatched,omitempty"`
}

// Coverage is the share of the right side's names matched (1 when it is empty).
func (j Join) Coverage() float64 {
	if j.RightNames == 0 {
		return 1
	}
	return float64(j.Matched) / float64(j.RightNames)
}

// EndpointJoin is one in-flight endpoint and the pod it joined to.
type EndpointJoin struct {
	Endpoint string `json:"endpoint"`
	// Pod is the pod it joined to, "" when none.
	Pod string `json:"pod,omitempty"`
	// Rank is the data-parallel rank its name carries, -1 when none.
	Rank int `json:"rank"`
}

var rankSuffix = regexp.MustCompile(`^(.+)-rank-([0-9]+)$`)

// endpointJoin maps in-flight endpoint names to pods.
type endpointJoin struct {
	pod   map[string]string // endpoint → pod ("" unmatched)
	ranks map[string][]string
	// known: the right side (routed pods, else vLLM pods) was not empty.
	known bool
	join  Join
	rows  []EndpointJoin
}

// joinEndpoints joins the in-flight endpoint names to the pods the EPP
// routed to (its scheduler attempts), or, when those are unknown, to the
// pods with vLLM series: a name joins as itself or, named <pod>-rank-<i>,
// as its pod.
func joinEndpoints(inflight, routed, vllmPods []string) *endpointJoin {
	right, rightName := routed, mEPPAttempts+"{endpoint_name}"
	if len(right) == 0 {
		right, rightName = vllmPods, "vLLM {pod}"
	}
	known := map[string]bool{}
	for _, n := range right {
		known[n] = true
	}
	for _, n := range vllmPods {
		known[n] = true
	}
	j := &endpointJoin{pod: map[string]string{}, ranks: map[string][]string{}, known: len(right) > 0,
		join: Join{Left: mEPPInflightTokens + "{endpoint_name}", Right: rightName, LeftNames: len(inflight), RightNames: len(right)}}
	for _, ep := range inflight {
		row := EndpointJoin{Endpoint: ep, Rank: -1}
		if m := rankSuffix.FindStringSubmatch(ep); m != nil {
			row.Rank, _ = strconv.Atoi(m[2])
			if known[m[1]] && !known[ep] {
				row.Pod = m[1]
			}
		}
		if row.Pod == "" && known[ep] {
			row.Pod = ep
		}
		j.pod[ep] = row.Pod
		if row.Pod != "" {
			j.ranks[row.Pod] = append(j.ranks[row.Pod], ep)
		} else if len(j.join.LeftUnmatched) < 3 {
			j.join.LeftUnmatched = append(j.join.LeftUnmatched, ep)
		}
		j.rows = append(j.rows, row)
	}
	for _, n := range right {
		if len(j.ranks[n]) > 0 {
			j.join.Matched++
		} else if len(j.join.RightUnmatched) < 3 {
			j.join.RightUnmatched = append(j.join.RightUnmatched, n)
		}
	}
	for _, eps := range j.ranks {
		sort.Strings(eps)
	}
	return j
}

// renamed reports whether some endpoint joined to a pod of another name.
func (j *endpointJoin) renamed() bool {
	for ep, p := range j.pod {
		if p != "" && p != ep {
			return true
		}
	}
	return false
}

// naming is "pod-rank" when the endpoints carry ranks, else "pod".
func (j *endpointJoin) naming() string {
	for _, r := range j.rows {
		if r.Rank >= 0 && r.Pod != r.Endpoint {
			return "pod-rank"
		}
	}
	if len(j.rows) == 0 {
		return ""
	}
	return "pod"
}

func (j *endpointJoin) ranksPerPod() int {
	n := 0
	for _, eps := range j.ranks {
		n = max(n, len(eps))
	}
	return n
}

// unmatchedReason names both sides with examples when fewer than least of
// the routed (or vLLM) pods have an in-flight endpoint; nil otherwise.
func (j *endpointJoin) unmatchedReason(least float64) *Reason {
	if !j.known || j.join.LeftNames == 0 || j.join.Coverage() >= least {
		return nil
	}
	left, right := "(none)", "(none)"
	if len(j.join.LeftUnmatched) > 0 {
		left = strconv.Quote(j.join.LeftUnmatched[0])
	}
	if len(j.join.RightUnmatched) > 0 {
		right = strconv.Quote(j.join.RightUnmatched[0])
	}
	side := "routing"
	if !strings.HasPrefix(j.join.Right, mEPPAttempts) {
		side = "vLLM pod"
	}
	return &Reason{Code: ReasonEndpointNamesUnmatched, Part: partInFlight,
		Detail: fmt.Sprintf("in-flight %s vs %s %s: %d of %d %s names have an in-flight endpoint (minimum %.0f%%; in-flight endpoints join as the pod or <pod>-rank-<i>)",
			left, side, right, j.join.Matched, j.join.RightNames, side, 100*least)}
}

// inVLLMGeneration infers the vLLM generation from the names present.
func inferVLLM(has func(string) bool) string {
	switch {
	case has(mWaitingByReason):
		return "2026-03+"
	case has(mBySource) || has(mPromptCached):
		return "2026"
	case has(mGPUCacheUsage) || has(mGPUPrefixHits) || has(mTPOT+"_count"):
		return "<=0.11"
	case has(mWaiting):
		return "0.12-2025"
	}
	return ""
}

// inferEPP infers the EPP generation from the names present.
func inferEPP(has func(string) bool) string {
	switch {
	case has(mEPPInflightTokens) || has(mEPPAttempts) || has(mEPPInputTokens+"_count"):
		return ">=0.10"
	case has(mGIEAttempts) || has(mGIEInputTokens+"_count"):
		return "<0.10"
	}
	return ""
}

// routingByEndpoint restates pod routing shares in the in-flight
// endpoints' names: the EPP counts a scheduling attempt per pod, so a
// pod's attempts are split evenly over its rank endpoints. Pods without an
// in-flight endpoint keep their name.
func (j *endpointJoin) routingByEndpoint(shares []EndpointShare) []EndpointShare {
	out := make([]EndpointShare, 0, len(shares))
	for _, s := range shares {
		eps := j.ranks[s.Endpoint]
		if len(eps) == 0 {
			s.Pod = s.Endpoint
			out = append(out, s)
			continue
		}
		k := float64(len(eps))
		for _, ep := range eps {
			out = append(out, EndpointShare{Endpoint: ep, Pod: s.Endpoint, Attempts: s.Attempts / k, Share: s.Share / k})
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Endpoint < out[b].Endpoint })
	return out
}

// podOf is the pod an in-flight endpoint joined to and how many endpoints
// share it; the endpoint itself and 1 when the join knows nothing.
func (j *endpointJoin) podOf(ep string) (string, int, bool) {
	if j == nil {
		return ep, 1, true
	}
	p, ok := j.pod[ep]
	if !ok || p == "" {
		return ep, 1, !j.known
	}
	return p, len(j.ranks[p]), true
}

// JoinReasonCodes are the reasons that say a target's series could not be
// found or joined: the fatal join reasons and the endpoints-unjoined warning.
func JoinReasonCodes() []ReasonCode {
	return []ReasonCode{ReasonEndpointNamesUnmatched, ReasonEndpointsUnjoined, ReasonInFlightProducerAmbiguous,
		ReasonInFlightProducerNotFound, ReasonSelectorMatchesNothing, ReasonPodLabelMissing, ReasonSeriesEmpty,
		ReasonPDGateProfileUnknown, ReasonPDGateProfileMismatch, ReasonPDPrefillPodsUnselected}
}

// JoinProblems counts, per join reason the estimate carries, what failed
// to join: for endpoint-names-unmatched the routed (or vLLM) pods without
// an in-flight endpoint, for endpoints-unjoined the in-flight endpoints
// without a pod (both from Shape), 1 for the others. Reasons the estimate
// does not carry are absent.
func (e *Estimates) JoinProblems() map[ReasonCode]float64 {
	out := map[ReasonCode]float64{}
	join := map[ReasonCode]bool{}
	for _, c := range JoinReasonCodes() {
		join[c] = true
	}
	for _, r := range append(append([]Reason(nil), e.Reasons...), e.Warnings...) {
		if join[r.Code] {
			out[r.Code] = 1
		}
	}
	if _, ok := out[ReasonEndpointNamesUnmatched]; ok {
		for _, j := range e.Shape.Joins {
			if j.Left == mEPPInflightTokens+"{endpoint_name}" && j.RightNames > j.Matched {
				out[ReasonEndpointNamesUnmatched] = float64(j.RightNames - j.Matched)
			}
		}
	}
	if _, ok := out[ReasonEndpointsUnjoined]; ok {
		n := 0
		for _, ep := range e.Shape.Endpoints {
			if ep.Pod == "" {
				n++
			}
		}
		out[ReasonEndpointsUnjoined] = float64(max(n, 1))
	}
	return out
}

// EndpointRates maps the names a per-endpoint rate is looked up by to r's
// per-pod rates (positive, finite): each unit's own name (the pod, or
// pod@instance when every rank of a pod is scraped) and every in-flight
// endpoint joined to the pod (Shape.Endpoints, named <pod>-rank-<i>). A pod
// measured as one unit gives its rate to each of its rank endpoints (each
// rank is one engine behind one port, and only the scraped one is
// measured); a pod measured per port gives its units, ordered by port, to
// its ranks in order.
func (e *Estimates) EndpointRates(r *RateEstimate) map[string]float64 {
	out := map[string]float64{}
	units := map[string][]PodRate{} // pod → its units, by port
	for _, p := range r.PerPod {
		if !(p.Value > 0) || math.IsInf(p.Value, 0) {
			continue
		}
		out[p.Pod] = p.Value
		pod, _, _ := strings.Cut(p.Pod, "@")
		units[pod] = append(units[pod], p)
	}
	for pod, us := range units {
		sort.Slice(us, func(a, b int) bool { return unitPort(us[a].Pod) < unitPort(us[b].Pod) })
		units[pod] = us
	}
	for _, ep := range e.Shape.Endpoints {
		us := units[ep.Pod]
		if _, own := out[ep.Endpoint]; own || len(us) == 0 {
			continue
		}
		switch {
		case len(us) == 1:
			out[ep.Endpoint] = us[0].Value
		case ep.Rank >= 0 && ep.Rank < len(us):
			out[ep.Endpoint] = us[ep.Rank].Value
		}
	}
	return out
}

// unitPort is the port of a pod@host:port unit name (0 without one).
func unitPort(unit string) int {
	_, inst, ok := strings.Cut(unit, "@")
	if !ok {
		return 0
	}
	i := strings.LastIndex(inst, ":")
	p, _ := strconv.Atoi(inst[i+1:])
	return p
}
