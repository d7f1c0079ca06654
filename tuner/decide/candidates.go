package decide

import (
	"math"
	"strconv"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/shadow"
)

// barGrid is the number of steps per doubling of the candidate bars.
const barGrid = 4

// barSpan is how many grid steps the candidates reach each way from the anchor (2^(40/4) = 1024×).
const barSpan = 40

// Candidate is one settings variant the tuner may recommend.
type Candidate struct {
	shadow.Candidate
	// Bar is the token bar: static maxTTFTPenaltyMs × ppt / 1000, or the
	// matchedTokens ceiling's bar; +Inf for no bar (gate or ceiling off).
	Bar float64
	// Current marks the settings in force.
	Current bool
	// TokenBar marks a candidate of the token-bar generation: it sets
	// maxTokensInFlightPenalty (Bar tokens) and nothing else.
	TokenBar bool
}

// CandidateSpec says which candidates to build.
type CandidateSpec struct {
	Current gate.Params
	Profile gate.Profile
	// DrainRate is the estimate written as peakPrefillThroughput (tok/s).
	DrainRate float64
	// TTFTSLOMs, when > 0, is the matchedTokens ceiling (ms at DrainRate).
	TTFTSLOMs float64
}

// CurrentBar returns the token bar of the settings in force (+Inf when off).
func CurrentBar(s gate.Settings) float64 {
	if s.MaxTokensInFlightPenalty > 0 && s.MaxTTFTPenaltyMs <= 0 {
		return float64(s.MaxTokensInFlightPenalty)
	}
	if !s.HasBar() {
		return gate.NoBar()
	}
	return s.BarTokens()
}

// BuildCandidates returns the current settings first, then static bars on a
// geometric grid (2^(1/4) apart, anchored on the current bar so that the
// ×/÷ step limits are grid points) plus "gate off", then — for profiles that
// accept penaltyMode — matchedTokens with the SLO ceiling, or with every
// grid ceiling and no ceiling.
func BuildCandidates(spec CandidateSpec) []Candidate {
	cur := spec.Current.Settings(spec.Profile.MissingSignal)
	out := []Candidate{{Candidate: shadow.Candidate{Label: "current", Params: spec.Current, Settings: cur}, Bar: CurrentBar(cur), Current: true}}
	if TokenBarOnly(spec.Profile, cur) {
		out[0].TokenBar = true
		return append(out, tokenBarCandidates(spec)...)
	}
	anchor := CurrentBar(cur)
	if gate.IsNoBar(anchor) || anchor <= 0 {
		anchor = gate.DefaultMaxTTFTPenaltyMs * spec.DrainRate / 1000
	}
	d := spec.DrainRate
	mk := func(mode gate.PenaltyMode, bar float64) Candidate {
		ms := 0.0
		if !gate.IsNoBar(bar) {
			ms = bar / d * 1000
		}
		ovs := []shadow.Override{
			{Key: gate.KeyPeakPrefillThroughput, Value: formatFloat(d)},
			{Key: gate.KeyMaxTTFTPenaltyMs, Value: formatFloat(ms)},
		}
		if mode == gate.ModeMatchedTokens || spec.Current.Present.Has(gate.KeyPenaltyMode) {
			ovs = append(ovs, shadow.Override{Key: gate.KeyPenaltyMode, Value: mode.String()})
		}
		c, err := shadow.NewCandidate(spec.Current, spec.Profile, ovs...)
		if err != nil { // values are well-formed numbers and modes
			panic(err)
		}
		if gate.IsNoBar(bar) {
			bar = gate.NoBar()
		} else {
			bar = c.Settings.BarTokens()
		}
		return Candidate{Candidate: c, Bar: bar}
	}
	if d <= 0 || math.IsNaN(d) || math.IsInf(d, 0) {
		return out
	}
	for k := -barSpan; k <= barSpan; k++ {
		out = append(out, mk(gate.ModeStatic, anchor*math.Exp2(float64(k)/barGrid)))
	}
	out = append(out, mk(gate.ModeStatic, gate.NoBar()))
	if spec.Profile.Accepts(gate.KeyPenaltyMode) && cur.Source == gate.SourcePrefillThroughput {
		if spec.TTFTSLOMs > 0 {
			out = append(out, mk(gate.ModeMatchedTokens, spec.TTFTSLOMs*d/1000))
		} else {
			for k := -barSpan; k <= barSpan; k++ {
				out = append(out, mk(gate.ModeMatchedTokens, anchor*math.Exp2(float64(k)/barGrid)))
			}
			out = append(out, mk(gate.ModeMatchedTokens, gate.NoBar()))
		}
	}
	return out
}

// TokenBarOnly reports whether the settings' only load gate is the token
// bar maxTokensInFlightPenalty: a build that has the key (router-2026-05-tokens)
// with maxTTFTPenaltyMs 0. That build's filter (plugin.go@a42e39d3d) then
// skips the TTFT gate and does not consume latency predictions: it releases
// iff the fewest in-flight tokens among sticky endpoints exceed the fewest
// among the others by more than the bar (a missing load is 0 tokens) —
// values the shadow replays exactly, whatever ttftSource says.
func TokenBarOnly(prof gate.Profile, s gate.Settings) bool {
	return prof.Accepts(gate.KeyMaxTokensInFlightPenalty) && s.MaxTTFTPenaltyMs <= 0
}

