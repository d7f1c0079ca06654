package estimator_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/estimator"
)

// TestTraceScenarioEstimatesMatchSimulatorTruth runs the built-in trace
// scenarios (Mooncake's production trace replayed near saturation, and
// mixed with a growing long-context class) through a real Prometheus and
// checks the pooled drain rate over the whole run within ±2 % of the
// simulator's truth and the nominal within ±5 %.
func TestTraceScenarioEstimatesMatchSimulatorTruth(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real Prometheus; skipped under -short")
	}
	for _, name := range []string{"trace-saturation", "trace-drift"} {
		t.Run(name, func(t *testing.T) {
			run := fixture(t, variant{key: name, scenario: name, seed: 1})
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
				t.Fatal("the simulator reports no saturated window; the scenario no longer saturates")
			}
			b := e.DrainRate
			if b.Status != estimator.StatusOK || b.Value == nil {
				t.Fatalf("drain rate %s: %+v", b.Status, b.Reasons)
			}
			rel := *b.Value/truth - 1
			t.Logf("drain rate %.0f tok/s vs truth %.0f (%+.2f%%), %d windows (truth %d), source %s", *b.Value, truth, 100*rel, b.Windows, nTruth, b.Source)
			if math.Abs(rel) > 0.02 {
				t.Errorf("drain rate %.0f is %.2f%% from the truth %.0f; want within 2%%", *b.Value, 100*rel, truth)
			}
			nominal := run.sc.Pods.Engine.NominalRate
			n := e.Nominal
			if n.Status != estimator.StatusOK || n.Value == nil {
				t.Fatalf("nominal %s: %+v", n.Status, n.Reasons)
			}
			nrel := *n.Value/nominal - 1
			t.Logf("nominal %.0f vs truth %.0f (%+.2f%%), source %s", *n.Value, nominal, 100*nrel, n.Source)
			if math.Abs(nrel) > 0.05 {
				t.Errorf("nominal %.0f is %.2f%% from the truth %.0f; want within 5%%", *n.Value, 100*nrel, nominal)
			}
		})
	}
}
