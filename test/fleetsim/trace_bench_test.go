package fleetsim

import (
	"context"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/test/fleetsim/internal/fleettest"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
)

// traceHour is the whole one-hour Mooncake trace at its own rate (scale 1,
// no loop) on 16 pods, in one phase.
func traceHour(b *testing.B, window time.Duration) *scenario.Scenario {
	b.Helper()
	return traceScenario(b, func(sc *scenario.Scenario) {
		sc.Trace.TargetUtilization, sc.Trace.Scale, sc.Trace.Loop, sc.Trace.Window = 0, 1, false, window
		sc.Pods.Count = 16
		sc.Phases = sc.Phases[:1]
		sc.Phases[0].Duration = 3538 * time.Second
		if window > 0 {
			sc.Phases[0].Duration = window
		}
	})
}

// BenchmarkTraceHour16Pods simulates the whole one-hour trace on 16 pods,
// writing OpenMetrics (15 s scrapes) and one gate record per decision to
// io.Discard; the half-hour variant shows how cost and memory grow with the
// trace's length. heap-MB is the live heap after the run (before a GC).
func BenchmarkTraceHour16Pods(b *testing.B) {
	for _, tc := range []struct {
		name   string
		window time.Duration
	}{{"30m", 30 * time.Minute}, {"60m", 0}} {
		b.Run(tc.name, func(b *testing.B) {
			sc := traceHour(b, tc.window)
			b.ReportAllocs()
			var reqs int64
			var heap uint64
			for b.Loop() {
				tr, err := Run(context.Background(), sc, Options{Seed: 1, Metrics: io.Discard, Records: io.Discard})
				if err != nil {
					b.Fatal(err)
				}
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				heap = max(heap, ms.HeapAlloc)
				reqs = tr.Trace.Requests
			}
			b.ReportMetric(float64(reqs), "requests/op")
			b.ReportMetric(float64(heap)/(1<<20), "heap-MB")
		})
	}
}

// BenchmarkLongRunMemory runs a workload for one length and for four times
// it, measuring the live heap (heap-live-MB: after a GC every 2 minutes of
// scenario time, the largest) and the prefix tree's node slots at the end
// (tree-slots; tree-live of them held): both stay flat when the run is four
// times as long, once the caches have filled. Cases: trace-saturation (the
// trace looped on 8 pods at 80 %, a pass every ~15 minutes) for its first
// quarter hour and for its hour, and prompt-shift's afternoon (chat and
// coding agents over churning repositories) for 40 and 160 minutes. Metrics
// and records go to io.Discard.
func BenchmarkLongRunMemory(b *testing.B) {
	saturation := func(n int) *scenario.Scenario {
		return traceScenario(b, func(sc *scenario.Scenario) { sc.Phases = sc.Phases[:n] })
	}
	afternoon := func(n int) *scenario.Scenario {
		sc := fleettest.Load(b, "prompt-shift")
		sc.Phases = sc.Phases[3:4]
		sc.Phases[0].Duration = time.Duration(n) * 40 * time.Minute
		if err := sc.Validate(); err != nil {
			b.Fatal(err)
		}
		return sc
	}
	for _, tc := range []struct {
		name string
		sc   func(int) *scenario.Scenario
		n    int
	}{{"trace/15m", saturation, 1}, {"trace/60m", saturation, 4}, {"sessions/40m", afternoon, 1}, {"sessions/160m", afternoon, 4}} {
		b.Run(tc.name, func(b *testing.B) {
			sc := tc.sc(tc.n)
			b.ReportAllocs()
			var heap uint64
			var slots, live int
			for b.Loop() {
				s, err := newSim(sc, Options{Seed: 1, Metrics: io.Discard, Records: io.Discard}, false)
				if err != nil {
					b.Fatal(err)
				}
				for t := s.runStart; t < s.runEnd; {
					t = min(t+int64(2*time.Minute), s.runEnd)
					if err := s.advance(context.Background(), t); err != nil {
						b.Fatal(err)
					}
					runtime.GC()
					var ms runtime.MemStats
					runtime.ReadMemStats(&ms)
					heap = max(heap, ms.HeapAlloc)
				}
				slots, live = s.tree.Len(), s.tree.Live()
			}
			b.ReportMetric(float64(heap)/(1<<20), "heap-live-MB")
			b.ReportMetric(float64(slots), "tree-slots")
			b.ReportMetric(float64(live), "tree-live")
		})
	}
}
