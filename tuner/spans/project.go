package spans

import (
	"fmt"
	"math"

	"github.com/gatetuner/gatetuner/gate"
)

// Exactness says how far a span decides a candidate's outcome.
type Exactness uint8

// Exactness levels.
const (
	// Exact: the candidate's EPP would decide Outcome, float for float.
	Exact Exactness = iota
	// Boundary: the candidate's bar sits within float rounding of the
	// span's gap; the EPP's own rounding of each group's TTFT decides, and
	// the span does not carry them. Outcome is the real-arithmetic one.
	Boundary
	// NeedsModel: the decision depends on what the span lacks (the best
	// sticky endpoint's matched tokens, the partition at another threshold,
	// a gap the gate did not measure); Gap is set when measured.
	NeedsModel
	// Unknown: the span cannot be projected (an outcome gate does not model,
	// or a penalty that is no whole token gap at the throughput in force).
	Unknown
)

var exactNames = [...]string{"exact", "boundary", "needs-model", "unknown"}

// String names the level.
func (e Exactness) String() string {
	if int(e) < len(exactNames) {
		return exactNames[e]
	}
	return fmt.Sprintf("Exactness(%d)", uint8(e))
}

// Projection is a candidate setting's decision on one span's request.
type Projection struct {
	Outcome gate.Outcome
	Exact   Exactness
	// ExplorationPossible: the candidate explores with a probability in
	// (0,1); Outcome is the decision without the draw, as gate.Decide's.
	ExplorationPossible bool
	// GapTokens is best sticky − best non-sticky in-flight tokens, recovered
	// from the penalty (HasGap).
	GapTokens int64
	HasGap    bool
}

// boundaryBand is the relative distance from the bar within which a
// projected decision is Boundary. Each group's TTFT is rounded twice
// (divide, multiply) and their difference once, so the EPP's penalty is
// within 5u·(a+b) of the real one (u = 2⁻⁵³, a and b the groups' TTFTs).
// The band allows a+b up to 2¹² times the bar (a queue of 4096 bars at the
// best sticky endpoint) before a flip could escape it.
const boundaryBand = 5 * 0x1p-53 * 0x1p12

// maxGap bounds a recovered gap so that gap×1000 is exact in float64.
const maxGap = 1 << 43

// gapSlack is how far from a whole number penalty×P/1000 may be and still
// be read as a token gap (tokens are int64 in the EPP).
const gapSlack = 1e-3

// RecoverGap returns the token gap behind a penalty at throughput ppt
// (tok/s): penalty = (tS − tN)·1000/ppt in real arithmetic, and the gap is a
// whole number. ok is false when the penalty is not finite, the gap is
// beyond 2⁴³, or penalty×ppt/1000 is not within gapSlack of a whole number
// (the throughput in force is not ppt).
func RecoverGap(penaltyMs, ppt float64) (gap int64, ok bool) {
	if !(ppt > 0) || math.IsInf(ppt, 0) || math.IsNaN(penaltyMs) || math.IsInf(penaltyMs, 0) {
		return 0, false
	}
	g := penaltyMs * ppt / 1000
	r := math.Round(g)
	if math.Abs(r) > maxGap || math.Abs(g-r) > gapSlack {
		return 0, false
	}
	return int64(r), true
}

// Project decides what a candidate setting would have done with the request
// behind record r, given the settings in force when the EPP emitted it.
// Static candidates at the threshold and TTFT source in force are exact
// (bar a Boundary); matchedTokens candidates are exact only where the
// ceiling releases or the gap cannot pass any positive match, and otherwise
// NeedsModel with the gap for the caller to hold against the model's
// matched tokens (release iff matched > 0 and gap > matched).
func Project(r *Record, inForce, cand *gate.Settings, threshold float64) Projection {
	p := Projection{Outcome: r.Outcome}
	if r.Outcome >= gate.NumOutcomes {
		p.Exact = Unknown
		return p
	}
	if int(r.Candidates) <= 1 || cand.AffinityThreshold <= 0 {
		p.Outcome = gate.OutcomeNotApplicable
		return p
	}
	if cand.ExplorationProbability >= 1 {
		p.Outcome = gate.OutcomeExploration
		return p
	}
	p.ExplorationPossible = cand.ExplorationProbability > 0
	if cand.AffinityThreshold != threshold || cand.Source != inForce.Source ||
		r.Outcome == gate.OutcomeNotApplicable || r.Outcome == gate.OutcomeExploration {
		p.Exact = NeedsModel // the partition at this threshold is not in the span
		return p
	}
	switch {
	case r.Outcome == gate.OutcomeNoMatch:
		return p
	case r.Sticky == r.Candidates:
		p.Outcome = gate.OutcomeSticky
		return p
	case r.Outcome == gate.OutcomeMissingSignal:
		return projectMissing(p, cand)
	}
	if !r.HasPenalty() { // kept sticky with the gate off in force
		if cand.HasBar() {
			p.Exact = NeedsModel
		}
		p.Outcome = gate.OutcomeSticky
		return p
	}
	return projectPenalty(p, r, inForce, cand)
}

