package fleetsim

import (
	"bufio"
	"encoding/binary"
	"io"
	"math"
	"math/bits"
	"sort"
	"strconv"
	"strings"

	"github.com/gatetuner/gatetuner/gate"
)

// Bucket boundaries, exactly as vLLM and the llm-d EPP declare them.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10,
		20, 40, 80, 160, 640, 2560}
	itlBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}
	// requestLatencyBuckets serve queue, prefill, decode, inference and e2e time.
	requestLatencyBuckets = []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480,
		960, 1920, 7680}
	iterationBuckets = []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}
	eppTokenBuckets  = []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32778, 65536,
		131072, 262144, 524288, 1048576}
	eppTTFTBuckets = []float64{0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10,
		15, 20, 30, 45, 60, 120}
	// The approximate prefix producer's lookup histograms.
	hitRatioBuckets = []float64{0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0}
	hitBytesBuckets = []float64{0, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536}
)

// tokenBuckets is vLLM's 1-2-5 series up to maxModelLen.
func tokenBuckets(maxModelLen int) []float64 {
	var out []float64
	for m := 1; ; m *= 10 {
		for _, f := range []int{1, 2, 5} {
			v := f * m
			if v > maxModelLen {
				return out
			}
			out = append(out, float64(v))
		}
	}
}

// hist is a classic histogram: counts per bucket (the last one +Inf), sum, count.
type hist struct {
	bounds []float64
	counts []int64
	sum    float64
	count  int64
}

func newHist(bounds []float64) hist {
	return hist{bounds: bounds, counts: make([]int64, len(bounds)+1)}
}

func (h *hist) observe(v float64) { h.observeN(v, 1) }

func (h *hist) observeN(v float64, n int64) {
	i := sort.SearchFloat64s(h.bounds, v)
	h.counts[i] += n
	h.sum += v * float64(n)
	h.count += n
}

// podMetrics are one engine's counters and histograms.
type podMetrics struct {
	promptTokens, localCompute, localCacheHit, cachedTokens int64
	pcQueries, pcHits, genTokens, preemptions, success      int64
	extTransfer                                             int64

	promptTokensH, kvComputedH, genTokensH      hist
	ttft, itl                                   hist
	queueH, prefillH, decodeH, inferenceH, e2eH hist
	iter                                        hist
}

func (m *podMetrics) init(maxModelLen int) {
	tb := tokenBuckets(maxModelLen)
	m.promptTokensH, m.kvComputedH, m.genTokensH = newHist(tb), newHist(tb), newHist(tb)
	m.ttft, m.itl = newHist(ttftBuckets), newHist(itlBuckets)
	m.queueH, m.prefillH, m.decodeH = newHist(requestLatencyBuckets), newHist(requestLatencyBuckets), newHist(requestLatencyBuckets)
	m.inferenceH, m.e2eH = newHist(requestLatencyBuckets), newHist(requestLatencyBuckets)
	m.iter = newHist(iterationBuckets)
}

// eppMetrics are the EPP's counters and histograms.
type eppMetrics struct {
	decisions              [gate.NumOutcomes]int64
	attempts               []int64
	inputH, cachedH, ttftH hist
	// disagg counts P/D decisions: [0] decode-only, [1] prefill-decode.
	disagg [2]int64
	// schedFail counts scheduling attempts that found no endpoint.
	schedFail int64
	// hitRatio and hitBytes are the approximate prefix producer's lookups
	// for the primary pick (match over total, matched bytes at 4 per token).
	hitRatio, hitBytes hist
}

func (m *eppMetrics) init(pods int) {
	m.attempts = make([]int64, pods)
	m.inputH, m.cachedH, m.ttftH = newHist(eppTokenBuckets), newHist(eppTokenBuckets), newHist(eppTTFTBuckets)
	m.hitRatio, m.hitBytes = newHist(hitRatioBuckets), newHist(hitBytesBuckets)
}

// observeHit records a prefix-index lookup for the chosen endpoint
// (llm-d-router approximateprefix/plugin.go, PreRequest: recordPrefixCacheMatch).
func (m *eppMetrics) observeHit(matched, total, bs int32) {
	m.hitBytes.observe(float64(matched) * float64(bs) * 4)
	if total > 0 {
		m.hitRatio.observe(float64(matched) / float64(total))
	}
}

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
	h      *hist
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

