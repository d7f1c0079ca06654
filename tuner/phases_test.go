package tuner_test

import (
	"context"
	"fmt"
	"github.com/gatetuner/gatetuner/exporter"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/estimator/prom"
	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim"
	"github.com/gatetuner/gatetuner/test/fleetsim/epp"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenarios"
	"github.com/gatetuner/gatetuner/test/fleetsim/truth"
	"github.com/gatetuner/gatetuner/test/simenv"
	"github.com/gatetuner/gatetuner/tuner"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/sink"
	"github.com/gatetuner/gatetuner/tuner/source"
)

// phaseEnv recommends from one simulated phase through the whole tuner path:
// simulator → embedded Prometheus → estimator → Prometheus model → shadow →
// guards, against a file-backed EPP config, in mode off.
type phaseEnv struct {
	t       *testing.T
	sc      *scenario.Scenario
	profile gate.Profile
	policy  config.Policy
	// metrics, when set, receives the cycles' metrics; cycles > 1 runs that
	// many cycles at the same time, calling afterCycle between them.
	metrics    *exporter.Metrics
	cycles     int
	afterCycle func(i int)
}

func newPhaseEnv(t *testing.T, scenario, profile string) *phaseEnv {
	sc, err := scenarios.Load(scenario)
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
	// The evidence is the phase just simulated (the history no longer
	// follows the lookback): one 20-minute window of the simulated day.
	pol.History, pol.DayLength, pol.WindowWidth = 20*time.Minute, 2*time.Hour, 20*time.Minute
	pol.Cooldown = 20 * time.Minute
	pol.RestartWarmup = 5 * time.Second
	bs := sc.EPP.PrefixIndex.BlockSizeTokens
	pol.BlockSizeTokens = &bs
	return &phaseEnv{t: t, sc: sc, profile: prof, policy: pol}
}

// recommend simulates phase with settings cur and runs one tuner cycle at its end.
func (e *phaseEnv) recommend(phase string, cur gate.Settings, seed uint64) (*tuner.Report, *truth.Truth) {
	return e.recommendFrom(phase, cur, seed, false)
}

