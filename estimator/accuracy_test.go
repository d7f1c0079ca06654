package estimator_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/test/fleetsim/export"
)

func calibrationVariants() []struct {
	v        variant
	wantRank int
} {
	legacy := export.MetricsOptions{LegacyVLLM: true}
	oldest := export.MetricsOptions{LegacyVLLM: true, Omit: []string{"vllm:request_prefill_kv_computed_tokens"}}
	var out []struct {
		v        variant
		wantRank int
	}
	for _, sc := range []string{"calibration-1970", "calibration-15928", "calibration-39065"} {
		out = append(out,
			struct {
				v        variant
				wantRank int
			}{variant{key: sc, scenario: sc, seed: 1}, 1},
			struct {
				v        variant
				wantRank int
			}{variant{key: sc + "-legacy", scenario: sc, seed: 1, metrics: legacy}, 3},
		)
	}
	out = append(out, struct {
		v        variant
		wantRank int
	}{variant{key: "calibration-1970-oldest", scenario: "calibration-1970", seed: 1, metrics: oldest}, 4})
	return out
}

// TestCalibrationEstimatesMatchSimulatorTruth runs each calibration scenario
// (and its older-vLLM emulations) through a real Prometheus and checks the
// pooled drain rate (±5 %), the nominal estimate (±10 %), that the
// per-request rate reads low under concurrency (≤ 0.8 × truth), and that the
// computed-token source falls back in the documented order.
func TestCalibrationEstimatesMatchSimulatorTruth(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real Prometheus; skipped under -short")
	}
	for _, tc := range calibrationVariants() {
		t.Run(tc.v.key, func(t *testing.T) {
			run := fixture(t, tc.v)
			at := run.end()
			lookback := time.Duration(run.truth.End-run.truth.Start) * time.Second
			est, err := estimator.New(run.q, fixedClock(at), estimator.Config{Lookback: lookback})
			if err != nil {
				t.Fatal(err)
			}
			e, err := est.Estimate(context.Background(), run.target(), at)
			if err != nil {
				t.Fatal(err)
			}
			truth, nTruth := drainTruth(run.truth, run.base, at.Add(-lookback), at)
			if nTruth == 0 {
				t.Fatalf("the simulator reports no saturated window; the scenario no longer saturates")
			}
			if e.Features.ComputedTokensRank != tc.wantRank {
				t.Errorf("computed-token source %q (rank %d), want rank %d", e.Features.ComputedTokens, e.Features.ComputedTokensRank, tc.wantRank)
			}
			b := e.DrainRate
			if b.Status != estimator.StatusOK || b.Value == nil {
				t.Fatalf("drain rate %s: %+v", b.Status, b.Reasons)
			}
			rel := *b.Value/truth - 1
			t.Logf("drain rate B %.0f tok/s vs truth %.0f (%+.2f%%), %d windows (truth %d), interval [%.0f, %.0f], confidence %.3f, source %s",
				*b.Value, truth, 100*rel, b.Windows, nTruth, b.Interval.Low, b.Interval.High, b.Confidence, b.Source)
			if math.Abs(rel) > 0.05 {
				t.Errorf("drain rate %.0f is %.2f%% from the truth %.0f; want within 5%%", *b.Value, 100*rel, truth)
			}
			if b.Confidence < 0 || b.Confidence > 1 {
				t.Errorf("confidence %v outside [0,1]", b.Confidence)
			}
			if b.Interval.Low > *b.Value || b.Interval.High < *b.Value {
				t.Errorf("interval [%v, %v] does not hold the value %v", b.Interval.Low, b.Interval.High, *b.Value)
			}

			nominalTruth := run.sc.Pods.Engine.NominalRate
			n := e.Nominal
			if n.Status != estimator.StatusOK || n.Value == nil {
				t.Fatalf("nominal %s: %+v", n.Status, n.Reasons)
			}
			nrel := *n.Value/nominalTruth - 1
			t.Logf("nominal %.0f vs truth %.0f (%+.2f%%), confidence %.3f, source %s", *n.Value, nominalTruth, 100*nrel, n.Confidence, n.Source)
			if math.Abs(nrel) > 0.10 {
				t.Errorf("nominal %.0f is %.2f%% from the truth %.0f; want within 10%%", *n.Value, 100*nrel, nominalTruth)
			}
			if c := e.StepRate; c.Status == estimator.StatusOK {
				t.Logf("step rate C %.0f (%+.2f%% vs truth)", *c.Value, 100*(*c.Value/truth-1))
			} else {
				t.Errorf("step rate %s: %+v", c.Status, c.Reasons)
			}

			a := e.PerRequestRate
			if a.Status != estimator.StatusOK || a.Value == nil {
				t.Fatalf("per-request rate %s: %+v", a.Status, a.Reasons)
			}
			t.Logf("per-request rate A %.0f = %.2f x truth", *a.Value, *a.Value/truth)
			if *a.Value > 0.8*truth {
				t.Errorf("per-request rate %.0f > 0.8 x truth %.0f: the concurrency trap is not there", *a.Value, truth)
			}
			if e.Status != estimator.StatusOK {
				t.Errorf("overall status %s, reasons %+v", e.Status, e.Reasons)
			}
			t.Logf("queries: %+v; warnings %+v", e.Queries, e.Warnings)
		})
	}
}

