package decide

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/eppconfig"
	"github.com/gatetuner/gatetuner/tuner/shadow"
)

func barPtr(b float64) *float64 {
	if gate.IsNoBar(b) {
		return nil
	}
	return &b
}

// chooseThroughput returns the rate written as peakPrefillThroughput and a
// note. The drain-rate estimate is written when conclusive (or a labelled
// prior); otherwise the configured value is kept — the token bar the gate
// decides on does not depend on it — and the note says why.
func chooseThroughput(est *Estimate, params gate.Params, t Target) (float64, ThroughputNote) {
	d := est.Drain
	calibrated := params.PPTSource() == gate.PPTCalibrated
	if d.Value != nil && (d.StatusOK || d.StatusPrior) && !calibrated {
		note := fmt.Sprintf("drain-rate estimate (%s, confidence %.2f)", d.Method, d.Confidence)
		if d.Prior {
			note = fmt.Sprintf("prior %s (%s), live evidence insufficient", d.Source, d.Method)
		}
		return math.Round(*d.Value), ThroughputNote{Write: true, Value: math.Round(*d.Value), Note: note}
	}
	why := "drain rate inconclusive"
	if d.Reasons != "" {
		why += " (" + d.Reasons + ")"
	}
	if calibrated {
		if t.AllowCalibrationOverride && d.Value != nil && d.StatusOK {
			return math.Round(*d.Value), ThroughputNote{Write: true, Value: math.Round(*d.Value), Note: "drain-rate estimate over the calibrated value (allowCalibrationOverride)"}
		}
		return 0, ThroughputNote{Note: "peakPrefillThroughput is calibrated and its value unknown here; " + why}
	}
	return params.PeakPrefillThroughput, ThroughputNote{Value: params.PeakPrefillThroughput,
		Note: fmt.Sprintf("kept the configured %.0f tok/s (%s): only maxTTFTPenaltyMs moves, which sets the token bar exactly", params.PeakPrefillThroughput, why)}
}

// chooseThroughputFor is chooseThroughput for a build with
// peakPrefillThroughput; for one without it (the token-bar build) the rate
// only prices the objective's queued tokens in seconds and is never
// written: the drain-rate estimate, else the nominal estimate.
func chooseThroughputFor(est *Estimate, params gate.Params, t Target) (float64, ThroughputNote) {
	prof := t.Profile
	if prof.Accepts(gate.KeyPeakPrefillThroughput) {
		return chooseThroughput(est, params, t)
	}
	for _, c := range []struct {
		r    *Rate
		name string
	}{{&est.Drain, "drain-rate estimate"}, {&est.Nominal, "nominal estimate"}} {
		if v := c.r.Value; v != nil && *v > 0 && !math.IsInf(*v, 0) && !c.r.Inconclusive {
			return math.Round(*v), ThroughputNote{Value: math.Round(*v),
				Note: fmt.Sprintf("%s (%s, confidence %.2f) prices the queued tokens; build %s has no peakPrefillThroughput: only its token bar is written", c.name, c.r.Method, c.r.Confidence, prof.Name)}
		}
	}
	why := "drain rate inconclusive"
	if est.Drain.Reasons != "" {
		why += " (" + est.Drain.Reasons + ")"
	}
	return 0, ThroughputNote{Note: fmt.Sprintf("build %s has no peakPrefillThroughput and the %s, nominal unknown: nothing prices queued tokens in seconds for the objective", prof.Name, why)}
}

// changesFor is the edit that turns the current parameters into the candidate's.
func changesFor(inst eppconfig.Target, params gate.Params, rc Candidate, writePPT bool) []eppconfig.Change {
	ch := eppconfig.Change{Target: inst, Set: map[gate.Key]eppconfig.Value{}}
	s := rc.Settings
	if rc.TokenBar {
		// The token-bar generation: only maxTokensInFlightPenalty moves.
		if !rc.Current && (s.MaxTokensInFlightPenalty != params.MaxTokensInFlightPenalty || !params.Present.Has(gate.KeyMaxTokensInFlightPenalty)) {
			ch.Set[gate.KeyMaxTokensInFlightPenalty] = eppconfig.Number(float64(s.MaxTokensInFlightPenalty))
		}
		return []eppconfig.Change{ch}
	}
	if s.MaxTTFTPenaltyMs != params.MaxTTFTPenaltyMs || !params.Present.Has(gate.KeyMaxTTFTPenaltyMs) {
		ch.Set[gate.KeyMaxTTFTPenaltyMs] = eppconfig.Number(s.MaxTTFTPenaltyMs)
	}
	if writePPT && (s.PeakPrefillThroughput != params.PeakPrefillThroughput || !params.Present.Has(gate.KeyPeakPrefillThroughput)) {
		ch.Set[gate.KeyPeakPrefillThroughput] = eppconfig.Number(s.PeakPrefillThroughput)
	}
	if s.Mode != params.PenaltyMode {
		if s.Mode == gate.ModeStatic && params.Present.Has(gate.KeyPenaltyMode) {
			ch.Set[gate.KeyPenaltyMode] = eppconfig.String(s.Mode.String())
		} else if s.Mode == gate.ModeMatchedTokens {
			ch.Set[gate.KeyPenaltyMode] = eppconfig.String(s.Mode.String())
		}
	}
	if rc.Current {
		ch.Set = map[gate.Key]eppconfig.Value{}
	}
	return []eppconfig.Change{ch}
}

