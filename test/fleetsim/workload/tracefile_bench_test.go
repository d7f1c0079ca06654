package workload

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"testing"
)

const mooncakeTrace = "../traces/mooncake-conversation.jsonl.gz"

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