// tokenBarCandidates are the token bars on the geometric grid around the
// current bar (whole tokens, each once), then the bar off
// (maxTokensInFlightPenalty 0). Only maxTokensInFlightPenalty varies.
func tokenBarCandidates(spec CandidateSpec) []Candidate {
	cur := spec.Current.Settings(spec.Profile.MissingSignal)
	anchor := CurrentBar(cur)
	if gate.IsNoBar(anchor) || anchor <= 0 {
		if d := spec.DrainRate; d > 0 && !math.IsInf(d, 0) && !math.IsNaN(d) {
			anchor = gate.DefaultMaxTTFTPenaltyMs * d / 1000
		} else {
			return nil
		}
	}
	mk := func(n int64) Candidate {
		c, err := shadow.NewCandidate(spec.Current, spec.Profile, shadow.Override{Key: gate.KeyMaxTokensInFlightPenalty, Value: strconv.FormatInt(n, 10)})
		if err != nil { // a formatted integer always parses
			panic(err)
		}
		bar := gate.NoBar()
		if n > 0 {
			bar = float64(n)
		}
		return Candidate{Candidate: c, Bar: bar, TokenBar: true}
	}
	var out []Candidate
	seen := map[int64]bool{}
	for k := -barSpan; k <= barSpan; k++ {
		n := int64(math.Round(anchor * math.Exp2(float64(k)/barGrid)))
		if n < 1 || seen[n] {
			continue
		}
		seen[n] = true
		out = append(out, mk(n))
	}
	return append(out, mk(0))
}

// barDistance is |log(a/b)|, with +Inf bars far from finite ones.
func barDistance(a, b float64) float64 {
	switch {
	case gate.IsNoBar(a) && gate.IsNoBar(b):
		return 0
	case gate.IsNoBar(a) || gate.IsNoBar(b) || a <= 0 || b <= 0:
		return math.Inf(1)
	}
	return math.Abs(math.Log(a / b))
}

func formatFloat(v float64) string {
	// Round to a value a person can read back: 4 significant decimals for
	// the ms, whole tokens per second.
	if v >= 100 {
		v = math.Round(v)
	} else {
		v = math.Round(v*100) / 100
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// ceilingTolerance: the matchedTokens ceiling is the one nearest the bar in
// force among those whose objective is within this fraction of the best
// matchedTokens one.
const ceilingTolerance = 0.02

// Choice is the objective's pick.
type Choice struct {
	// Best is the index (into the candidates) of the lowest objective,
	// preferring the current settings on ties and, in matchedTokens, the
	// ceiling nearest the bar in force within 2 % of the best.
	Best int
	// BestStatic and BestMatched are the best of each mode (-1 when none).
	BestStatic, BestMatched int
}

// Choose picks the candidate with the lowest objective. costs[i] is the
// objective of candidates[i] on the same decisions, lower is better (the
// tuner passes the feedback replay's estimated TTFT p90; see docs/tuner.md).
func Choose(cands []Candidate, costs []float64) Choice {
	ch := Choice{Best: 0, BestStatic: -1, BestMatched: -1}
	anchor := cands[0].Bar
	// better: lower cost, then (on equal cost) the bar nearest the current one.
	better := func(i, j int) bool {
		if j < 0 || costs[i] != costs[j] {
			return j < 0 || costs[i] < costs[j]
		}
		return barDistance(cands[i].Bar, anchor) < barDistance(cands[j].Bar, anchor)
	}
	for i := 1; i < len(cands); i++ {
		switch cands[i].Settings.Mode {
		case gate.ModeStatic:
			if better(i, ch.BestStatic) {
				ch.BestStatic = i
			}
		case gate.ModeMatchedTokens:
			if better(i, ch.BestMatched) {
				ch.BestMatched = i
			}
		}
	}
	if ch.BestMatched >= 0 {
		// Among the ceilings whose cost is within 2 % of the best (the
		// objective cannot tell them apart), the one nearest the bar in force:
		// the smallest change. (The smallest such ceiling, chosen before,
		// releases more on the ceiling with no estimated gain.)
		limit := costs[ch.BestMatched] * (1 + ceilingTolerance)
		for i := 1; i < len(cands); i++ {
			if cands[i].Settings.Mode == gate.ModeMatchedTokens && costs[i] <= limit &&
				barDistance(cands[i].Bar, anchor) < barDistance(cands[ch.BestMatched].Bar, anchor) {
				ch.BestMatched = i
			}
		}
	}
	for _, i := range []int{ch.BestStatic, ch.BestMatched} {
		if i >= 0 && costs[i] < costs[ch.Best] {
			ch.Best = i
		}
	}
	if ch.BestStatic >= 0 && ch.BestMatched >= 0 && ch.Best == ch.BestStatic && costs[ch.BestMatched] == costs[ch.BestStatic] {
		ch.Best = ch.BestStatic // equal cost: keep the mode with no new key
	}
	return ch
}

// latencyPredictorDetail says why a latencyPredictor target is reported
// only, and for the token-bar build what would let gatetuner tune it.
func latencyPredictorDetail(prof gate.Profile) string {
	d := "ttftSource is latencyPredictor: the gate compares predicted milliseconds, which gatetuner neither estimates nor writes; reported only"
	if prof.Accepts(gate.KeyMaxTokensInFlightPenalty) {
		d += " (with maxTTFTPenaltyMs: 0 this build gates on maxTokensInFlightPenalty alone, which gatetuner tunes)"
	}
	return d
}
