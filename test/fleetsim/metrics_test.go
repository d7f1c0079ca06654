package fleetsim

import (
	"bytes"
	"errors"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"

	"github.com/gatetuner/gatetuner/test/fleetsim/export"
	"github.com/gatetuner/gatetuner/test/fleetsim/internal/fleettest"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/truth"
)

// omSeries is one series read back from OpenMetrics text.
type omSeries struct {
	name   string
	labels labels.Labels
	ts     []int64
	vals   []float64
}

type omFile struct {
	types  map[string]string // family → type, from # TYPE
	order  []string          // families in order of appearance
	series map[string]*omSeries
}

// parseOM parses OpenMetrics text with Prometheus' own parser (the one
// promtool's backfill uses) and checks the layout rules on the way.
func parseOM(t *testing.T, data []byte) *omFile {
	t.Helper()
	if !bytes.HasSuffix(data, []byte("# EOF\n")) {
		t.Fatal("exposition does not end with # EOF")
	}
	p := textparse.NewOpenMetricsParser(data, labels.NewSymbolTable())
	f := &omFile{types: map[string]string{}, series: map[string]*omSeries{}}
	var lset labels.Labels
	for {
		e, err := p.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("OpenMetrics parse error: %v", err)
		}
		switch e {
		case textparse.EntryType:
			name, typ := p.Type()
			f.types[string(name)] = string(typ)
			f.order = append(f.order, string(name))
		case textparse.EntrySeries:
			key, ts, v := p.Series()
			if ts == nil {
				t.Fatalf("sample %s has no timestamp", key)
			}
			p.Labels(&lset)
			s := f.series[string(key)]
			if s == nil {
				s = &omSeries{name: lset.Get(labels.MetricName), labels: lset.Copy()}
				f.series[string(key)] = s
			}
			if n := len(s.ts); n > 0 && *ts <= s.ts[n-1] {
				t.Fatalf("series %s: timestamp %d after %d", key, *ts, s.ts[n-1])
			}
			s.ts = append(s.ts, *ts)
			s.vals = append(s.vals, v)
		}
	}
	return f
}

func (f *omFile) find(name string, match map[string]string) []*omSeries {
	var out []*omSeries
	keys := make([]string, 0, len(f.series))
	for k := range f.series {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s := f.series[k]
		if s.name != name {
			continue
		}
		ok := true
		for ln, lv := range match {
			if s.labels.Get(ln) != lv {
				ok = false
			}
		}
		if ok {
			out = append(out, s)
		}
	}
	return out
}

func runMetrics(t *testing.T, name string, mo export.MetricsOptions) ([]byte, *truth.Truth, *scenario.Scenario) {
	t.Helper()
	sc := fleettest.Load(t, name)
	var b bytes.Buffer
	tr := mustRun(t, sc, Options{Seed: 1, Metrics: &b, MetricsOptions: mo})
	return b.Bytes(), tr, sc
}

