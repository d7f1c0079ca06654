package scenario

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Named export shapes (ExportShapeNamed).
const (
	// ShapeLegacySim is the simulator's output before export shapes existed:
	// bare pod names everywhere, every in-flight series from the start,
	// `namespace`/`pod` labels only, iteration tokens observed every step.
	// No cluster emits this; it is kept only until the estimator is adapted.
	ShapeLegacySim = "legacy-sim"
	// ShapeLLMD2026 is today's llm-d: llm-d-router main (>= 0.10) behind a
	// prometheus-operator ServiceMonitor, vLLM of late 2026 behind llm-d's
	// PodMonitor (port 8000). docs/exporters.md cites every fact.
	ShapeLLMD2026 = "llm-d-2026"
	// ShapeLLMDMid2026 is llm-d-2026 with a vLLM from before the July 2026
	// prefix-cache fix (PR #48860).
	ShapeLLMDMid2026 = "llm-d-mid-2026"
	// ShapeLLMD2025 is llm-d-router release-0.8 (GIE v1.5 metric names, no
	// in-flight gauges) with vLLM 0.11.
	ShapeLLMD2025 = "llm-d-2025"
)

// DefaultExportShape is the shape runs use when neither the scenario nor
// the Options name one. The one line to flip to ShapeLLMD2026 once the
// estimator reads the real shapes.
const DefaultExportShape = ShapeLLMD2026

// VLLMGeneration selects the vLLM build whose metric names and counting
// rules the engines export.
type VLLMGeneration string

// vLLM generations.
const (
	// VLLMSim is legacy-sim's vLLM: 2026 names without waiting_by_reason.
	VLLMSim VLLMGeneration = "sim"
	// VLLM011 is vLLM <= 0.11: also the gpu_* names and
	// time_per_output_token_seconds, none of the 2026 counters, prefix-cache
	// counters re-counted on every scheduling attempt.
	VLLM011 VLLMGeneration = "0.11"
	// VLLMMid2026 has the 2026 counters and waiting_by_reason, but counts
	// prefix-cache queries/hits on every scheduling attempt (before PR #48860).
	VLLMMid2026 VLLMGeneration = "2026-06"
	// VLLMLate2026 counts prefix-cache queries/hits once per request.
	VLLMLate2026 VLLMGeneration = "2026-11"
)

// EPPGeneration selects the llm-d-router build whose EPP metrics are exported.
type EPPGeneration string

// EPP generations.
const (
	// EPP08 is llm-d-router release-0.8 (GIE v1.5): inference_extension_* and
	// inference_objective_* names, pod_name label, no in-flight gauges.
	EPP08 EPPGeneration = "0.8"
	// EPP010 is llm-d-router >= 0.10 (main): llm_d_epp_* names and in-flight
	// gauges, with the deprecated GIE names still emitted alongside.
	EPP010 EPPGeneration = "0.10"
	// EPPSim is legacy-sim's EPP: llm_d_epp_* names only.
	EPPSim EPPGeneration = "sim"
)

// ScrapeShape is how the series reach Prometheus: the target labels it adds.
type ScrapeShape string

// Scrape shapes.
const (
	// ScrapeSim labels every series with namespace and pod only (legacy-sim).
	ScrapeSim ScrapeShape = "sim"
	// ScrapeOperator is prometheus-operator: vLLM through a PodMonitor
	// (job, namespace, pod, container, endpoint, instance), the EPP through
	// a ServiceMonitor (+ service) with honorLabels false, so the EPP's own
	// namespace label becomes exported_namespace.
	ScrapeOperator ScrapeShape = "prometheus-operator"
	// ScrapeKubernetesSD is a raw kubernetes_sd job (llm-d-router's example
	// Prometheus): instance and job only.
	ScrapeKubernetesSD ScrapeShape = "kubernetes-sd"
)