// projectMissing: a group had no signal (only v2 builds say so); the
// candidate's gate, when on, finds the same, since the signal does not
// depend on the settings. With the gate off it keeps the sticky set: a token
// bar needs both groups' fewest tokens, which a group without signal lacks.
func projectMissing(p Projection, cand *gate.Settings) Projection {
	if cand.MaxTTFTPenaltyMs > 0 || cand.Mode == gate.ModeMatchedTokens {
		p.Outcome = gate.OutcomeMissingSignal
		return p
	}
	p.Outcome = gate.OutcomeSticky
	return p
}

// projectPenalty decides a candidate from a measured penalty.
func projectPenalty(p Projection, r *Record, inForce, cand *gate.Settings) Projection {
	ttft, ttftExact := releasesTTFT(r.PenaltyMs, inForce, cand)
	if cand.Source == gate.SourcePrefillThroughput {
		p.GapTokens, p.HasGap = RecoverGap(r.PenaltyMs, inForce.PeakPrefillThroughput)
		if !p.HasGap && ttftExact != Exact {
			p.Exact = Unknown
			return p
		}
	}
	p.Outcome = gate.OutcomeSticky
	p.Exact = ttftExact
	if cand.Mode == gate.ModeMatchedTokens {
		// Break-even comes first, then the ceiling: both release, so a
		// ceiling release is exact whatever the matched tokens are.
		if ttft && ttftExact == Exact {
			p.Outcome = gate.OutcomeLoadOverride
			return p
		}
		if p.HasGap && p.GapTokens <= 0 {
			if ttft {
				p.Outcome = gate.OutcomeLoadOverride
			}
			return p // gap > matched > 0 is impossible
		}
		p.Exact = NeedsModel
		return p
	}
	if ttft {
		p.Outcome = gate.OutcomeLoadOverride
		return p
	}
	if cand.MaxTokensInFlightPenalty > 0 {
		if !p.HasGap {
			p.Exact = NeedsModel
			return p
		}
		if p.GapTokens > cand.MaxTokensInFlightPenalty {
			p.Outcome = gate.OutcomeLoadOverride
		}
	}
	return p
}

// releasesTTFT decides the candidate's TTFT comparison from the measured
// penalty: exactly the EPP's float comparison when the penalty is the same
// float (latency predictor, or the same throughput), else the real-
// arithmetic comparison penalty·P/P′ > M′ with a Boundary band.
func releasesTTFT(penalty float64, inForce, cand *gate.Settings) (bool, Exactness) {
	m := cand.MaxTTFTPenaltyMs
	if m <= 0 {
		return false, Exact
	}
	if cand.Source == gate.SourceLatencyPredictor || cand.PeakPrefillThroughput == inForce.PeakPrefillThroughput {
		return penalty > m, Exact
	}
	gap, ok := RecoverGap(penalty, inForce.PeakPrefillThroughput)
	if !ok || !(cand.PeakPrefillThroughput > 0) {
		return false, Unknown
	}
	x := float64(gap) * 1000 / cand.PeakPrefillThroughput
	if math.Abs(x-m) <= boundaryBand*math.Max(math.Abs(x), m) {
		return realGreater(gap, cand.PeakPrefillThroughput, m), Boundary
	}
	return x > m, Exact
}

// realGreater decides gap·1000/ppt > m in real arithmetic: gap·1000 > m·ppt,
// the product's rounding error taken exactly with a fused multiply-add.
func realGreater(gap int64, ppt, m float64) bool {
	lhs := float64(gap) * 1000 // exact below 2⁵³/1000 tokens
	prod := m * ppt
	err := math.FMA(m, ppt, -prod) // m·ppt = prod + err exactly
	if lhs != prod {
		return lhs > prod
	}
	return err < 0
}
