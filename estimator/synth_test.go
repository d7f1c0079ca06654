package estimator_test

import (
	"context"
	"log/slog"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/estimator/prom"
)

// synthFleet writes a small fleet straight into an embedded TSDB (the real
// PromQL engine): pods with data-parallel engines that stay saturated, and
// two EPP replicas that describe the same endpoints.
type synthFleet struct {
	start time.Time
	steps int // scrapes, 15 s apart
	// engines per pod, in pod order p-0, p-1, ...
	engines []int
	// computed tokens per second per engine
	rate float64
	// replica b stops this many scrapes before the end
	bStopsEarly int
}

const synthScrape = 15 * time.Second

func (f synthFleet) end() time.Time { return f.start.Add(time.Duration(f.steps-1) * synthScrape) }

func (f synthFleet) write(t testing.TB, e *prom.Embedded) {
	t.Helper()
	var samples []prom.Sample
	add := func(name string, labels map[string]string, v float64, ts time.Time) {
		samples = append(samples, prom.Sample{Name: name, Labels: labels, Value: v, Time: ts})
	}
	buckets := []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000}
	for i := 0; i < f.steps; i++ {
		ts := f.start.Add(time.Duration(i) * synthScrape)
		sec := float64(i) * synthScrape.Seconds()
		for p, ne := range f.engines {
			pod := "p-" + strconv.Itoa(p)
			for en := 0; en < ne; en++ {
				l := func(extra ...string) map[string]string {
					m := map[string]string{"namespace": "ns", "pod": pod, "engine": strconv.Itoa(en), "model_name": "m"}
					for j := 0; j+1 < len(extra); j += 2 {
						m[extra[j]] = extra[j+1]
					}
					return m
				}
				add("vllm:num_requests_waiting", l(), 4, ts)
				add("vllm:num_requests_running", l(), 20, ts)
				add("vllm:kv_cache_usage_perc", l(), 0.5, ts)
				add("vllm:num_preemptions_total", l(), 0, ts)
				add("vllm:prompt_tokens_by_source_total", l("source", "local_compute"), f.rate*sec, ts)
				add("vllm:prompt_tokens_by_source_total", l("source", "local_cache_hit"), 0.5*f.rate*sec, ts)
				add("vllm:request_prefill_time_seconds_sum", l(), 2*sec, ts)
				add("vllm:request_prefill_time_seconds_count", l(), sec, ts)
				// One request per second, every prompt 1500 tokens.
				for _, le := range buckets {
					v := 0.0
					if le >= 1500 {
						v = sec
					}
					add("vllm:request_prompt_tokens_bucket", l("le", strconv.FormatFloat(le, 'f', -1, 64)), v, ts)
				}
				add("vllm:request_prompt_tokens_bucket", l("le", "+Inf"), sec, ts)
				add("vllm:request_prompt_tokens_sum", l(), 1500*sec, ts)
				add("vllm:request_prompt_tokens_count", l(), sec, ts)
			}
		}
		for r, rep := range []string{"epp-a", "epp-b"} {
			if rep == "epp-b" && i >= f.steps-f.bStopsEarly {
				continue
			}
			for p := range f.engines {
				ep := "p-" + strconv.Itoa(p)
				l := map[string]string{"namespace": "ns", "pod": rep, "endpoint_name": ep, "producer_name": "x", "fairness_id": "d", "priority": "0"}
				// Replica a sees 100 tokens per endpoint, b 1000 (b reports more).
				add("llm_d_epp_inflight_tokens", l, float64(100*(1+9*r)), ts)
				add("llm_d_epp_inflight_requests", l, float64(1+r), ts)
				add("llm_d_epp_scheduler_attempts_total", map[string]string{"namespace": "ns", "pod": rep, "endpoint_name": ep, "status": "success"}, float64(p+1)*sec, ts)
			}
		}
	}
	if err := e.Append(context.Background(), samples...); err != nil {
		t.Fatal(err)
	}
}