// SettingsOf shows settings s of parameters p as the config has them.
func SettingsOf(s gate.Settings, p gate.Params) SettingsView {
	v := SettingsView{Mode: s.Mode.String(), MaxTTFTPenaltyMs: s.MaxTTFTPenaltyMs, PeakPrefillThroughput: s.PeakPrefillThroughput,
		PPTSource: p.PPTSource().String(), TTFTSource: s.Source.String(), AffinityThreshold: s.AffinityThreshold}
	v.BarTokens = barPtr(CurrentBar(s))
	return v
}

func row(c Candidate, counts *shadow.Counts, scale float64) ShadowRow {
	return ShadowRow{Settings: c.Settings.String(), Verdicts: counts.Verdicts, Outcomes: counts.Outcomes,
		Rates: shadow.RatesOf(counts), ExcessTokens: counts.ExcessTokens * scale}
}

// snapshotCoverage is the fraction of the window's expected snapshots
// present: each span's own (per window), else the lookback's.
func snapshotCoverage(lookback *Estimate, day *Day, w WindowView) float64 {
	step := lookback.StepSeconds
	if step <= 0 {
		return 0
	}
	want := w.To.Sub(w.From).Seconds() / step
	got := 0
	count := func(e *Traffic, from, to time.Time) {
		for _, at := range e.Snapshots {
			if !at.Before(from) && at.Before(to) {
				got++
			}
		}
	}
	if day == nil || !day.PerWindow {
		count(&lookback.Traffic, w.From, w.To)
	} else {
		for _, s := range day.Spans {
			if s.Est != nil {
				count(s.Est, maxTime(s.From, w.From), minTime(s.To, w.To))
			}
		}
	}
	if want <= 0 {
		return 0
	}
	return math.Min(1, float64(got)/math.Floor(want))
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// applyReason is the history entry's reason: the bar's move and the
// wrongly-held rates before and after (curBar: the bar in force).
func applyReason(curBar *float64, r *Recommendation) string {
	return fmt.Sprintf("%s: bar %s → %s tokens; wrongly held %s → %s", r.Mode, BarText(curBar), BarText(r.EffectiveBarTokens),
		PctText(r.Evidence.Shadow.Current.Rates.WronglyHeld), PctText(r.Evidence.Shadow.Recommended.Rates.WronglyHeld))
}

// evidenceLine is the history entry's evidence: the source, the excess
// before and after, the confidence and the throughput note.
func evidenceLine(r *Recommendation) string {
	ev := r.Evidence
	parts := []string{
		fmt.Sprintf("source %s, %d decisions (%d known)", ev.Source, ev.Window.Decisions, ev.Window.Known),
		fmt.Sprintf("excess %.3g → %.3g tokens", ev.ExcessCost.Current, ev.ExcessCost.Recommended),
		fmt.Sprintf("confidence %.2f", r.Confidence),
		"ppt: " + ev.Throughput.Note,
	}
	return strings.Join(parts, "; ")
}

// BarText renders a bar in tokens ("none": no bar).
func BarText(b *float64) string {
	if b == nil {
		return "none"
	}
	return fmt.Sprintf("%.0f", *b)
}

// PctText renders a ratio as a percentage ("n/a": unknown).
func PctText(v *float64) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", *v*100)
}

// recHash identifies the change a recommendation would write: the target,
// each edited instance and the owned values as they would be rendered. It
// hashes nothing of the evidence, so the same change has the same hash in
// every cycle however the shadow's numbers move; "" when nothing would change.
func recHash(target string, changes []eppconfig.Change) string {
	var parts []string
	for _, c := range changes {
		if len(c.Set) == 0 && len(c.Remove) == 0 {
			continue
		}
		kv := make([]string, 0, len(c.Set)+len(c.Remove))
		for k, v := range c.Set {
			kv = append(kv, string(k)+"="+v.String())
		}
		for _, k := range c.Remove {
			kv = append(kv, "-"+string(k))
		}
		sort.Strings(kv)
		parts = append(parts, c.Plugin+"\x00"+c.DataKey+"\x00"+strings.Join(kv, "\x00"))
	}
	if len(parts) == 0 {
		return ""
	}
	sort.Strings(parts)
	b, _ := json.Marshal(append([]string{target}, parts...))
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}