// ExportShape is what the simulated exporters emit and how it is scraped:
// names, labels, observation rules, lifecycles and topology. Start from a
// named shape (ExportShapeNamed) and override fields.
type ExportShape struct {
	// Name is the named shape this one started from.
	Name string
	VLLM VLLMGeneration
	EPP  EPPGeneration
	// RankEndpoints names EPP endpoints <pod>-rank-<i> in the in-flight
	// gauges (the scheduler attempts and vLLM keep the bare pod).
	RankEndpoints bool
	// LazyInFlight makes an endpoint's in-flight series appear only after its
	// first request; they are never deleted.
	LazyInFlight bool
	// Producers are the in-flight load producer instances (producer_name);
	// the first feeds the gate, the others count the same requests.
	Producers []string
	// DPRanks is the data-parallel ranks per pod: one engine, one port
	// (8000+i) and one EPP endpoint each.
	DPRanks int
	// DPEngines is vLLM's internal data parallelism: engines behind one
	// port (engine label 0..N-1), chosen per request by vLLM's front-end.
	DPEngines int
	// ScrapeAllRanks scrapes every rank's port; false scrapes port 8000
	// only (llm-d's PodMonitor), so only rank 0's vLLM series exist.
	ScrapeAllRanks bool
	// EPPReplicas is the number of EPP pods; requests alternate among them.
	EPPReplicas int
	// SyncReplicas shares in-flight load across replicas: the gate sees the
	// sum while each replica's gauge shows its own increments.
	SyncReplicas bool
	Scrape       ScrapeShape
	// UsageShare is the share of responses carrying usage; only those
	// observe the EPP's token histograms (streaming without include_usage).
	UsageShare float64
	// IterationEveryStep observes vllm:iteration_tokens_total on every
	// engine step (legacy-sim); real vLLM skips steps without an output.
	IterationEveryStep bool

	// PrefillPods > 0 disaggregates prefill and decode (docs/exporters.md,
	// "P/D pools"): that many prefill pods (llm-d.ai/role: prefill) beside
	// the scenario's pods, which become the decode pods.
	PrefillPods int
	// PDNonCachedTokens is the prefix-based P/D decider's nonCachedTokens:
	// a request is disaggregated when the part of its prompt the decode
	// endpoint does not hold is at least this long.
	PDNonCachedTokens int
	// PDGateProfile is the scheduling profile carrying the tuned
	// prefix-cache-affinity filter: PDProfilePrefill or PDProfileDecode.
	PDGateProfile string
	// PDUsageCached is whose cached tokens a disaggregated response's usage
	// reports to the EPP: PDProfilePrefill (the routing sidecar rewrites
	// them to the prefill pod's since llm-d-router PR #916) or
	// PDProfileDecode (before it: the decode pod's, nearly the whole prompt).
	PDUsageCached string
	// KVTransferTokensPerSec is the rate at which a decode pod pulls a
	// prompt's KV from the prefill pod (after a fixed kvTransferLatency).
	KVTransferTokensPerSec float64

	// DepartPods pods (the last ones) leave at DepartAt: they crash, their
	// requests are aborted, the EPP stops routing to them and their vLLM
	// series end; their in-flight series stay. With RejoinAfter > 0 as many
	// pods join RejoinAfter later: the same pods restarted (counters from
	// zero, an empty cache) with RejoinSameName, else new pods.
	DepartPods     int
	DepartAt       time.Duration
	RejoinAfter    time.Duration
	RejoinSameName bool
}

// P/D scheduling profiles (llm-d-router's disagg-profile-handler defaults).
const (
	PDProfilePrefill = "prefill"
	PDProfileDecode  = "decode"
)

// PD reports whether the shape disaggregates prefill and decode.
func (x *ExportShape) PD() bool { return x.PrefillPods > 0 }

// ExportShapeNames lists the named shapes.
func ExportShapeNames() []string {
	return []string{ShapeLLMD2025, ShapeLLMD2026, ShapeLLMDMid2026, ShapeLegacySim}
}

