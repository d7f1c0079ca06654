package gate

import (
	"math"
	"testing"
)

func TestEnumParsersRoundTripTheirSpellings(t *testing.T) {
	for _, src := range []TTFTSource{SourcePrefillThroughput, SourceLatencyPredictor} {
		if got, err := ParseTTFTSource(src.String()); err != nil || got != src {
			t.Errorf("ParseTTFTSource(%q) = %v, %v", src, got, err)
		}
	}
	for _, m := range []PenaltyMode{ModeStatic, ModeMatchedTokens} {
		if got, err := ParsePenaltyMode(m.String()); err != nil || got != m {
			t.Errorf("ParsePenaltyMode(%q) = %v, %v", m, got, err)
		}
	}
	for _, bad := range []string{"", "LatencyPredictor", "magic"} {
		if _, err := ParseTTFTSource(bad); err == nil {
			t.Errorf("ParseTTFTSource(%q) accepted", bad)
		}
	}
}

func TestParseParamsUsesTheOneTTFTSourceParser(t *testing.T) {
	prof := mustProfile(t, ProfileRouter202608)
	for _, v := range []string{"prefillThroughput", "latencyPredictor", "magic", ""} {
		want, wantErr := ParseTTFTSource(v)
		p, err := ParseParams([]byte(`{"ttftSource":"`+v+`"}`), prof)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("%q: ParseParams err %v, ParseTTFTSource err %v", v, err, wantErr)
		}
		if err == nil && p.TTFTSource != want {
			t.Errorf("%q: ParseParams %v, ParseTTFTSource %v", v, p.TTFTSource, want)
		}
	}
}

func TestHasBarAndNoBar(t *testing.T) {
	tests := []struct {
		name string
		s    Settings
		want bool
	}{
		{"the default TTFT bar", Settings{MaxTTFTPenaltyMs: 18000, PeakPrefillThroughput: 15928}, true},
		{"gate off", Settings{MaxTTFTPenaltyMs: 0, PeakPrefillThroughput: 15928}, false},
		{"token bar alone", Settings{MaxTokensInFlightPenalty: 4096}, true},
		{"matchedTokens without a ceiling", Settings{Mode: ModeMatchedTokens}, false},
	}
	for _, tt := range tests {
		if got := tt.s.HasBar(); got != tt.want {
			t.Errorf("%s: HasBar() = %v, want %v", tt.name, got, tt.want)
		}
		if !tt.s.HasBar() && tt.s.BarTokens() > 0 {
			t.Errorf("%s: no bar but BarTokens() = %v", tt.name, tt.s.BarTokens())
		}
	}
	if !IsNoBar(NoBar()) || IsNoBar(math.MaxFloat64) || IsNoBar(0) || IsNoBar(math.Inf(-1)) {
		t.Error("IsNoBar must hold for NoBar() only")
	}
}

func TestReadsThroughput(t *testing.T) {
	tests := []struct {
		name string
		s    Settings
		want bool
	}{
		{"static from throughput", Settings{MaxTTFTPenaltyMs: 18000}, true},
		{"gate off", Settings{}, false},
		{"latency predictor", Settings{MaxTTFTPenaltyMs: 18000, Source: SourceLatencyPredictor}, false},
	}
	for _, tt := range tests {
		if got := tt.s.ReadsThroughput(); got != tt.want {
			t.Errorf("%s: ReadsThroughput() = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestKeepsMatchesAppendKept(t *testing.T) {
	s := Settings{AffinityThreshold: 0.8, MaxTTFTPenaltyMs: 1000, PeakPrefillThroughput: 1000, Semantics: SemanticsV1}
	eps := []Endpoint{
		{HasMatch: true, MatchBlocks: 9, TotalBlocks: 10, HasLoad: true, InFlightTokens: 5000},
		{HasMatch: true, MatchBlocks: 1, TotalBlocks: 10, HasLoad: true, InFlightTokens: 0},
		{HasMatch: true, MatchBlocks: 10, TotalBlocks: 10, HasLoad: true, InFlightTokens: 100},
	}
	for _, max := range []float64{50, 1e9} { // release (100 ms gap), then stay sticky
		s.MaxTTFTPenaltyMs = max
		d := Decide(&s, eps)
		kept := AppendKept(nil, &s, eps, &d)
		n := 0
		for i := range eps {
			if d.Keeps(&s, &eps[i]) {
				if n >= len(kept) || kept[n] != i {
					t.Fatalf("max %v: Keeps(%d) but AppendKept = %v", max, i, kept)
				}
				n++
			}
		}
		if n != len(kept) {
			t.Fatalf("max %v: Keeps counts %d, AppendKept %v", max, n, kept)
		}
		if wantAll := max == 50; wantAll != (n == len(eps)) || d.KeepsAll() != wantAll {
			t.Errorf("max %v: outcome %v kept %v", max, d.Outcome, kept)
		}
	}
}
