package window_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/tuner/spans/window"
)

// BenchmarkWindowMemoryPerSpan fills a window to its bound and reports the
// heap it holds per span.
func BenchmarkWindowMemoryPerSpan(b *testing.B) {
	const n = 1 << 20
	batchOf := batch(1024, t0, "glm-5")
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		w, err := window.Open("", "glm", window.Options{MaxSpans: n, MaxAge: 24 * time.Hour, Now: func() time.Time { return t0 }})
		if err != nil {
			b.Fatal(err)
		}
		for range n / len(batchOf) {
			if _, err := w.Append(batchOf); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(w.Len()), "heap-bytes/span")
		runtime.KeepAlive(w)
	}
}

// BenchmarkWindowAppendPersisted appends 512-span batches to a window on
// disk: the store's share of ingest.
func BenchmarkWindowAppendPersisted(b *testing.B) {
	w, err := window.Open(b.TempDir(), "glm", window.Options{MaxSpans: 1 << 20, MaxAge: 24 * time.Hour, Now: func() time.Time { return t0 }})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	batchOf := batch(512, t0, "glm-5")
	for b.Loop() {
		if _, err := w.Append(batchOf); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*512), "ns/span")
}
