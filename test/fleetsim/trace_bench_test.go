package fleetsim

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// traceHour is the whole one-hour Mooncake trace at its own rate (scale 1,
// no loop) on 16 pods, in one phase.
func traceHour(b *testing.B, window time.Duration) *Scenario {
	b.Helper()
	return traceScenario(b, func(sc *Scenario) {
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

// BenchmarkTraceReader streams the trace, once and four times over (each
// copy an hour later): the reader's live memory (reader-live-KB: the live
// heap after a GC every 2000 records, less the heap before reading, which
// holds the compressed input) stays flat while the input grows.
func BenchmarkTraceReader(b *testing.B) {
	f, err := os.Open(mooncakeTrace)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	src, err := NewTraceReader(f, TraceReaderOptions{Strict: true})
	if err != nil {
		b.Fatal(err)
	}
	var recs []TraceRecord
	for {
		rec, err := src.Next()
		if err == io.EOF {
			break
		} else if err != nil {
			b.Fatal(err)
		}
		c := *rec
		c.HashIDs = append([]int64(nil), rec.HashIDs...)
		recs = append(recs, c)
	}
	for _, n := range []int{1, 4} {
		// The trace n times over, each copy an hour later, gzip-compressed.
		var plain bytes.Buffer
		for k := range n {
			for _, r := range recs {
				fmt.Fprintf(&plain, `{"timestamp": %d, "input_length": %d, "output_length": %d, "hash_ids": %s}`+"\n",
					r.TimestampMs+int64(k)*3600_000, r.InputLength, r.OutputLength, strings.ReplaceAll(fmt.Sprint(r.HashIDs), " ", ", "))
			}
		}
		data := gz(b, plain.Bytes())
		b.Run(map[int]string{1: "1x", 4: "4x"}[n], func(b *testing.B) {
			b.ReportAllocs()
			var peak int64
			for b.Loop() {
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				base := int64(ms.HeapAlloc)
				r, err := NewTraceReader(bytes.NewReader(data), TraceReaderOptions{})
				if err != nil {
					b.Fatal(err)
				}
				for i := 0; ; i++ {
					if _, err := r.Next(); err == io.EOF {
						break
					} else if err != nil {
						b.Fatal(err)
					}
					if i%2000 == 0 {
						runtime.GC()
						runtime.ReadMemStats(&ms)
						peak = max(peak, int64(ms.HeapAlloc)-base)
					}
				}
				if r.Stats().Bad != 0 {
					b.Fatal(r.Stats())
				}
			}
			b.ReportMetric(float64(peak)/(1<<10), "reader-live-KB")
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
	saturation := func(n int) *Scenario {
		return traceScenario(b, func(sc *Scenario) { sc.Phases = sc.Phases[:n] })
	}
	afternoon := func(n int) *Scenario {
		sc := mustLoad(b, "prompt-shift")
		sc.Phases = sc.Phases[3:4]
		sc.Phases[0].Duration = time.Duration(n) * 40 * time.Minute
		if err := sc.Validate(); err != nil {
			b.Fatal(err)
		}
		return sc
	}
	for _, tc := range []struct {
		name string
		sc   func(int) *Scenario
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
				slots, live = s.tree.len(), s.tree.live()
			}
			b.ReportMetric(float64(heap)/(1<<20), "heap-live-MB")
			b.ReportMetric(float64(slots), "tree-slots")
			b.ReportMetric(float64(live), "tree-live")
		})
	}
}
