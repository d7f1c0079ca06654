package gate

import "fmt"

// Verdict is the shadow's judgement of one decision against the seed's
// per-decision break-even: releasing a pin is worth it iff the queue gap
// exceeds the cached prefix the request would forfeit.
type Verdict uint8

// Verdicts, in the order they are decided.
const (
	// NotGated: one endpoint or none, threshold ≤ 0, no sticky or no
	// non-sticky endpoint, or exploration probability 1.
	NotGated Verdict = iota
	// Unknown: a group has no usable in-flight signal, or nothing is matched.
	Unknown
	// HeldOK: held, and holding was right (gap ≤ matched).
	HeldOK
	// HeldWrong: a wrongly-held pin (gap > matched); excess gap − matched.
	HeldWrong
	// ReleasedOK: released, and releasing was right.
	ReleasedOK
	// ReleasedWrong: released although the cache outvalued the gap; excess
	// matched − gap re-prefilled.
	ReleasedWrong
	// ReleasedCeiling: released by the matchedTokens ceiling although
	// break-even said hold; excess matched − gap.
	ReleasedCeiling
	NumVerdicts
)

var verdictNames = [NumVerdicts]string{"not_gated", "unknown", "held_ok", "held_wrong", "released_ok", "released_wrong", "released_ceiling"}

// String returns the verdict's name.
func (v Verdict) String() string {
	if v < NumVerdicts {
		return verdictNames[v]
	}
	return fmt.Sprintf("Verdict(%d)", uint8(v))
}

// ParseVerdict parses a verdict name.
func ParseVerdict(s string) (Verdict, bool) {
	for i, n := range verdictNames {
		if n == s {
			return Verdict(i), true
		}
	}
	return 0, false
}

// Known reports whether the verdict counts towards rates (held_* or released_*).
func (v Verdict) Known() bool { return v >= HeldOK && v < NumVerdicts }

// Judge returns the decision's verdict and its excess cost in tokens.
func Judge(d *Decision) (Verdict, int64) {
	switch {
	case d.Outcome == OutcomeNotApplicable || d.Outcome == OutcomeExploration ||
		d.Outcome == OutcomeNoMatch || d.NonSticky == 0:
		return NotGated, 0
	case d.Outcome == OutcomeMissingSignal || !d.HasGap || d.MatchedTokens == 0:
		return Unknown, 0
	}
	worth := d.GapTokens > d.MatchedTokens
	if d.Outcome == OutcomeLoadOverride {
		switch {
		case worth:
			return ReleasedOK, 0
		case d.Reason == ReasonCeiling:
			return ReleasedCeiling, d.MatchedTokens - d.GapTokens
		default:
			return ReleasedWrong, d.MatchedTokens - d.GapTokens
		}
	}
	if worth {
		return HeldWrong, d.GapTokens - d.MatchedTokens
	}
	return HeldOK, 0
}
