package gate

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// This file holds literal transcriptions of each cited build's Filter, on
// this package's Endpoint type, and checks that Decide takes the same
// decision on every endpoint set: the same kept endpoints, in order, and the
// outcome the build would record. A transcription keeps the build's
// arithmetic and comparisons as written (float64 division then
// multiplication, strict < from MaxFloat64 / MaxInt64, strict > against the
// bar), so float order and tie-breaking are compared too.

// buildConfig is the part of an upstream Config a transcription reads.
type buildConfig struct {
	threshold, maxMs, ppt float64
	latency               bool
	explore               bool  // the exploration draw succeeded (p ≥ 1)
	tokenBar              int64 // a42e39d3d only
}

func allIndexes(eps []Endpoint) []int {
	out := make([]int, len(eps))
	for i := range out {
		out[i] = i
	}
	return out
}

// upstreamScore is prefixCacheScore, the same in every build.
func upstreamScore(e *Endpoint) float64 {
	if e.HasMatch {
		if e.TotalBlocks > 0 {
			score := float64(e.MatchBlocks) / float64(e.TotalBlocks)
			if !math.IsNaN(score) {
				return score
			}
		}
	}
	return 0
}

// partition is the sticky/non-sticky split every build makes first; done
// reports an early return (not_applicable, exploration, no_match).
func partition(c buildConfig, eps []Endpoint) (sticky, nonSticky []int, kept []int, outcome string, done bool) {
	if len(eps) <= 1 || c.threshold <= 0 {
		return nil, nil, allIndexes(eps), "not_applicable", true
	}
	if c.explore {
		return nil, nil, allIndexes(eps), "exploration", true
	}
	for i := range eps {
		if upstreamScore(&eps[i]) >= c.threshold {
			sticky = append(sticky, i)
		} else {
			nonSticky = append(nonSticky, i)
		}
	}
	if len(sticky) == 0 {
		return nil, nil, allIndexes(eps), "no_match", true
	}
	return sticky, nonSticky, nil, "", false
}

// filterV1 transcribes plugin.go@800ec0e45 (main ebab68792), @ff37a5592
// (v0.9.0 … v0.10.0), @920d38f3e (PR #2494: the same code plus one
// recordDecision per return, the outcome returned here), main after #2720
// and @17dd1ab57: a missing signal is MaxFloat64 (predictor) or 0 tokens
// (throughput).
func filterV1(c buildConfig, eps []Endpoint) ([]int, string) {
	sticky, nonSticky, kept, outcome, done := partition(c, eps)
	if done {
		return kept, outcome
	}
	endpointTTFT := func(e *Endpoint) float64 {
		if c.latency {
			if e.HasPrediction {
				return e.PredictedTTFTMs
			}
			return math.MaxFloat64
		}
		var tokens int64
		if e.HasLoad {
			tokens = e.InFlightTokens
		}
		return float64(tokens) / c.ppt * 1000
	}
	bestTTFT := func(idx []int) float64 {
		best := math.MaxFloat64
		for _, i := range idx {
			if ttft := endpointTTFT(&eps[i]); ttft < best {
				best = ttft
			}
		}
		return best
	}
	if c.maxMs > 0 && len(nonSticky) > 0 {
		penalty := bestTTFT(sticky) - bestTTFT(nonSticky)
		if penalty > c.maxMs {
			return allIndexes(eps), "load_override"
		}
	}
	return sticky, "sticky"
}

