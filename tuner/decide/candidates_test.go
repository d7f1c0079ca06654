package decide

import (
	"math"
	"testing"

	"github.com/gatetuner/gatetuner/gate"
)

func profile(t *testing.T, name string) gate.Profile {
	t.Helper()
	p, err := gate.LookupProfile(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCandidatesAreAnchoredOnTheCurrentBar(t *testing.T) {
	cur := gate.DefaultParams() // 18000 ms × 15928 tok/s = 286704 tokens
	cands := BuildCandidates(CandidateSpec{Current: cur, Profile: profile(t, gate.ProfileRouter202608), DrainRate: 4000})
	if !cands[0].Current || cands[0].Bar != 286704 {
		t.Fatalf("first candidate %+v", cands[0])
	}
	var four, quarter, off bool
	for _, c := range cands[1:] {
		if c.Settings.Mode != gate.ModeStatic {
			t.Fatalf("router-2026-08 got a %s candidate", c.Settings.Mode)
		}
		if c.Settings.PeakPrefillThroughput != 4000 {
			t.Fatalf("candidate writes ppt %v, want the drain rate", c.Settings.PeakPrefillThroughput)
		}
		if c.Invalid != "" {
			t.Fatalf("candidate %s invalid: %s", c.Label, c.Invalid)
		}
		four = four || math.Abs(c.Bar/(4*286704)-1) < 1e-3
		quarter = quarter || math.Abs(c.Bar/(286704/4.0)-1) < 1e-3
		off = off || (math.IsInf(c.Bar, 1) && c.Settings.MaxTTFTPenaltyMs == 0)
	}
	if !four || !quarter || !off {
		t.Fatalf("grid lacks ×4 (%v), ÷4 (%v) or gate off (%v)", four, quarter, off)
	}
}

func TestMatchedTokensCandidatesOnlyForProfilesWithTheMode(t *testing.T) {
	cur := gate.DefaultParams()
	cands := BuildCandidates(CandidateSpec{Current: cur, Profile: profile(t, gate.ProfilePenaltyMode), DrainRate: 4000, TTFTSLOMs: 8000})
	n := 0
	for _, c := range cands {
		if c.Settings.Mode == gate.ModeMatchedTokens {
			n++
			if c.Settings.MaxTTFTPenaltyMs != 8000 || c.Invalid != "" {
				t.Fatalf("SLO ceiling candidate %+v", c)
			}
		}
	}
	if n != 1 {
		t.Fatalf("%d matchedTokens candidates with an SLO, want 1", n)
	}
	lp := gate.DefaultParams()
	lp.TTFTSource = gate.SourceLatencyPredictor
	for _, c := range BuildCandidates(CandidateSpec{Current: lp, Profile: profile(t, gate.ProfilePenaltyMode), DrainRate: 4000}) {
		if c.Settings.Mode == gate.ModeMatchedTokens {
			t.Fatal("matchedTokens offered to a latency-predictor target")
		}
	}
}

func TestChoose(t *testing.T) {
	mk := func(mode gate.PenaltyMode, bar float64) Candidate {
		c := Candidate{Bar: bar}
		c.Settings.Mode = mode
		return c
	}
	inf := math.Inf(1)
	tests := []struct {
		name  string
		cands []Candidate
		costs []float64
		best  int
	}{
		{"lowest cost wins", []Candidate{mk(0, 100), mk(0, 50), mk(0, 200)}, []float64{10, 3, 5}, 1},
		{"ties keep the current settings", []Candidate{mk(0, 100), mk(0, 50), mk(0, 200)}, []float64{3, 3, 5}, 0},
		{"equal static costs prefer the bar nearest the current", []Candidate{mk(0, 100), mk(0, 10), mk(0, 150), mk(0, 1000)}, []float64{9, 1, 1, 1}, 2},
		{"a ceiling within 2 % of the best is nearer the current bar than none", []Candidate{mk(0, 100), mk(1, 50), mk(1, 400), mk(1, inf)}, []float64{9, 5, 1.01, 1}, 2},
		{"ceilings within 2 % of the best prefer the one nearest the current bar", []Candidate{mk(0, 100), mk(1, 25), mk(1, 100), mk(1, 400)}, []float64{9, 1, 1.01, 1.005}, 2},
		{"static wins when cheaper than matchedTokens", []Candidate{mk(0, 100), mk(0, 80), mk(1, inf)}, []float64{9, 1, 2}, 1},
		{"equal cost prefers static over a mode change", []Candidate{mk(0, 100), mk(0, 80), mk(1, inf)}, []float64{9, 1, 1}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Choose(tc.cands, tc.costs).Best; got != tc.best {
				t.Fatalf("best = %d, want %d", got, tc.best)
			}
		})
	}
}
