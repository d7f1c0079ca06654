package fleetsim

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/gatetuner/gatetuner/test/fleetsim/internal/fleettest"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/truth"
)

// shapeOf returns a named shape with edits applied.
func shapeOf(t *testing.T, spec string) *scenario.ExportShape {
	t.Helper()
	x, err := scenario.ParseExportShape(spec)
	if err != nil {
		t.Fatal(err)
	}
	return &x
}

// runShape runs the warm phase of calibration-1970 (or sc) from time 0 (no
// warm-up, so the first scrapes precede the first requests) under shape x.
func runShape(t *testing.T, sc *scenario.Scenario, x *scenario.ExportShape, last string) (*omFile, *truth.Truth, *sim) {
	t.Helper()
	if sc == nil {
		sc = fleettest.Load(t, "calibration-1970")
	}
	if last == "" {
		last = sc.Phases[0].Name
	}
	var b bytes.Buffer
	s, err := newSim(sc, Options{Seed: 1, Last: last, Metrics: &b, Exporters: x}, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.advance(context.Background(), s.runEnd); err != nil {
		t.Fatal(err)
	}
	if err := s.drain(context.Background(), DefaultMaxDrain); err != nil {
		t.Fatal(err)
	}
	if err := s.om.Finish(); err != nil {
		t.Fatal(err)
	}
	return parseOM(t, b.Bytes()), s.truth(), s
}

func labelNames(l labels.Labels) string {
	var names []string
	l.Range(func(lb labels.Label) {
		if lb.Name != labels.MetricName {
			names = append(names, lb.Name)
		}
	})
	return strings.Join(names, ",")
}

func TestRealShapeNamesInFlightEndpointsByRankAndKeepsBarePodsElsewhere(t *testing.T) {
	f, _, _ := runShape(t, nil, shapeOf(t, scenario.ShapeLLMD2026), "")
	pods := []string{"llama-3-2-3b-cpu-decode-0", "llama-3-2-3b-cpu-decode-1"}
	for _, pod := range pods {
		for _, g := range []string{"llm_d_epp_inflight_tokens", "llm_d_epp_inflight_requests"} {
			if got := f.find(g, map[string]string{"endpoint_name": pod + "-rank-0"}); len(got) != 1 {
				t.Errorf("%s{endpoint_name=%q-rank-0}: %d series, want 1", g, pod, len(got))
			}
			if got := f.find(g, map[string]string{"endpoint_name": pod}); len(got) != 0 {
				t.Errorf("%s has the bare pod name %q", g, pod)
			}
		}
		if got := f.find("llm_d_epp_scheduler_attempts_total", map[string]string{"endpoint_name": pod, "port": "8000"}); len(got) != 1 {
			t.Errorf("scheduler attempts for bare pod %q: %d series, want 1", pod, len(got))
		}
		if got := f.find("vllm:num_requests_waiting", map[string]string{"pod": pod}); len(got) != 1 {
			t.Errorf("vllm:num_requests_waiting{pod=%q}: %d series, want 1", pod, len(got))
		}
	}
	// PodMonitor / ServiceMonitor target labels; honorLabels false renames the EPP's namespace.
	in := f.find("llm_d_epp_inflight_tokens", nil)[0].labels
	if want := "container,endpoint,endpoint_name,exported_namespace,fairness_id,instance,job,namespace,pod,priority,producer_name,service"; labelNames(in) != want {
		t.Errorf("in-flight labels %s, want %s", labelNames(in), want)
	}
	if in.Get("exported_namespace") != "llm-d" || in.Get("namespace") != "llm-d" || in.Get("endpoint") != "http-metrics" {
		t.Errorf("in-flight series %s: want exported_namespace and namespace llm-d, endpoint http-metrics", in)
	}
	v := f.find("vllm:num_requests_running", nil)[0].labels
	if want := "container,endpoint,engine,instance,job,model_name,namespace,pod"; labelNames(v) != want {
		t.Errorf("vLLM labels %s, want %s", labelNames(v), want)
	}
	if v.Get("endpoint") != "8000" || v.Get("job") != "llm-d/llama-3-2-3b-cpu-decode" {
		t.Errorf("vLLM series %s: want endpoint 8000 and the PodMonitor job", v)
	}
}

func TestInFlightSeriesAppearAtFirstRequestAndAreNeverDeleted(t *testing.T) {
	f, tr, _ := runShape(t, nil, shapeOf(t, scenario.ShapeLLMD2026), "")
	scrapes := f.find("vllm:num_requests_running", nil)[0].ts
	if len(scrapes) < 10 {
		t.Fatalf("only %d scrapes", len(scrapes))
	}
	ins := f.find("llm_d_epp_inflight_tokens", nil)
	if len(ins) != len(tr.Exporters.Engines) {
		t.Fatalf("%d in-flight series for %d endpoints", len(ins), len(tr.Exporters.Engines))
	}
	for _, s := range ins {
		if s.ts[0] == scrapes[0] {
			t.Errorf("%s exists at the first scrape, before any request", s.labels)
		}
		// Once there, it is at every later scrape (idle scrapes included).
		born := len(scrapes) - len(s.ts)
		for i, ts := range s.ts {
			if ts != scrapes[born+i] {
				t.Fatalf("%s: gap at scrape %d", s.labels, born+i)
			}
		}
		zero := false
		for _, v := range s.vals {
			zero = zero || v == 0
		}
		if !zero {
			t.Errorf("%s never reads 0: the idle case is untested", s.labels)
		}
	}
	// The legacy shape has every series from the first scrape.
	lf, _, _ := runShape(t, nil, shapeOf(t, scenario.ShapeLegacySim), "")
	for _, s := range lf.find("llm_d_epp_inflight_tokens", nil) {
		if s.ts[0] != scrapes[0] {
			t.Errorf("legacy-sim %s starts late", s.labels)
		}
	}
}

func TestSeveralProducersEachHaveTheirSeries(t *testing.T) {
	f, tr, _ := runShape(t, nil, shapeOf(t, scenario.ShapeLLMD2026+",producers=gate-load,scorer-load"), "")
	if tr.Exporters.GateProducer != "gate-load" {
		t.Errorf("gate producer %q, want gate-load", tr.Exporters.GateProducer)
	}
	a := f.find("llm_d_epp_inflight_tokens", map[string]string{"producer_name": "gate-load"})
	b := f.find("llm_d_epp_inflight_tokens", map[string]string{"producer_name": "scorer-load"})
	if len(a) != 2 || len(b) != 2 {
		t.Fatalf("series per producer: %d and %d, want 2 each", len(a), len(b))
	}
	for i := range a {
		if len(a[i].vals) != len(b[i].vals) || a[i].vals[len(a[i].vals)/2] != b[i].vals[len(b[i].vals)/2] {
			t.Errorf("producers disagree on %s", a[i].labels.Get("endpoint_name"))
		}
	}
}

func TestDataParallelRanksAreEndpointsAndOnlyPort8000IsScraped(t *testing.T) {
	for _, all := range []bool{false, true} {
		spec := scenario.ShapeLLMD2026 + ",dpRanks=2"
		if all {
			spec += ",scrapeAllRanks=true"
		}
		f, tr, s := runShape(t, nil, shapeOf(t, spec), "")
		if len(s.pods) != 4 || len(tr.Exporters.Engines) != 4 {
			t.Fatalf("%s: %d engines, want 2 pods x 2 ranks", spec, len(s.pods))
		}
		for _, ep := range []string{"llama-3-2-3b-cpu-decode-1-rank-0", "llama-3-2-3b-cpu-decode-1-rank-1"} {
			if len(f.find("llm_d_epp_inflight_tokens", map[string]string{"endpoint_name": ep})) != 1 {
				t.Errorf("%s: no in-flight series for %s", spec, ep)
			}
		}
		for _, port := range []string{"8000", "8001"} {
			if len(f.find("llm_d_epp_scheduler_attempts_total", map[string]string{"endpoint_name": "llama-3-2-3b-cpu-decode-1", "port": port})) != 1 {
				t.Errorf("%s: no scheduler attempts for port %s of the bare pod", spec, port)
			}
		}
		want := 2
		if all {
			want = 4
		}
		v := f.find("vllm:num_requests_running", nil)
		if len(v) != want {
			t.Errorf("%s: %d vLLM series reach Prometheus, want %d", spec, len(v), want)
		}
		scraped := 0
		for _, e := range tr.Exporters.Engines {
			if e.Scraped {
				scraped++
			}
		}
		if scraped != want {
			t.Errorf("%s: truth says %d engines scraped, want %d", spec, scraped, want)
		}
		for _, ph := range tr.Phases {
			for _, p := range ph.Pods {
				if p.Routed == 0 {
					t.Errorf("%s: rank %d of %s got no request", spec, p.Rank, p.Pod)
				}
			}
		}
	}
}

func TestEPPReplicasGateSeesTheSumOnlyWhenSynced(t *testing.T) {
	for _, synced := range []bool{true, false} {
		x := shapeOf(t, scenario.ShapeLLMD2026+",eppReplicas=2")
		x.SyncReplicas = synced
		sc := fleettest.Load(t, "calibration-1970")
		s, err := newSim(sc, Options{Seed: 1, Last: "saturated", Exporters: x}, false)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		checked, differ := 0, 0
		for step := 1; step <= 40; step++ {
			if err := s.advance(ctx, int64(step)*int64(30*time.Second)); err != nil {
				t.Fatal(err)
			}
			e := s.epp
			for i := range e.Tokens {
				if e.Tokens[i] != e.Replicas[0].Tokens[i]+e.Replicas[1].Tokens[i] {
					t.Fatalf("endpoint %d: sum %d != replicas %d + %d", i, e.Tokens[i], e.Replicas[0].Tokens[i], e.Replicas[1].Tokens[i])
				}
			}
			k := e.ReplicaOf(s.nextID + 1)
			want := make([]int64, len(e.Tokens))
			for i := range want {
				want[i] = e.Replicas[k].Tokens[i]
				if synced {
					want[i] = e.Tokens[i]
				}
				if e.Replicas[k].Tokens[i] != e.Tokens[i] {
					differ++
				}
			}
			s.arrive()
			for i := range want {
				if e.Endpoints[i].InFlightTokens != want[i] {
					t.Fatalf("synced=%t: gate saw %d in-flight tokens on endpoint %d, want %d", synced, e.Endpoints[i].InFlightTokens, i, want[i])
				}
			}
			checked++
		}
		if differ == 0 {
			t.Errorf("synced=%t: a replica's own share never differed from the sum; the test cannot tell them apart", synced)
		}
		// Each replica exports its own gauges.
		var b bytes.Buffer
		if _, err := Run(ctx, sc, Options{Seed: 1, Last: "warm", Metrics: &b, Exporters: x}); err != nil {
			t.Fatal(err)
		}
		f := parseOM(t, b.Bytes())
		for _, pod := range []string{"llama-3-2-3b-cpu-epp-0", "llama-3-2-3b-cpu-epp-1"} {
			if n := len(f.find("llm_d_epp_inflight_tokens", map[string]string{"pod": pod})); n != 2 {
				t.Errorf("EPP replica %s: %d in-flight series, want 2", pod, n)
			}
		}
	}
}

func TestVLLMGenerationsExportTheirNames(t *testing.T) {
	cases := []struct {
		shape        string
		have, absent []string
	}{
		{scenario.ShapeLLMD2025, []string{"vllm:gpu_cache_usage_perc", "vllm:gpu_prefix_cache_queries", "vllm:gpu_prefix_cache_hits",
			"vllm:time_per_output_token_seconds", "vllm:kv_cache_usage_perc", "vllm:prefix_cache_queries"},
			[]string{"vllm:prompt_tokens_by_source", "vllm:prompt_tokens_cached", "vllm:num_requests_waiting_by_reason", "vllm:request_prefill_kv_computed_tokens"}},
		{scenario.ShapeLLMDMid2026, []string{"vllm:num_requests_waiting_by_reason", "vllm:prompt_tokens_by_source", "vllm:prompt_tokens_cached"},
			[]string{"vllm:gpu_cache_usage_perc", "vllm:gpu_prefix_cache_queries", "vllm:time_per_output_token_seconds"}},
		{scenario.ShapeLLMD2026, []string{"vllm:num_requests_waiting_by_reason", "vllm:prompt_tokens_by_source", "vllm:inter_token_latency_seconds"},
			[]string{"vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds"}},
	}
	for _, c := range cases {
		f, _, _ := runShape(t, nil, shapeOf(t, c.shape), "")
		for _, n := range c.have {
			if _, ok := f.types[n]; !ok {
				t.Errorf("%s lacks %s", c.shape, n)
			}
		}
		for _, n := range c.absent {
			if _, ok := f.types[n]; ok {
				t.Errorf("%s exports %s", c.shape, n)
			}
		}
	}
	// waiting_by_reason sums to waiting.
	f, _, _ := runShape(t, nil, shapeOf(t, scenario.ShapeLLMD2026), "saturated")
	for _, w := range f.find("vllm:num_requests_waiting", nil) {
		pod := w.labels.Get("pod")
		c := f.find("vllm:num_requests_waiting_by_reason", map[string]string{"pod": pod, "reason": "capacity"})
		d := f.find("vllm:num_requests_waiting_by_reason", map[string]string{"pod": pod, "reason": "deferred"})
		if len(c) != 1 || len(d) != 1 {
			t.Fatalf("%s: by_reason series %d/%d", pod, len(c), len(d))
		}
		for i := range w.vals {
			if c[0].vals[i]+d[0].vals[i] != w.vals[i] {
				t.Fatalf("%s at %d: capacity %v + deferred %v != waiting %v", pod, w.ts[i], c[0].vals[i], d[0].vals[i], w.vals[i])
			}
		}
	}
}

// kvPressure is calibration-1970 on a KV pool too small for its load, so
// admissions fail for blocks and requests get preempted.
func kvPressure(t *testing.T) *scenario.Scenario {
	sc := fleettest.Load(t, "calibration-1970")
	sc.Pods.Engine.NumGPUBlocks = 600
	return sc
}

func TestPrefixCacheCountersCountRetriesBeforeTheJuly2026Fix(t *testing.T) {
	totals := func(s *sim) (queries, prompt, preempt int64) {
		for _, p := range s.pods {
			queries += p.Metrics.PCQueries
			prompt += p.Metrics.PromptTokens
			preempt += p.Metrics.Preemptions
		}
		return
	}
	mf, _, ms := runShape(t, kvPressure(t), shapeOf(t, scenario.ShapeLLMDMid2026), "saturated")
	_, _, ls := runShape(t, kvPressure(t), shapeOf(t, scenario.ShapeLLMD2026), "saturated")
	// Drained, every request was admitted and got its first token: counted
	// once, the queries are the prompts.
	lq, lp, _ := totals(ls)
	if lq != lp {
		t.Errorf("late 2026: prefix-cache queries %d != prompt tokens %d", lq, lp)
	}
	mq, mp, preempt := totals(ms)
	if !(float64(mq) > 1.05*float64(mp)) {
		t.Errorf("mid 2026 under KV pressure (%d preemptions): queries %d not above prompt tokens %d", preempt, mq, mp)
	}
	if mp != lp {
		t.Errorf("the counting rule changed the run: prompt tokens %d vs %d", mp, lp)
	}
	// The exposition carries the engine's counter.
	var exported float64
	for _, s := range mf.find("vllm:prefix_cache_queries_total", nil) {
		exported += s.vals[len(s.vals)-1]
	}
	if exported <= 0 || exported > float64(mq) {
		t.Errorf("exported queries %v, engine counted %d", exported, mq)
	}
}

// longPrompts is a pod serving rare prompts of several chunks: most steps
// are prefill-only.
func longPrompts(t *testing.T) *scenario.Scenario {
	sc := fleettest.Load(t, "calibration-1970")
	sc.Pods.Count = 1
	sc.Classes = []scenario.SessionClass{{Name: "long", UserTokens: scenario.Dist{Kind: scenario.DistUniform, Min: 6000, Max: 8000},
		OutputTokens: scenario.ConstDist(2)}}
	sc.Phases = sc.Phases[:1]
	sc.Phases[0].RequestRate = 0.05
	sc.Phases[0].Mix = []float64{1}
	if err := sc.Validate(); err != nil {
		t.Fatal(err)
	}
	return sc
}

func TestIterationTokensAreObservedOnlyOnStepsWithAnOutput(t *testing.T) {
	_, _, real := runShape(t, longPrompts(t), shapeOf(t, scenario.ShapeLLMD2026), "")
	_, _, legacy := runShape(t, longPrompts(t), shapeOf(t, scenario.ShapeLegacySim), "")
	p, l := real.pods[0], legacy.pods[0]
	if p.Steps() != l.Steps() || p.Steps() == 0 {
		t.Fatalf("steps differ: %d vs %d", p.Steps(), l.Steps())
	}
	if !(p.OutputSteps() < p.Steps()/2) {
		t.Fatalf("%d of %d steps emitted an output: not a prefill-heavy pod", p.OutputSteps(), p.Steps())
	}
	if p.Metrics.Iter.Count != p.OutputSteps() {
		t.Errorf("llm-d-2026: %d iteration observations, want %d (steps with an output)", p.Metrics.Iter.Count, p.OutputSteps())
	}
	if l.Metrics.Iter.Count != l.Steps() {
		t.Errorf("legacy-sim: %d iteration observations, want every step (%d)", l.Metrics.Iter.Count, l.Steps())
	}
}

func TestEPPTokenHistogramsObserveOnlyResponsesWithUsage(t *testing.T) {
	count := func(f *omFile, name string) (n float64) {
		s := f.find(name, nil)
		if len(s) == 0 {
			t.Fatalf("%s: no series", name)
		}
		for _, x := range s {
			n += x.vals[len(x.vals)-1]
		}
		return n
	}
	full, _, _ := runShape(t, nil, shapeOf(t, scenario.ShapeLLMD2026), "saturated")
	part, _, _ := runShape(t, nil, shapeOf(t, scenario.ShapeLLMD2026+",usageShare=0.6"), "saturated")
	var finished float64
	for _, s := range full.find("vllm:request_success_total", nil) {
		finished += s.vals[len(s.vals)-1]
	}
	if n := count(full, "llm_d_epp_request_input_tokens_count"); n != finished {
		t.Errorf("usage on every response: %v input-token observations for %v finished requests", n, finished)
	}
	n := count(part, "llm_d_epp_request_input_tokens_count")
	if math.Abs(n/finished-0.6) > 0.03 {
		t.Errorf("usageShare 0.6: %v observations of %v requests (%.3f)", n, finished, n/finished)
	}
	if c := count(part, "llm_d_epp_request_cached_tokens_count"); c != n {
		t.Errorf("cached-token observations %v != input-token observations %v", c, n)
	}
	if v := count(part, "vllm:request_prompt_tokens_count"); v != count(full, "vllm:request_prompt_tokens_count") {
		t.Errorf("usage share changed vLLM's own histogram")
	}
}

func TestOlderEPPExportsTheGIENamesOnly(t *testing.T) {
	f, _, _ := runShape(t, nil, shapeOf(t, scenario.ShapeLLMD2025), "")
	for n := range f.types {
		if strings.HasPrefix(n, "llm_d_epp_") {
			t.Errorf("release-0.8 exports %s", n)
		}
	}
	a := f.find("inference_extension_scheduler_attempts_total", map[string]string{"pod_name": "llama-3-2-3b-cpu-decode-0"})
	if len(a) != 1 || a[0].labels.Get("endpoint_name") != "" {
		t.Errorf("inference_extension_scheduler_attempts_total by pod_name: %d series", len(a))
	}
	for _, n := range []string{"inference_objective_input_tokens", "inference_objective_prompt_cached_tokens"} {
		s := f.find(n+"_count", nil)
		if len(s) != 1 || labelNames(s[0].labels) != "container,endpoint,instance,job,model_name,namespace,pod,service,target_model_name" {
			t.Errorf("%s: %d series", n, len(s))
		}
	}
	// main emits the GIE names alongside.
	m, _, _ := runShape(t, nil, shapeOf(t, scenario.ShapeLLMD2026), "")
	if len(m.find("inference_extension_scheduler_attempts_total", nil)) != 2 || len(m.find("llm_d_epp_scheduler_attempts_total", nil)) != 2 {
		t.Error("llm-d-router main: want both attempts counters")
	}
}

func TestRawKubernetesSDLabelsOnlyInstanceAndJob(t *testing.T) {
	f, _, _ := runShape(t, nil, shapeOf(t, scenario.ShapeLLMD2026+",scrape=kubernetes-sd"), "")
	v := f.find("vllm:num_requests_running", nil)
	if len(v) != 2 || labelNames(v[0].labels) != "engine,instance,job,model_name" {
		t.Fatalf("vLLM series: %d, labels %s", len(v), labelNames(v[0].labels))
	}
	if !strings.HasSuffix(v[0].labels.Get("instance"), ":8000") || v[0].labels.Get("job") != "vllm" {
		t.Errorf("vLLM target %s", v[0].labels)
	}
	in := f.find("llm_d_epp_inflight_tokens", nil)[0].labels
	if labelNames(in) != "endpoint_name,fairness_id,instance,job,namespace,priority,producer_name" || in.Get("namespace") != "llm-d" {
		t.Errorf("EPP series %s: the EPP's own namespace stays, no pod", in)
	}
}

func TestShapedRunsAreDeterministic(t *testing.T) {
	x := shapeOf(t, scenario.ShapeLLMD2026+",dpRanks=2,eppReplicas=2,syncReplicas=false,usageShare=0.5")
	sc := fleettest.Load(t, "calibration-1970")
	var a, b bytes.Buffer
	mustRun(t, sc, Options{Seed: 3, Last: "warm", Metrics: &a, Exporters: x})
	mustRun(t, sc, Options{Seed: 3, Last: "warm", Metrics: &b, Exporters: x})
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("same seed and shape, different metrics")
	}
}

