package records

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"testing"
)

// BenchmarkReader reads the shadow's reference records (8 endpoints, ~850 B
// a line, tuner/shadow/testdata/bench) plain and gzip-compressed: the
// reader alone, line reading and decoding, without the replay.
func BenchmarkReader(b *testing.B) {
	plain, err := os.ReadFile("../shadow/testdata/bench/records-8ep.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(plain); err != nil {
		b.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		b.Fatal(err)
	}
	n := bytes.Count(plain, []byte{'\n'})
	for _, bc := range []struct {
		name string
		in   []byte
	}{{"plain", plain}, {"gzip", gz.Bytes()}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(plain)))
			b.ReportAllocs()
			for b.Loop() {
				r := NewReader(bytes.NewReader(bc.in), Options{})
				got := 0
				for {
					_, err := r.Next()
					if err == io.EOF {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
					got++
				}
				if got != n {
					b.Fatalf("%d records, want %d", got, n)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