// filterV2 transcribes plugin.go@066c20ea1 and
// red-hat-data-services/llm-d-router plugin.go@4a00e2dd5 (the same Filter,
// bestTTFT, endpointTTFT and inFlightTokens, read side by side): endpoints
// without the signal are left out of the minimum; a group without one ends
// missing_signal, keeping every endpoint.
func filterV2(c buildConfig, eps []Endpoint) ([]int, string) {
	sticky, nonSticky, kept, outcome, done := partition(c, eps)
	if done {
		return kept, outcome
	}
	endpointTTFT := func(e *Endpoint) (float64, bool) {
		if c.latency {
			if e.HasPrediction {
				return e.PredictedTTFTMs, true
			}
			return math.MaxFloat64, false
		}
		if !e.HasLoad {
			return 0, false
		}
		return float64(e.InFlightTokens) / c.ppt * 1000, true
	}
	bestTTFT := func(idx []int) (float64, bool) {
		best, found := math.MaxFloat64, false
		for _, i := range idx {
			if ttft, ok := endpointTTFT(&eps[i]); ok && ttft < best {
				best, found = ttft, true
			}
		}
		return best, found
	}
	if c.maxMs > 0 && len(nonSticky) > 0 {
		bs, okS := bestTTFT(sticky)
		bn, okN := bestTTFT(nonSticky)
		if !okS || !okN {
			return allIndexes(eps), "missing_signal"
		}
		if bs-bn > c.maxMs {
			return allIndexes(eps), "load_override"
		}
	}
	return sticky, "sticky"
}

// filterTokenBar transcribes plugin.go@a42e39d3d: a TTFT gate on the
// latency predictor, then the token bar over in-flight tokens (missing = 0).
func filterTokenBar(c buildConfig, eps []Endpoint) ([]int, string) {
	sticky, nonSticky, kept, outcome, done := partition(c, eps)
	if done {
		return kept, outcome
	}
	bestTTFT := func(idx []int) float64 {
		best := math.MaxFloat64
		for _, i := range idx {
			if e := &eps[i]; e.HasPrediction && e.PredictedTTFTMs < best {
				best = e.PredictedTTFTMs
			}
		}
		return best
	}
	bestInFlightTokens := func(idx []int) int64 {
		best := int64(math.MaxInt64)
		for _, i := range idx {
			var tokens int64
			if eps[i].HasLoad {
				tokens = eps[i].InFlightTokens
			}
			if tokens < best {
				best = tokens
			}
		}
		return best
	}
	if c.maxMs > 0 && len(nonSticky) > 0 {
		if bestTTFT(sticky)-bestTTFT(nonSticky) > c.maxMs {
			return allIndexes(eps), "load_override"
		}
	}
	if c.tokenBar > 0 && len(nonSticky) > 0 {
		if bestInFlightTokens(sticky)-bestInFlightTokens(nonSticky) > c.tokenBar {
			return allIndexes(eps), "load_override"
		}
	}
	return sticky, "sticky"
}

// edgeEndpoints draws endpoint sets rich in ties, missing attributes,
// non-finite predictions and extreme token counts.
func edgeEndpoints(r *rand.Rand) []Endpoint {
	preds := []float64{0, 1000, 1000, 5000.000000000001, math.MaxFloat64, math.Inf(1), math.Inf(-1), math.NaN(), -3, 18000}
	tokens := []int64{0, 3, 79640, 79643, 286704, 286705, 1 << 40, math.MaxInt64, -5}
	eps := make([]Endpoint, r.IntN(7))
	for i := range eps {
		total := []int{0, 1, 10, 100}[r.IntN(4)]
		e := Endpoint{
			HasMatch: r.IntN(6) != 0, MatchBlocks: r.IntN(total + 2), TotalBlocks: total, BlockSizeTokens: 16,
			HasLoad: r.IntN(4) != 0, HasPrediction: r.IntN(4) != 0,
		}
		if r.IntN(2) == 0 {
			e.InFlightTokens = tokens[r.IntN(len(tokens))]
		} else {
			e.InFlightTokens = r.Int64N(400000)
		}
		if r.IntN(2) == 0 {
			e.PredictedTTFTMs = preds[r.IntN(len(preds))]
		} else {
			e.PredictedTTFTMs = r.Float64() * 30000
		}
		eps[i] = e
	}
	return eps
}

