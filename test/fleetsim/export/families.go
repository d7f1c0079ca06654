// Package export is what the simulated vLLM engines and EPP export: their
// metric families with the labels Prometheus stores under an export shape,
// rendered as a live /metrics or as OpenMetrics with timestamps for a
// backfill, and the gate records of the EPP's decisions.
package export

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim/engine"
	"github.com/gatetuner/gatetuner/test/fleetsim/epp"
	"github.com/gatetuner/gatetuner/test/fleetsim/hist"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
)

// MetricsOptions shape the exposition.
type MetricsOptions struct {
	// LegacyVLLM emulates vLLM builds from before 2026: no
	// vllm:prompt_tokens_by_source_total and no vllm:prompt_tokens_cached_total.
	LegacyVLLM bool
	// Omit drops these metric families (names as exposed, e.g.
	// "vllm:request_prefill_kv_computed_tokens"), to emulate other builds.
	Omit []string
	// Interleaved writes every family at every scrape (O(1) memory). promtool
	// accepts it, but OpenMetrics requires a family's samples to be
	// contiguous, which the default grouped layout guarantees.
	Interleaved bool
}

type famType uint8

const (
	typCounter famType = iota
	typGauge
	typHistogram
)

func (t famType) String() string {
	return [...]string{"counter", "gauge", "histogram"}[t]
}

// metricDef is one labelled metric: a counter, a gauge, or a histogram.
type metricDef struct {
	labels string // rendered pairs, without braces
	geti   func() int64
	getf   func() float64
	h      *hist.Hist
	les    []string // rendered le label values (histograms, +Inf included)
	// present, when set, says whether the series exists yet (EPP series
	// appear at their first observation and are never deleted).
	present func() bool
}

type familyDef struct {
	name    string // the OpenMetrics family name (counters without _total)
	typ     famType
	help    string
	pyLE    bool // le values rendered like Python's prometheus_client (vLLM)
	metrics []metricDef
}

// Catalog lists every family the simulator exposes, bound to its state.
type Catalog struct {
	fams []familyDef
}

// fleet is what the families read: the scenario, the shape, the engines and
// the EPP.
type fleet struct {
	sc   *scenario.Scenario
	x    *scenario.ExportShape
	pods []*engine.Pod
	epp  *epp.EPP
}

// labelSet renders label pairs sorted by name.
func labelSet(kv ...string) string {
	type pair struct{ k, v string }
	ps := make([]pair, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			continue // Prometheus stores no label with an empty value
		}
		ps = append(ps, pair{kv[i], kv[i+1]})
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].k < ps[j].k })
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(p.k)
		b.WriteString(`="`)
		b.WriteString(escapeLabel(p.v))
		b.WriteByte('"')
	}
	return b.String()
}

