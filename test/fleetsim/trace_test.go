package fleetsim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim/internal/fleettest"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/workload"
	"github.com/gatetuner/gatetuner/tuner/records"
	"github.com/gatetuner/gatetuner/tuner/shadow"
)

const mooncakeTrace = "traces/mooncake-conversation.jsonl.gz"

// traceScenario is trace-saturation with its trace shaped by edit.
func traceScenario(t testing.TB, edit func(sc *scenario.Scenario)) *scenario.Scenario {
	t.Helper()
	sc := fleettest.Load(t, "trace-saturation")
	if edit != nil {
		edit(sc)
	}
	if err := sc.Validate(); err != nil {
		t.Fatal(err)
	}
	return sc
}

// quantile interpolates linearly between order statistics.
func quantile(sorted []float64, q float64) float64 {
	pos := q * float64(len(sorted)-1)
	i := int(pos)
	if i+1 >= len(sorted) {
		return sorted[len(sorted)-1]
	}
	return sorted[i] + (pos-float64(i))*(sorted[i+1]-sorted[i])
}

func within(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol*math.Abs(want) {
		t.Errorf("%s = %.6g, trace's own %.6g (off %.2f %%, allowed %.0f %%)", what, got, want, 100*(got-want)/want, 100*tol)
	} else {
		t.Logf("%s = %.6g, trace's own %.6g", what, got, want)
	}
}

// The simulator's ground truth reproduces the trace's own request rate,
// prompt quantiles and cacheable share (blocks repeating an earlier block)
// within 1 %, for the whole trace and for a window of it.
func TestTraceStatisticsAreReproduced(t *testing.T) {
	raw := fleettest.ReadRawTrace(t, mooncakeTrace)
	for _, tc := range []struct {
		name          string
		scale         float64
		start, window time.Duration
	}{
		{"whole trace at scale 2", 2, 0, 0},
		{"minutes 20-40 at scale 0.5", 0.5, 20 * time.Minute, 20 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The trace's own statistics over the window.
			lo, hi := tc.start.Seconds(), math.Inf(1)
			if tc.window > 0 {
				hi = (tc.start + tc.window).Seconds()
			}
			var in []float64
			for i, ts := range raw.TS {
				if ts >= lo && ts < hi {
					in = append(in, raw.In[i])
				}
			}
			span := raw.TS[len(raw.TS)-1] - raw.TS[0] // the trace's 3,537 s
			run := span + 1                           // past the last arrival
			if tc.window > 0 {
				span, run = tc.window.Seconds(), tc.window.Seconds()
			}
			wantRate := float64(len(in)) / span
			sort.Float64s(in)

			sc := traceScenario(t, func(sc *scenario.Scenario) {
				tr := sc.Trace
				tr.TargetUtilization, tr.Scale, tr.Start, tr.Window, tr.Loop = 0, tc.scale, tc.start, tc.window, false
				sc.Pods.Count = 8
				sc.Phases = sc.Phases[:1]
				sc.Phases[0].Duration = time.Duration(run / tc.scale * 1e9)
			})
			truth := mustRun(t, sc, Options{Seed: 1})
			ph := truth.Phases[0]
			if ph.Requests != len(in) || truth.Trace.Requests != int64(len(in)) {
				t.Fatalf("simulated %d requests (trace class %d), the window holds %d", ph.Requests, truth.Trace.Requests, len(in))
			}
			within(t, "request rate / scale", ph.RequestRate/tc.scale, wantRate, 0.01)
			within(t, "prompt p50", ph.PromptTokens.P50, quantile(in, 0.5), 0.01)
			within(t, "prompt p90", ph.PromptTokens.P90, quantile(in, 0.9), 0.01)
			within(t, "prompt p99", ph.PromptTokens.P99, quantile(in, 0.99), 0.01)
			if tc.window == 0 {
				within(t, "cacheable share", truth.Trace.RepeatedShare, float64(raw.Repeated)/float64(raw.Prompt), 0.01)
			}
			if truth.Trace.Scale != tc.scale || truth.Trace.Passes != 1 || truth.Trace.Dropped != 0 || truth.Trace.BadLines != 0 {
				t.Errorf("trace truth = %+v", truth.Trace)
			}
		})
	}
}

