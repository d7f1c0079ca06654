package fleetsim

import (
	"bytes"
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim/epp"
	"github.com/gatetuner/gatetuner/test/fleetsim/internal/fleettest"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/truth"
)

func mustRun(t testing.TB, sc *scenario.Scenario, opt Options) *truth.Truth {
	t.Helper()
	tr, err := Run(context.Background(), sc, opt)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

type outputs struct{ metrics, records, truth bytes.Buffer }

func runOutputs(t *testing.T, sc *scenario.Scenario, seed uint64) *outputs {
	t.Helper()
	o := &outputs{}
	tr := mustRun(t, sc, Options{Seed: seed, Metrics: &o.metrics, Records: &o.records})
	if err := tr.WriteJSON(&o.truth); err != nil {
		t.Fatal(err)
	}
	return o
}

func TestSameSeedGivesByteIdenticalOutputs(t *testing.T) {
	for _, name := range []string{"calibration-1970", "prompt-shift"} {
		t.Run(name, func(t *testing.T) {
			sc := fleettest.Load(t, name)
			if name == "prompt-shift" {
				// Every phase, compressed 20x to keep the test quick.
				var err error
				if sc, err = sc.Compressed(20); err != nil {
					t.Fatal(err)
				}
			}
			a, b := runOutputs(t, sc, 7), runOutputs(t, sc, 7)
			for _, c := range []struct {
				what string
				x, y *bytes.Buffer
			}{{"metrics", &a.metrics, &b.metrics}, {"records", &a.records, &b.records}, {"truth", &a.truth, &b.truth}} {
				if c.x.Len() == 0 {
					t.Fatalf("%s output is empty", c.what)
				}
				if !bytes.Equal(c.x.Bytes(), c.y.Bytes()) {
					t.Errorf("%s differ between two runs with one seed (%d vs %d bytes)", c.what, c.x.Len(), c.y.Len())
				}
			}
			other := runOutputs(t, sc, 8)
			if bytes.Equal(a.records.Bytes(), other.records.Bytes()) {
				t.Error("another seed gave the same gate records")
			}
		})
	}
}

// runToIdle runs a simulation past its end until every request finished.
func runToIdle(t *testing.T, s *sim) {
	t.Helper()
	ctx := context.Background()
	if err := s.advance(ctx, s.runEnd); err != nil {
		t.Fatal(err)
	}
	s.arrivalsEnd = 0
	for {
		tp, pi := int64(math.MaxInt64), -1
		for i, p := range s.pods {
			if p.Busy() && p.StepEnd() < tp {
				tp, pi = p.StepEnd(), i
			}
		}
		if pi < 0 {
			return
		}
		s.now = tp
		s.pods[pi].EndStep(tp)
	}
}

func TestAccountingBalancesWhenTheFleetDrains(t *testing.T) {
	for _, name := range []string{"calibration-15928", "hotspot", "steady"} {
		t.Run(name, func(t *testing.T) {
			sc := fleettest.Load(t, name)
			if name != "calibration-15928" {
				var err error
				if sc, err = sc.Compressed(4); err != nil {
					t.Fatal(err)
				}
			}
			s, err := newSim(sc, Options{Seed: 3}, false)
			if err != nil {
				t.Fatal(err)
			}
			runToIdle(t, s)
			var routed, finished int64
			for i, p := range s.pods {
				pinned, lru := s.ec.Pinned(int32(i)), s.ec.LRUBlocks(int32(i))
				if p.Private() != 0 || pinned != 0 || p.Running() != 0 || p.Waiting() != 0 || p.Decoding() != 0 || p.Prefilling() != 0 {
					t.Errorf("pod %d idle with private=%d pinned=%d running=%d waiting=%d decoding=%d prefilling=%d",
						i, p.Private(), pinned, p.Running(), p.Waiting(), p.Decoding(), p.Prefilling())
				}
				for g, c := range p.GrowthBuckets() {
					if c != 0 {
						t.Errorf("pod %d: decode growth bucket %d = %d after draining", i, g, c)
					}
				}
				if lru > p.TotalBlocks() {
					t.Errorf("pod %d caches %d blocks of %d", i, lru, p.TotalBlocks())
				}
				if s.epp.Tokens[i] != 0 || s.epp.Reqs[i] != 0 {
					t.Errorf("pod %d: EPP in-flight tokens %d requests %d after draining", i, s.epp.Tokens[i], s.epp.Reqs[i])
				}
				for k := range s.epp.Replicas {
					rp := &s.epp.Replicas[k]
					if rp.Tokens[i] != 0 || rp.Reqs[i] != 0 {
						t.Errorf("pod %d: EPP replica %d in-flight tokens %d requests %d after draining", i, k, rp.Tokens[i], rp.Reqs[i])
					}
					routed += rp.Metrics.Attempts[i]
				}
				finished += p.Metrics.Success
				var promptH int64
				for _, c := range p.Metrics.PromptTokensH.Counts {
					promptH += c
				}
				if promptH != p.Metrics.Success || p.Metrics.TTFT.Count != p.Metrics.Success {
					t.Errorf("pod %d: %d finished but %d prompt observations and %d TTFT", i, p.Metrics.Success, promptH, p.Metrics.TTFT.Count)
				}
				if p.Metrics.PromptTokens != p.Metrics.LocalCompute+p.Metrics.LocalCacheHit || p.Metrics.CachedTokens != p.Metrics.LocalCacheHit {
					t.Errorf("pod %d: prompt tokens %d != compute %d + cache hit %d (cached %d)", i,
						p.Metrics.PromptTokens, p.Metrics.LocalCompute, p.Metrics.LocalCacheHit, p.Metrics.CachedTokens)
				}
			}
			if routed == 0 || routed != finished {
				t.Errorf("routed %d requests, %d finished", routed, finished)
			}
			if s.pendingFirst != 0 {
				t.Errorf("%d requests never got a first token", s.pendingFirst)
			}
		})
	}
}

// TestNominalRateIsWhatTheCalibrationRecipeMeasures sends sequential
// chunk-sized, never-cached prompts to one idle pod, as llm-d's calibration
// recipe does: chunk / median TTFT must read the scenario's nominal rate.
func TestNominalRateIsWhatTheCalibrationRecipeMeasures(t *testing.T) {
	for _, name := range []string{"calibration-1970", "calibration-15928", "calibration-39065"} {
		t.Run(name, func(t *testing.T) {
			sc := fleettest.Load(t, name).Clone()
			sc.Pods.Count = 1
			chunk := float64(sc.Pods.Engine.MaxNumBatchedTokens)
			sc.Classes = []scenario.SessionClass{{Name: "probe", UserTokens: scenario.ConstDist(chunk), OutputTokens: scenario.ConstDist(1)}}
			sc.Phases = []scenario.Phase{{Name: "probe", Duration: 10 * time.Minute, RequestRate: 0.1,
				Arrivals: scenario.ArrivalSpec{Process: scenario.ArrivalPoisson}, Mix: []float64{1}, Settings: sc.EPP.Settings}}
			tr := mustRun(t, sc, Options{Seed: 1})
			p := tr.Phases[0]
			if p.Requests < 20 {
				t.Fatalf("only %d probes", p.Requests)
			}
			got := chunk / p.TTFT.P50
			if math.Abs(got/sc.Pods.Engine.NominalRate-1) > 1e-3 {
				t.Errorf("chunk/median TTFT = %.1f tok/s, want the nominal %.0f", got, sc.Pods.Engine.NominalRate)
			}
			if p.CachedTokens.P99 != 0 {
				t.Errorf("probes hit the cache: %+v", p.CachedTokens)
			}
		})
	}
}

func TestCalibrationScenariosDrainBelowNominal(t *testing.T) {
	for _, name := range []string{"calibration-1970", "calibration-15928", "calibration-39065"} {
		t.Run(name, func(t *testing.T) {
			sc := fleettest.Load(t, name)
			tr := mustRun(t, sc, Options{Seed: 1})
			if len(tr.Windows) == 0 {
				t.Fatal("no saturated window")
			}
			p := tr.Phase("saturated")
			if p == nil {
				t.Fatal("no saturated phase")
			}
			nominal := sc.Pods.Engine.NominalRate
			if p.PooledDrainRate == nil {
				t.Fatal("no pooled drain rate in the saturated phase")
			}
			t.Logf("%s: nominal %.0f, pooled drain %.0f (%.1f%% below)", name, nominal, *p.PooledDrainRate, 100*(1-*p.PooledDrainRate/nominal))
			for _, pod := range p.Pods {
				if pod.DrainRate == nil || pod.DecodeShare == nil || pod.PerRequestRate == nil || pod.CounterDrainRate == nil {
					t.Errorf("%s: missing truth %+v", pod.Pod, pod)
					continue
				}
				drain, share, perReq := *pod.DrainRate, *pod.DecodeShare, *pod.PerRequestRate
				t.Logf("  %s: windows %d drain %.0f counter %.0f decode share %.3f per-request %.0f (%.2f of drain)",
					pod.Pod, pod.SaturatedWindows, drain, *pod.CounterDrainRate, share, perReq, perReq/drain)
				if share < 0.15 {
					t.Errorf("%s: decode share %.3f < 0.15", pod.Pod, share)
				}
				if drain > 0.9*nominal {
					t.Errorf("%s: drain %.0f is not 10%% below nominal %.0f", pod.Pod, drain, nominal)
				}
				// The step model: drain ≈ nominal × (1 − decode share), less
				// the step overhead's share.
				if want := nominal * (1 - share); math.Abs(drain/want-1) > 0.05 {
					t.Errorf("%s: drain %.0f, want ≈ nominal×(1−decode share) = %.0f", pod.Pod, drain, want)
				}
				if math.Abs(*pod.CounterDrainRate/drain-1) > 0.05 {
					t.Errorf("%s: counter drain %.0f far from engine drain %.0f", pod.Pod, *pod.CounterDrainRate, drain)
				}
				if perReq > 0.8*drain {
					t.Errorf("%s: per-request rate %.0f > 0.8 × drain %.0f", pod.Pod, perReq, drain)
				}
			}
			// Windows are what the rule says: whole, aligned, inside the run.
			w := tr.Saturation.WindowSeconds
			for _, win := range tr.Windows {
				if math.Abs(win.End-win.Start-w) > 1e-9 || math.Mod(win.Start-tr.Start+1e-9, w) > 1e-6 {
					t.Errorf("window %+v is not an aligned %v s window", win, w)
				}
			}
		})
	}
}

func TestQuietNeverSaturates(t *testing.T) {
	tr := mustRun(t, fleettest.Load(t, "quiet"), Options{Seed: 1})
	if len(tr.Windows) != 0 {
		t.Errorf("quiet has %d saturated windows, e.g. %+v", len(tr.Windows), tr.Windows[0])
	}
	for _, p := range tr.Phases {
		if p.PooledDrainRate != nil {
			t.Errorf("phase %s has a drain rate without saturation", p.Name)
		}
		if p.Requests == 0 || p.TTFT.P99 > 1 {
			t.Errorf("phase %s: %d requests, TTFT p99 %.2fs", p.Name, p.Requests, p.TTFT.P99)
		}
	}
}

func TestSinglePhaseRunSeesTheSameRequests(t *testing.T) {
	sc := fleettest.Load(t, "steady")
	last := sc.Phases[len(sc.Phases)-1].Name
	full := mustRun(t, sc, Options{Seed: 5})
	one := mustRun(t, sc, Options{Seed: 5, First: last, Last: last, Warmup: 5 * time.Minute})
	all := mustRun(t, sc, Options{Seed: 5, First: last, Last: last, Warmup: WarmupAll})
	if len(one.Phases) != 1 || one.Phases[0].Name != last {
		t.Fatalf("single-phase run measured %d phases", len(one.Phases))
	}
	f, o, a := full.Phase(last), one.Phases[0], all.Phases[0]
	if f.Requests != o.Requests || f.PromptTokens != o.PromptTokens {
		t.Errorf("single phase saw %d requests (prompts %+v), the full run %d (%+v)", o.Requests, o.PromptTokens, f.Requests, f.PromptTokens)
	}
	if a.TTFT != f.TTFT || a.Verdicts != f.Verdicts {
		t.Errorf("a run warmed by every earlier phase differs from the full run: %+v vs %+v", a.TTFT, f.TTFT)
	}
	if one.Start != f.Start || one.End != f.End {
		t.Errorf("single phase spans [%v,%v], the full run's phase [%v,%v]", one.Start, one.End, f.Start, f.End)
	}
	if _, err := Run(context.Background(), sc, Options{First: "nope"}); err == nil {
		t.Error("unknown phase accepted")
	}
	if _, err := Run(context.Background(), sc, Options{First: last, Last: sc.Phases[0].Name}); err == nil {
		t.Error("reversed phase range accepted")
	}
}

func TestSettingsOverrideIsPerPhaseAndReported(t *testing.T) {
	sc := fleettest.Load(t, "steady")
	off := epp.DefaultSettings()
	off.MaxTTFTPenaltyMs = 0 // static gate off: never releases
	tight := StaticBars(epp.DefaultSettings(), 2000)[0]
	tr := mustRun(t, sc, Options{Seed: 2, SettingsFor: func(i int) gate.Settings {
		if i == 0 {
			return off
		}
		return tight
	}})
	p0, p1 := tr.Phases[0], tr.Phases[1]
	if p0.Settings.MaxTTFTPenaltyMs != 0 || p1.Settings.BarTokens != 2000 {
		t.Errorf("settings in force: %+v / %+v", p0.Settings, p1.Settings)
	}
	if p0.Outcomes.LoadOverride != 0 {
		t.Errorf("gate off released %d pins", p0.Outcomes.LoadOverride)
	}
	if p1.Outcomes.LoadOverride == 0 {
		t.Error("a 2000-token bar released nothing")
	}
}

func TestSettingsByPhaseFallsBackToTheScenario(t *testing.T) {
	sc := fleettest.Load(t, "steady")
	tight := StaticBars(epp.DefaultSettings(), 5000)[0]
	f := SettingsByPhase(sc, map[string]gate.Settings{"afternoon": tight})
	if f(0) != sc.Phases[0].Settings || f(1) != tight {
		t.Errorf("SettingsByPhase: %+v / %+v", f(0), f(1))
	}
}

func TestRunStopsWhenTheContextIsCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, fleettest.Load(t, "steady"), Options{Seed: 1})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run with a cancelled context = %v", err)
	}
}