func escapeLabel(s string) string {
	if !strings.ContainsAny(s, "\\\"\n") {
		return s
	}
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

// pyFloat renders a float like Python's repr for the bucket values used here
// (vLLM's prometheus_client writes le="1.0", le="0.001").
func pyFloat(v float64) string {
	s := strconv.FormatFloat(v, 'f', -1, 64)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return s
}

func leValues(bounds []float64, py bool) []string {
	out := make([]string, 0, len(bounds)+1)
	for _, b := range bounds {
		if py {
			out = append(out, pyFloat(b))
		} else {
			out = append(out, strconv.FormatFloat(b, 'g', -1, 64))
		}
	}
	return append(out, "+Inf")
}

// NewCatalog binds the families of sc's engines pods and EPP e under export
// shape x, shaped by opt.
func NewCatalog(sc *scenario.Scenario, x *scenario.ExportShape, pods []*engine.Pod, e *epp.EPP, opt MetricsOptions) *Catalog {
	s := &fleet{sc: sc, x: x, pods: pods, epp: e}
	c := &Catalog{}
	omit := map[string]bool{}
	for _, o := range opt.Omit {
		omit[strings.TrimSuffix(o, "_total")] = true
		omit[o] = true
	}
	vg := x.VLLM
	if opt.LegacyVLLM || vg == scenario.VLLM011 {
		omit["vllm:prompt_tokens_by_source"] = true
		omit["vllm:prompt_tokens_cached"] = true
	}
	if vg == scenario.VLLM011 {
		omit["vllm:request_prefill_kv_computed_tokens"] = true
	}
	add := func(f familyDef) {
		exposed := f.name
		if f.typ == typCounter {
			exposed += "_total"
		}
		if omit[f.name] || omit[exposed] || len(f.metrics) == 0 {
			return
		}
		for i := range f.metrics {
			if f.metrics[i].h != nil {
				f.metrics[i].les = leValues(f.metrics[i].h.Bounds, f.pyLE)
			}
		}
		c.fams = append(c.fams, f)
	}
	addVLLMFamilies(s, x, add)
	for k := range s.epp.Replicas {
		addEPPFamilies(s, x, k, add)
	}
	return c
}

// vllmTargetLabels are engine i's labels as Prometheus stores them: vLLM's
// own (model_name, engine) and the scrape's target labels.
func vllmTargetLabels(s *fleet, x *scenario.ExportShape, i int) string {
	sc := s.sc
	ep := x.EndpointOf(i)
	pod := x.PodOf(ep)
	eng := strconv.Itoa(i % x.DPEngines)
	inst := podIP(pod) + ":" + strconv.Itoa(x.Port(ep))
	switch x.Scrape {
	case scenario.ScrapeOperator:
		// One PodMonitor per role (llm-d's recipe monitor selects only
		// role "both"; a P/D deployment needs its own).
		job := sc.Namespace + "/" + sc.Target + "-decode"
		if x.IsPrefill(sc, pod) {
			job = sc.Namespace + "/" + sc.Target + "-prefill"
		}
		return labelSet("engine", eng, "model_name", sc.Model, "container", "vllm", "endpoint", strconv.Itoa(x.Port(ep)),
			"instance", inst, "job", job, "namespace", sc.Namespace, "pod", x.PodName(sc, pod))
	case scenario.ScrapeKubernetesSD:
		return labelSet("engine", eng, "model_name", sc.Model, "instance", inst, "job", "vllm")
	}
	if x.DPRanks > 1 {
		return labelSet("engine", "0", "model_name", sc.Model, "namespace", sc.Namespace, "pod", x.PodName(sc, pod), "instance", inst)
	}
	return labelSet("engine", "0", "model_name", sc.Model, "namespace", sc.Namespace, "pod", x.PodName(sc, pod))
}

func ival(p *int64) func() int64 { return func() int64 { return *p } }

// vllmFamilies adds the engines' families: one series per scraped engine,
// labelled as the scrape stores it.
type vllmFamilies struct {
	s       *fleet
	x       *scenario.ExportShape
	add     func(familyDef)
	labels  []string // per engine
	scraped []int
}

func addVLLMFamilies(s *fleet, x *scenario.ExportShape, add func(familyDef)) {
	v := &vllmFamilies{s: s, x: x, add: add, labels: make([]string, len(s.pods))}
	for i := range s.pods {
		v.labels[i] = vllmTargetLabels(s, x, i)
		if x.Scraped(i) {
			v.scraped = append(v.scraped, i)
		}
	}
	v.gauges()
	v.counters()
	v.histograms()
}

// up is whether an engine's series exist: with departures, while its
// engine is up (nil: always).
func (v *vllmFamilies) up(p *engine.Pod) func() bool {
	if v.x.DepartPods == 0 {
		return nil
	}
	return func() bool { return p.Up() }
}

// perPod adds a family with mk's metric for every scraped engine.
func (v *vllmFamilies) perPod(name string, typ famType, help string, mk func(p *engine.Pod) metricDef) {
	f := familyDef{name: name, typ: typ, help: help, pyLE: true}
	for _, i := range v.scraped {
		p := v.s.pods[i]
		m := mk(p)
		m.present = v.up(p)
		if m.labels == "" {
			m.labels = v.labels[i]
		} else {
			m.labels = v.labels[i] + "," + m.labels
		}
		f.metrics = append(f.metrics, m)
	}
	v.add(f)
}

// gauges adds the scheduler's and the KV cache's gauges.
func (v *vllmFamilies) gauges() {
	eng := &v.s.sc.Pods.Engine

	v.perPod("vllm:num_requests_running", typGauge, "Number of requests in model execution batches.",
		func(p *engine.Pod) metricDef { return metricDef{geti: func() int64 { return int64(p.Running()) }} })
	// Waiting counts the decode legs deferred while their KV loads (P/D).
	v.perPod("vllm:num_requests_waiting", typGauge, "Number of requests waiting to be processed.",
		func(p *engine.Pod) metricDef {
			return metricDef{geti: func() int64 { return int64(p.Waiting()) + int64(p.Deferred()) }}
		})
	if v.x.VLLM == scenario.VLLMMid2026 || v.x.VLLM == scenario.VLLMLate2026 {
		f := familyDef{name: "vllm:num_requests_waiting_by_reason", typ: typGauge, help: "Number of requests waiting to be processed, by reason."}
		for _, i := range v.scraped {
			p := v.s.pods[i]
			f.metrics = append(f.metrics,
				metricDef{labels: v.labels[i] + `,reason="capacity"`, geti: func() int64 { return int64(p.Waiting()) }, present: v.up(p)},
				metricDef{labels: v.labels[i] + `,reason="deferred"`, geti: func() int64 { return int64(p.Deferred()) }, present: v.up(p)})
		}
		v.add(f)
	}
	kvUsage := func(p *engine.Pod) metricDef {
		return metricDef{getf: func() float64 { return float64(p.UsedBlocks()) / float64(p.TotalBlocks()) }}
	}
	if v.x.VLLM == scenario.VLLM011 {
		v.perPod("vllm:gpu_cache_usage_perc", typGauge, "GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.", kvUsage)
	}
	v.perPod("vllm:kv_cache_usage_perc", typGauge, "KV-cache usage. 1 means 100 percent usage.", kvUsage)
	cacheInfo := labelSet("block_size", strconv.Itoa(eng.BlockSize), "cache_dtype", "auto",
		"enable_prefix_caching", "True", "num_gpu_blocks", strconv.Itoa(eng.NumGPUBlocks), "num_cpu_blocks", "None")
	v.perPod("vllm:cache_config_info", typGauge, "Information of the LLMEngine CacheConfig",
		func(_ *engine.Pod) metricDef { return metricDef{labels: cacheInfo, geti: func() int64 { return 1 }} })
}

// counters adds the token, prefix-cache, preemption and request counters.
func (v *vllmFamilies) counters() {
	v.perPod("vllm:prompt_tokens", typCounter, "Number of prefill tokens processed.",
		func(p *engine.Pod) metricDef { return metricDef{geti: ival(&p.Metrics.PromptTokens)} })
	{
		f := familyDef{name: "vllm:prompt_tokens_by_source", typ: typCounter, help: "Number of prompt tokens by source."}
		for _, i := range v.scraped {
			p := v.s.pods[i]
			f.metrics = append(f.metrics,
				metricDef{labels: v.labels[i] + ",source=\"external_kv_transfer\"", geti: ival(&p.Metrics.ExtTransfer), present: v.up(p)},
				metricDef{labels: v.labels[i] + ",source=\"local_cache_hit\"", geti: ival(&p.Metrics.LocalCacheHit), present: v.up(p)},
				metricDef{labels: v.labels[i] + ",source=\"local_compute\"", geti: ival(&p.Metrics.LocalCompute), present: v.up(p)})
		}
		v.add(f)
	}
	v.perPod("vllm:prompt_tokens_cached", typCounter, "Number of cached prompt tokens (local and external).",
		func(p *engine.Pod) metricDef { return metricDef{geti: ival(&p.Metrics.CachedTokens)} })
	if v.x.VLLM == scenario.VLLM011 {
		v.perPod("vllm:gpu_prefix_cache_queries", typCounter, "GPU prefix cache queries, in terms of number of queriedtokens. DEPRECATED: Use vllm:prefix_cache_queries instead.",
			func(p *engine.Pod) metricDef { return metricDef{geti: ival(&p.Metrics.PCQueries)} })
		v.perPod("vllm:gpu_prefix_cache_hits", typCounter, "GPU prefix cache hits, in terms of number of cached tokens. DEPRECATED: Use vllm:prefix_cache_hits instead.",
			func(p *engine.Pod) metricDef { return metricDef{geti: ival(&p.Metrics.PCHits)} })
	}
	v.perPod("vllm:prefix_cache_queries", typCounter, "Prefix cache queries, in terms of number of queried tokens.",
		func(p *engine.Pod) metricDef { return metricDef{geti: ival(&p.Metrics.PCQueries)} })
	v.perPod("vllm:prefix_cache_hits", typCounter, "Prefix cache hits, in terms of number of cached tokens.",
		func(p *engine.Pod) metricDef { return metricDef{geti: ival(&p.Metrics.PCHits)} })
	v.perPod("vllm:generation_tokens", typCounter, "Number of generation tokens processed.",
		func(p *engine.Pod) metricDef { return metricDef{geti: ival(&p.Metrics.GenTokens)} })
	v.perPod("vllm:num_preemptions", typCounter, "Cumulative number of preemption from the engine.",
		func(p *engine.Pod) metricDef { return metricDef{geti: ival(&p.Metrics.Preemptions)} })
	// A prefill pod's requests stop at max_tokens 1 (the sidecar caps them).
	v.perPod("vllm:request_success", typCounter, "Count of successfully processed requests.",
		func(p *engine.Pod) metricDef {
			reason := `finished_reason="stop"`
			if v.x.IsPrefill(v.s.sc, v.x.PodOf(v.x.EndpointOf(int(p.Index())))) {
				reason = `finished_reason="length"`
			}
			return metricDef{labels: reason, geti: ival(&p.Metrics.Success)}
		})
}

// histograms adds the request and iteration histograms.
func (v *vllmFamilies) histograms() {
	hists := []struct {
		name, help string
		h          func(p *engine.Pod) *hist.Hist
	}{
		{"vllm:request_prompt_tokens", "Number of prefill tokens processed.", func(p *engine.Pod) *hist.Hist { return &p.Metrics.PromptTokensH }},
		{"vllm:request_prefill_kv_computed_tokens", "Number of prompt tokens whose KV was computed (prompt minus cached).", func(p *engine.Pod) *hist.Hist { return &p.Metrics.KVComputedH }},
		{"vllm:request_generation_tokens", "Number of generation tokens processed.", func(p *engine.Pod) *hist.Hist { return &p.Metrics.GenTokensH }},
		{"vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", func(p *engine.Pod) *hist.Hist { return &p.Metrics.TTFT }},
		{"vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", func(p *engine.Pod) *hist.Hist { return &p.Metrics.ITL }},
		{"vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", func(p *engine.Pod) *hist.Hist { return &p.Metrics.QueueH }},
		{"vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", func(p *engine.Pod) *hist.Hist { return &p.Metrics.PrefillH }},
		{"vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", func(p *engine.Pod) *hist.Hist { return &p.Metrics.DecodeH }},
		{"vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", func(p *engine.Pod) *hist.Hist { return &p.Metrics.InferenceH }},
		{"vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", func(p *engine.Pod) *hist.Hist { return &p.Metrics.E2EH }},
		{"vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", func(p *engine.Pod) *hist.Hist { return &p.Metrics.Iter }},
	}
	if v.x.VLLM == scenario.VLLM011 {
		// time_per_output_token_seconds is observed exactly like inter_token_latency_seconds (the same samples).
		hists = append(hists[:5], append([]struct {
			name, help string
			h          func(p *engine.Pod) *hist.Hist
		}{{"vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", func(p *engine.Pod) *hist.Hist { return &p.Metrics.ITL }}}, hists[5:]...)...)
	}
	for _, h := range hists {
		v.perPod(h.name, typHistogram, h.help, func(p *engine.Pod) metricDef { return metricDef{h: h.h(p)} })
	}
}

// eppLabeler renders EPP replica k's series labels: its own labels and the
// scrape's target labels. Under a ServiceMonitor (honorLabels false) the
// EPP's own namespace label becomes exported_namespace.
type eppLabeler struct {
	target   []string
	renameNS bool
}

func newEPPLabeler(s *fleet, x *scenario.ExportShape, k int) eppLabeler {
	sc := s.sc
	pod := sc.EPPPodName(k, x.EPPReplicas)
	inst := eppIP(k) + ":9090"
	switch x.Scrape {
	case scenario.ScrapeOperator:
		svc := sc.Target + "-epp"
		return eppLabeler{renameNS: true, target: []string{"container", "epp", "endpoint", "http-metrics", "instance", inst,
			"job", svc, "namespace", sc.Namespace, "pod", pod, "service", svc}}
	case scenario.ScrapeKubernetesSD:
		return eppLabeler{target: []string{"instance", inst, "job", "inference-extension-epp"}}
	}
	return eppLabeler{target: []string{"namespace", sc.Namespace, "pod", pod}}
}

// labels renders the EPP's own label pairs with the target labels: under
// honorLabels false a clashing own namespace becomes exported_namespace;
// legacy-sim has one namespace label for both.
func (l eppLabeler) labels(own ...string) string {
	kv := append([]string(nil), l.target...)
	for i := 0; i+1 < len(own); i += 2 {
		k := own[i]
		if k == "namespace" {
			switch {
			case l.renameNS:
				k = "exported_namespace"
			case containsKey(l.target, "namespace"):
				continue
			}
		}
		kv = append(kv, k, own[i+1])
	}
	return labelSet(kv...)
}

func containsKey(kv []string, key string) bool {
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == key {
			return true
		}
	}
	return false
}

