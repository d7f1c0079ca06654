package fleetsim

import (
	"bytes"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/test/fleetsim/internal/fleettest"
	"github.com/gatetuner/gatetuner/test/promharness"
)

// TestBackfilledMetricsReadBackInARealPrometheus backfills a run with
// promtool and queries it through the HTTP API: the counters' rise over each
// saturated window is the truth's counter drain rate, and the waiting queue
// is non-empty all through the window.
func TestBackfilledMetricsReadBackInARealPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real Prometheus (promtool backfill + server)")
	}
	sc := fleettest.Load(t, "calibration-1970")
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
		v0, ok0 := fleettest.Scalar(t, srv, sel, at(w.Start))
		v1, ok1 := fleettest.Scalar(t, srv, sel, at(w.End))
		if !ok0 || !ok1 {
			t.Fatalf("no %s at the window's ends", sel)
		}
		if got := (v1 - v0) / (w.End - w.Start); math.Abs(got-w.CounterDrainRate) > 1e-6 {
			t.Errorf("%s: counter rate %v over [%v, %v], truth %v", w.Pod, got, w.Start, w.End, w.CounterDrainRate)
		}
		// Prometheus 2.x range selectors include their left end: look back
		// one millisecond less than the window to stay inside it.
		minWait, ok := fleettest.Scalar(t, srv, fmt.Sprintf(`min_over_time(vllm:num_requests_waiting{pod=%q}[%dms])`, w.Pod,
			int64((w.End-w.Start)*1000)-1), at(w.End))
		if !ok || minWait <= 0 {
			t.Errorf("%s: min waiting over the window = %v (found %v)", w.Pod, minWait, ok)
		}
		kv, _ := fleettest.Scalar(t, srv, fmt.Sprintf(`max_over_time(vllm:kv_cache_usage_perc{pod=%q}[%dms])`, w.Pod,
			int64((w.End-w.Start)*1000)-1), at(w.End))
		if kv >= tr.Saturation.MaxKVUsage {
			t.Errorf("%s: KV usage %v in a saturated window", w.Pod, kv)
		}
	}
	p := tr.Phase("saturated")
	q := fmt.Sprintf(`histogram_quantile(0.5, sum by (le) (increase(vllm:time_to_first_token_seconds_bucket[%ds])))`, int((p.End - p.Start)))
	med, ok := fleettest.Scalar(t, srv, q, at(p.End))
	if !ok || !(med > 0) {
		t.Fatalf("%s = %v", q, med)
	}
	// Bucket resolution is coarse (40-80 s around the truth's median).
	t.Logf("TTFT median from the histogram %.1fs, truth %.1fs", med, p.TTFT.P50)
	if med < p.TTFT.P50/3 || med > p.TTFT.P50*3 {
		t.Errorf("histogram median %.1fs far from the truth %.1fs", med, p.TTFT.P50)
	}
	info, ok := fleettest.Scalar(t, srv, fmt.Sprintf(`vllm:cache_config_info{pod=%q}`, sc.PodName(0)), at(tr.End))
	if !ok || info != 1 {
		t.Errorf("cache_config_info = %v (found %v)", info, ok)
	}
}
