package gate

import (
	"math"
	"slices"
	"testing"
)

// ep builds an endpoint with match info (16-token blocks) and in-flight tokens.
func ep(match, total int, tokens int64) Endpoint {
	return Endpoint{HasMatch: true, MatchBlocks: match, TotalBlocks: total, BlockSizeTokens: 16, HasLoad: true, InFlightTokens: tokens}
}

// noLoad builds an endpoint with match info and no InFlightLoad attribute.
func noLoad(match, total int) Endpoint {
	return Endpoint{HasMatch: true, MatchBlocks: match, TotalBlocks: total, BlockSizeTokens: 16}
}

// pred builds a latency-predictor endpoint.
func pred(match, total int, ms float64, has bool) Endpoint {
	e := Endpoint{HasMatch: true, MatchBlocks: match, TotalBlocks: total, BlockSizeTokens: 16, HasPrediction: has, PredictedTTFTMs: ms}
	return e
}

func static(max float64) Settings {
	return Settings{AffinityThreshold: 0.8, MaxTTFTPenaltyMs: max, PeakPrefillThroughput: 15928, Semantics: SemanticsV1}
}

func matched(max float64) Settings {
	s := static(max)
	s.Mode = ModeMatchedTokens
	return s
}

func with(s Settings, f func(*Settings)) Settings { f(&s); return s }

func v2(s Settings) Settings { s.Semantics = SemanticsV2; return s }

func latency(s Settings) Settings { s.Source = SourceLatencyPredictor; return s }

type conformanceCase struct {
	name     string
	settings Settings
	eps      []Endpoint
	outcome  Outcome
	reason   Reason
	kept     []int
	verdict  Verdict
	excess   int64
}