// ExportShapeNamed returns a named shape ("" = DefaultExportShape).
func ExportShapeNamed(name string) (ExportShape, error) {
	if name == "" {
		name = DefaultExportShape
	}
	llmd := ExportShape{Name: name, VLLM: VLLMLate2026, EPP: EPP010, RankEndpoints: true, LazyInFlight: true,
		Producers: []string{"inflight-load-producer"}, DPRanks: 1, DPEngines: 1, EPPReplicas: 1, SyncReplicas: true,
		Scrape: ScrapeOperator, UsageShare: 1}
	llmd.pdDefaults()
	switch name {
	case ShapeLegacySim:
		x := ExportShape{Name: name, VLLM: VLLMSim, EPP: EPPSim, Producers: []string{"inflight-load-producer"},
			DPRanks: 1, DPEngines: 1, EPPReplicas: 1, Scrape: ScrapeSim, UsageShare: 1, IterationEveryStep: true}
		x.pdDefaults()
		return x, nil
	case ShapeLLMD2026:
		return llmd, nil
	case ShapeLLMDMid2026:
		llmd.VLLM = VLLMMid2026
		return llmd, nil
	case ShapeLLMD2025:
		llmd.VLLM, llmd.EPP = VLLM011, EPP08
		return llmd, nil
	}
	return ExportShape{}, fmt.Errorf("unknown export shape %q (known: %s)", name, strings.Join(ExportShapeNames(), ", "))
}

// pdDefaults sets the P/D fields' defaults: llm-d-router's sample P/D
// config (deploy/config/pd-epp-config.yaml: nonCachedTokens 16), the gate
// in the prefill profile, today's sidecar.
func (x *ExportShape) pdDefaults() {
	x.PDNonCachedTokens, x.PDGateProfile, x.PDUsageCached = 16, PDProfilePrefill, PDProfilePrefill
	x.KVTransferTokensPerSec = 200000
}

// Validate checks the shape's fields.
func (x *ExportShape) Validate() error {
	switch x.VLLM {
	case VLLMSim, VLLM011, VLLMMid2026, VLLMLate2026:
	default:
		return fmt.Errorf("vllm must be one of %s, %s, %s, %s, got %q", VLLM011, VLLMMid2026, VLLMLate2026, VLLMSim, x.VLLM)
	}
	switch x.EPP {
	case EPPSim, EPP08, EPP010:
	default:
		return fmt.Errorf("epp must be one of %s, %s, %s, got %q", EPP08, EPP010, EPPSim, x.EPP)
	}
	switch x.Scrape {
	case ScrapeSim, ScrapeOperator, ScrapeKubernetesSD:
	default:
		return fmt.Errorf("scrape must be one of %s, %s, %s, got %q", ScrapeOperator, ScrapeKubernetesSD, ScrapeSim, x.Scrape)
	}
	if len(x.Producers) == 0 {
		return fmt.Errorf("producers must name at least one in-flight producer")
	}
	seen := map[string]bool{}
	for _, p := range x.Producers {
		if p == "" || seen[p] {
			return fmt.Errorf("producers must be non-empty and unique, got %q", x.Producers)
		}
		seen[p] = true
	}
	if x.DPRanks < 1 || x.DPRanks > 64 {
		return fmt.Errorf("dpRanks must be in [1, 64], got %d", x.DPRanks)
	}
	if x.DPEngines < 1 || x.DPEngines > 64 {
		return fmt.Errorf("dpEngines must be in [1, 64], got %d", x.DPEngines)
	}
	if x.Scrape == ScrapeSim && x.DPEngines > 1 {
		return fmt.Errorf("dpEngines > 1 needs a real scrape shape (scrape %s labels no engine)", ScrapeSim)
	}
	if x.EPPReplicas < 1 || x.EPPReplicas > 16 {
		return fmt.Errorf("eppReplicas must be in [1, 16], got %d", x.EPPReplicas)
	}
	if !(x.UsageShare >= 0 && x.UsageShare <= 1) || math.IsNaN(x.UsageShare) {
		return fmt.Errorf("usageShare must be in [0, 1], got %v", x.UsageShare)
	}
	if err := x.validatePD(); err != nil {
		return err
	}
	return x.validateLifecycle()
}