// catalog lists every family the simulator exposes, bound to its state.
type catalog struct {
	fams []familyDef
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

func newCatalog(s *sim, opt MetricsOptions, x *ExportShape) *catalog {
	c := &catalog{}
	omit := map[string]bool{}
	for _, o := range opt.Omit {
		omit[strings.TrimSuffix(o, "_total")] = true
		omit[o] = true
	}
	vg := x.VLLM
	if opt.LegacyVLLM || vg == VLLM011 {
		omit["vllm:prompt_tokens_by_source"] = true
		omit["vllm:prompt_tokens_cached"] = true
	}
	if vg == VLLM011 {
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
				f.metrics[i].les = leValues(f.metrics[i].h.bounds, f.pyLE)
			}
		}
		c.fams = append(c.fams, f)
	}
	addVLLMFamilies(s, x, add)
	for k := range s.epp.reps {
		addEPPFamilies(s, x, k, add)
	}
	return c
}

// vllmTargetLabels are engine i's labels as Prometheus stores them: vLLM's
// own (model_name, engine) and the scrape's target labels.
func vllmTargetLabels(s *sim, x *ExportShape, i int) string {
	sc := s.sc
	ep := x.endpointOf(i)
	pod := x.podOf(ep)
	eng := strconv.Itoa(i % x.DPEngines)
	inst := podIP(pod) + ":" + strconv.Itoa(x.port(ep))
	switch x.Scrape {
	case ScrapeOperator:
		// One PodMonitor per role (llm-d's recipe monitor selects only
		// role "both"; a P/D deployment needs its own).
		job := sc.Namespace + "/" + sc.Target + "-decode"
		if x.isPrefill(sc, pod) {
			job = sc.Namespace + "/" + sc.Target + "-prefill"
		}
		return labelSet("engine", eng, "model_name", sc.Model, "container", "vllm", "endpoint", strconv.Itoa(x.port(ep)),
			"instance", inst, "job", job, "namespace", sc.Namespace, "pod", x.podName(sc, pod))
	case ScrapeKubernetesSD:
		return labelSet("engine", eng, "model_name", sc.Model, "instance", inst, "job", "vllm")
	}
	if x.DPRanks > 1 {
		return labelSet("engine", "0", "model_name", sc.Model, "namespace", sc.Namespace, "pod", x.podName(sc, pod), "instance", inst)
	}
	return labelSet("engine", "0", "model_name", sc.Model, "namespace", sc.Namespace, "pod", x.podName(sc, pod))
}

func ival(p *int64) func() int64 { return func() int64 { return *p } }