func histPresent(h *hist.Hist) func() bool { return func() bool { return h.Count > 0 } }

func counterPresent(v *int64) func() bool { return func() bool { return *v > 0 } }

// eppFamilies adds EPP replica rp's families, labelled by lb.
type eppFamilies struct {
	sc  *scenario.Scenario
	x   *scenario.ExportShape
	rp  *epp.Replica
	lb  eppLabeler
	add func(familyDef)
}

func addEPPFamilies(s *fleet, x *scenario.ExportShape, k int, add func(familyDef)) {
	e := &eppFamilies{sc: s.sc, x: x, rp: &s.epp.Replicas[k], lb: newEPPLabeler(s, x, k), add: add}
	gen := x.EPP
	if gen == scenario.EPP010 || gen == scenario.EPPSim {
		e.inFlight()
		e.requests()
		e.attempts()
		if gen == scenario.EPP010 {
			addPrefixIndexerFamilies(e.lb, e.rp, add)
		}
	}
	if x.PD() {
		addDisaggFamilies(s.sc, e.lb, e.rp, add)
	}
	if gen == scenario.EPP010 || gen == scenario.EPP08 {
		e.gieNames()
	}
	if gen != scenario.EPP08 {
		e.decisions()
	}
}

// lazy: client_golang vectors, a series exists once first set.
func (e *eppFamilies) lazy() bool { return e.x.EPP != scenario.EPPSim }