// conformanceCases pins every case of the semantics reference (§4 seed tests,
// §5 edge cases) plus precedence rules.
func conformanceCases() []conformanceCase {
	all3 := []int{0, 1, 2}
	return []conformanceCase{
		// §5.1
		{name: "no endpoints is not applicable", settings: static(5000), eps: nil, outcome: OutcomeNotApplicable, kept: []int{}, verdict: NotGated},
		{name: "one endpoint is not applicable", settings: static(5000), eps: []Endpoint{ep(90, 100, 1e9)}, outcome: OutcomeNotApplicable, kept: []int{0}, verdict: NotGated},
		// §5.2
		{name: "explicit zero threshold is not applicable", settings: with(static(5000), func(s *Settings) { s.AffinityThreshold = 0 }),
			eps: []Endpoint{ep(90, 100, 1e9), ep(0, 100, 0)}, outcome: OutcomeNotApplicable, kept: []int{0, 1}, verdict: NotGated},
		{name: "negative threshold is not applicable", settings: with(static(5000), func(s *Settings) { s.AffinityThreshold = -0.5 }),
			eps: []Endpoint{ep(90, 100, 1e9), ep(0, 100, 0)}, outcome: OutcomeNotApplicable, kept: []int{0, 1}, verdict: NotGated},
		// §5.3
		{name: "score exactly at threshold is sticky", settings: static(5000),
			eps: []Endpoint{ep(80, 100, 0), ep(79, 100, 0)}, outcome: OutcomeSticky, kept: []int{0}, verdict: HeldOK},
		// §5.4
		{name: "zero total blocks everywhere is no match", settings: static(5000),
			eps: []Endpoint{ep(0, 0, 0), ep(5, 0, 0)}, outcome: OutcomeNoMatch, kept: []int{0, 1}, verdict: NotGated},
		{name: "match above total is sticky", settings: static(5000),
			eps: []Endpoint{ep(120, 100, 0), ep(0, 100, 0)}, outcome: OutcomeSticky, kept: []int{0}, verdict: HeldOK},
		{name: "missing match info scores zero", settings: static(5000),
			eps: []Endpoint{{HasLoad: true}, {HasLoad: true}}, outcome: OutcomeNoMatch, kept: []int{0, 1}, verdict: NotGated},
		// §5.5
		{name: "all sticky skips the gate even heavily loaded", settings: static(1),
			eps: []Endpoint{ep(90, 100, 1e9), ep(95, 100, 2e9)}, outcome: OutcomeSticky, kept: []int{0, 1}, verdict: NotGated},
		// §5.6
		{name: "static max zero always sticks", settings: static(0),
			eps: []Endpoint{ep(90, 100, 1e9), ep(0, 100, 0)}, outcome: OutcomeSticky, kept: []int{0}, verdict: HeldWrong, excess: 1e9 - 1440},
		// §5.7
		{name: "penalty exactly at max stays sticky", settings: static(5000),
			eps: []Endpoint{ep(90, 100, 79640), ep(0, 100, 0)}, outcome: OutcomeSticky, kept: []int{0}, verdict: HeldWrong, excess: 79640 - 1440},
		// §5.8
		{name: "per-endpoint divide then multiply releases at 5000.000000000001", settings: static(5000),
			eps: []Endpoint{ep(90, 100, 79643), ep(0, 100, 3)}, outcome: OutcomeLoadOverride, reason: ReasonTTFT, kept: []int{0, 1}, verdict: ReleasedOK},
		// §5.9
		{name: "default bar holds 286704 tokens", settings: static(18000),
			eps: []Endpoint{ep(90, 100, 286704), ep(0, 100, 0)}, outcome: OutcomeSticky, kept: []int{0}, verdict: HeldWrong, excess: 286704 - 1440},
		{name: "default bar releases 286705 tokens", settings: static(18000),
			eps: []Endpoint{ep(90, 100, 286705), ep(0, 100, 0)}, outcome: OutcomeLoadOverride, reason: ReasonTTFT, kept: []int{0, 1}, verdict: ReleasedOK},
		// §5.10
		{name: "negative gap never releases", settings: static(1),
			eps: []Endpoint{ep(90, 100, 0), ep(0, 100, 500000)}, outcome: OutcomeSticky, kept: []int{0}, verdict: HeldOK},
		// §5.11
		{name: "group minima keep both sticky endpoints", settings: static(5000),
			eps: []Endpoint{ep(90, 100, 1e9), ep(85, 100, 0), ep(0, 100, 0)}, outcome: OutcomeSticky, kept: []int{0, 1}, verdict: HeldOK},
		// §5.12
		{name: "v1 reads missing in-flight load as idle", settings: static(5000),
			eps: []Endpoint{noLoad(90, 100), ep(90, 100, 400000), ep(0, 100, 0)}, outcome: OutcomeSticky, kept: []int{0, 1}, verdict: HeldOK},
		{name: "v2 skips missing in-flight load and releases", settings: v2(static(5000)),
			eps: []Endpoint{noLoad(90, 100), ep(90, 100, 400000), ep(0, 100, 0)}, outcome: OutcomeLoadOverride, reason: ReasonTTFT, kept: all3, verdict: ReleasedOK},
		{name: "v2 group without in-flight signal is missing signal", settings: v2(static(5000)),
			eps: []Endpoint{noLoad(90, 100), ep(0, 100, 0)}, outcome: OutcomeMissingSignal, kept: []int{0, 1}, verdict: Unknown},
		{name: "v2 with the gate off never reports missing signal", settings: v2(static(0)),
			eps: []Endpoint{noLoad(90, 100), ep(0, 100, 0)}, outcome: OutcomeSticky, kept: []int{0}, verdict: Unknown},
		// §5.13
		{name: "v1 latency predictor missing non-sticky prediction stays sticky", settings: latency(static(5000)),
			eps: []Endpoint{pred(90, 100, 9000, true), pred(0, 100, 0, false)}, outcome: OutcomeSticky, kept: []int{0}, verdict: Unknown},
		{name: "v2 latency predictor missing non-sticky prediction is missing signal", settings: v2(latency(static(5000))),
			eps: []Endpoint{pred(90, 100, 9000, true), pred(0, 100, 0, false)}, outcome: OutcomeMissingSignal, kept: []int{0, 1}, verdict: Unknown},
		// §5.14
		{name: "v1 latency predictor both groups missing is sticky", settings: latency(static(5000)),
			eps: []Endpoint{pred(90, 100, 0, false), pred(0, 100, 0, false)}, outcome: OutcomeSticky, kept: []int{0}, verdict: Unknown},
		{name: "v2 latency predictor both groups missing is missing signal", settings: v2(latency(static(5000))),
			eps: []Endpoint{pred(90, 100, 0, false), pred(0, 100, 0, false)}, outcome: OutcomeMissingSignal, kept: []int{0, 1}, verdict: Unknown},
		{name: "v2 latency predictor NaN and +Inf never win the minimum, so a group of only those has no signal", settings: v2(latency(static(5000))),
			eps: []Endpoint{pred(90, 100, math.Inf(-1), true), pred(0, 100, math.NaN(), true), pred(0, 100, math.Inf(1), true)}, outcome: OutcomeMissingSignal, kept: all3, verdict: Unknown},
		// The newest upstream filter takes any present prediction as a signal
		// (bestTTFT: ok && ttft < best): -Inf is one (docs/gate.md).
		{name: "v2 latency predictor -Inf prediction is a signal", settings: v2(latency(static(5000))),
			eps: []Endpoint{pred(90, 100, 9000, true), pred(0, 100, math.Inf(-1), true)}, outcome: OutcomeLoadOverride, reason: ReasonTTFT, kept: []int{0, 1}, verdict: Unknown},
		{name: "v2 latency predictor -Inf on the sticky side holds", settings: v2(latency(static(5000))),
			eps: []Endpoint{pred(90, 100, math.Inf(-1), true), pred(0, 100, 100, true)}, outcome: OutcomeSticky, kept: []int{0}, verdict: Unknown},
		{name: "v1 latency predictor NaN prediction is never the minimum", settings: latency(static(5000)),
			eps: []Endpoint{pred(90, 100, 9000, true), pred(0, 100, math.NaN(), true), pred(0, 100, 1000, true)}, outcome: OutcomeLoadOverride, reason: ReasonTTFT, kept: all3, verdict: Unknown},
		{name: "latency predictor releases on predicted gap", settings: v2(latency(static(5000))),
			eps: []Endpoint{pred(90, 100, 9000, true), pred(0, 100, 3999, true)}, outcome: OutcomeLoadOverride, reason: ReasonTTFT, kept: []int{0, 1}, verdict: Unknown},
		// §4 the seed's nine tests.
		{name: "seed KeepsPinWhenGapBelowMatchedTokens", settings: matched(0),
			eps: []Endpoint{ep(90, 100, 1000), ep(0, 100, 0)}, outcome: OutcomeSticky, kept: []int{0}, verdict: HeldOK},
		{name: "seed ReleasesPinWhenGapExceedsMatchedTokens", settings: matched(0),
			eps: []Endpoint{ep(90, 100, 4000), ep(0, 100, 0)}, outcome: OutcomeLoadOverride, reason: ReasonBreakEven, kept: []int{0, 1}, verdict: ReleasedOK},
		{name: "seed ScalesWithCacheValue", settings: matched(0),
			eps:     []Endpoint{{HasMatch: true, MatchBlocks: 900, TotalBlocks: 1000, BlockSizeTokens: 16, HasLoad: true, InFlightTokens: 4000}, ep(0, 100, 0)},
			outcome: OutcomeSticky, kept: []int{0}, verdict: HeldOK},
		{name: "seed CeilingStillApplies", settings: matched(100),
			eps:     []Endpoint{{HasMatch: true, MatchBlocks: 90000, TotalBlocks: 100000, BlockSizeTokens: 16, HasLoad: true, InFlightTokens: 4000}, ep(0, 100, 0)},
			outcome: OutcomeLoadOverride, reason: ReasonCeiling, kept: []int{0, 1}, verdict: ReleasedCeiling, excess: 1440000 - 4000},
		{name: "seed NoMatchInfoIsNoOp missing block size does not release", settings: matched(0),
			eps:     []Endpoint{{HasMatch: true, MatchBlocks: 90, TotalBlocks: 100, HasLoad: true, InFlightTokens: 1e9}, ep(0, 100, 0)},
			outcome: OutcomeSticky, kept: []int{0}, verdict: Unknown},
		{name: "seed StaticModeUnchanged holds below the bar", settings: static(18000),
			eps: []Endpoint{ep(90, 100, 4000), ep(0, 100, 0)}, outcome: OutcomeSticky, kept: []int{0}, verdict: HeldWrong, excess: 4000 - 1440},
		{name: "seed StaticModeUnchanged releases above the bar", settings: static(100),
			eps: []Endpoint{ep(90, 100, 4000), ep(0, 100, 0)}, outcome: OutcomeLoadOverride, reason: ReasonTTFT, kept: []int{0, 1}, verdict: ReleasedOK},
		// §5.15
		{name: "matchedTokens gap equal to matched stays sticky", settings: matched(0),
			eps: []Endpoint{ep(90, 100, 1440), ep(0, 100, 0)}, outcome: OutcomeSticky, kept: []int{0}, verdict: HeldOK},
		// §5.16
		{name: "matchedTokens ceiling 0 and ppt 0 still breaks even", settings: with(matched(0), func(s *Settings) { s.PeakPrefillThroughput = 0 }),
			eps: []Endpoint{ep(90, 100, 1441), ep(0, 100, 0)}, outcome: OutcomeLoadOverride, reason: ReasonBreakEven, kept: []int{0, 1}, verdict: ReleasedOK},
		// Precedence.
		{name: "break-even is reported before the ceiling", settings: matched(1),
			eps: []Endpoint{ep(90, 100, 100000), ep(0, 100, 0)}, outcome: OutcomeLoadOverride, reason: ReasonBreakEven, kept: []int{0, 1}, verdict: ReleasedOK},
		{name: "exploration probability one keeps all", settings: with(static(5000), func(s *Settings) { s.ExplorationProbability = 1 }),
			eps: []Endpoint{ep(90, 100, 0), ep(0, 100, 0)}, outcome: OutcomeExploration, kept: []int{0, 1}, verdict: NotGated},
		{name: "not applicable precedes exploration", settings: with(static(5000), func(s *Settings) { s.ExplorationProbability = 1 }),
			eps: []Endpoint{ep(90, 100, 0)}, outcome: OutcomeNotApplicable, kept: []int{0}, verdict: NotGated},
		{name: "partial exploration decides as if no draw", settings: with(static(5000), func(s *Settings) { s.ExplorationProbability = 0.1 }),
			eps: []Endpoint{ep(90, 100, 0), ep(0, 100, 0)}, outcome: OutcomeSticky, kept: []int{0}, verdict: HeldOK},
		{name: "ties go to the first endpoint in input order", settings: static(5000),
			eps: []Endpoint{ep(90, 100, 7), ep(95, 100, 7), ep(0, 100, 3), ep(10, 100, 3)}, outcome: OutcomeSticky, kept: []int{0, 1}, verdict: HeldOK},
		{name: "v2 matchedTokens without signal in a group is missing signal", settings: v2(matched(0)),
			eps: []Endpoint{ep(90, 100, 5000), noLoad(0, 100)}, outcome: OutcomeMissingSignal, kept: []int{0, 1}, verdict: Unknown},
		{name: "v2 matchedTokens skips endpoints without signal", settings: v2(matched(0)),
			eps: []Endpoint{noLoad(95, 100), ep(90, 100, 5000), ep(0, 100, 0)}, outcome: OutcomeLoadOverride, reason: ReasonBreakEven, kept: all3, verdict: ReleasedOK},
		{name: "v1 matchedTokens reads missing load as idle", settings: matched(0),
			eps: []Endpoint{noLoad(95, 100), ep(90, 100, 5000), ep(0, 100, 0)}, outcome: OutcomeSticky, kept: []int{0, 1}, verdict: HeldOK},
		{name: "static release that forfeits more than it saves is released wrong", settings: static(10),
			eps:     []Endpoint{{HasMatch: true, MatchBlocks: 9000, TotalBlocks: 10000, BlockSizeTokens: 16, HasLoad: true, InFlightTokens: 1000}, ep(0, 100, 0)},
			outcome: OutcomeLoadOverride, reason: ReasonTTFT, kept: []int{0, 1}, verdict: ReleasedWrong, excess: 144000 - 1000},
	}
}

