package eppconfig

import (
	"testing"

	"github.com/gatetuner/gatetuner/gate"
)

// BenchmarkParseEditProduction parses the production sample and edits its
// filter (replace one value, insert one key), verification included.
func BenchmarkParseEditProduction(b *testing.B) {
	data := readSample(b, sampleProduction)
	prof := mustProfile(b, gate.ProfilePenaltyMode)
	changes := []Change{{Target: Target{Plugin: "prefill-affinity"},
		Set: map[gate.Key]Value{gate.KeyMaxTTFTPenaltyMs: Number(4092), gate.KeyPenaltyMode: String("matchedTokens")}}}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		f, err := Parse(data, sampleProduction)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := f.Edit(changes, prof); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseProduction parses the production sample only.
func BenchmarkParseProduction(b *testing.B) {
	data := readSample(b, sampleProduction)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data, sampleProduction); err != nil {
			b.Fatal(err)
		}
	}
}