// inFlight adds the in-flight load gauges, per producer and endpoint.
func (e *eppFamilies) inFlight() {
	for _, g := range []struct {
		name, help string
		vals       []int64
	}{
		{"llm_d_epp_inflight_tokens", "Uncached prompt tokens of requests in flight per endpoint, until their first token.", e.rp.Tokens},
		{"llm_d_epp_inflight_requests", "Requests in flight per endpoint.", e.rp.Reqs},
	} {
		f := familyDef{name: g.name, typ: typGauge, help: g.help}
		for _, prod := range e.x.Producers {
			for i := range g.vals {
				m := metricDef{
					labels: e.lb.labels("endpoint_name", e.x.EndpointName(e.sc, i), "namespace", e.sc.Namespace, "producer_name", prod,
						"fairness_id", "default", "priority", "0"),
					geti: ival(&g.vals[i]),
				}
				if e.x.LazyInFlight {
					seen := &e.rp.Seen[i]
					m.present = func() bool { return *seen }
				}
				f.metrics = append(f.metrics, m)
			}
		}
		e.add(f)
	}
}

// requests adds the request histograms.
func (e *eppFamilies) requests() {
	reqLabels := e.lb.labels("model_name", e.sc.Model, "target_model_name", e.sc.Model, "fairness_id", "default", "priority", "0")
	hm := func(h *hist.Hist, labels string) metricDef {
		m := metricDef{labels: labels, h: h}
		if e.lazy() {
			m.present = histPresent(h)
		}
		return m
	}
	e.add(familyDef{name: "llm_d_epp_request_cached_tokens", typ: typHistogram, help: "Cached prompt tokens per request.",
		metrics: []metricDef{hm(&e.rp.Metrics.CachedH, reqLabels)}})
	e.add(familyDef{name: "llm_d_epp_request_input_tokens", typ: typHistogram, help: "Prompt tokens per request.",
		metrics: []metricDef{hm(&e.rp.Metrics.InputH, reqLabels)}})
	e.add(familyDef{name: "llm_d_epp_request_ttft_seconds", typ: typHistogram, help: "Time to first token in seconds, measured from request received to first response byte.",
		metrics: []metricDef{hm(&e.rp.Metrics.TTFTH, e.lb.labels("model_name", e.sc.Model, "target_model_name", e.sc.Model, "fairness_id", "default", "priority", "0", "streaming", "true"))}})
}

