package fleetsim

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/test/fleetsim/internal/fleettest"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
)

// promptShiftHour is prompt-shift's mix compressed into one hour (its six
// phases 10 minutes each) at a steady 50 requests/s on its 16 pods.
func promptShiftHour(b *testing.B) *scenario.Scenario {
	b.Helper()
	sc := fleettest.Load(b, "prompt-shift")
	sc, err := sc.Compressed(float64(sc.Duration()) / float64(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	for i := range sc.Phases {
		sc.Phases[i].RequestRate = 50
	}
	return sc
}

// BenchmarkPromptShiftHour simulates one hour of 16 pods at 50 requests/s
// with the prompt-shift mix, writing OpenMetrics (15 s scrapes) and one gate
// record per decision to io.Discard.
func BenchmarkPromptShiftHour(b *testing.B) {
	sc := promptShiftHour(b)
	b.ReportAllocs()
	var reqs int
	for b.Loop() {
		tr, err := Run(context.Background(), sc, Options{Seed: 1, Metrics: io.Discard, Records: io.Discard})
		if err != nil {
			b.Fatal(err)
		}
		reqs = 0
		for _, p := range tr.Phases {
			reqs += p.Requests
		}
	}
	b.ReportMetric(float64(reqs), "requests/op")
}

// BenchmarkPromptShiftHourTruthOnly is the same run without outputs.
func BenchmarkPromptShiftHourTruthOnly(b *testing.B) {
	sc := promptShiftHour(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Run(context.Background(), sc, Options{Seed: 1}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPromptShiftHourLLMD2026 is BenchmarkPromptShiftHour under the
// llm-d-2026 export shape (lazy EPP series, GIE names alongside, operator
// target labels).
func BenchmarkPromptShiftHourLLMD2026(b *testing.B) {
	sc := promptShiftHour(b)
	x, err := scenario.ExportShapeNamed(scenario.ShapeLLMD2026)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Run(context.Background(), sc, Options{Seed: 1, Metrics: io.Discard, Records: io.Discard, Exporters: &x}); err != nil {
			b.Fatal(err)
		}
	}
}