// recommendFrom is recommend with the decision source chosen: the
// Prometheus model, or (records) the gate records the simulated EPP wrote.
func (e *phaseEnv) recommendFrom(phase string, cur gate.Settings, seed uint64, records bool) (*tuner.Report, *truth.Truth) {
	t := e.t
	ctx := context.Background()
	dir := t.TempDir()
	emb, err := prom.NewEmbedded(prom.EmbeddedConfig{Dir: dir + "/tsdb", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	opt := fleetsim.Options{Seed: seed, First: phase, Last: phase, SettingsFor: func(int) gate.Settings { return cur }}
	var recPath string
	if records {
		recPath = filepath.Join(dir, "records.jsonl")
		f, err := os.Create(recPath)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		opt.Records = f
	}
	tr, end, err := simenv.Fill(ctx, emb, e.sc, opt)
	if err != nil {
		t.Fatal(err)
	}
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
	tu := &tuner.Tuner{Estimator: est, Clock: func() time.Time { return at }, Seed: seed, Logger: quiet, Metrics: e.metrics}
	target := &tuner.Target{Config: tc, Profile: e.profile, Sink: snk, Est: simenv.EstimatorTarget(e.sc)}
	if records {
		target.Records = &tuner.RecordsFile{Path: recPath}
	}
	rep := tu.Cycle(ctx, target)
	for i := 1; i < e.cycles; i++ {
		if e.afterCycle != nil {
			e.afterCycle(i)
		}
		rep = tu.Cycle(ctx, target)
	}
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

// TestPromptShiftPhaseByPhase recommends at the end of each prompt-shift
// phase and runs the next phase with the recommendation, for both decision
// sources and both profiles, and prints what happened next to the default
// settings' outcome. A recommendation must never make the next phase's
// TTFT p90 more than twice the default's (a release-chain meltdown is 10–
// 500× worse).
func TestPromptShiftPhaseByPhase(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates prompt-shift several times")
	}
	sc, err := scenarios.Load("prompt-shift")
	if err != nil {
		t.Fatal(err)
	}
	def := map[string]float64{}
	for _, ph := range sc.Phases {
		tr, err := fleetsim.Run(context.Background(), sc, fleetsim.Options{Seed: 1, First: ph.Name, Last: ph.Name,
			SettingsFor: func(int) gate.Settings { return epp.DefaultSettings() }})
		if err != nil {
			t.Fatal(err)
		}
		def[ph.Name] = tr.Phase(ph.Name).TTFT.P90
	}
	for _, source := range []string{tuner.SourceKindModel, tuner.SourceKindRecords} {
		for _, profile := range []string{gate.ProfileRouter202608, gate.ProfilePenaltyMode} {
			t.Run(source+"/"+profile, func(t *testing.T) {
				e := newPhaseEnv(t, "prompt-shift", profile)
				cur := epp.DefaultSettings()
				for i := 0; i+1 < len(e.sc.Phases); i++ {
					ph, next := e.sc.Phases[i].Name, e.sc.Phases[i+1].Name
					rep, _ := e.recommendFrom(ph, cur, 1, source == tuner.SourceKindRecords)
					hold := ""
					if rep.Hold != nil {
						hold = string(rep.Hold.Reason) + ": " + rep.Hold.Detail
					}
					rec := rep.Recommendation
					line := fmt.Sprintf("%-9s result %-11s", ph, rep.Result)
					if rec != nil {
						o := rec.Evidence.Objective
						line += fmt.Sprintf(" rec %s bar %s conf %.2f est p90 %.2fs→%.2fs wh %s→%s", rec.Mode, barS(rec.EffectiveBarTokens), rec.Confidence,
							o.Current.P90TTFTSeconds, o.Recommended.P90TTFTSeconds,
							pctS(rec.Evidence.Shadow.Current.Rates.WronglyHeld), pctS(rec.Evidence.Shadow.Recommended.Rates.WronglyHeld))
					}
					t.Log(line, " ", hold)
					nxt := recommended(rep, cur)
					tr, err := fleetsim.Run(context.Background(), e.sc, fleetsim.Options{Seed: 1, First: next, Last: next, SettingsFor: func(int) gate.Settings { return nxt }})
					if err != nil {
						t.Fatal(err)
					}
					p := tr.Phase(next)
					t.Logf("   → %s with %s: TTFT p90 %.2fs (default %.2fs), wrongly held %s", next, nxt.String(), p.TTFT.P90, def[next], pctS(p.WronglyHeldRate))
					if p.TTFT.P90 > 2*def[next] {
						t.Errorf("%s: TTFT p90 %.2fs with %s, more than twice the default's %.2fs", next, p.TTFT.P90, nxt.String(), def[next])
					}
					cur = nxt
				}
			})
		}
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

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestPolicyEndpointBudgetIsTheModels: the policy's default
// modelEndpointBudget is the model's own default.
func TestPolicyEndpointBudgetIsTheModels(t *testing.T) {
	if got := *config.DefaultPolicy().ModelEndpointBudget; got != source.DefaultEndpointBudget {
		t.Fatalf("policy default %d, model default %d", got, source.DefaultEndpointBudget)
	}
}

// TestModelDrawsStandForTheirShareOfTheStep: the Prometheus model's draws
// are spread over each snapshot's step and each carries the real requests
// it stands for (rate × step / draws) and its prompt length, so the
// feedback replay can give each its share of time; past 16 endpoints the
// endpoint budget draws fewer, each standing for more.
func TestModelDrawsStandForTheirShareOfTheStep(t *testing.T) {
	base := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	rate := 10.0
	// snap is a snapshot of n endpoints: a and b, then idle-ish pods.
	snap := func(at time.Time, n int) estimator.Snapshot {
		eps := []estimator.EndpointLoad{{Endpoint: "a", Tokens: 5000}, {Endpoint: "b", Tokens: 0}}
		for i := len(eps); i < n; i++ {
			eps = append(eps, estimator.EndpointLoad{Endpoint: fmt.Sprintf("pod-%d", i), Tokens: float64(100 * i)})
		}
		return estimator.Snapshot{Time: at, Endpoints: eps}
	}
	dist := func(lo, hi float64) estimator.Distribution {
		return estimator.Distribution{Status: estimator.StatusOK, Count: 100, Buckets: []estimator.Bucket{{Lower: lo, Upper: hi, Count: 100}}}
	}
	for _, tc := range []struct {
		name       string
		endpoints  int
		per        int
		budget     int
		wantPer    int
		wantWeight float64
	}{
		{"default draws are capped at 50 per snapshot", 2, 0, 0, 50, rate * 30 / 50},
		{"16 endpoints fill the budget at 50", 16, 0, 0, 50, rate * 30 / 50},
		{"64 endpoints draw the budget's 800/64", 64, 0, 0, 12, rate * 30 / 12},
		{"a larger budget draws 50 of 64 endpoints", 64, 0, 64 * 50, 50, rate * 30 / 50},
		{"explicit draws per snapshot", 64, 20, 0, 20, rate * 30 / 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			est := &estimator.Estimates{
				RequestRate: estimator.Scalar{Status: estimator.StatusOK, Value: &rate},
				InFlight:    estimator.InFlight{Status: estimator.StatusOK, StepSeconds: 30, Snapshots: []estimator.Snapshot{snap(base, tc.endpoints), snap(base.Add(30*time.Second), tc.endpoints)}},
				Prompt:      dist(1000, 4000),
				Cached:      dist(500, 3000),
				Routing:     estimator.Routing{Status: estimator.StatusOK, Endpoints: []estimator.EndpointShare{{Endpoint: "a", Share: 0.5}, {Endpoint: "b", Share: 0.5}}},
			}
			m := &tuner.Model{Est: est, BlockSizeTokens: 64, PerSnapshot: tc.per, EndpointBudget: tc.budget, Seed: 1}
			var got []tuner.Decision
			err := m.Replay(context.Background(), base, base.Add(time.Minute), func(d *tuner.Decision) error {
				got = append(got, tuner.Decision{TS: d.TS, Weight: d.Weight, PromptTokens: d.PromptTokens, Endpoints: append([]gate.Endpoint(nil), d.Endpoints...)})
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2*tc.wantPer {
				t.Fatalf("%d decisions, want %d", len(got), 2*tc.wantPer)
			}
			spacing := 30 * time.Second / time.Duration(tc.wantPer)
			for i, d := range got {
				k, s := i%tc.wantPer, i/tc.wantPer
				if want := base.Add(time.Duration(s)*30*time.Second + time.Duration(k)*spacing); !d.TS.Equal(want) {
					t.Fatalf("draw %d at %s, want %s", i, d.TS, want)
				}
				if math.Abs(d.Weight-tc.wantWeight) > 1e-9 {
					t.Fatalf("draw %d weight %v, want %v", i, d.Weight, tc.wantWeight)
				}
				if blocks := int(math.Ceil(float64(d.PromptTokens) / 64)); d.PromptTokens < 1000 || d.PromptTokens > 4000 || blocks < d.Endpoints[0].TotalBlocks-1 || blocks > d.Endpoints[0].TotalBlocks {
					t.Fatalf("draw %d prompt %d with %d blocks of 64", i, d.PromptTokens, d.Endpoints[0].TotalBlocks)
				}
			}
		})
	}
}