func TestConformance(t *testing.T) {
	for _, tc := range conformanceCases() {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(&tc.settings, tc.eps)
			if d.Outcome != tc.outcome || d.Reason != tc.reason {
				t.Fatalf("outcome = %s/%s, want %s/%s (decision %+v)", d.Outcome, d.Reason, tc.outcome, tc.reason, d)
			}
			kept := AppendKept([]int{}, &tc.settings, tc.eps, &d)
			if !slices.Equal(kept, tc.kept) {
				t.Errorf("kept = %v, want %v", kept, tc.kept)
			}
			v, excess := Judge(&d)
			if v != tc.verdict || excess != tc.excess {
				t.Errorf("verdict = %s excess %d, want %s excess %d (decision %+v)", v, excess, tc.verdict, tc.excess, d)
			}
			wantPossible := tc.settings.ExplorationProbability > 0 && tc.settings.ExplorationProbability < 1 && tc.outcome != OutcomeNotApplicable
			if d.ExplorationPossible != wantPossible {
				t.Errorf("explorationPossible = %v, want %v", d.ExplorationPossible, wantPossible)
			}
		})
	}
}

func TestFloatOrderPenalty(t *testing.T) {
	s := static(5000)
	d := Decide(&s, []Endpoint{ep(90, 100, 79643), ep(0, 100, 3)})
	if d.PenaltyMs != 5000.000000000001 {
		t.Fatalf("penalty = %.17g, want 5000.000000000001 (per-endpoint tokens/ppt*1000)", d.PenaltyMs)
	}
	if wrong := float64(79643-3) / 15928 * 1000; wrong != 5000 {
		t.Fatalf("the subtract-first order should give exactly 5000, got %.17g", wrong)
	}
}

