package main

import (
	"strings"
	"testing"

	"github.com/gatetuner/gatetuner/tuner"
	"github.com/gatetuner/gatetuner/tuner/config"
)

// TestCycleWhySaysWhyInWords: applied and held rows say why in words, and
// a raise out of the release-chain hazard is named as such.
func TestCycleWhySaysWhyInWords(t *testing.T) {
	pol := config.DefaultPolicy()
	f := func(v float64) *float64 { return &v }
	hazard := &tuner.Report{Result: tuner.ResultApplied, Current: tuner.SettingsView{Mode: "static", BarTokens: f(71676)},
		Recommendation: &tuner.Recommendation{Mode: "static", EffectiveBarTokens: f(101366),
			Evidence: tuner.Evidence{ReleaseChainFloorTokens: 91929}}}
	lowered := &tuner.Report{Result: tuner.ResultApplied, Current: tuner.SettingsView{Mode: "static", BarTokens: f(286704)},
		Recommendation: &tuner.Recommendation{Mode: "static", EffectiveBarTokens: f(71676)}}
	for _, tc := range []struct {
		name string
		r    *tuner.Report
		want string
	}{
		{"release-chain raise", hazard, "raised out of the release-chain hazard"},
		{"lowered", lowered, "lowered: requests queue behind"},
		{"deadband", &tuner.Report{Result: tuner.ResultHeld, Hold: &tuner.Hold{Reason: tuner.HoldDeadband}}, "not worth an EPP restart"},
		{"cooldown", &tuner.Report{Result: tuner.ResultHeld, Hold: &tuner.Hold{Reason: tuner.HoldCooldown}}, "too recent to judge"},
		{"other holds keep their detail", &tuner.Report{Result: tuner.ResultHeld, Hold: &tuner.Hold{Reason: tuner.HoldInconclusive, Detail: "no saturated windows"}}, "no saturated windows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := cycleWhy(tc.r, pol); !strings.Contains(got, tc.want) {
				t.Fatalf("why = %q, want %q", got, tc.want)
			}
		})
	}
}