// attempts adds the scheduling attempts by status and endpoint.
func (e *eppFamilies) attempts() {
	f := familyDef{name: "llm_d_epp_scheduler_attempts", typ: typCounter, help: "Scheduling attempts by status and endpoint."}
	for i := range e.rp.Metrics.Attempts {
		m := metricDef{
			labels: e.lb.labels("status", "success", "target_model_name", e.sc.Model, "endpoint_name", e.x.PodName(e.sc, e.x.PodOf(i)),
				"namespace", e.sc.Namespace, "port", strconv.Itoa(e.x.Port(i))),
			geti: ival(&e.rp.Metrics.Attempts[i]),
		}
		if e.lazy() {
			m.present = counterPresent(&e.rp.Metrics.Attempts[i])
		}
		f.metrics = append(f.metrics, m)
	}
	if e.x.EPP == scenario.EPP010 {
		// A failed attempt carries empty endpoint labels (metrics.go,
		// RecordSchedulerAttempt), which Prometheus does not store.
		f.metrics = append(f.metrics, metricDef{labels: e.lb.labels("status", "failure", "target_model_name", e.sc.Model, "endpoint_name", "",
			"namespace", "", "port", ""), geti: ival(&e.rp.Metrics.SchedFail), present: counterPresent(&e.rp.Metrics.SchedFail)})
	}
	e.add(f)
}