// TestQuietIsInconclusiveWithTheLowerBound checks a deployment that never
// saturates gets no drain rate, the no-saturated-windows reason and the
// per-request rate as a lower bound.
func TestQuietIsInconclusiveWithTheLowerBound(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real Prometheus; skipped under -short")
	}
	run := fixture(t, variant{key: "quiet", scenario: "quiet", seed: 1})
	at := run.end()
	lookback := time.Duration(run.truth.End-run.truth.Start) * time.Second
	if len(run.truth.Windows) != 0 {
		t.Fatalf("the quiet scenario saturated %d windows; the fixture no longer fits the test", len(run.truth.Windows))
	}
	est, err := estimator.New(run.q, fixedClock(at), estimator.Config{Lookback: lookback})
	if err != nil {
		t.Fatal(err)
	}
	e, err := est.Estimate(context.Background(), run.target(), at)
	if err != nil {
		t.Fatal(err)
	}
	if e.Status != estimator.StatusInconclusive || e.DrainRate.Status != estimator.StatusInconclusive {
		t.Fatalf("status %s / drain %s, want inconclusive", e.Status, e.DrainRate.Status)
	}
	if !e.HasReason(estimator.ReasonNoSaturatedWindows) {
		t.Errorf("reasons %+v lack %s", e.Reasons, estimator.ReasonNoSaturatedWindows)
	}
	if e.DrainRate.Value != nil {
		t.Errorf("an inconclusive drain rate carries a value %v", *e.DrainRate.Value)
	}
	if e.DrainRate.LowerBound == nil || e.PerRequestRate.Value == nil || *e.DrainRate.LowerBound != *e.PerRequestRate.Value {
		t.Fatalf("lower bound %v, per-request %v: want the per-request rate reported as the lower bound", e.DrainRate.LowerBound, e.PerRequestRate.Value)
	}
	t.Logf("lower bound (per-request rate) %.0f tok/s; nominal truth %.0f", *e.DrainRate.LowerBound, run.sc.Pods.Engine.NominalRate)
	if *e.DrainRate.LowerBound > run.sc.Pods.Engine.NominalRate {
		t.Errorf("the lower bound %.0f exceeds the nominal rate %.0f", *e.DrainRate.LowerBound, run.sc.Pods.Engine.NominalRate)
	}
	// The other parts still stand.
	if e.Prompt.Status != estimator.StatusOK || e.InFlight.Status != estimator.StatusOK || e.Routing.Status != estimator.StatusOK {
		t.Errorf("prompt %s, in-flight %s, routing %s: want ok", e.Prompt.Status, e.InFlight.Status, e.Routing.Status)
	}
}

// TestPromptP50TracksAShiftWithinOneLookback checks that from one lookback
// after the prompt mix has shifted (the last phase's start), the estimated
// p50 prompt length stays within 15 % of the simulator's truth for that
// phase, and that it matched the first phase's before the shift began.
func TestPromptP50TracksAShiftWithinOneLookback(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real Prometheus; skipped under -short")
	}
	run := fixture(t, variant{key: "prompt-shift", scenario: "prompt-shift", seed: 1})
	if len(run.truth.Phases) < 2 {
		t.Fatalf("prompt-shift has %d phases, want a before and an after", len(run.truth.Phases))
	}
	before, after := run.truth.Phases[0], run.truth.Phases[len(run.truth.Phases)-1]
	const lookback = 10 * time.Minute
	shiftEnd := run.base.Add(time.Duration(after.Start * float64(time.Second)))
	end := run.base.Add(time.Duration(after.End * float64(time.Second)))
	if end.Sub(shiftEnd) < lookback {
		t.Fatalf("the %s phase lasts %v, shorter than the %v lookback", after.Name, end.Sub(shiftEnd), lookback)
	}
	est, err := estimator.New(run.q, time.Now, estimator.Config{Lookback: lookback})
	if err != nil {
		t.Fatal(err)
	}
	check := func(at time.Time, truth float64, phase string) {
		t.Helper()
		e, err := est.Estimate(context.Background(), run.target(), at)
		if err != nil {
			t.Fatal(err)
		}
		p := e.Prompt
		if p.Status != estimator.StatusOK || p.P50 == nil {
			t.Fatalf("at %s: prompt distribution %s %+v", at.Format(time.RFC3339), p.Status, p.Reasons)
		}
		rel := *p.P50/truth - 1
		t.Logf("at shift%+v: p50 %.0f vs %s truth %.0f (%+.1f%%); p90 %.0f, mean %.0f, %0.f requests from %s",
			at.Sub(shiftEnd).Round(time.Second), *p.P50, phase, truth, 100*rel, *p.P90, *p.Mean, p.Count, p.Source)
		if math.Abs(rel) > 0.15 {
			t.Errorf("at shift%+v: p50 %.0f is %.1f%% from the %s truth %.0f; want within 15%%", at.Sub(shiftEnd), *p.P50, 100*rel, phase, truth)
		}
	}
	check(run.base.Add(time.Duration(before.End*float64(time.Second))+offGrid), before.PromptTokens.P50, before.Name)
	for at := shiftEnd.Add(lookback + offGrid); !at.After(end.Add(offGrid)); at = at.Add(150 * time.Second) {
		check(at, after.PromptTokens.P50, after.Name)
	}
}
