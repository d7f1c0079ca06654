package gate

import (
	"encoding/json"
	"os"
	"testing"
)

func loadBenchEndpoints(b *testing.B) []Endpoint {
	b.Helper()
	data, err := os.ReadFile("testdata/bench/eight-endpoints.json")
	if err != nil {
		b.Fatal(err)
	}
	var in struct {
		Endpoints []struct {
			MatchBlocks, TotalBlocks, BlockSizeTokens int
			InFlightTokens, InFlightRequests          int64
		}
	}
	if err := json.Unmarshal(data, &in); err != nil {
		b.Fatal(err)
	}
	eps := make([]Endpoint, len(in.Endpoints))
	for i, e := range in.Endpoints {
		eps[i] = Endpoint{HasMatch: true, MatchBlocks: e.MatchBlocks, TotalBlocks: e.TotalBlocks, BlockSizeTokens: e.BlockSizeTokens,
			HasLoad: true, InFlightTokens: e.InFlightTokens, InFlightRequests: e.InFlightRequests}
	}
	return eps
}

var sinkDecision Decision

// BenchmarkDecide8: one decision on 8 endpoints per mode (goal ≤ 100 ns, 0 allocs).
func BenchmarkDecide8(b *testing.B) {
	eps := loadBenchEndpoints(b)
	for _, bc := range []struct {
		name string
		s    Settings
	}{
		{"static", static(5000)},
		{"static-v2", v2(static(5000))},
		{"matchedTokens", matched(18000)},
		{"matchedTokens-v2", v2(matched(18000))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sinkDecision = Decide(&bc.s, eps)
			}
		})
	}
}

// BenchmarkDecideAll16: one decision against 16 candidate settings (goal ≤ 1 µs, 0 allocs).
func BenchmarkDecideAll16(b *testing.B) {
	eps := loadBenchEndpoints(b)
	settings := make([]Settings, 16)
	for i := range settings {
		if i < 12 {
			settings[i] = static(float64(int(250) << i))
		} else {
			settings[i] = matched(float64(1000 * (i - 11)))
		}
	}
	out := make([]Decision, len(settings))
	b.ReportAllocs()
	for b.Loop() {
		DecideAll(settings, eps, out)
	}
}

// BenchmarkDecideAndJudge8: decision plus verdict, the shadow's per-record work.
func BenchmarkDecideAndJudge8(b *testing.B) {
	eps := loadBenchEndpoints(b)
	s := static(5000)
	b.ReportAllocs()
	var n int64
	for b.Loop() {
		d := Decide(&s, eps)
		_, x := Judge(&d)
		n += x
	}
	_ = n
}