// writeTrace writes lines as a trace file in a temporary directory.
func writeTrace(t *testing.T, lines ...string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "trace.jsonl")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// One pod, requests far apart: what the engine's prefix cache and the EPP's
// index hold of an earlier prompt is exactly the shared hash-id prefix, at
// the engine's 16-token and the index's 256-token blocks; a partial last
// block is not the full block of the same id, and equal ids under different
// prefixes do not collide.
func TestTraceBlocksMapOntoEngineAndIndexBlocks(t *testing.T) {
	file := writeTrace(t,
		`{"timestamp": 0, "input_length": 1500, "output_length": 1, "hash_ids": [1, 2, 3]}`,
		`{"timestamp": 10000, "input_length": 1300, "output_length": 1, "hash_ids": [1, 2, 4]}`, // shares 1024
		`{"timestamp": 20000, "input_length": 1200, "output_length": 1, "hash_ids": [9, 2, 3]}`, // shares nothing
		`{"timestamp": 30000, "input_length": 1100, "output_length": 1, "hash_ids": [1, 2, 3]}`, // 3 partial (76): shares 1024
		`{"timestamp": 40000, "input_length": 1500, "output_length": 1, "hash_ids": [1, 2, 3]}`, // all 1500
	)
	sc := traceScenario(t, func(sc *scenario.Scenario) {
		sc.Trace.UseFile(file)
		sc.Trace.TargetUtilization, sc.Trace.Scale, sc.Trace.Loop = 0, 1, false
		sc.Pods.Count = 1
		sc.Phases = sc.Phases[:1]
		sc.Phases[0].Duration = time.Minute
	})
	var rec bytes.Buffer
	truth := mustRun(t, sc, Options{Seed: 1, Records: &rec})
	wantCached := []int64{0, 1024, 0, 1024, 1500 / 16 * 16}
	wantMatch := []int{0, 1024 / 256, 0, 1024 / 256, 1500 / 256}
	r := records.NewReader(&rec, records.Options{Strict: true})
	for i := range wantMatch {
		rc, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if got := rc.Endpoints[0].MatchBlocks; got != wantMatch[i] {
			t.Errorf("request %d: the EPP index matched %d blocks, want %d", i+1, got, wantMatch[i])
		}
	}
	// The engine's cached tokens: their sum is the phase's cached tokens.
	var sum int64
	for _, c := range wantCached {
		sum += c
	}
	ph := truth.Phases[0]
	if got := int64(math.Round(ph.CachedTokens.Mean * float64(ph.CachedTokens.N))); got != sum {
		t.Errorf("engine prefix-cache hits sum to %d tokens, want %d (%v)", got, sum, wantCached)
	}
	if want := int64(1024 + 1024 + 1500); truth.Trace.RepeatedTokens != want {
		t.Errorf("repeated tokens = %d, want %d", truth.Trace.RepeatedTokens, want)
	}
}

// The envelope multiplies the trace's rate hour by hour: one trace hour,
// looped, drives three simulated hours at 1x, 2x and 0.5x its rate.
func TestTraceEnvelopeShapesTheRate(t *testing.T) {
	hours := make([]float64, 24)
	hours[0], hours[1], hours[2] = 1, 2, 0.5
	sc := traceScenario(t, func(sc *scenario.Scenario) {
		sc.Trace.TargetUtilization, sc.Trace.Scale, sc.Trace.Envelope = 0, 1, hours
		sc.Pods.Count = 16
		sc.Phases = []scenario.Phase{{Name: "h0", Duration: time.Hour}, {Name: "h1", Duration: time.Hour}, {Name: "h2", Duration: time.Hour}}
		for i := range sc.Phases {
			sc.Phases[i].Parameters, sc.Phases[i].Settings = sc.EPP.Parameters, sc.EPP.Settings
			sc.Phases[i].Arrivals.Process = scenario.ArrivalPoisson
		}
	})
	truth := mustRun(t, sc, Options{Seed: 1})
	raw := fleettest.ReadRawTrace(t, mooncakeTrace)
	period := truth.Trace.PeriodSeconds
	// Hour h replays trace time [from, from + 3600 x multiplier) of the looped trace.
	var from float64
	for i, m := range hours[:3] {
		to := from + 3600*m
		want := 0
		for k := 0.0; k*period < to; k++ {
			for _, ts := range raw.TS {
				if x := k*period + ts; x >= from && x < to {
					want++
				}
			}
		}
		if got := truth.Phases[i].Requests; math.Abs(float64(got-want)) > 0.001*float64(want) {
			t.Errorf("hour %d (multiplier %v): %d requests, the looped trace holds %d in trace time [%.0f s, %.0f s)", i, m, got, want, from, to)
		}
		from = to
	}
	if truth.Trace.Passes != 4 { // 1 + 2 + 0.5 trace hours: the fourth pass has begun
		t.Errorf("passes = %d, want 4", truth.Trace.Passes)
	}
}