func TestGateRecordsAreOnePerDecisionInTheDesignFormat(t *testing.T) {
	sc := fleettest.Load(t, "calibration-1970")
	var rec bytes.Buffer
	tr := mustRun(t, sc, Options{Seed: 1, Records: &rec})
	lines := strings.Split(strings.TrimSuffix(rec.String(), "\n"), "\n")
	var want int
	for _, p := range tr.Phases {
		want += p.Requests
	}
	if len(lines) != want {
		t.Fatalf("%d records for %d decisions", len(lines), want)
	}
	first := lines[0]
	for _, part := range []string{`"ts":"2026-11-29T00:`, `"requestId":"r-`, `"target":"llama-3-2-3b-cpu"`, `"plugin":"prefix-cache-affinity-filter"`,
		`"promptTokens":`, `"endpoints":[{"name":"llama-3-2-3b-cpu-decode-0","matchBlocks":`, `"blockSizeTokens":64`, `"inFlightTokens":`,
		`"inFlightRequests":`, `"observed":{"outcome":"`, `"chosen":"llama-3-2-3b-cpu-decode-`} {
		if !strings.Contains(first, part) {
			t.Errorf("record %s lacks %s", first, part)
		}
	}
	ts := make([]string, len(lines))
	for i, l := range lines {
		ts[i] = l[7:31]
	}
	if !slices.IsSorted(ts) {
		t.Error("records are not in time order")
	}
}

func TestTruthJSONIsStable(t *testing.T) {
	tr := mustRun(t, fleettest.Load(t, "calibration-1970"), Options{Seed: 1})
	var b bytes.Buffer
	if err := tr.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"pooledDrainRate"`, `"nominalRate": 1970`, `"saturation": {`, `"windowSeconds": 120`,
		`"maxKVUsage": 0.95`, `"belowMaxNumSeqs": true`, `"ttftSeconds"`, `"cacheHitRate"`, `"verdicts"`, `"held_wrong"`,
		`"wronglyHeldRate"`, `"barTokens"`, `"windows": [`, `"counterDrainRate"`, `"perRequestRate"`} {
		if !strings.Contains(b.String(), key) {
			t.Errorf("truth JSON lacks %s", key)
		}
	}
}
