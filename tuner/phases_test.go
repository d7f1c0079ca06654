package tuner_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/estimator/prom"
	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim"
	"github.com/gatetuner/gatetuner/test/simenv"
	"github.com/gatetuner/gatetuner/tuner"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/sink"
)

// phaseEnv recommends from one simulated phase through the whole tuner path:
// simulator → embedded Prometheus → estimator → Prometheus model → shadow →
// guards, against a file-backed EPP config, in mode off.
type phaseEnv struct {
	t       *testing.T
	sc      *fleetsim.Scenario
	profile gate.Profile
	policy  config.Policy
}

func newPhaseEnv(t *testing.T, scenario, profile string) *phaseEnv {
	sc, err := fleetsim.LoadScenario(scenario)
	if err != nil {
		t.Fatal(err)
	}
	prof, err := gate.LookupProfile(profile)
	if err != nil {
		t.Fatal(err)
	}
	pol := config.DefaultPolicy()
	// The scenario compresses a day into two hours: scale the guards' clocks.
	pol.Lookback = 20 * time.Minute
	pol.Cooldown = 20 * time.Minute
	pol.RestartWarmup = 5 * time.Second
	bs := sc.EPP.PrefixIndex.BlockSizeTokens
	pol.BlockSizeTokens = &bs
	return &phaseEnv{t: t, sc: sc, profile: prof, policy: pol}
}

// recommend simulates phase with settings cur and runs one tuner cycle at its end.
func (e *phaseEnv) recommend(phase string, cur gate.Settings, seed uint64) (*tuner.Report, *fleetsim.Truth) {
	t := e.t
	ctx := context.Background()
	dir := t.TempDir()
	var end time.Time
	emb, err := prom.NewEmbedded(prom.EmbeddedConfig{Dir: dir + "/tsdb", Now: func() time.Time { return end.Add(time.Hour) }, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	end = fleetsim.DefaultBaseTime().Add(100 * time.Hour) // retention reference until Fill reports the real end
	tr, end2, err := simenv.Fill(ctx, emb, e.sc, fleetsim.Options{Seed: seed, First: phase, Last: phase, SettingsFor: func(int) gate.Settings { return cur }})
	if err != nil {
		t.Fatal(err)
	}
	end = end2
	at := end.Add(7 * time.Second) // off the scrape grid
	path, err := simenv.WriteEPPConfig(dir, e.sc, cur, false)
	if err != nil {
		t.Fatal(err)
	}
	snk, err := sink.New(sink.Target{Name: e.sc.Target, File: path, Plugins: []string{e.sc.EPP.Plugin}, Profile: e.profile}, sink.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	est, err := estimator.New(emb, func() time.Time { return at }, estimator.Config{Lookback: e.policy.Lookback})
	if err != nil {
		t.Fatal(err)
	}
	tc := config.Target{Name: e.sc.Target, File: path, Plugin: e.sc.EPP.Plugin, Profile: e.profile.Name, Policy: e.policy}
	tu := &tuner.Tuner{Estimator: est, Clock: func() time.Time { return at }, Seed: seed, Logger: quiet}
	rep := tu.Cycle(ctx, &tuner.Target{Config: tc, Profile: e.profile, Sink: snk, Est: simenv.EstimatorTarget(e.sc)})
	return rep, tr
}

// recommended returns the settings the report recommends, or cur when it holds.
func recommended(rep *tuner.Report, cur gate.Settings) gate.Settings {
	if rep.Result != tuner.ResultRecommended || rep.Recommendation == nil {
		return cur
	}
	r := rep.Recommendation
	s := cur
	s.MaxTTFTPenaltyMs, s.PeakPrefillThroughput = r.MaxTTFTPenaltyMs, r.PeakPrefillThroughput
	s.Mode, _ = gate.ParsePenaltyMode(r.Mode)
	return s
}

func TestPromptShiftPhaseByPhase(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates prompt-shift several times")
	}
	for _, profile := range []string{gate.ProfileRouter202608, gate.ProfilePenaltyMode} {
		t.Run(profile, func(t *testing.T) {
			e := newPhaseEnv(t, "prompt-shift", profile)
			cur := fleetsim.DefaultSettings()
			for i := 0; i+1 < len(e.sc.Phases); i++ {
				ph, next := e.sc.Phases[i].Name, e.sc.Phases[i+1].Name
				rep, _ := e.recommend(ph, cur, 1)
				hold := ""
				if rep.Hold != nil {
					hold = string(rep.Hold.Reason) + ": " + rep.Hold.Detail
				}
				rec := rep.Recommendation
				line := fmt.Sprintf("%-9s result %-11s", ph, rep.Result)
				if rec != nil {
					line += fmt.Sprintf(" rec %s bar %s conf %.2f wh %s→%s", rec.Mode, barS(rec.EffectiveBarTokens), rec.Confidence,
						pctS(rec.Evidence.Shadow.Current.Rates.WronglyHeld), pctS(rec.Evidence.Shadow.Recommended.Rates.WronglyHeld))
				}
				t.Log(line, " ", hold)
				nxt := recommended(rep, cur)
				tr, err := fleetsim.Run(context.Background(), e.sc, fleetsim.Options{Seed: 1, First: next, Last: next, SettingsFor: func(int) gate.Settings { return nxt }})
				if err != nil {
					t.Fatal(err)
				}
				p := tr.Phase(next)
				t.Logf("   → %s with %s: TTFT p90 %.2fs, wrongly held %s", next, nxt.String(), p.TTFT.P90, pctS(p.WronglyHeldRate))
				cur = nxt
			}
		})
	}
}

func barS(b *float64) string {
	if b == nil {
		return "none"
	}
	return fmt.Sprintf("%.0f", *b)
}

func pctS(v *float64) string {
	if v == nil || math.IsNaN(*v) {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", *v*100)
}

var _ = strings.Join

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))