func addVLLMFamilies(s *sim, x *ExportShape, add func(familyDef)) {
	sc := s.sc
	vg := x.VLLM
	podLabels := make([]string, len(s.pods))
	var scraped []int
	for i := range s.pods {
		podLabels[i] = vllmTargetLabels(s, x, i)
		if x.scraped(i) {
			scraped = append(scraped, i)
		}
	}
	// With departures a pod's series exist while its engine is up.
	up := func(p *pod) func() bool {
		if x.DepartPods == 0 {
			return nil
		}
		return func() bool { return p.up }
	}
	perPod := func(name string, typ famType, help string, mk func(p *pod) metricDef) {
		f := familyDef{name: name, typ: typ, help: help, pyLE: true}
		for _, i := range scraped {
			p := s.pods[i]
			m := mk(p)
			m.present = up(p)
			if m.labels == "" {
				m.labels = podLabels[i]
			} else {
				m.labels = podLabels[i] + "," + m.labels
			}
			f.metrics = append(f.metrics, m)
		}
		add(f)
	}
	eng := &sc.Pods.Engine

	perPod("vllm:num_requests_running", typGauge, "Number of requests in model execution batches.",
		func(p *pod) metricDef { return metricDef{geti: func() int64 { return int64(p.nRunning) }} })
	// Waiting counts the decode legs deferred while their KV loads (P/D).
	perPod("vllm:num_requests_waiting", typGauge, "Number of requests waiting to be processed.",
		func(p *pod) metricDef {
			return metricDef{geti: func() int64 { return int64(p.waiting.len()) + int64(p.deferred) }}
		})
	if vg == VLLMMid2026 || vg == VLLMLate2026 {
		f := familyDef{name: "vllm:num_requests_waiting_by_reason", typ: typGauge, help: "Number of requests waiting to be processed, by reason."}
		for _, i := range scraped {
			p := s.pods[i]
			f.metrics = append(f.metrics,
				metricDef{labels: podLabels[i] + `,reason="capacity"`, geti: func() int64 { return int64(p.waiting.len()) }, present: up(p)},
				metricDef{labels: podLabels[i] + `,reason="deferred"`, geti: func() int64 { return int64(p.deferred) }, present: up(p)})
		}
		add(f)
	}
	kvUsage := func(p *pod) metricDef {
		return metricDef{getf: func() float64 { return float64(p.usedBlocks()) / float64(p.cfg.totalBlocks) }}
	}
	if vg == VLLM011 {
		perPod("vllm:gpu_cache_usage_perc", typGauge, "GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.", kvUsage)
	}
	perPod("vllm:kv_cache_usage_perc", typGauge, "KV-cache usage. 1 means 100 percent usage.", kvUsage)
	cacheInfo := labelSet("block_size", strconv.Itoa(eng.BlockSize), "cache_dtype", "auto",
		"enable_prefix_caching", "True", "num_gpu_blocks", strconv.Itoa(eng.NumGPUBlocks), "num_cpu_blocks", "None")
	perPod("vllm:cache_config_info", typGauge, "Information of the LLMEngine CacheConfig",
		func(_ *pod) metricDef { return metricDef{labels: cacheInfo, geti: func() int64 { return 1 }} })
	perPod("vllm:prompt_tokens", typCounter, "Number of prefill tokens processed.",
		func(p *pod) metricDef { return metricDef{geti: ival(&p.m.promptTokens)} })
	{
		f := familyDef{name: "vllm:prompt_tokens_by_source", typ: typCounter, help: "Number of prompt tokens by source."}
		for _, i := range scraped {
			p := s.pods[i]
			f.metrics = append(f.metrics,
				metricDef{labels: podLabels[i] + ",source=\"external_kv_transfer\"", geti: ival(&p.m.extTransfer), present: up(p)},
				metricDef{labels: podLabels[i] + ",source=\"local_cache_hit\"", geti: ival(&p.m.localCacheHit), present: up(p)},
				metricDef{labels: podLabels[i] + ",source=\"local_compute\"", geti: ival(&p.m.localCompute), present: up(p)})
		}
		add(f)
	}
	perPod("vllm:prompt_tokens_cached", typCounter, "Number of cached prompt tokens (local and external).",
		func(p *pod) metricDef { return metricDef{geti: ival(&p.m.cachedTokens)} })
	if vg == VLLM011 {
		perPod("vllm:gpu_prefix_cache_queries", typCounter, "GPU prefix cache queries, in terms of number of queriedtokens. DEPRECATED: Use vllm:prefix_cache_queries instead.",
			func(p *pod) metricDef { return metricDef{geti: ival(&p.m.pcQueries)} })
		perPod("vllm:gpu_prefix_cache_hits", typCounter, "GPU prefix cache hits, in terms of number of cached tokens. DEPRECATED: Use vllm:prefix_cache_hits instead.",
			func(p *pod) metricDef { return metricDef{geti: ival(&p.m.pcHits)} })
	}
	perPod("vllm:prefix_cache_queries", typCounter, "Prefix cache queries, in terms of number of queried tokens.",
		func(p *pod) metricDef { return metricDef{geti: ival(&p.m.pcQueries)} })
	perPod("vllm:prefix_cache_hits", typCounter, "Prefix cache hits, in terms of number of cached tokens.",
		func(p *pod) metricDef { return metricDef{geti: ival(&p.m.pcHits)} })
	perPod("vllm:generation_tokens", typCounter, "Number of generation tokens processed.",
		func(p *pod) metricDef { return metricDef{geti: ival(&p.m.genTokens)} })
	perPod("vllm:num_preemptions", typCounter, "Cumulative number of preemption from the engine.",
		func(p *pod) metricDef { return metricDef{geti: ival(&p.m.preemptions)} })
	// A prefill pod's requests stop at max_tokens 1 (the sidecar caps them).
	perPod("vllm:request_success", typCounter, "Count of successfully processed requests.",
		func(p *pod) metricDef {
			reason := `finished_reason="stop"`
			if x.isPrefill(sc, x.podOf(x.endpointOf(int(p.idx)))) {
				reason = `finished_reason="length"`
			}
			return metricDef{labels: reason, geti: ival(&p.m.success)}
		})
	hists := []struct {
		name, help string
		h          func(p *pod) *hist
	}{
		{"vllm:request_prompt_tokens", "Number of prefill tokens processed.", func(p *pod) *hist { return &p.m.promptTokensH }},
		{"vllm:request_prefill_kv_computed_tokens", "Number of prompt tokens whose KV was computed (prompt minus cached).", func(p *pod) *hist { return &p.m.kvComputedH }},
		{"vllm:request_generation_tokens", "Number of generation tokens processed.", func(p *pod) *hist { return &p.m.genTokensH }},
		{"vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", func(p *pod) *hist { return &p.m.ttft }},
		{"vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", func(p *pod) *hist { return &p.m.itl }},
		{"vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", func(p *pod) *hist { return &p.m.queueH }},
		{"vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", func(p *pod) *hist { return &p.m.prefillH }},
		{"vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", func(p *pod) *hist { return &p.m.decodeH }},
		{"vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", func(p *pod) *hist { return &p.m.inferenceH }},
		{"vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", func(p *pod) *hist { return &p.m.e2eH }},
		{"vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", func(p *pod) *hist { return &p.m.iter }},
	}
	if vg == VLLM011 {
		// time_per_output_token_seconds is observed exactly like inter_token_latency_seconds (the same samples).
		hists = append(hists[:5], append([]struct {
			name, help string
			h          func(p *pod) *hist
		}{{"vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", func(p *pod) *hist { return &p.m.itl }}}, hists[5:]...)...)
	}
	for _, h := range hists {
		perPod(h.name, typHistogram, h.help, func(p *pod) metricDef { return metricDef{h: h.h(p)} })
	}
}

