package spans_test

import (
	"math/rand/v2"
	"testing"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/spans"
)

// recordOf is the record of the span the EPP emits for d.
func recordOf(n int, d *gate.Decision) spans.Record {
	r := spans.Record{Outcome: d.Outcome, Candidates: uint16(n), Sticky: uint16(d.Sticky)}
	if d.Outcome != gate.OutcomeNotApplicable && d.Outcome != gate.OutcomeExploration {
		r.Flags |= spans.FlagSticky
	}
	if d.TTFTCompared {
		r.Flags |= spans.FlagPenalty
		r.PenaltyMs = d.PenaltyMs
	}
	return r
}

// endpoints builds a request: sticky endpoints hold 90 of 100 blocks of 16
// tokens, the others none; tokens in flight are drawn by tok.
func endpoints(rng *rand.Rand, tok func() int64) []gate.Endpoint {
	n := 2 + rng.IntN(7)
	eps := make([]gate.Endpoint, n)
	for i := range eps {
		m := 0
		if rng.IntN(2) == 0 {
			m = 90
		}
		eps[i] = gate.Endpoint{HasMatch: true, MatchBlocks: m, TotalBlocks: 100, BlockSizeTokens: 16, HasLoad: true, InFlightTokens: tok()}
	}
	return eps
}

type projTally struct{ exact, boundary, needsModel, unknown, flips, trials int }

// check projects one request for one candidate and holds the projection
// against gate.Decide: exact projections must agree, needs-model ones must
// agree once the matched tokens gate.Decide saw are supplied.
func check(t *testing.T, tl *projTally, inForce, cand *gate.Settings, eps []gate.Endpoint) {
	t.Helper()
	d := gate.Decide(inForce, eps)
	r := recordOf(len(eps), &d)
	truth := gate.Decide(cand, eps)
	p := spans.Project(&r, inForce, cand, inForce.AffinityThreshold)
	tl.trials++
	switch p.Exact {
	case spans.Exact:
		tl.exact++
		if p.Outcome != truth.Outcome {
			t.Fatalf("exact projection %s, gate.Decide %s (in force %+v, cand %+v, decision %+v)", p.Outcome, truth.Outcome, *inForce, *cand, d)
		}
	case spans.Boundary:
		tl.boundary++
		if p.Outcome != truth.Outcome {
			tl.flips++
		}
	case spans.NeedsModel:
		tl.needsModel++
		if p.HasGap && d.TTFTCompared && p.GapTokens != d.GapTokens {
			t.Fatalf("recovered gap %d, gate %d", p.GapTokens, d.GapTokens)
		}
		if cand.Mode == gate.ModeMatchedTokens && p.HasGap {
			got := p.Outcome
			if truth.MatchedTokens > 0 && p.GapTokens > truth.MatchedTokens {
				got = gate.OutcomeLoadOverride
			}
			if got != truth.Outcome {
				t.Fatalf("gap %d + matched %d gave %s, gate.Decide %s", p.GapTokens, truth.MatchedTokens, got, truth.Outcome)
			}
		}
	default:
		tl.unknown++
	}
}

func TestProjectionMatchesGateDecideOnRandomTokenPairs(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	inForce := gate.Settings{AffinityThreshold: 0.8, MaxTTFTPenaltyMs: 5000, PeakPrefillThroughput: 15928}
	ppts := []float64{15928, 8000, 12000, 16000, 20000, 31856, 7964}
	var static, matched projTally
	tok := func() int64 { return rng.Int64N(400000) }
	for range 60000 {
		eps := endpoints(rng, tok)
		cand := gate.Settings{AffinityThreshold: 0.8, MaxTTFTPenaltyMs: float64(100 * (1 + rng.IntN(300))),
			PeakPrefillThroughput: ppts[rng.IntN(len(ppts))]}
		if rng.IntN(10) == 0 {
			cand.PeakPrefillThroughput = 5000 + 30000*rng.Float64()
		}
		check(t, &static, &inForce, &cand, eps)
		cand.Mode = gate.ModeMatchedTokens
		if rng.IntN(4) == 0 {
			cand.MaxTTFTPenaltyMs = 0
		}
		check(t, &matched, &inForce, &cand, eps)
	}
	t.Logf("static: %+v", static)
	t.Logf("matchedTokens: %+v", matched)
	if static.needsModel+static.unknown != 0 {
		t.Fatalf("static candidates at the threshold in force must all be exact or boundary: %+v", static)
	}
	if static.boundary*1000 > static.trials {
		t.Fatalf("boundary on %d of %d random requests", static.boundary, static.trials)
	}
}

// On exact ties (gap·1000 = M′·P′) the real comparison keeps the pin and the
// EPP's float rounding of each group decides: these are the Boundary cases.
func TestProjectionFlagsExactTiesAsBoundary(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	inForce := gate.Settings{AffinityThreshold: 0.8, MaxTTFTPenaltyMs: 100000, PeakPrefillThroughput: 12000}
	cand := gate.Settings{AffinityThreshold: 0.8, MaxTTFTPenaltyMs: 5000, PeakPrefillThroughput: 15928}
	var tl projTally
	for range 20000 {
		base := rng.Int64N(300000)
		eps := []gate.Endpoint{
			{HasMatch: true, MatchBlocks: 90, TotalBlocks: 100, BlockSizeTokens: 16, HasLoad: true, InFlightTokens: base + 79640},
			{HasMatch: true, MatchBlocks: 0, TotalBlocks: 100, BlockSizeTokens: 16, HasLoad: true, InFlightTokens: base},
		}
		check(t, &tl, &inForce, &cand, eps)
	}
	t.Logf("ties: %+v", tl)
	if tl.boundary != tl.trials {
		t.Fatalf("every tie must be boundary: %+v", tl)
	}
	if tl.flips == 0 {
		t.Fatal("no tie flipped: the boundary band is not needed, or the test does not reach it")
	}
}

func TestProjectionWithoutTheGateInForceNeedsTheModel(t *testing.T) {
	inForce := gate.Settings{AffinityThreshold: 0.8, PeakPrefillThroughput: 15928}
	eps := []gate.Endpoint{
		{HasMatch: true, MatchBlocks: 90, TotalBlocks: 100, HasLoad: true, InFlightTokens: 500000},
		{HasMatch: true, TotalBlocks: 100, HasLoad: true},
	}
	d := gate.Decide(&inForce, eps)
	r := recordOf(2, &d)
	cand := gate.Settings{AffinityThreshold: 0.8, MaxTTFTPenaltyMs: 5000, PeakPrefillThroughput: 15928}
	if p := spans.Project(&r, &inForce, &cand, 0.8); p.Exact != spans.NeedsModel {
		t.Fatalf("gate off in force, candidate on: %+v", p)
	}
	cand.AffinityThreshold = 0.5
	if p := spans.Project(&r, &inForce, &cand, 0.8); p.Exact != spans.NeedsModel {
		t.Fatalf("another threshold: %+v", p)
	}
	if _, ok := spans.RecoverGap(5000.3, 15928); ok {
		t.Fatal("a penalty that is no whole gap recovered one")
	}
	if g, ok := spans.RecoverGap(5000, 15928); !ok || g != 79640 {
		t.Fatalf("gap %d %v", g, ok)
	}
}
