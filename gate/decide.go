package gate

import (
	"fmt"
	"math"
)

// Endpoint is one candidate endpoint's attributes as the filter reads them.
// The Has* fields say whether the attribute is present at all.
type Endpoint struct {
	// PrefixCacheMatchInfo.
	HasMatch        bool
	MatchBlocks     int
	TotalBlocks     int
	BlockSizeTokens int
	// InFlightLoad (uncached prompt tokens of requests in flight, excluding
	// the request being scheduled).
	HasLoad          bool
	InFlightTokens   int64
	InFlightRequests int64
	// LatencyPredictionInfo (only read with ttftSource: latencyPredictor).
	HasPrediction   bool
	PredictedTTFTMs float64
}

// Outcome is what the filter did with a request, as the EPP counts it.
type Outcome uint8

// Outcomes, as in llm_d_epp_prefix_cache_affinity_filter_decisions_total.
const (
	OutcomeNotApplicable Outcome = iota
	OutcomeExploration
	OutcomeNoMatch
	OutcomeSticky
	OutcomeLoadOverride
	OutcomeMissingSignal
	NumOutcomes
)

var outcomeNames = [NumOutcomes]string{"not_applicable", "exploration", "no_match", "sticky", "load_override", "missing_signal"}

// String returns the EPP's label value for the outcome.
func (o Outcome) String() string {
	if o < NumOutcomes {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// ParseOutcome parses an EPP outcome label value.
func ParseOutcome(s string) (Outcome, bool) {
	for i, n := range outcomeNames {
		if n == s {
			return Outcome(i), true
		}
	}
	return 0, false
}

// Reason says which test released a pin (outcome load_override).
type Reason uint8

// Release reasons.
const (
	ReasonNone      Reason = iota
	ReasonTTFT             // static: TTFT penalty above maxTTFTPenaltyMs
	ReasonBreakEven        // matchedTokens: queue gap above the cached prefix
	ReasonCeiling          // matchedTokens: TTFT penalty above the ceiling
	ReasonTokens           // token-bar generation: in-flight token gap above maxTokensInFlightPenalty
	NumReasons
)

var reasonNames = [NumReasons]string{"", "ttft", "break_even", "ceiling", "tokens"}

// String returns the reason's name ("" for none).
func (r Reason) String() string {
	if r < NumReasons {
		return reasonNames[r]
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// Decision is one filter decision and the numbers behind it.
type Decision struct {
	Outcome Outcome
	Reason  Reason
	// ExplorationPossible: 0 < explorationProbability < 1, so the live EPP may
	// have kept all endpoints by a random draw; the decision is the one taken
	// without that draw.
	ExplorationPossible bool
	// Sticky and NonSticky count the partition (0 when not reached).
	Sticky, NonSticky int
	// TTFTCompared: the TTFT comparison was made; the fields below it hold.
	TTFTCompared bool
	// BestStickyTTFTMs and BestNonStickyTTFTMs are the group minima as the EPP
	// computes them; PenaltyMs is their difference.
	BestStickyTTFTMs, BestNonStickyTTFTMs, PenaltyMs float64
	// BestSticky and BestNonSticky are the indexes of the endpoints with the
	// fewest in-flight tokens in each group as the build reads them (v1: a
	// missing signal is 0 tokens; v2: skipped), first in input order on ties;
	// -1 when none.
	BestSticky, BestNonSticky int
	// GapTokens = tokens(BestSticky) − tokens(BestNonSticky); MatchedTokens =
	// MatchBlocks × BlockSizeTokens of BestSticky. Set when both are found.
	GapTokens, MatchedTokens int64
	// HasGap: both groups have an endpoint with a real in-flight signal, so
	// the gap is measured rather than read from missing attributes.
	HasGap bool
}

// KeepsAll reports whether the filter returned every endpoint.
func (d *Decision) KeepsAll() bool { return d.Outcome != OutcomeSticky }

// score is the filter's prefix-cache score of an endpoint.
func score(e *Endpoint) float64 {
	if e.HasMatch && e.TotalBlocks > 0 {
		s := float64(e.MatchBlocks) / float64(e.TotalBlocks)
		if !math.IsNaN(s) {
			return s
		}
	}
	return 0
}

// IsSticky reports whether endpoint e is sticky at threshold t.
func IsSticky(e *Endpoint, t float64) bool { return score(e) >= t }

// Keeps reports whether the decision, taken with settings s, keeps endpoint
// e: every endpoint when it keeps all, else the sticky ones.
func (d *Decision) Keeps(s *Settings, e *Endpoint) bool {
	return d.KeepsAll() || IsSticky(e, s.AffinityThreshold)
}

// AppendKept appends the indexes of the endpoints the decision keeps.
func AppendKept(dst []int, s *Settings, eps []Endpoint, d *Decision) []int {
	for i := range eps {
		if d.Keeps(s, &eps[i]) {
			dst = append(dst, i)
		}
	}
	return dst
}

// group holds one side of the partition's minima.
type group struct {
	n int
	// fewest in-flight tokens among endpoints with a usable signal
	tokIdx int
	tok    int64
	// signal: some endpoint of the group has an InFlightLoad attribute
	signal bool
	// latency-predictor minimum as the EPP computes it
	predIdx   int
	pred      float64
	predFound bool
}

// prepared is the partition of an endpoint set at one threshold, with the
// minima every mode needs.
type prepared struct {
	n                 int
	applicable        bool // len > 1 and threshold > 0
	sticky, nonSticky group
}

func (g *group) reset() {
	*g = group{tokIdx: -1, predIdx: -1, pred: math.MaxFloat64}
}

func (p *prepared) prepare(eps []Endpoint, threshold float64, sem Semantics) {
	p.n = len(eps)
	p.applicable = len(eps) > 1 && threshold > 0
	p.sticky.reset()
	p.nonSticky.reset()
	if !p.applicable {
		return
	}
	for i := range eps {
		e := &eps[i]
		g := &p.nonSticky
		if score(e) >= threshold {
			g = &p.sticky
		}
		g.n++
		// In-flight tokens: v1 reads a missing signal as 0 tokens, v2 skips it.
		g.signal = g.signal || e.HasLoad
		if e.HasLoad || sem != SemanticsV2 {
			t := int64(0)
			if e.HasLoad {
				t = e.InFlightTokens
			}
			if g.tokIdx < 0 || t < g.tok {
				g.tokIdx, g.tok = i, t
			}
		}
		// Latency prediction: v1 reads a missing one as MaxFloat64; v2 skips a
		// missing one. A present prediction is a signal in both, as the EPP
		// reads it: the minimum starts at MaxFloat64 and takes strictly
		// smaller values, so NaN and +Inf never win (a group holding only
		// those has no signal) and -Inf does.
		v := math.MaxFloat64
		if e.HasPrediction {
			v = e.PredictedTTFTMs
		}
		if sem == SemanticsV2 && !e.HasPrediction {
			continue
		}
		if v < g.pred {
			g.pred, g.predIdx, g.predFound = v, i, true
		}
	}
}

// ttftMin is the EPP's bestTTFT over a group for the throughput source:
// best starts at MaxFloat64 and takes each float64(tokens)/ppt*1000 that is
// strictly smaller. For ppt > 0 the division is monotone, so the minimum is
// reached at the group's fewest tokens; otherwise the loop is run literally.
func ttftMin(eps []Endpoint, g *group, ppt, threshold float64, wantSticky bool, sem Semantics) (float64, bool) {
	if g.tokIdx < 0 {
		return math.MaxFloat64, false
	}
	if ppt > 0 && !math.IsInf(ppt, 0) {
		v := float64(g.tok) / ppt * 1000
		if v < math.MaxFloat64 {
			return v, true
		}
		return math.MaxFloat64, false
	}
	best, found := math.MaxFloat64, false
	for i := range eps {
		e := &eps[i]
		if (score(e) >= threshold) != wantSticky {
			continue
		}
		if !e.HasLoad && sem == SemanticsV2 {
			continue
		}
		t := int64(0)
		if e.HasLoad {
			t = e.InFlightTokens
		}
		if v := float64(t) / ppt * 1000; v < best {
			best, found = v, true
		}
	}
	return best, found
}

// Decide runs the filter on one request's endpoints.
func Decide(s *Settings, eps []Endpoint) Decision {
	var p prepared
	p.prepare(eps, s.AffinityThreshold, s.Semantics)
	return p.decide(s, eps)
}

// DecideAll runs the filter on one request's endpoints for every settings
// entry, writing out[i] for settings[i]. The partition is computed once per
// run of equal thresholds and semantics. len(out) must be ≥ len(settings).
func DecideAll(settings []Settings, eps []Endpoint, out []Decision) {
	var p prepared
	for i := range settings {
		s := &settings[i]
		if i == 0 || s.AffinityThreshold != settings[i-1].AffinityThreshold || s.Semantics != settings[i-1].Semantics {
			p.prepare(eps, s.AffinityThreshold, s.Semantics)
		}
		out[i] = p.decide(s, eps)
	}
}

func (p *prepared) decide(s *Settings, eps []Endpoint) Decision {
	d := Decision{BestSticky: -1, BestNonSticky: -1}
	if !p.applicable {
		d.Outcome = OutcomeNotApplicable
		return d
	}
	// The EPP draws rand.Float64() < explorationProbability: certain at ≥ 1,
	// impossible at ≤ 0, a coin in between.
	if s.ExplorationProbability >= 1 {
		d.Outcome = OutcomeExploration
		return d
	}
	d.ExplorationPossible = s.ExplorationProbability > 0
	d.Sticky, d.NonSticky = p.sticky.n, p.nonSticky.n
	if d.Sticky == 0 {
		d.Outcome = OutcomeNoMatch
		return d
	}
	if d.NonSticky == 0 {
		d.Outcome = OutcomeSticky
		return d
	}
	d.BestSticky, d.BestNonSticky = p.sticky.tokIdx, p.nonSticky.tokIdx
	d.HasGap = p.sticky.signal && p.nonSticky.signal
	if d.BestSticky >= 0 && d.BestNonSticky >= 0 {
		bs := &eps[d.BestSticky]
		d.GapTokens = p.sticky.tok - p.nonSticky.tok
		if bs.HasMatch {
			d.MatchedTokens = int64(bs.MatchBlocks) * int64(bs.BlockSizeTokens)
		}
	}
	if s.Mode == ModeMatchedTokens {
		if s.Semantics == SemanticsV2 && !d.HasGap {
			d.Outcome = OutcomeMissingSignal
			return d
		}
		if d.MatchedTokens > 0 && d.GapTokens > d.MatchedTokens {
			d.Outcome, d.Reason = OutcomeLoadOverride, ReasonBreakEven
			return d
		}
		if s.MaxTTFTPenaltyMs > 0 && p.compareTTFT(s, eps, &d) && d.PenaltyMs > s.MaxTTFTPenaltyMs {
			d.Outcome, d.Reason = OutcomeLoadOverride, ReasonCeiling
			return d
		}
		d.Outcome = OutcomeSticky
		return d
	}
	if s.MaxTTFTPenaltyMs > 0 {
		if !p.compareTTFT(s, eps, &d) {
			d.Outcome = OutcomeMissingSignal
			return d
		}
		if d.PenaltyMs > s.MaxTTFTPenaltyMs {
			d.Outcome, d.Reason = OutcomeLoadOverride, ReasonTTFT
			return d
		}
	}
	// The token-bar generation's second gate (v1: a missing load is 0 tokens).
	if s.MaxTokensInFlightPenalty > 0 && d.BestSticky >= 0 && d.BestNonSticky >= 0 && d.GapTokens > s.MaxTokensInFlightPenalty {
		d.Outcome, d.Reason = OutcomeLoadOverride, ReasonTokens
		return d
	}
	d.Outcome = OutcomeSticky
	return d
}

// compareTTFT computes the group TTFT minima and the penalty the way the EPP
// does. It returns false when, under v2, a group has no signal.
func (p *prepared) compareTTFT(s *Settings, eps []Endpoint, d *Decision) bool {
	var bs, bn float64
	var okS, okN bool
	if s.Source == SourceLatencyPredictor {
		bs, okS = p.sticky.pred, p.sticky.predFound
		bn, okN = p.nonSticky.pred, p.nonSticky.predFound
	} else {
		bs, okS = ttftMin(eps, &p.sticky, s.PeakPrefillThroughput, s.AffinityThreshold, true, s.Semantics)
		bn, okN = ttftMin(eps, &p.nonSticky, s.PeakPrefillThroughput, s.AffinityThreshold, false, s.Semantics)
	}
	if s.Semantics == SemanticsV2 && (!okS || !okN) {
		return false
	}
	d.TTFTCompared = true
	d.BestStickyTTFTMs, d.BestNonStickyTTFTMs = bs, bn
	d.PenaltyMs = bs - bn
	return true
}