// eppLabeler renders EPP replica k's series labels: its own labels and the
// scrape's target labels. Under a ServiceMonitor (honorLabels false) the
// EPP's own namespace label becomes exported_namespace.
type eppLabeler struct {
	target   []string
	renameNS bool
}

func newEPPLabeler(s *sim, x *ExportShape, k int) eppLabeler {
	sc := s.sc
	pod := eppPodName(sc, k, x.EPPReplicas)
	inst := eppIP(k) + ":9090"
	switch x.Scrape {
	case ScrapeOperator:
		svc := sc.Target + "-epp"
		return eppLabeler{renameNS: true, target: []string{"container", "epp", "endpoint", "http-metrics", "instance", inst,
			"job", svc, "namespace", sc.Namespace, "pod", pod, "service", svc}}
	case ScrapeKubernetesSD:
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

func histPresent(h *hist) func() bool { return func() bool { return h.count > 0 } }

func counterPresent(v *int64) func() bool { return func() bool { return *v > 0 } }

func addEPPFamilies(s *sim, x *ExportShape, k int, add func(familyDef)) {
	sc := s.sc
	rp := &s.epp.reps[k]
	lb := newEPPLabeler(s, x, k)
	lazy := x.EPP != EPPSim // client_golang vectors: a series exists once first set
	gen := x.EPP
	if gen == EPP010 || gen == EPPSim {
		for _, g := range []struct {
			name, help string
			vals       []int64
		}{
			{"llm_d_epp_inflight_tokens", "Uncached prompt tokens of requests in flight per endpoint, until their first token.", rp.tokens},
			{"llm_d_epp_inflight_requests", "Requests in flight per endpoint.", rp.reqs},
		} {
			f := familyDef{name: g.name, typ: typGauge, help: g.help}
			for _, prod := range x.Producers {
				for i := range g.vals {
					m := metricDef{
						labels: lb.labels("endpoint_name", x.endpointName(sc, i), "namespace", sc.Namespace, "producer_name", prod,
							"fairness_id", "default", "priority", "0"),
						geti: ival(&g.vals[i]),
					}
					if x.LazyInFlight {
						seen := &rp.seen[i]
						m.present = func() bool { return *seen }
					}
					f.metrics = append(f.metrics, m)
				}
			}
			add(f)
		}
		reqLabels := lb.labels("model_name", sc.Model, "target_model_name", sc.Model, "fairness_id", "default", "priority", "0")
		hm := func(h *hist, labels string) metricDef {
			m := metricDef{labels: labels, h: h}
			if lazy {
				m.present = histPresent(h)
			}
			return m
		}
		add(familyDef{name: "llm_d_epp_request_cached_tokens", typ: typHistogram, help: "Cached prompt tokens per request.",
			metrics: []metricDef{hm(&rp.m.cachedH, reqLabels)}})
		add(familyDef{name: "llm_d_epp_request_input_tokens", typ: typHistogram, help: "Prompt tokens per request.",
			metrics: []metricDef{hm(&rp.m.inputH, reqLabels)}})
		add(familyDef{name: "llm_d_epp_request_ttft_seconds", typ: typHistogram, help: "Time to first token in seconds, measured from request received to first response byte.",
			metrics: []metricDef{hm(&rp.m.ttftH, lb.labels("model_name", sc.Model, "target_model_name", sc.Model, "fairness_id", "default", "priority", "0", "streaming", "true"))}})
		f := familyDef{name: "llm_d_epp_scheduler_attempts", typ: typCounter, help: "Scheduling attempts by status and endpoint."}
		for i := range rp.m.attempts {
			m := metricDef{
				labels: lb.labels("status", "success", "target_model_name", sc.Model, "endpoint_name", x.podName(sc, x.podOf(i)),
					"namespace", sc.Namespace, "port", strconv.Itoa(x.port(i))),
				geti: ival(&rp.m.attempts[i]),
			}
			if lazy {
				m.present = counterPresent(&rp.m.attempts[i])
			}
			f.metrics = append(f.metrics, m)
		}
		if gen == EPP010 {
			// A failed attempt carries empty endpoint labels (metrics.go,
			// RecordSchedulerAttempt), which Prometheus does not store.
			f.metrics = append(f.metrics, metricDef{labels: lb.labels("status", "failure", "target_model_name", sc.Model, "endpoint_name", "",
				"namespace", "", "port", ""), geti: ival(&rp.m.schedFail), present: counterPresent(&rp.m.schedFail)})
		}
		add(f)
		if gen == EPP010 {
			addPrefixIndexerFamilies(lb, rp, add)
		}
	}
	if x.pd() {
		addDisaggFamilies(sc, lb, rp, add)
	}
	if gen == EPP010 || gen == EPP08 {
		// The GIE v1.5 names: release-0.8's only ones, still emitted alongside
		// the llm_d_epp_* names by main.
		f := familyDef{name: "inference_extension_scheduler_attempts", typ: typCounter, help: "Total number of scheduling attempts."}
		for i := range rp.m.attempts {
			f.metrics = append(f.metrics, metricDef{
				labels: lb.labels("status", "success", "target_model_name", sc.Model, "pod_name", x.podName(sc, x.podOf(i)),
					"namespace", sc.Namespace, "port", strconv.Itoa(x.port(i))),
				geti: ival(&rp.m.attempts[i]), present: counterPresent(&rp.m.attempts[i]),
			})
		}
		f.metrics = append(f.metrics, metricDef{labels: lb.labels("status", "failure", "target_model_name", sc.Model, "pod_name", "",
			"namespace", "", "port", ""), geti: ival(&rp.m.schedFail), present: counterPresent(&rp.m.schedFail)})
		add(f)
		ml := lb.labels("model_name", sc.Model, "target_model_name", sc.Model)
		add(familyDef{name: "inference_objective_input_tokens", typ: typHistogram, help: "Inference objective input token count distribution for requests in each model.",
			metrics: []metricDef{{labels: ml, h: &rp.m.inputH, present: histPresent(&rp.m.inputH)}}})
		add(familyDef{name: "inference_objective_prompt_cached_tokens", typ: typHistogram, help: "Inference objective prompt cached token count distribution for requests in each model.",
			metrics: []metricDef{{labels: ml, h: &rp.m.cachedH, present: histPresent(&rp.m.cachedH)}}})
	}
	if gen != EPP08 {
		f := familyDef{name: "llm_d_epp_prefix_cache_affinity_filter_decisions", typ: typCounter, help: "Prefix cache affinity filter decisions by outcome."}
		outs := []gate.Outcome{gate.OutcomeExploration, gate.OutcomeLoadOverride, gate.OutcomeNoMatch, gate.OutcomeNotApplicable, gate.OutcomeSticky}
		if sc.EPP.Settings.Semantics == gate.SemanticsV2 {
			outs = append(outs, gate.OutcomeMissingSignal)
		}
		sort.Slice(outs, func(i, j int) bool { return outs[i].String() < outs[j].String() })
		for _, o := range outs {
			m := metricDef{labels: lb.labels("plugin_name", sc.EPP.Plugin, "outcome", o.String()), geti: ival(&rp.m.decisions[o])}
			if lazy {
				m.present = counterPresent(&rp.m.decisions[o])
			}
			f.metrics = append(f.metrics, m)
		}
		add(f)
	}
}

// addPrefixIndexerFamilies emits the approximate prefix producer's lookup
// histograms, llm_d_epp_prefix_indexer_hit_ratio / _hit_bytes{plugin_name,
// plugin_type} and their deprecated unlabelled inference_extension_ twins
// (llm-d-router approximateprefix/metrics.go; the producer's default name
// is its type, approx-prefix-cache-producer).
func addPrefixIndexerFamilies(lb eppLabeler, rp *eppReplica, add func(familyDef)) {
	own := lb.labels("plugin_name", "approx-prefix-cache-producer", "plugin_type", "approx-prefix-cache-producer")
	bare := lb.labels()
	for _, h := range []struct {
		name, help string
		h          *hist
	}{
		{"prefix_indexer_hit_ratio", "Ratio of prefix length matched to total prefix length in the cache lookup.", &rp.m.hitRatio},
		{"prefix_indexer_hit_bytes", "Length of the prefix match in number of bytes in the cache lookup.", &rp.m.hitBytes},
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
func addDisaggFamilies(sc *Scenario, lb eppLabeler, rp *eppReplica, add func(familyDef)) {
	types := [2]string{"decode-only", "prefill-decode"}
	f := familyDef{name: "llm_d_epp_disagg_decision", typ: typCounter, help: "Total number of disaggregation routing decisions made"}
	g := familyDef{name: "llm_d_inference_scheduler_disagg_decision", typ: typCounter,
		help: "[Deprecated: Use llm_d_epp_disagg_decision_total] Total number of disaggregation routing decisions made"}
	for i, dt := range types {
		f.metrics = append(f.metrics, metricDef{labels: lb.labels("plugin_name", "disagg-profile-handler", "plugin_type", "disagg-profile-handler",
			"model_name", sc.Model, "decision_type", dt), geti: ival(&rp.m.disagg[i]), present: counterPresent(&rp.m.disagg[i])})
		g.metrics = append(g.metrics, metricDef{labels: lb.labels("model_name", sc.Model, "decision_type", dt),
			geti: ival(&rp.m.disagg[i]), present: counterPresent(&rp.m.disagg[i])})
	}
	add(f)
	add(g)
}

// --- rendering ---

func appendSample(b []byte, name, suffix, labels, extra string) []byte {
	b = append(b, name...)
	b = append(b, suffix...)
	if labels != "" || extra != "" {
		b = append(b, '{')
		b = append(b, labels...)
		if extra != "" {
			if labels != "" {
				b = append(b, ',')
			}
			b = append(b, extra...)
		}
		b = append(b, '}')
	}
	return append(b, ' ')
}

func appendFloat(b []byte, v float64) []byte {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.AppendInt(b, int64(v), 10)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}

func appendTS(b []byte, ms int64) []byte {
	b = append(b, ' ')
	b = strconv.AppendInt(b, ms/1000, 10)
	b = append(b, '.')
	r := ms % 1000
	b = append(b, byte('0'+r/100), byte('0'+r/10%10), byte('0'+r%10))
	return append(b, '\n')
}

func escapeHelp(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(s)
}

// writeText renders the current values in the Prometheus text format 0.0.4
// (what a live /metrics serves).
func (c *catalog) writeText(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	var b []byte
	for fi := range c.fams {
		f := &c.fams[fi]
		name := f.name
		if f.typ == typCounter {
			name += "_total"
		}
		b = append(b[:0], "# HELP "...)
		b = append(b, name...)
		b = append(b, ' ')
		b = append(b, escapeHelp(f.help)...)
		b = append(b, "\n# TYPE "...)
		b = append(b, name...)
		b = append(b, ' ')
		b = append(b, f.typ.String()...)
		b = append(b, '\n')
		for mi := range f.metrics {
			m := &f.metrics[mi]
			if m.present != nil && !m.present() {
				continue
			}
			b = appendMetricNow(b, f, m, name)
		}
		if _, err := bw.Write(b); err != nil {
			return err
		}
	}
	return bw.Flush()
}

func appendMetricNow(b []byte, _ *familyDef, m *metricDef, name string) []byte {
	switch {
	case m.h != nil:
		var cum int64
		for i, le := range m.les {
			cum += m.h.counts[i]
			b = appendSample(b, name, "_bucket", m.labels, `le="`+le+`"`)
			b = strconv.AppendInt(b, cum, 10)
			b = append(b, '\n')
		}
		b = appendSample(b, name, "_sum", m.labels, "")
		b = appendFloat(b, m.h.sum)
		b = append(b, '\n')
		b = appendSample(b, name, "_count", m.labels, "")
		b = strconv.AppendInt(b, m.h.count, 10)
		b = append(b, '\n')
	case m.geti != nil:
		b = appendSample(b, name, "", m.labels, "")
		b = strconv.AppendInt(b, m.geti(), 10)
		b = append(b, '\n')
	default:
		b = appendSample(b, name, "", m.labels, "")
		b = appendFloat(b, m.getf())
		b = append(b, '\n')
	}
	return b
}

// --- OpenMetrics with timestamps ---

// column holds one series' samples, delta-encoded: integers as zigzag
// varints of the difference, floats as the bit-reversed XOR with the
// previous value (a few bytes per sample).
type column struct {
	buf   []byte
	last  uint64
	float bool
}

func (c *column) appendInt(v int64) {
	d := v - int64(c.last)
	c.buf = binary.AppendUvarint(c.buf, uint64(d<<1)^uint64(d>>63))
	c.last = uint64(v)
}

func (c *column) appendFloat(v float64) {
	b := math.Float64bits(v)
	c.buf = binary.AppendUvarint(c.buf, bits.Reverse64(b^c.last))
	c.last = b
}

type colReader struct {
	c    *column
	off  int
	last uint64
}

func (r *colReader) nextInt() int64 {
	u, n := binary.Uvarint(r.c.buf[r.off:])
	r.off += n
	d := int64(u>>1) ^ -int64(u&1)
	r.last = uint64(int64(r.last) + d)
	return int64(r.last)
}

func (r *colReader) nextFloat() float64 {
	u, n := binary.Uvarint(r.c.buf[r.off:])
	r.off += n
	r.last ^= bits.Reverse64(u)
	return math.Float64frombits(r.last)
}

// omWriter writes OpenMetrics text with explicit timestamps.
type omWriter struct {
	cat         *catalog
	w           *bufio.Writer
	interleaved bool
	ts          []int64    // ms, grouped layout
	cols        [][]column // per family-metric (flattened), grouped layout
	// runs are, per family-metric, the [start, end) index ranges into ts in
	// which the series existed (end -1: still open); on whether it does now.
	runs [][]int
	on   []bool
	b    []byte
	err  error
}

func newOMWriter(cat *catalog, w io.Writer, interleaved bool) *omWriter {
	o := &omWriter{cat: cat, w: bufio.NewWriterSize(w, 256<<10), interleaved: interleaved}
	if !interleaved {
		for fi := range cat.fams {
			for mi := range cat.fams[fi].metrics {
				m := &cat.fams[fi].metrics[mi]
				var cols []column
				switch {
				case m.h != nil:
					cols = make([]column, len(m.les)+2)
					cols[len(m.les)].float = true
				case m.getf != nil:
					cols = []column{{float: true}}
				default:
					cols = []column{{}}
				}
				o.cols = append(o.cols, cols)
				if m.present != nil {
					o.runs, o.on = append(o.runs, nil), append(o.on, false)
				} else {
					o.runs, o.on = append(o.runs, []int{0, -1}), append(o.on, true)
				}
			}
		}
	}
	return o
}

func (o *omWriter) header(f *familyDef) {
	o.b = append(o.b, "# HELP "...)
	o.b = append(o.b, f.name...)
	o.b = append(o.b, ' ')
	o.b = append(o.b, escapeHelp(f.help)...)
	o.b = append(o.b, "\n# TYPE "...)
	o.b = append(o.b, f.name...)
	o.b = append(o.b, ' ')
	o.b = append(o.b, f.typ.String()...)
	o.b = append(o.b, '\n')
}

func (o *omWriter) flushBuf() {
	if o.err == nil && len(o.b) > 0 {
		_, o.err = o.w.Write(o.b)
	}
	o.b = o.b[:0]
}

// scrape records (or, interleaved, writes) every series' value at ms.
func (o *omWriter) scrape(ms int64) {
	if o.err != nil {
		return
	}
	if o.interleaved {
		for fi := range o.cat.fams {
			f := &o.cat.fams[fi]
			o.header(f)
			for mi := range f.metrics {
				if m := &f.metrics[mi]; m.present == nil || m.present() {
					o.appendPoint(f, m, ms, nil)
				}
			}
			o.flushBuf()
		}
		return
	}
	o.ts = append(o.ts, ms)
	k := 0
	for fi := range o.cat.fams {
		f := &o.cat.fams[fi]
		for mi := range f.metrics {
			m := &f.metrics[mi]
			cols := o.cols[k]
			if m.present != nil {
				if p := m.present(); p != o.on[k] {
					if p {
						o.runs[k] = append(o.runs[k], len(o.ts)-1, -1)
					} else {
						o.runs[k][len(o.runs[k])-1] = len(o.ts) - 1
					}
					o.on[k] = p
				}
				if !o.on[k] {
					k++
					continue
				}
			}
			k++
			switch {
			case m.h != nil:
				var cum int64
				for i := range m.les {
					cum += m.h.counts[i]
					cols[i].appendInt(cum)
				}
				cols[len(m.les)].appendFloat(m.h.sum)
				cols[len(m.les)+1].appendInt(m.h.count)
			case m.geti != nil:
				cols[0].appendInt(m.geti())
			default:
				cols[0].appendFloat(m.getf())
			}
		}
	}
}

// appendPoint writes one metric's samples at ms, from the live values
// (readers == nil) or from stored columns.
func (o *omWriter) appendPoint(f *familyDef, m *metricDef, ms int64, rd []colReader) {
	name := f.name
	switch {
	case m.h != nil:
		var cum int64
		for i, le := range m.les {
			var v int64
			if rd != nil {
				v = rd[i].nextInt()
			} else {
				cum += m.h.counts[i]
				v = cum
			}
			o.b = appendSample(o.b, name, "_bucket", m.labels, `le="`+le+`"`)
			o.b = strconv.AppendInt(o.b, v, 10)
			o.b = appendTS(o.b, ms)
		}
		sum, cnt := m.h.sum, m.h.count
		if rd != nil {
			sum, cnt = rd[len(m.les)].nextFloat(), rd[len(m.les)+1].nextInt()
		}
		o.b = appendSample(o.b, name, "_sum", m.labels, "")
		o.b = appendFloat(o.b, sum)
		o.b = appendTS(o.b, ms)
		o.b = appendSample(o.b, name, "_count", m.labels, "")
		o.b = strconv.AppendInt(o.b, cnt, 10)
		o.b = appendTS(o.b, ms)
	default:
		suffix := ""
		if f.typ == typCounter {
			suffix = "_total"
		}
		o.b = appendSample(o.b, name, suffix, m.labels, "")
		switch {
		case rd != nil && m.geti != nil:
			o.b = strconv.AppendInt(o.b, rd[0].nextInt(), 10)
		case rd != nil:
			o.b = appendFloat(o.b, rd[0].nextFloat())
		case m.geti != nil:
			o.b = strconv.AppendInt(o.b, m.geti(), 10)
		default:
			o.b = appendFloat(o.b, m.getf())
		}
		o.b = appendTS(o.b, ms)
	}
	if len(o.b) > 128<<10 {
		o.flushBuf()
	}
}

// finish writes the stored samples family by family (grouped layout) and
// the closing "# EOF".
func (o *omWriter) finish() error {
	if !o.interleaved && o.err == nil {
		k := 0
		var rd []colReader
		for fi := range o.cat.fams {
			f := &o.cat.fams[fi]
			o.header(f)
			for mi := range f.metrics {
				cols := o.cols[k]
				runs := o.runs[k]
				k++
				if len(runs) == 0 {
					continue
				}
				rd = rd[:0]
				for ci := range cols {
					rd = append(rd, colReader{c: &cols[ci]})
				}
				for ri := 0; ri+1 < len(runs); ri += 2 {
					end := runs[ri+1]
					if end < 0 {
						end = len(o.ts)
					}
					for _, ms := range o.ts[runs[ri]:end] {
						o.appendPoint(f, &f.metrics[mi], ms, rd)
					}
				}
				for ci := range cols {
					cols[ci] = column{}
				}
			}
			o.flushBuf()
		}
	}
	o.b = append(o.b, "# EOF\n"...)
	o.flushBuf()
	if o.err == nil {
		o.err = o.w.Flush()
	}
	return o.err
}