func TestDecisionNumbers(t *testing.T) {
	s := matched(2000)
	eps := []Endpoint{ep(0, 100, 50), ep(90, 100, 9000), ep(95, 100, 8000), ep(10, 100, 1000)}
	d := Decide(&s, eps)
	if d.BestSticky != 2 || d.BestNonSticky != 0 {
		t.Fatalf("best = %d/%d, want 2/0", d.BestSticky, d.BestNonSticky)
	}
	if d.GapTokens != 7950 || d.MatchedTokens != 95*16 {
		t.Fatalf("gap/matched = %d/%d", d.GapTokens, d.MatchedTokens)
	}
	if d.Sticky != 2 || d.NonSticky != 2 {
		t.Fatalf("partition = %d/%d", d.Sticky, d.NonSticky)
	}
}

// TestDecideAllMatchesDecide pins that the shared-partition path equals one
// Decide per settings entry.
func TestDecideAllMatchesDecide(t *testing.T) {
	for _, tc := range conformanceCases() {
		settings := []Settings{tc.settings, static(1), static(18000), matched(0), matched(300), v2(static(5000)), latency(static(10))}
		out := make([]Decision, len(settings))
		DecideAll(settings, tc.eps, out)
		for i := range settings {
			if want := Decide(&settings[i], tc.eps); out[i] != want {
				t.Fatalf("%s: settings %d: DecideAll = %+v, Decide = %+v", tc.name, i, out[i], want)
			}
		}
	}
}