func TestInternalDataParallelEnginesShareOneEndpoint(t *testing.T) {
	f, tr, s := runShape(t, nil, shapeOf(t, scenario.ShapeLLMD2026+",dpEngines=2"), "saturated")
	if len(s.pods) != 4 || len(s.epp.Tokens) != 2 {
		t.Fatalf("%d engines behind %d endpoints, want 4 behind 2", len(s.pods), len(s.epp.Tokens))
	}
	pod := "llama-3-2-3b-cpu-decode-1"
	for _, eng := range []string{"0", "1"} {
		v := f.find("vllm:num_requests_running", map[string]string{"pod": pod, "engine": eng})
		if len(v) != 1 || v[0].labels.Get("endpoint") != "8000" {
			t.Errorf("%s engine %s: %d series on port 8000, want 1", pod, eng, len(v))
		}
	}
	if n := len(f.find("llm_d_epp_inflight_tokens", nil)); n != 2 {
		t.Errorf("%d in-flight series, want one per endpoint (2)", n)
	}
	for _, ph := range tr.Phases {
		var routed [2]int
		for _, p := range ph.Pods {
			if p.Routed == 0 {
				t.Errorf("phase %s: engine %d of %s got no request", ph.Name, p.Engine, p.Pod)
			}
			if p.Pod == pod {
				routed[p.Engine] += p.Routed
			}
		}
		// vLLM's front-end balances by waiting×4 + running.
		if lo, hi := min(routed[0], routed[1]), max(routed[0], routed[1]); float64(lo) < 0.6*float64(hi) {
			t.Errorf("phase %s: engines of %s got %v requests: not balanced", ph.Name, pod, routed)
		}
	}
	var sum float64
	for _, e := range tr.Exporters.Engines {
		if e.Endpoint != pod+"-rank-0" && e.Pod == pod {
			t.Errorf("engine %+v: endpoint %q", e, e.Endpoint)
		}
		sum++
	}
	if sum != 4 {
		t.Errorf("%v engines in the truth", sum)
	}
}