func TestOpenMetricsHasTheRealNamesLabelsAndBuckets(t *testing.T) {
	data, tr, sc := runMetrics(t, "calibration-1970", export.MetricsOptions{})
	f := parseOM(t, data)
	seen := map[string]bool{}
	for _, fam := range f.order {
		if seen[fam] {
			t.Errorf("family %s appears twice (samples of a family must be contiguous)", fam)
		}
		seen[fam] = true
	}
	for fam, typ := range fleettest.RequiredFamilies {
		if f.types[fam] != typ {
			t.Errorf("family %s has type %q, want %q", fam, f.types[fam], typ)
		}
	}
	scrapes := int(tr.End-tr.Start)/int(tr.ScrapeIntervalSeconds) + 1
	for _, s := range f.find("vllm:num_requests_waiting", nil) {
		for _, l := range []string{"namespace", "pod", "model_name", "engine"} {
			if s.labels.Get(l) == "" {
				t.Errorf("%s lacks label %s", s.labels, l)
			}
		}
		if len(s.ts) != scrapes {
			t.Errorf("%s has %d samples, want one per scrape (%d)", s.labels, len(s.ts), scrapes)
		}
		if d := s.ts[1] - s.ts[0]; d != int64(tr.ScrapeIntervalSeconds*1000) {
			t.Errorf("samples %d ms apart", d)
		}
	}
	if got := f.find("vllm:prompt_tokens_total", nil); len(got) != sc.Pods.Count {
		t.Errorf("%d vllm:prompt_tokens_total series, want %d", len(got), sc.Pods.Count)
	}
	les := func(name string, match map[string]string) []string {
		var out []string
		for _, s := range f.find(name, match) {
			out = append(out, s.labels.Get("le"))
		}
		slices.SortFunc(out, func(a, b string) int { return cmpLE(a, b) })
		return slices.Compact(out)
	}
	pod0 := map[string]string{"pod": sc.PodName(0)}
	if got, want := strings.Join(les("vllm:time_to_first_token_seconds_bucket", pod0), ","),
		"0.001,0.005,0.01,0.02,0.04,0.06,0.08,0.1,0.25,0.5,0.75,1.0,2.5,5.0,7.5,10.0,20.0,40.0,80.0,160.0,640.0,2560.0,+Inf"; got != want {
		t.Errorf("TTFT buckets %s, want %s", got, want)
	}
	if got, want := strings.Join(les("vllm:request_prompt_tokens_bucket", pod0), ","),
		"1.0,2.0,5.0,10.0,20.0,50.0,100.0,200.0,500.0,1000.0,2000.0,5000.0,+Inf"; got != want {
		t.Errorf("prompt token buckets (max_model_len 8192) %s, want %s", got, want)
	}
	if got, want := strings.Join(les("vllm:request_queue_time_seconds_bucket", pod0), ","),
		"0.3,0.5,0.8,1.0,1.5,2.0,2.5,5.0,10.0,15.0,20.0,30.0,40.0,50.0,60.0,120.0,240.0,480.0,960.0,1920.0,7680.0,+Inf"; got != want {
		t.Errorf("queue time buckets %s, want %s", got, want)
	}
	// Prometheus 3's OpenMetrics parser normalises le values; the raw text
	// renders them as each exporter does (Go's %g for the EPP, Python's repr
	// for vLLM), which is what a Prometheus 2.x TSDB stores.
	if got, want := strings.Join(les("llm_d_epp_request_input_tokens_bucket", nil), ","),
		"1.0,8.0,16.0,32.0,64.0,128.0,256.0,512.0,1024.0,2048.0,4096.0,8192.0,16384.0,32778.0,65536.0,131072.0,262144.0,524288.0,1.048576e+06,+Inf"; got != want {
		t.Errorf("EPP input token buckets %s, want %s", got, want)
	}
	for _, raw := range []string{`le="32778"}`, `le="1.048576e+06"}`, `le="0.005"}`, `le="2560.0"}`, `le="1.0"}`} {
		if !bytes.Contains(data, []byte(raw)) {
			t.Errorf("raw exposition lacks %s", raw)
		}
	}
	// Counters agree with the truth and are monotone.
	for _, s := range f.find("vllm:prompt_tokens_by_source_total", map[string]string{"source": "local_compute"}) {
		for i := 1; i < len(s.vals); i++ {
			if s.vals[i] < s.vals[i-1] {
				t.Fatalf("%s decreases", s.labels)
			}
		}
	}
	for _, w := range tr.Windows[:3] {
		s := f.find("vllm:prompt_tokens_by_source_total", map[string]string{"source": "local_compute", "pod": w.Pod})[0]
		base := s.ts[0] - int64(tr.Start*1000)
		i0 := slices.Index(s.ts, base+int64(w.Start*1000))
		i1 := slices.Index(s.ts, base+int64(w.End*1000))
		if i0 < 0 || i1 < 0 {
			t.Fatalf("window %+v not on the scrape grid", w)
		}
		got := (s.vals[i1] - s.vals[i0]) / (w.End - w.Start)
		if diff := got - w.CounterDrainRate; diff > 1e-6 || diff < -1e-6 {
			t.Errorf("counter rate over window %v-%v is %v, truth says %v", w.Start, w.End, got, w.CounterDrainRate)
		}
		wait := f.find("vllm:num_requests_waiting", map[string]string{"pod": w.Pod})[0]
		for i := i0 + 1; i <= i1; i++ {
			if wait.vals[i] <= 0 {
				t.Errorf("window %v-%v of %s: waiting %v at a scrape inside it", w.Start, w.End, w.Pod, wait.vals[i])
			}
		}
	}
	outcomes := les("llm_d_epp_prefix_cache_affinity_filter_decisions_total", nil)
	if len(outcomes) != 1 {
		t.Errorf("decision counter has le labels: %v", outcomes)
	}
	if got := f.find("llm_d_epp_prefix_cache_affinity_filter_decisions_total", map[string]string{"outcome": "no_match"}); len(got) != 1 {
		t.Errorf("no no_match decision series")
	}
}

// cmpLE orders le label values numerically, +Inf last.
func cmpLE(a, b string) int {
	pa, pb := parseLE(a), parseLE(b)
	switch {
	case pa < pb:
		return -1
	case pa > pb:
		return 1
	}
	return 0
}

func parseLE(s string) float64 {
	if s == "+Inf" {
		return math.Inf(1)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return math.NaN()
	}
	return f
}

func TestLegacyVLLMAndOmitDropFamilies(t *testing.T) {
	data, _, _ := runMetrics(t, "calibration-1970", export.MetricsOptions{LegacyVLLM: true, Omit: []string{"vllm:request_prefill_kv_computed_tokens", "llm_d_epp_prefix_cache_affinity_filter_decisions_total"}})
	f := parseOM(t, data)
	for _, gone := range []string{"vllm:prompt_tokens_by_source", "vllm:prompt_tokens_cached", "vllm:request_prefill_kv_computed_tokens", "llm_d_epp_prefix_cache_affinity_filter_decisions"} {
		if _, ok := f.types[gone]; ok {
			t.Errorf("family %s still exposed", gone)
		}
	}
	for _, kept := range []string{"vllm:prompt_tokens", "vllm:prefix_cache_hits", "vllm:time_to_first_token_seconds"} {
		if _, ok := f.types[kept]; !ok {
			t.Errorf("family %s missing", kept)
		}
	}
}

func TestInterleavedLayoutHasTheSameSamples(t *testing.T) {
	grouped, _, _ := runMetrics(t, "calibration-1970", export.MetricsOptions{})
	inter, _, _ := runMetrics(t, "calibration-1970", export.MetricsOptions{Interleaved: true})
	g, i := parseOM(t, grouped), parseOM(t, inter)
	if len(g.series) != len(i.series) {
		t.Fatalf("%d series grouped, %d interleaved", len(g.series), len(i.series))
	}
	for k, s := range g.series {
		o := i.series[k]
		if o == nil || !slices.Equal(s.ts, o.ts) || !slices.Equal(s.vals, o.vals) {
			t.Fatalf("series %s differs between layouts", k)
		}
	}
}
