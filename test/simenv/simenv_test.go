package simenv

import (
	"strings"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenarios"
	"github.com/gatetuner/gatetuner/tuner/config"
)

func load(t *testing.T, name string) *scenario.Scenario {
	t.Helper()
	sc, err := scenarios.Load(name)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// TestPolicyScalesTheDayByEachCallersChoices: the one simulated policy
// scales the day-long clocks to the simulated day; the dry run and the
// closed loop differ only in the options they name (mode, lookback, window
// rule), which matter on a day of unequal phases.
func TestPolicyScalesTheDayByEachCallersChoices(t *testing.T) {
	cal := load(t, "calibration-1970") // phases of 10, 20 and 10 minutes
	two, err := scenario.Days(load(t, "prompt-shift"), 2)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name                  string
		sc                    *scenario.Scenario
		opt                   PolicyOptions
		mode                  string
		lookback, window, day time.Duration
	}{
		{"a dry run over unequal phases: lookback within the first phase, windows of it", cal, DryRunPolicy(),
			config.ModeOff, 10 * time.Minute, 10 * time.Minute, 40 * time.Minute},
		{"a loop over unequal phases: a twelfth of the day", cal, LoopPolicy(),
			config.ModeConfigMap, 15 * time.Minute, 40 * time.Minute / 12, 40 * time.Minute},
		{"a loop over two days of equal phases: one day, windows of a phase", two, LoopPolicy(),
			config.ModeConfigMap, 15 * time.Minute, 20 * time.Minute, 2 * time.Hour},
		{"a dry run over one day of equal phases", load(t, "prompt-shift"), DryRunPolicy(),
			config.ModeOff, 20 * time.Minute, 20 * time.Minute, 2 * time.Hour},
	}
	def := config.DefaultPolicy()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := Policy(tc.sc, tc.opt)
			if p.Mode != tc.mode || p.Lookback != tc.lookback || p.WindowWidth != tc.window || p.DayLength != tc.day || p.History != tc.day {
				t.Errorf("mode %s lookback %s window %s day %s history %s; want %s %s %s %s",
					p.Mode, p.Lookback, p.WindowWidth, p.DayLength, p.History, tc.mode, tc.lookback, tc.window, tc.day)
			}
			if want := time.Duration(float64(def.Cooldown) * float64(tc.day) / float64(24*time.Hour)); p.Cooldown != want || p.BudgetWindow != tc.day {
				t.Errorf("cooldown %s, budget window %s; want %s, %s (scaled to the day)", p.Cooldown, p.BudgetWindow, want, tc.day)
			}
			if p.RestartWarmup != RestartWarmup || p.BlockSizeTokens == nil || *p.BlockSizeTokens != tc.sc.EPP.PrefixIndex.BlockSizeTokens {
				t.Errorf("restart warm-up %s, block size %v; want the simulated EPP's", p.RestartWarmup, p.BlockSizeTokens)
			}
		})
	}
}

// TestEstimatorTargetSelectsAPDPoolsPrefillPods: a P/D pool's target
// selects the decode and the prefill pods and names the gate's profile;
// another pool's selects its pods.
func TestEstimatorTargetSelectsAPDPoolsPrefillPods(t *testing.T) {
	sc := load(t, "calibration-1970")
	plain := EstimatorTarget(sc)
	if want := `namespace="` + sc.Namespace + `",pod=~"` + sc.Pods.NamePrefix + `-[0-9]+"`; plain.VLLMSelector != want || plain.PDGateProfile != "" {
		t.Errorf("VLLMSelector %s, PDGateProfile %q; want %s and none", plain.VLLMSelector, plain.PDGateProfile, want)
	}
	if plain.EPPSelector != `namespace="`+sc.Namespace+`",pod="`+sc.EPP.Pod+`"` || plain.MaxNumBatchedTokens != sc.Pods.Engine.MaxNumBatchedTokens {
		t.Errorf("EPP selector %s, maxNumBatchedTokens %d", plain.EPPSelector, plain.MaxNumBatchedTokens)
	}
	x, err := scenario.ParseExportShape(scenario.ShapeLLMD2026 + ",prefillPods=2")
	if err != nil {
		t.Fatal(err)
	}
	sc.Exporters = &x
	pd := EstimatorTarget(sc)
	if !strings.Contains(pd.VLLMSelector, sc.PrefillNamePrefix()) || !strings.Contains(pd.VLLMSelector, sc.Pods.NamePrefix) || pd.PDGateProfile != x.PDGateProfile || pd.PDGateProfile == "" {
		t.Errorf("P/D: VLLMSelector %s, PDGateProfile %q; want the decode and prefill pods and the shape's profile %q", pd.VLLMSelector, pd.PDGateProfile, x.PDGateProfile)
	}
}

// TestConfigTargetKeepsTheCallersConfigAndAddsTheScenarios: the daemon's
// target over a scenario edits the caller's file, plugin and key under its
// profile, and selects and limits what the scenario says.
func TestConfigTargetKeepsTheCallersConfigAndAddsTheScenarios(t *testing.T) {
	sc := load(t, "steady")
	pol := Policy(sc, DryRunPolicy())
	got := ConfigTarget(sc, config.Target{File: "/tmp/epp.yaml", Plugin: "gate", Key: "config.yaml", Profile: "penalty-mode"}, pol)
	et := EstimatorTarget(sc)
	if got.File != "/tmp/epp.yaml" || got.Plugin != "gate" || got.Key != "config.yaml" || got.Profile != "penalty-mode" {
		t.Errorf("the caller's config: %+v", got)
	}
	if got.Name != sc.Target || got.MaxNumBatchedTokens != sc.Pods.Engine.MaxNumBatchedTokens ||
		got.Selector.VLLM != et.VLLMSelector || got.Selector.EPP != et.EPPSelector || got.PDGateProfile != et.PDGateProfile ||
		got.Policy.Lookback != pol.Lookback || got.Policy.WindowWidth != pol.WindowWidth {
		t.Errorf("the scenario's: %+v", got)
	}
}
