package spans

import (
	"fmt"
	"math"

	"github.com/gatetuner/gatetuner/gate"
)

// Bounds are what a window of spans reveals about the settings in force.
type Bounds struct {
	// Thresholds are the distinct affinity_threshold values and their counts.
	Thresholds []ThresholdCount
	// MaxKept is the largest penalty of a decision kept sticky with the gate
	// run (HasKept): maxTTFTPenaltyMs ≥ MaxKept, since the EPP releases iff
	// penalty > max.
	MaxKept float64
	HasKept bool
	// MinReleased is the smallest penalty of a load_override (HasReleased):
	// in static mode without a token bar, maxTTFTPenaltyMs < MinReleased.
	MinReleased float64
	HasReleased bool
	// Penalties counts spans with a finite penalty; GapOff those whose
	// penalty is no whole token gap at the throughput given to SettingsBounds.
	Penalties, GapOff uint64
	// MissingSignal and RequestLoadOverride count decisions only v2 builds
	// and request-gate heads make; Other counts unknown decision values.
	MissingSignal, RequestLoadOverride, Other uint64
}

// SettingsBounds scans a view for the bounds; ppt is the configured
// peakPrefillThroughput (0 skips the gap check, as for a latency predictor).
func SettingsBounds(v *View, ppt float64) Bounds {
	b := Bounds{Thresholds: v.Thresholds(), MaxKept: math.Inf(-1), MinReleased: math.Inf(1)}
	for r := range v.All() {
		switch r.Outcome {
		case gate.OutcomeMissingSignal:
			b.MissingSignal++
		case OutcomeRequestLoadOverride:
			b.RequestLoadOverride++
		case OutcomeOther:
			b.Other++
		}
		if !r.HasPenalty() || math.IsNaN(r.PenaltyMs) || math.IsInf(r.PenaltyMs, 0) {
			continue
		}
		b.Penalties++
		if ppt > 0 {
			if _, ok := RecoverGap(r.PenaltyMs, ppt); !ok {
				b.GapOff++
			}
		}
		switch r.Outcome {
		case gate.OutcomeSticky:
			b.HasKept = true
			b.MaxKept = math.Max(b.MaxKept, r.PenaltyMs)
		case gate.OutcomeLoadOverride:
			b.HasReleased = true
			b.MinReleased = math.Min(b.MinReleased, r.PenaltyMs)
		}
	}
	return b
}

// Mismatch is one piece of evidence that a setting is not in force.
type Mismatch struct {
	// Setting is the plugin parameter key.
	Setting string
	Reason  string
}

func (m Mismatch) String() string { return m.Setting + ": " + m.Reason }

// GapOffTolerance is the share of penalties allowed off a whole token gap
// before the throughput counts as not in force.
const GapOffTolerance = 0.01

// Check lists where the spans contradict settings s (the config the tuner
// believes in force). Empty means no contradiction, not proof.
func (b *Bounds) Check(s *gate.Settings) []Mismatch {
	var out []Mismatch
	if len(b.Thresholds) > 1 {
		out = append(out, Mismatch{"affinityThreshold", fmt.Sprintf("%d distinct thresholds in the window (two filter instances or a change)", len(b.Thresholds))})
	}
	for _, t := range b.Thresholds {
		if t.Threshold != s.AffinityThreshold {
			out = append(out, Mismatch{"affinityThreshold", fmt.Sprintf("spans carry %v, config %v", t.Threshold, s.AffinityThreshold)})
		}
	}
	gateOn := s.MaxTTFTPenaltyMs > 0 || s.Mode == gate.ModeMatchedTokens
	if !gateOn && b.Penalties > 0 {
		out = append(out, Mismatch{"maxTTFTPenaltyMs", fmt.Sprintf("config 0 (gate off) but %d spans carry a penalty", b.Penalties)})
	}
	if s.MaxTTFTPenaltyMs > 0 && b.HasKept && s.MaxTTFTPenaltyMs < b.MaxKept {
		out = append(out, Mismatch{"maxTTFTPenaltyMs", fmt.Sprintf("config %v but a %v ms penalty was kept sticky", s.MaxTTFTPenaltyMs, b.MaxKept)})
	}
	if s.MaxTTFTPenaltyMs > 0 && b.HasReleased && s.Mode == gate.ModeStatic && s.MaxTokensInFlightPenalty == 0 &&
		s.MaxTTFTPenaltyMs >= b.MinReleased {
		out = append(out, Mismatch{"maxTTFTPenaltyMs", fmt.Sprintf("config %v but a %v ms penalty was released", s.MaxTTFTPenaltyMs, b.MinReleased)})
	}
	if s.Source == gate.SourcePrefillThroughput && b.Penalties > 0 && float64(b.GapOff) > GapOffTolerance*float64(b.Penalties) {
		out = append(out, Mismatch{"peakPrefillThroughput", fmt.Sprintf("%d of %d penalties are no whole token gap at %v tok/s", b.GapOff, b.Penalties, s.PeakPrefillThroughput)})
	}
	return out
}
