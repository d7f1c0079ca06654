package prom_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"

	"github.com/gatetuner/gatetuner/estimator/prom"
)

const (
	benchSeries = 64
	benchSpan   = 6 * time.Hour
	benchStep   = 15 * time.Second
)

var benchStart = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// fillBench writes 64 counter series (16 pods × 4 engines) × 6 h at 15 s,
// time step by time step like a simulator, in one transaction per step.
func fillBench(b *testing.B, e *prom.Embedded) int {
	b.Helper()
	ctx := context.Background()
	n := 0
	steps := int(benchSpan / benchStep)
	labels := make([]map[string]string, benchSeries)
	for i := range labels {
		labels[i] = map[string]string{"namespace": "llm", "pod": fmt.Sprintf("pod-%02d", i/4), "engine": fmt.Sprint(i % 4)}
	}
	for s := 0; s <= steps; s++ {
		app := e.Appender(ctx)
		ts := benchStart.Add(time.Duration(s) * benchStep)
		for i := range benchSeries {
			if err := app.Add(prom.Sample{Name: "vllm:prompt_tokens_total", Labels: labels[i], Value: float64(s * (100 + i)), Time: ts}); err != nil {
				b.Fatal(err)
			}
			n++
		}
		if err := app.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	return n
}

// BenchmarkEmbeddedIngest: Appender ingest of 64 series × 6 h at 15 s.
func BenchmarkEmbeddedIngest(b *testing.B) {
	var n int
	for b.Loop() {
		b.StopTimer()
		e, err := prom.NewEmbedded(prom.EmbeddedConfig{Logger: quietLogger()})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		n = fillBench(b, e)
		b.StopTimer()
		_ = e.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(n), "samples/op")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/sample")
}

// BenchmarkEmbeddedIngestText: the same data as one OpenMetrics text.
func BenchmarkEmbeddedIngestText(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("# TYPE vllm:prompt_tokens counter\n")
	steps := int(benchSpan / benchStep)
	for i := range benchSeries {
		for s := 0; s <= steps; s++ {
			fmt.Fprintf(&sb, "vllm:prompt_tokens_total{namespace=\"llm\",pod=\"pod-%02d\",engine=\"%d\"} %d %d\n",
				i/4, i%4, s*(100+i), benchStart.Add(time.Duration(s)*benchStep).Unix())
		}
	}
	sb.WriteString("# EOF\n")
	text := sb.String()
	b.SetBytes(int64(len(text)))
	var n int
	for b.Loop() {
		b.StopTimer()
		e, err := prom.NewEmbedded(prom.EmbeddedConfig{Logger: quietLogger()})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		st, err := e.IngestText(context.Background(), strings.NewReader(text), prom.IngestOptions{Format: prom.FormatOpenMetrics})
		if err != nil {
			b.Fatal(err)
		}
		n = st.Samples
		b.StopTimer()
		_ = e.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(n), "samples/op")
}

// BenchmarkEmbeddedRangeQuery: range queries over the whole 6 h at a 15 s
// step (1441 steps) on the 64 series.
func BenchmarkEmbeddedRangeQuery(b *testing.B) {
	e, err := prom.NewEmbedded(prom.EmbeddedConfig{Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	fillBench(b, e)
	r := v1.Range{Start: benchStart, End: benchStart.Add(benchSpan), Step: benchStep}
	for _, q := range []string{
		`rate(vllm:prompt_tokens_total[2m])`,
		`sum by (namespace, pod) (rate(vllm:prompt_tokens_total[2m]))`,
	} {
		b.Run(q, func(b *testing.B) {
			var points int
			for b.Loop() {
				m, _, err := e.QueryRange(context.Background(), q, r)
				if err != nil {
					b.Fatal(err)
				}
				points = 0
				for _, s := range m {
					points += len(s.Values)
				}
			}
			b.ReportMetric(float64(points), "points/op")
		})
	}
}
