package estimator_test

import (
	"context"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/estimator/prom"
	"github.com/gatetuner/gatetuner/test/fleetsim/export"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
)

// pointsQuerier wraps a Querier and records the largest number of points
// per series any range query asked for.
type pointsQuerier struct {
	q         prom.Querier
	mu        sync.Mutex
	maxPoints int
	maxQuery  string
	queries   int
}

func (p *pointsQuerier) Query(ctx context.Context, q string, ts time.Time) (model.Vector, v1.Warnings, error) {
	p.mu.Lock()
	p.queries++
	p.mu.Unlock()
	return p.q.Query(ctx, q, ts)
}

func (p *pointsQuerier) QueryRange(ctx context.Context, q string, r v1.Range) (model.Matrix, v1.Warnings, error) {
	n := int(r.End.Sub(r.Start)/r.Step) + 1
	p.mu.Lock()
	p.queries++
	if n > p.maxPoints {
		p.maxPoints, p.maxQuery = n, q
	}
	p.mu.Unlock()
	return p.q.QueryRange(ctx, q, r)
}

// prometheusPointLimit is Prometheus' limit on points per series of a range query.
const prometheusPointLimit = 11000

// TestNoQueryAsksForMoreThan11kPoints wraps the querier and checks every
// range query stays within Prometheus' 11,000 points per series, for the
// default 6 h lookback and for a 30-day one (split and stretched steps).
func TestNoQueryAsksForMoreThan11kPoints(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real Prometheus; skipped under -short")
	}
	run := fixture(t, variant{key: "calibration-15928", scenario: "calibration-15928", seed: 1})
	for _, lookback := range []time.Duration{6 * time.Hour, 30 * 24 * time.Hour} {
		pq := &pointsQuerier{q: run.q}
		est, err := estimator.New(pq, fixedClock(run.end()), estimator.Config{Lookback: lookback})
		if err != nil {
			t.Fatal(err)
		}
		e, err := est.Estimate(context.Background(), run.target(), run.end())
		if err != nil {
			t.Fatal(err)
		}
		if e.Queries.Failed > 0 {
			t.Fatalf("lookback %v: %d queries failed: %v", lookback, e.Queries.Failed, codes(e.Reasons))
		}
		t.Logf("lookback %v: %d queries, at most %d points per series (%s)", lookback, pq.queries, pq.maxPoints, pq.maxQuery)
		if pq.maxPoints > prometheusPointLimit {
			t.Errorf("lookback %v: a query asked for %d points per series: %s", lookback, pq.maxPoints, pq.maxQuery)
		}
		if e.Queries.MaxPoints != pq.maxPoints {
			t.Errorf("the estimates report %d max points, the querier saw %d", e.Queries.MaxPoints, pq.maxPoints)
		}
		if e.DrainRate.Status != estimator.StatusOK {
			t.Errorf("lookback %v: drain rate %s %v", lookback, e.DrainRate.Status, codes(e.Reasons))
		}
	}
}

// benchVariant is calibration-15928 grown to 64 pods over 6 h (request
// rates ×16, phases ×9). Families the estimator never reads are left out to
// keep the backfill near 1.5 GB of OpenMetrics text.
var benchVariant = variant{key: "bench-64x6h", scenario: "calibration-15928", seed: 1,
	edit: func(sc *scenario.Scenario) {
		sc.Pods.Count = 64
		for i := range sc.Phases {
			sc.Phases[i].RequestRate *= 16
			sc.Phases[i].Duration *= 9
		}
	},
	metrics: export.MetricsOptions{Omit: []string{
		"vllm:request_queue_time_seconds", "vllm:request_decode_time_seconds", "vllm:request_inference_time_seconds",
		"vllm:e2e_request_latency_seconds", "vllm:time_to_first_token_seconds", "vllm:request_generation_tokens",
		"llm_d_epp_request_ttft_seconds",
	}},
}

// BenchmarkEstimate64Pods6h times one estimation cycle of a 64-pod
// deployment over a 6 h lookback against a real Prometheus. The fixture
// (simulate, backfill, start) takes about a minute before the timer starts.
func BenchmarkEstimate64Pods6h(b *testing.B) {
	run := fixture(b, benchVariant)
	at := run.end()
	var slowMu sync.Mutex
	var slow []prom.QueryEvent
	hq, err := prom.NewHTTP(prom.HTTPConfig{Address: run.srv.URL(), Timeout: time.Minute, Observer: func(ev prom.QueryEvent) {
		slowMu.Lock()
		slow = append(slow, ev)
		slowMu.Unlock()
	}})
	if err != nil {
		b.Fatal(err)
	}
	defer hq.Close()
	pq := &pointsQuerier{q: hq}
	est, err := estimator.New(pq, fixedClock(at), estimator.Config{Lookback: 6 * time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	target := run.target()
	// Warm the server's caches once, and check the cycle is a real one.
	e, err := est.Estimate(ctx, target, at)
	if err != nil {
		b.Fatal(err)
	}
	if e.Status != estimator.StatusOK || len(e.Coverage.Covered) != 64 {
		b.Fatalf("status %s, %d pods covered, reasons %v", e.Status, len(e.Coverage.Covered), codes(e.Reasons))
	}
	sort.Slice(slow, func(i, j int) bool { return slow[i].Duration > slow[j].Duration })
	for _, ev := range slow[:min(4, len(slow))] {
		b.Logf("slowest: %v %s %.120s", ev.Duration.Round(time.Millisecond), ev.Type, ev.Query)
	}
	b.Logf("drain %.0f (truth pooled %.0f), nominal %.0f, %d windows, %d snapshots, %d queries, max %d points/series, OM %d MB",
		*e.DrainRate.Value, func() float64 { v, _ := drainTruth(run.truth, run.base, at.Add(-6*time.Hour), at); return v }(),
		*e.Nominal.Value, e.DrainRate.Windows, len(e.InFlight.Snapshots), e.Queries.Queries, e.Queries.MaxPoints, run.omBytes>>20)

	var peak atomic.Uint64
	var worst time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		base := ms.HeapAlloc
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			t := time.NewTicker(2 * time.Millisecond)
			defer t.Stop()
			for {
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				if d := m.HeapAlloc - min(base, m.HeapAlloc); d > peak.Load() {
					peak.Store(d)
				}
				select {
				case <-stop:
					return
				case <-t.C:
				}
			}
		}()
		start := time.Now()
		e, err := est.Estimate(ctx, target, at)
		if d := time.Since(start); d > worst {
			worst = d
		}
		close(stop)
		<-done
		if err != nil || e.Status != estimator.StatusOK {
			b.Fatalf("cycle: %v %v", err, e.Status)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(peak.Load())/(1<<20), "peak-heap-MB")
	b.ReportMetric(worst.Seconds(), "worst-s")
	b.ReportMetric(float64(pq.maxPoints), "max-points/series")
	if pq.maxPoints > prometheusPointLimit {
		b.Fatalf("a query asked for %d points per series: %s", pq.maxPoints, pq.maxQuery)
	}
}