// validatePD checks the P/D fields.
func (x *ExportShape) validatePD() error {
	if x.PrefillPods < 0 || x.PrefillPods > 4096 {
		return fmt.Errorf("prefillPods must be in [0, 4096], got %d", x.PrefillPods)
	}
	for _, f := range []struct{ key, v string }{{"pdGateProfile", x.PDGateProfile}, {"pdUsageCached", x.PDUsageCached}} {
		if f.v != PDProfilePrefill && f.v != PDProfileDecode {
			return fmt.Errorf("%s must be %s or %s, got %q", f.key, PDProfilePrefill, PDProfileDecode, f.v)
		}
	}
	if x.PDNonCachedTokens < 0 {
		return fmt.Errorf("pdNonCachedTokens must be >= 0, got %d", x.PDNonCachedTokens)
	}
	if !(x.KVTransferTokensPerSec > 0) || math.IsInf(x.KVTransferTokensPerSec, 0) {
		return fmt.Errorf("kvTransferTokensPerSec must be a positive number, got %v", x.KVTransferTokensPerSec)
	}
	if !x.PD() {
		return nil
	}
	switch {
	case x.VLLM != VLLMMid2026 && x.VLLM != VLLMLate2026:
		return fmt.Errorf("prefillPods needs vllm %s or %s (prompt_tokens_by_source and num_requests_waiting_by_reason), got %s", VLLMMid2026, VLLMLate2026, x.VLLM)
	case x.EPP != EPP010:
		return fmt.Errorf("prefillPods needs epp %s (disaggregation decisions and in-flight gauges), got %s", EPP010, x.EPP)
	case x.DPRanks > 1 || x.DPEngines > 1:
		return fmt.Errorf("prefillPods with data parallelism (dpRanks %d, dpEngines %d) is not simulated", x.DPRanks, x.DPEngines)
	case x.DepartPods > 0:
		return fmt.Errorf("prefillPods with departPods is not simulated")
	case x.Scrape == ScrapeSim:
		return fmt.Errorf("prefillPods needs a real scrape shape (scrape %s)", ScrapeSim)
	}
	return nil
}

// validateLifecycle checks the departure fields.
func (x *ExportShape) validateLifecycle() error {
	switch {
	case x.DepartPods < 0:
		return fmt.Errorf("departPods must be >= 0, got %d", x.DepartPods)
	case x.DepartAt < 0 || x.RejoinAfter < 0:
		return fmt.Errorf("departAt and rejoinAfter must be >= 0, got %v and %v", x.DepartAt, x.RejoinAfter)
	case x.DepartPods > 0 && x.DepartAt <= 0:
		return fmt.Errorf("departPods needs departAt > 0")
	case x.DepartPods == 0 && (x.DepartAt > 0 || x.RejoinAfter > 0 || x.RejoinSameName):
		return fmt.Errorf("departAt, rejoinAfter and rejoinSameName need departPods > 0")
	case x.RejoinSameName && x.RejoinAfter <= 0:
		return fmt.Errorf("rejoinSameName needs rejoinAfter > 0")
	}
	return nil
}

// String renders the shape's fields (stable order), e.g. for a report.
func (x *ExportShape) String() string {
	s := fmt.Sprintf("%s (vllm %s, epp %s, rank endpoints %t, lazy in-flight %t, producers %s, dp ranks %d, dp engines %d, scrape all ranks %t, epp replicas %d, synced %t, scrape %s, usage share %g",
		x.Name, x.VLLM, x.EPP, x.RankEndpoints, x.LazyInFlight, strings.Join(x.Producers, "+"), x.DPRanks, x.DPEngines, x.ScrapeAllRanks,
		x.EPPReplicas, x.SyncReplicas, x.Scrape, x.UsageShare)
	if x.PD() {
		s += fmt.Sprintf(", prefill pods %d, nonCachedTokens %d, gate in the %s profile, usage cached from %s, KV transfer %g tok/s",
			x.PrefillPods, x.PDNonCachedTokens, x.PDGateProfile, x.PDUsageCached, x.KVTransferTokensPerSec)
	}
	if x.DepartPods > 0 {
		s += fmt.Sprintf(", %d pods depart at %v", x.DepartPods, x.DepartAt)
		if x.RejoinAfter > 0 {
			s += fmt.Sprintf(" and rejoin %v later (same name %t)", x.RejoinAfter, x.RejoinSameName)
		}
	}
	return s + ")"
}