// targetUtilization picks the scale at which the trace's uncacheable prompt
// tokens per second are that share of the pool's nominal rate, and the run
// reports it.
func TestTraceTargetUtilizationPicksTheScale(t *testing.T) {
	raw := fleettest.ReadRawTrace(t, mooncakeTrace)
	sc := traceScenario(t, func(sc *scenario.Scenario) {
		sc.Phases = sc.Phases[:1]
		sc.Phases[0].Duration = 5 * time.Minute
	})
	truth := mustRun(t, sc, Options{Seed: 1})
	work := float64(raw.Prompt-raw.Repeated) / truth.Trace.PeriodSeconds
	want := 0.8 * 8 * 15928 / work
	if math.Abs(truth.Trace.Scale-want) > 1e-9*want {
		t.Errorf("picked scale %v, want %v", truth.Trace.Scale, want)
	}
}

// The exact gate records of a trace run replay through shadow with the
// simulator's verdicts and outcomes, decision for decision.
func TestTraceGateRecordsReplayThroughShadow(t *testing.T) {
	sc := traceScenario(t, func(sc *scenario.Scenario) {
		sc.Phases = sc.Phases[:1]
		sc.Phases[0].Duration = 5 * time.Minute
	})
	var rec bytes.Buffer
	truth := mustRun(t, sc, Options{Seed: 1, Records: &rec})
	acc := shadow.NewAccumulator([]gate.Settings{sc.Phases[0].Settings}, 0)
	if err := shadow.Replay(records.NewReader(&rec, records.Options{Strict: true}), acc, nil); err != nil {
		t.Fatal(err)
	}
	ph := truth.Phases[0]
	ag := acc.Agreement()
	if ag.Disagree != 0 || ag.Unobserved != 0 || ag.Unmodelled != 0 || ag.Agree+ag.Explained != int64(ph.Requests) {
		t.Errorf("agreement %+v over %d decisions", ag, ph.Requests)
	}
	c := acc.Counts(0)
	v := ph.Verdicts
	got := [...]int64{c.Verdicts[gate.HeldOK], c.Verdicts[gate.HeldWrong], c.Verdicts[gate.ReleasedOK], c.Verdicts[gate.ReleasedWrong], c.Verdicts[gate.ReleasedCeiling]}
	want := [...]int64{v.HeldOK, v.HeldWrong, v.ReleasedOK, v.ReleasedWrong, v.ReleasedCeiling}
	if got != want {
		t.Errorf("shadow verdicts %v, simulator %v", got, want)
	}
	if v.Known() == 0 {
		t.Error("no known verdicts: the test proves nothing")
	}
}

// Bad trace lines are counted and reported with their line numbers; strict
// fails the run naming the line.
func TestTraceBadLinesAreReportedOrFatal(t *testing.T) {
	file := writeTrace(t,
		`{"timestamp": 0, "input_length": 100, "output_length": 1, "hash_ids": [1]}`,
		`{"timestamp": 5, "input_length": 100, "output_length": 1, "hash_ids": [1, 2]}`,
		`{"timestamp": 1000, "input_length": 100, "output_length": 1, "hash_ids": [1]}`,
	)
	sc := traceScenario(t, func(sc *scenario.Scenario) {
		sc.Trace.UseFile(file)
		sc.Trace.TargetUtilization, sc.Trace.Scale, sc.Trace.Loop = 0, 1, false
		sc.Phases = sc.Phases[:1]
		sc.Phases[0].Duration = time.Minute
	})
	truth := mustRun(t, sc, Options{Seed: 1})
	if tt := truth.Trace; tt.Requests != 2 || tt.BadLines != 1 || len(tt.FirstBadLines) != 1 || tt.FirstBadLines[0].Line != 2 {
		t.Errorf("trace truth = %+v", tt)
	}
	sc.Trace.Strict = true
	sc.Trace.UseFile(file)
	_, err := Run(context.Background(), sc, Options{Seed: 1})
	var le *workload.LineError
	if !errors.As(err, &le) || le.Line != 2 || !strings.Contains(err.Error(), file) {
		t.Errorf("strict run error = %v, want line 2 of %s", err, file)
	}
}

// traceSweep logs a per-phase table of the default and the best static bar
// (by TTFT p90) over the named phases of a trace scenario, each phase run
// alone after the 10-minute warm-up.
func traceSweep(t *testing.T, name string, phases ...string) []*phaseSweep {
	t.Helper()
	out := sweepPhases(t, fleettest.Load(t, name), 1, phases...)
	var b strings.Builder
	fmt.Fprintf(&b, "%s: | phase | req/s | prompt p50 | default TTFT p50 / p90 | default wrongly held | best bar | best TTFT p50 / p90 | best wrongly held |\n", name)
	for _, ps := range out {
		d := ps.def()
		bar, best := ps.best()
		fmt.Fprintf(&b, "| %s | %.1f | %.0f | %.2f / %.2f s | %s | %.0f | %.2f / %.2f s | %s |\n", ps.phase, d.RequestRate, d.PromptTokens.P50,
			d.TTFT.P50, d.TTFT.P90, pctOrNA(d.WronglyHeldRate), bar, best.TTFT.P50, best.TTFT.P90, pctOrNA(best.WronglyHeldRate))
	}
	t.Log(b.String())
	return out
}