// gieNames adds the GIE v1.5 names: release-0.8's only ones, still emitted
// alongside the llm_d_epp_* names by main.
func (e *eppFamilies) gieNames() {
	f := familyDef{name: "inference_extension_scheduler_attempts", typ: typCounter, help: "Total number of scheduling attempts."}
	for i := range e.rp.Metrics.Attempts {
		f.metrics = append(f.metrics, metricDef{
			labels: e.lb.labels("status", "success", "target_model_name", e.sc.Model, "pod_name", e.x.PodName(e.sc, e.x.PodOf(i)),
				"namespace", e.sc.Namespace, "port", strconv.Itoa(e.x.Port(i))),
			geti: ival(&e.rp.Metrics.Attempts[i]), present: counterPresent(&e.rp.Metrics.Attempts[i]),
		})
	}
	f.metrics = append(f.metrics, metricDef{labels: e.lb.labels("status", "failure", "target_model_name", e.sc.Model, "pod_name", "",
		"namespace", "", "port", ""), geti: ival(&e.rp.Metrics.SchedFail), present: counterPresent(&e.rp.Metrics.SchedFail)})
	e.add(f)
	ml := e.lb.labels("model_name", e.sc.Model, "target_model_name", e.sc.Model)
	e.add(familyDef{name: "inference_objective_input_tokens", typ: typHistogram, help: "Inference objective input token count distribution for requests in each model.",
		metrics: []metricDef{{labels: ml, h: &e.rp.Metrics.InputH, present: histPresent(&e.rp.Metrics.InputH)}}})
	e.add(familyDef{name: "inference_objective_prompt_cached_tokens", typ: typHistogram, help: "Inference objective prompt cached token count distribution for requests in each model.",
		metrics: []metricDef{{labels: ml, h: &e.rp.Metrics.CachedH, present: histPresent(&e.rp.Metrics.CachedH)}}})
}