func newEmbedded(t testing.TB) *prom.Embedded {
	t.Helper()
	e, err := prom.NewEmbedded(prom.EmbeddedConfig{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// TestDataParallelEnginesSumPerPodAndReplicasAreNotAdded checks a pod's
// drain rate is the sum of its engines' and that in-flight snapshots come
// from one EPP replica, the freshest, never the sum of replicas.
func TestDataParallelEnginesSumPerPodAndReplicasAreNotAdded(t *testing.T) {
	f := synthFleet{start: time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC), steps: 161, engines: []int{1, 2, 2}, rate: 1000, bStopsEarly: 8}
	e := newEmbedded(t)
	f.write(t, e)
	at := f.end().Add(offGrid)
	est, err := estimator.New(e, fixedClock(at), estimator.Config{Lookback: 40 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	target := estimator.Target{Name: "synth", VLLMSelector: `namespace="ns"`, EPPSelector: `pod=~"epp-.*"`, MaxNumSeqs: 256}
	got, err := est.Estimate(context.Background(), target, at)
	if err != nil {
		t.Fatal(err)
	}
	if got.Queries.Failed != 0 {
		t.Fatalf("%d queries failed: %v", got.Queries.Failed, codes(got.Reasons))
	}
	b := got.DrainRate
	if b.Status != estimator.StatusOK {
		t.Fatalf("drain rate %s: %v", b.Status, codes(got.Reasons))
	}
	want := map[string]float64{"p-0": 1000, "p-1": 2000, "p-2": 2000}
	for _, p := range b.PerPod {
		if math.Abs(p.Value-want[p.Pod]) > 1e-6*want[p.Pod] {
			t.Errorf("pod %s: %v tok/s over %d engines, want %v", p.Pod, p.Value, p.Engines, want[p.Pod])
		}
	}
	if len(b.PerPod) != 3 || math.Abs(*b.Value-2000) > 1e-6 {
		t.Errorf("pooled %v over %d pods, want the median 2000 over 3", *b.Value, len(b.PerPod))
	}
	if got.Prompt.P50 == nil || math.Abs(*got.Prompt.P50-1500) > 1500*0.4 || *got.Prompt.Mean != 1500 {
		t.Errorf("prompt p50 %v mean %v, want about 1500 (inside the (1000, 2000] bucket) and exactly 1500", got.Prompt.P50, got.Prompt.Mean)
	}

	in := got.InFlight
	if in.Status != estimator.StatusOK || len(in.Replicas) != 2 {
		t.Fatalf("in-flight %s with replicas %v: %v", in.Status, in.Replicas, in.Reasons)
	}
	usedB := false
	for _, s := range in.Snapshots {
		if len(s.Endpoints) != 3 {
			t.Fatalf("snapshot at %s holds %d endpoints, want 3", s.Time, len(s.Endpoints))
		}
		for _, ep := range s.Endpoints {
			want := map[string]float64{"epp-a": 100, "epp-b": 1000}[s.Replica]
			if ep.Tokens != want {
				t.Fatalf("snapshot at %s from %s: %s has %v tokens, want %v (replicas must never be added)", s.Time, s.Replica, ep.Endpoint, ep.Tokens, want)
			}
		}
		usedB = usedB || s.Replica == "epp-b"
	}
	last := in.Snapshots[len(in.Snapshots)-1]
	if last.Replica != "epp-a" {
		t.Errorf("the last snapshot uses %s; epp-b stopped 2 minutes earlier, want the fresher epp-a", last.Replica)
	}
	if !usedB {
		t.Errorf("no snapshot used epp-b although it was as fresh and reported more")
	}
	shares := map[string]float64{}
	for _, s := range got.Routing.Endpoints {
		shares[s.Endpoint] = s.Share
	}
	if math.Abs(shares["p-0"]-1.0/6) > 0.01 || math.Abs(shares["p-2"]-3.0/6) > 0.01 {
		t.Errorf("routing shares %v, want 1/6, 2/6, 3/6", shares)
	}
}
