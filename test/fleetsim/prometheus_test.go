package fleetsim

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/gatetuner/gatetuner/test/promharness"
)

func scalar(t *testing.T, srv *promharness.Server, q string, at time.Time) (float64, bool) {
	t.Helper()
	v, _, err := srv.Query(context.Background(), q, at)
	if err != nil {
		t.Fatalf("query %s: %v", q, err)
	}
	vec, ok := v.(model.Vector)
	if !ok || len(vec) == 0 {
		return 0, false
	}
	if len(vec) != 1 {
		t.Fatalf("query %s returned %d series", q, len(vec))
	}
	return float64(vec[0].Value), true
}

// TestBackfilledMetricsReadBackInARealPrometheus backfills a run with
// promtool and queries it through the HTTP API: the counters' rise over each
// saturated window is the truth's counter drain rate, and the waiting queue
// is non-empty all through the window.
func TestBackfilledMetricsReadBackInARealPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real Prometheus (promtool backfill + server)")
	}
	sc := mustLoad(t, "calibration-1970")
	base := time.Now().Add(-sc.Duration() - time.Hour).Truncate(time.Minute)
	var om bytes.Buffer
	tr := mustRun(t, sc, Options{Seed: 1, Metrics: &om, BaseTime: base})
	dir := promharness.Backfill(t, &om)
	srv := promharness.Start(t, promharness.Options{DataDir: dir})
	at := func(sec float64) time.Time { return base.Add(time.Duration(sec * float64(time.Second))) }
	if len(tr.Windows) == 0 {
		t.Fatal("no saturated windows to check")
	}
	for _, w := range tr.Windows[:4] {
		sel := fmt.Sprintf(`vllm:prompt_tokens_by_source_total{source="local_compute",pod=%q}`, w.Pod)
		v0, ok0 := scalar(t, srv, sel, at(w.Start))
		v1, ok1 := scalar(t, srv, sel, at(w.End))
		if !ok0 || !ok1 {
			t.Fatalf("no %s at the window's ends", sel)
		}
		if got := (v1 - v0) / (w.End - w.Start); math.Abs(got-w.CounterDrainRate) > 1e-6 {
			t.Errorf("%s: counter rate %v over [%v, %v], truth %v", w.Pod, got, w.Start, w.End, w.CounterDrainRate)
		}
		// Prometheus 2.x range selectors include their left end: look back
		// one millisecond less than the window to stay inside it.
		minWait, ok := scalar(t, srv, fmt.Sprintf(`min_over_time(vllm:num_requests_waiting{pod=%q}[%dms])`, w.Pod,
			int64((w.End-w.Start)*1000)-1), at(w.End))
		if !ok || minWait <= 0 {
			t.Errorf("%s: min waiting over the window = %v (found %v)", w.Pod, minWait, ok)
		}
		kv, _ := scalar(t, srv, fmt.Sprintf(`max_over_time(vllm:kv_cache_usage_perc{pod=%q}[%dms])`, w.Pod,
			int64((w.End-w.Start)*1000)-1), at(w.End))
		if kv >= tr.Saturation.MaxKVUsage {
			t.Errorf("%s: KV usage %v in a saturated window", w.Pod, kv)
		}
	}
	p := tr.Phase("saturated")
	q := fmt.Sprintf(`histogram_quantile(0.5, sum by (le) (increase(vllm:time_to_first_token_seconds_bucket[%ds])))`, int((p.End - p.Start)))
	med, ok := scalar(t, srv, q, at(p.End))
	if !ok || !(med > 0) {
		t.Fatalf("%s = %v", q, med)
	}
	// Bucket resolution is coarse (40-80 s around the truth's median).
	t.Logf("TTFT median from the histogram %.1fs, truth %.1fs", med, p.TTFT.P50)
	if med < p.TTFT.P50/3 || med > p.TTFT.P50*3 {
		t.Errorf("histogram median %.1fs far from the truth %.1fs", med, p.TTFT.P50)
	}
	info, ok := scalar(t, srv, fmt.Sprintf(`vllm:cache_config_info{pod=%q}`, sc.PodName(0)), at(tr.End))
	if !ok || info != 1 {
		t.Errorf("cache_config_info = %v (found %v)", info, ok)
	}
}

// TestLiveFleetScrapedByARealPrometheus serves a live fleet on loopback and
// lets a real Prometheus scrape it at real time.
func TestLiveFleetScrapedByARealPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real Prometheus scraping in real time")
	}
	bin := promharness.Require(t)
	sc := mustLoad(t, "quiet")
	live, err := NewLive(sc, LiveOptions{Seed: 1, TimeScale: 60})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: live, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- live.Run(ctx, 50*time.Millisecond) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("live run: %v", err)
		}
	})
	srv := promharness.Start(t, promharness.Options{Binaries: bin, ScrapeInterval: time.Second,
		Targets: []promharness.Target{{Job: "fleet", Addrs: []string{ln.Addr().String()}}}})
	deadline := time.Now().Add(60 * time.Second)
	for {
		n, ok := scalar(t, srv, `count(vllm:num_requests_running)`, time.Now())
		g, ok2 := scalar(t, srv, `sum(vllm:generation_tokens_total)`, time.Now())
		if ok && ok2 && int(n) == sc.Pods.Count && g > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus never saw %d pods generating (count %v, tokens %v)\n%s", sc.Pods.Count, n, g, srv.LogTail(20))
		}
		time.Sleep(500 * time.Millisecond)
	}
	// The EPP's in-flight series appear only at an endpoint's first request
	// (docs/exporters.md): wait, within the same deadline, until every
	// endpoint has had one.
	for {
		eps, ok := scalar(t, srv, `count(llm_d_epp_inflight_tokens)`, time.Now())
		if ok && int(eps) == sc.Pods.Count {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("llm_d_epp_inflight_tokens has %v endpoints, want %d", eps, sc.Pods.Count)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