// TestDecideMatchesEachBuildsFilter runs every built-in profile's upstream
// Filter (transcribed above) and Decide on the same endpoint sets and
// settings valid for that build.
func TestDecideMatchesEachBuildsFilter(t *testing.T) {
	transcriptions := map[string]func(buildConfig, []Endpoint) ([]int, string){
		ProfileRouter202608:        filterV1,
		ProfileRouter202608Counter: filterV1,
		ProfileRouter202609:        filterV1,
		ProfileRouter202609V2:      filterV2,
		ProfileRouterCalibration:   filterV1,
		ProfileRouterCalibrationV2: filterV2,
		ProfilePenaltyMode:         filterV1, // static mode; matchedTokens is the seed's own (decide_test.go)
		ProfileRouterTokenBar:      filterTokenBar,
	}
	r := rand.New(rand.NewPCG(17, 2026))
	for _, prof := range BuiltinProfiles() {
		filter, ok := transcriptions[prof.Name]
		if !ok {
			t.Fatalf("no transcription of the build of %s", prof.Name)
		}
		recorded := map[string]bool{} // the outcomes the build's Filter returned by
		for n := 0; n < 20000; n++ {
			p := prof.DefaultParams()
			s := p.Settings(prof.MissingSignal)
			s.AffinityThreshold = []float64{0, 0.3, 0.8, 0.99, 1}[r.IntN(5)]
			if prof.Threshold == ThresholdAtMostOne && r.IntN(8) == 0 {
				s.AffinityThreshold = -0.5 // valid there, disables the filter
			}
			s.ExplorationProbability = []float64{0, 0, 0.25, 1}[r.IntN(4)]
			s.MaxTTFTPenaltyMs = []float64{0, 5000, 18000, r.Float64() * 30000, math.MaxFloat64}[r.IntN(5)]
			if prof.Accepts(KeyTTFTSource) {
				s.Source = TTFTSource(r.IntN(2))
				s.PeakPrefillThroughput = []float64{15928, 1, 1e-300, 4783.5}[r.IntN(4)]
			}
			if prof.Accepts(KeyMaxTokensInFlightPenalty) {
				s.MaxTokensInFlightPenalty = []int64{0, 1, 200000, r.Int64N(500000)}[r.IntN(4)]
			}
			eps := edgeEndpoints(r)
			c := buildConfig{threshold: s.AffinityThreshold, maxMs: s.MaxTTFTPenaltyMs, ppt: s.PeakPrefillThroughput,
				latency: s.Source == SourceLatencyPredictor, explore: s.ExplorationProbability >= 1, tokenBar: s.MaxTokensInFlightPenalty}
			wantKept, wantOutcome := filter(c, eps)
			recorded[wantOutcome] = true
			d := Decide(&s, eps)
			gotKept := AppendKept(nil, &s, eps, &d)
			if !slices.Equal(gotKept, wantKept) || d.Outcome.String() != wantOutcome {
				t.Fatalf("%s: %s on %+v\nDecide keeps %v (%s), the build keeps %v (%s)", prof.Name, s.String(), eps,
					gotKept, d.Outcome, wantKept, wantOutcome)
			}
		}
		checkReportedOutcomes(t, prof, recorded)
	}
}

// checkReportedOutcomes: a build that reports decisions declares exactly
// the outcomes its Filter returns by (each return path records one), and a
// build that reports none declares none.
func checkReportedOutcomes(t *testing.T, prof Profile, recorded map[string]bool) {
	t.Helper()
	if !prof.Reports.Any() {
		if len(prof.Reports.Outcomes) != 0 {
			t.Errorf("%s reports neither counter nor span but declares outcomes %v", prof.Name, prof.Reports.Outcomes)
		}
		return
	}
	declared := map[string]bool{}
	for _, o := range prof.Reports.Outcomes {
		declared[o.String()] = true
	}
	for o := range recorded {
		if !declared[o] {
			t.Errorf("%s: the build records %s, which its Reports do not declare", prof.Name, o)
		}
	}
	for o := range declared {
		if !recorded[o] {
			t.Errorf("%s: declares outcome %s, which the build's Filter never returned by in the run", prof.Name, o)
		}
	}
}