// SetExportField sets one shape field by its YAML name from a string value
// (the parser's and the command line's common path).
func (x *ExportShape) SetExportField(key, val string) error {
	b := func(dst *bool) error {
		v, err := strconv.ParseBool(val)
		if err != nil {
			return fmt.Errorf("%s must be true or false, got %q", key, val)
		}
		*dst = v
		return nil
	}
	n := func(dst *int) error {
		v, err := strconv.Atoi(val)
		if err != nil {
			return fmt.Errorf("%s must be an integer, got %q", key, val)
		}
		*dst = v
		return nil
	}
	switch key {
	case "vllm":
		x.VLLM = VLLMGeneration(val)
	case "epp":
		x.EPP = EPPGeneration(val)
	case "rankEndpoints":
		return b(&x.RankEndpoints)
	case "lazyInFlight":
		return b(&x.LazyInFlight)
	case "producers":
		x.Producers = nil
		for _, p := range strings.Split(val, ",") {
			x.Producers = append(x.Producers, strings.TrimSpace(p))
		}
	case "dpRanks":
		return n(&x.DPRanks)
	case "dpEngines":
		return n(&x.DPEngines)
	case "scrapeAllRanks":
		return b(&x.ScrapeAllRanks)
	case "eppReplicas":
		return n(&x.EPPReplicas)
	case "syncReplicas":
		return b(&x.SyncReplicas)
	case "scrape":
		x.Scrape = ScrapeShape(val)
	case "usageShare":
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return fmt.Errorf("usageShare must be a number, got %q", val)
		}
		x.UsageShare = v
	case "iterationEveryStep":
		return b(&x.IterationEveryStep)
	case "prefillPods":
		return n(&x.PrefillPods)
	case "pdNonCachedTokens":
		return n(&x.PDNonCachedTokens)
	case "pdGateProfile":
		x.PDGateProfile = val
	case "pdUsageCached":
		x.PDUsageCached = val
	case "kvTransferTokensPerSec":
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return fmt.Errorf("kvTransferTokensPerSec must be a number, got %q", val)
		}
		x.KVTransferTokensPerSec = v
	case "departPods":
		return n(&x.DepartPods)
	case "departAt", "rejoinAfter":
		d, err := time.ParseDuration(val)
		if err != nil {
			return fmt.Errorf("%s must be a duration, got %q", key, val)
		}
		if key == "departAt" {
			x.DepartAt = d
		} else {
			x.RejoinAfter = d
		}
	case "rejoinSameName":
		return b(&x.RejoinSameName)
	default:
		return fmt.Errorf("unknown exporters field %q (known: %s)", key, strings.Join(exportFieldNames(), ", "))
	}
	return nil
}

func exportFieldNames() []string {
	out := []string{"dpEngines", "dpRanks", "epp", "eppReplicas", "iterationEveryStep", "lazyInFlight", "producers", "rankEndpoints",
		"scrape", "scrapeAllRanks", "syncReplicas", "usageShare", "vllm", "prefillPods", "pdNonCachedTokens", "pdGateProfile",
		"pdUsageCached", "kvTransferTokensPerSec", "departPods", "departAt", "rejoinAfter", "rejoinSameName"}
	sort.Strings(out)
	return out
}

// ParseExportShape builds a shape from "NAME[,key=value...]" (the command
// line's --exporters).
func ParseExportShape(spec string) (ExportShape, error) {
	parts := strings.Split(spec, ",")
	x, err := ExportShapeNamed(strings.TrimSpace(parts[0]))
	if err != nil {
		return x, err
	}
	var producers []string
	for _, kv := range parts[1:] {
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok {
			// a bare word continues a producers list
			if producers != nil {
				producers = append(producers, strings.TrimSpace(kv))
				x.Producers = producers
				continue
			}
			return x, fmt.Errorf("exporters %q: %q is not key=value", spec, kv)
		}
		if k == "producers" {
			producers = []string{strings.TrimSpace(v)}
			x.Producers = producers
			continue
		}
		producers = nil
		if err := x.SetExportField(k, strings.TrimSpace(v)); err != nil {
			return x, fmt.Errorf("exporters %q: %w", spec, err)
		}
	}
	return x, x.Validate()
}

// Engines are indexed pod-major: engine e serves EPP endpoint e/DPEngines
// (with internal DP) and endpoint ep is rank ep%DPRanks of pod ep/DPRanks.