// decisions adds the filter's decisions by outcome.
func (e *eppFamilies) decisions() {
	f := familyDef{name: "llm_d_epp_prefix_cache_affinity_filter_decisions", typ: typCounter, help: "Prefix cache affinity filter decisions by outcome."}
	outs := []gate.Outcome{gate.OutcomeExploration, gate.OutcomeLoadOverride, gate.OutcomeNoMatch, gate.OutcomeNotApplicable, gate.OutcomeSticky}
	if e.sc.EPP.Settings.Semantics == gate.SemanticsV2 {
		outs = append(outs, gate.OutcomeMissingSignal)
	}
	sort.Slice(outs, func(i, j int) bool { return outs[i].String() < outs[j].String() })
	for _, o := range outs {
		m := metricDef{labels: e.lb.labels("plugin_name", e.sc.EPP.Plugin, "outcome", o.String()), geti: ival(&e.rp.Metrics.Decisions[o])}
		if e.lazy() {
			m.present = counterPresent(&e.rp.Metrics.Decisions[o])
		}
		f.metrics = append(f.metrics, m)
	}
	e.add(f)
}

// addPrefixIndexerFamilies emits the approximate prefix producer's lookup
// histograms, llm_d_epp_prefix_indexer_hit_ratio / _hit_bytes{plugin_name,
// plugin_type} and their deprecated unlabelled inference_extension_ twins
// (llm-d-router approximateprefix/metrics.go; the producer's default name
// is its type, approx-prefix-cache-producer).
func addPrefixIndexerFamilies(lb eppLabeler, rp *epp.Replica, add func(familyDef)) {
	own := lb.labels("plugin_name", "approx-prefix-cache-producer", "plugin_type", "approx-prefix-cache-producer")
	bare := lb.labels()
	for _, h := range []struct {
		name, help string
		h          *hist.Hist
	}{
		{"prefix_indexer_hit_ratio", "Ratio of prefix length matched to total prefix length in the cache lookup.", &rp.Metrics.HitRatio},
		{"prefix_indexer_hit_bytes", "Length of the prefix match in number of bytes in the cache lookup.", &rp.Metrics.HitBytes},
	} {
		add(familyDef{name: "llm_d_epp_" + h.name, typ: typHistogram, help: h.help,
			metrics: []metricDef{{labels: own, h: h.h, present: histPresent(h.h)}}})
		add(familyDef{name: "inference_extension_" + h.name, typ: typHistogram, help: "[Deprecated: Use llm_d_epp_" + h.name + "] " + h.help,
			metrics: []metricDef{{labels: bare, h: h.h, present: histPresent(h.h)}}})
	}
}

// addDisaggFamilies emits the disagg-profile-handler's decision counters
// (llm-d-router pkg/epp/framework/plugins/scheduling/profilehandler/disagg/
// metrics.go, RecordDisaggDecision: the llm_d_epp_ name and the deprecated
// llm_d_inference_scheduler_ one, both per decision type).
func addDisaggFamilies(sc *scenario.Scenario, lb eppLabeler, rp *epp.Replica, add func(familyDef)) {
	types := [2]string{"decode-only", "prefill-decode"}
	f := familyDef{name: "llm_d_epp_disagg_decision", typ: typCounter, help: "Total number of disaggregation routing decisions made"}
	g := familyDef{name: "llm_d_inference_scheduler_disagg_decision", typ: typCounter,
		help: "[Deprecated: Use llm_d_epp_disagg_decision_total] Total number of disaggregation routing decisions made"}
	for i, dt := range types {
		f.metrics = append(f.metrics, metricDef{labels: lb.labels("plugin_name", "disagg-profile-handler", "plugin_type", "disagg-profile-handler",
			"model_name", sc.Model, "decision_type", dt), geti: ival(&rp.Metrics.Disagg[i]), present: counterPresent(&rp.Metrics.Disagg[i])})
		g.metrics = append(g.metrics, metricDef{labels: lb.labels("model_name", sc.Model, "decision_type", dt),
			geti: ival(&rp.Metrics.Disagg[i]), present: counterPresent(&rp.Metrics.Disagg[i])})
	}
	add(f)
	add(g)
}

// podIP is a stable fake address for pod i (instance labels).
func podIP(i int) string { return fmt.Sprintf("10.1.%d.%d", i/250, i%250+2) }

// eppIP is EPP replica k's address.
func eppIP(k int) string { return fmt.Sprintf("10.2.0.%d", k+2) }