func pctOrNA(p *float64) string {
	if p == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.1f %%", 100**p)
}

// On Mooncake's trace, alone near saturation or under the growing agent
// class, releasing a sticky request never pays: in the first and the last
// phase the best static bar by TTFT p90 is one that releases (almost)
// nothing (>= 100k tokens), no worse than the EPP default, and the tightest
// bar is far worse — although the per-decision verdicts call 10-50 % of
// the default's holds wrong (a release costs the cache hit, whose prefill
// work then delays everyone; docs/traces.md).
func TestTraceReleasingDoesNotPay(t *testing.T) {
	if testing.Short() {
		t.Skip("sweeps two trace scenarios; skipped under -short")
	}
	for _, tc := range []struct{ scenario, first, last string }{
		{"trace-saturation", "q1", "q4"},
		{"trace-drift", "night", "late"},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			for _, ps := range traceSweep(t, tc.scenario, tc.first, tc.last) {
				bar, best := ps.best()
				def, tight := ps.def(), ps.at(0)
				if bar < 1e5 || best.TTFT.P90 > def.TTFT.P90*1.001 {
					t.Errorf("%s: best bar %.0f (TTFT p90 %.2f s) vs the default's %.2f s: want a bar >= 100k no worse than the default", ps.phase, bar, best.TTFT.P90, def.TTFT.P90)
				}
				if tight.TTFT.P90 < 1.25*def.TTFT.P90 {
					t.Errorf("%s: the %0.f-token bar's TTFT p90 %.2f s is within 25 %% of the default's %.2f s: releasing no longer hurts", ps.phase, sweepBars[0], tight.TTFT.P90, def.TTFT.P90)
				}
				if def.WronglyHeldRate == nil || *def.WronglyHeldRate < 0.1 {
					t.Errorf("%s: the default's wrongly-held rate %s; the verdicts no longer disagree with the outcome", ps.phase, pctOrNA(def.WronglyHeldRate))
				}
			}
		})
	}
}

// A compressed trace scenario is compressed in content, not in clock: its
// phases and its envelope's hours are shorter, the trace keeps its rate
// (scale × the hour's multiplier). Three envelope hours at 1x, 2x and 0.5x
// compressed 6x last ten minutes each and replay ten, twenty and five
// minutes of trace time.
func TestCompressedTraceKeepsItsRateAndShortensTheEnvelope(t *testing.T) {
	hours := make([]float64, 24)
	hours[0], hours[1], hours[2] = 1, 2, 0.5
	full := traceScenario(t, func(sc *scenario.Scenario) {
		sc.Trace.TargetUtilization, sc.Trace.Scale, sc.Trace.Envelope = 0, 1, hours
		sc.Pods.Count = 16
		sc.Phases = []scenario.Phase{{Name: "h0", Duration: time.Hour}, {Name: "h1", Duration: time.Hour}, {Name: "h2", Duration: time.Hour}}
		for i := range sc.Phases {
			sc.Phases[i].Parameters, sc.Phases[i].Settings = sc.EPP.Parameters, sc.EPP.Settings
			sc.Phases[i].Arrivals.Process = scenario.ArrivalPoisson
		}
	})
	sc, err := full.Compressed(6)
	if err != nil {
		t.Fatal(err)
	}
	if got := sc.Trace.HourLength(); got != 10*time.Minute {
		t.Fatalf("compressed envelope hour %v, want 10m", got)
	}
	if full.Trace.HourLength() != time.Hour {
		t.Fatal("compressing changed the original's envelope")
	}
	truth := mustRun(t, sc, Options{Seed: 1})
	raw := fleettest.ReadRawTrace(t, mooncakeTrace)
	period := truth.Trace.PeriodSeconds
	var from float64
	for i, m := range hours[:3] {
		to := from + 600*m
		want := 0
		for k := 0.0; k*period < to; k++ {
			for _, ts := range raw.TS {
				if x := k*period + ts; x >= from && x < to {
					want++
				}
			}
		}
		if got := truth.Phases[i].Requests; math.Abs(float64(got-want)) > 0.001*float64(want) {
			t.Errorf("compressed hour %d (multiplier %v): %d requests, the looped trace holds %d in trace time [%.0f s, %.0f s)", i, m, got, want, from, to)
		}
		if d := truth.Phases[i].End - truth.Phases[i].Start; d != 600 {
			t.Errorf("compressed hour %d lasts %v s, want 600", i, d)
		}
		from = to
	}
}