// Engines is the number of vLLM engines (pods × ranks × internal engines).
func (x *ExportShape) Engines(sc *Scenario) int { return x.Endpoints(sc) * x.DPEngines }

// Endpoints is the number of EPP endpoints (pods × ranks).
func (x *ExportShape) Endpoints(sc *Scenario) int { return x.PodCount(sc) * x.DPRanks }

// Pods are indexed: the scenario's pods (the decode pods with P/D), then
// the pods that join after a departure under new names, then the prefill
// pods.

// DecodePods is the number of pods that are not prefill pods.
func (x *ExportShape) DecodePods(sc *Scenario) int {
	n := sc.Pods.Count
	if x.DepartPods > 0 && x.RejoinAfter > 0 && !x.RejoinSameName {
		n += x.DepartPods
	}
	return n
}

// PodCount is the number of pods, prefill pods included.
func (x *ExportShape) PodCount(sc *Scenario) int { return x.DecodePods(sc) + x.PrefillPods }

// IsPrefill reports whether pod index i is a prefill pod.
func (x *ExportShape) IsPrefill(sc *Scenario, i int) bool { return i >= x.DecodePods(sc) }

// PodName is pod index i's name: the scenario's name, or a prefill pod's
// (<prefix>-prefill-<j>, the scenario's "-decode" prefix renamed).
func (x *ExportShape) PodName(sc *Scenario, i int) string {
	if !x.IsPrefill(sc, i) {
		return sc.PodName(i)
	}
	return prefillPrefix(sc) + "-" + strconv.Itoa(i-x.DecodePods(sc))
}

// prefillPrefix is the prefill pods' name prefix.
func prefillPrefix(sc *Scenario) string {
	if base, ok := strings.CutSuffix(sc.Pods.NamePrefix, "-decode"); ok {
		return base + "-prefill"
	}
	return sc.Pods.NamePrefix + "-prefill"
}

// Role is pod index i's llm-d.ai/role ("" without P/D).
func (x *ExportShape) Role(sc *Scenario, i int) string {
	switch {
	case !x.PD():
		return ""
	case x.IsPrefill(sc, i):
		return PDProfilePrefill
	}
	return PDProfileDecode
}

// EndpointOf is engine e's EPP endpoint.
func (x *ExportShape) EndpointOf(e int) int { return e / x.DPEngines }

// PodOf is endpoint ep's pod index.
func (x *ExportShape) PodOf(ep int) int { return ep / x.DPRanks }

// RankOf is endpoint ep's data-parallel rank.
func (x *ExportShape) RankOf(ep int) int { return ep % x.DPRanks }

// EndpointName is endpoint ep's name in the in-flight gauges.
func (x *ExportShape) EndpointName(sc *Scenario, ep int) string {
	pod := x.PodName(sc, x.PodOf(ep))
	if x.RankEndpoints || x.DPRanks > 1 {
		return pod + "-rank-" + strconv.Itoa(x.RankOf(ep))
	}
	return pod
}

// RecordName is endpoint ep's name in gate records: the bare pod with one
// rank (as before export shapes), else <pod>-rank-<i>.
func (x *ExportShape) RecordName(sc *Scenario, ep int) string {
	if x.DPRanks == 1 {
		return x.PodName(sc, ep)
	}
	return x.EndpointName(sc, ep)
}

// Port is endpoint ep's vLLM port.
func (x *ExportShape) Port(ep int) int { return 8000 + x.RankOf(ep) }

// Scraped reports whether engine e's vLLM series reach Prometheus.
func (x *ExportShape) Scraped(e int) bool {
	return x.ScrapeAllRanks || x.RankOf(x.EndpointOf(e)) == 0
}

// EPPPodName is EPP replica k's pod name among replicas.
func (sc *Scenario) EPPPodName(k, replicas int) string {
	if replicas == 1 {
		return sc.EPP.Pod
	}
	if base, ok := strings.CutSuffix(sc.EPP.Pod, "-0"); ok {
		return base + "-" + strconv.Itoa(k)
	}
	return sc.EPP.Pod + "-" + strconv.Itoa(k)
}
