//go:build thanos

package estimator_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/gatetuner/gatetuner/estimator/prom"
	"github.com/gatetuner/gatetuner/test/promharness"
	"github.com/gatetuner/gatetuner/test/thanosharness"
)

// onThanos backfills the variant into a real Prometheus carrying a replica external label and
// queries it through a real Thanos sidecar and querier; all live until the test ends.
func onThanos(t *testing.T, v variant) *simRun {
	t.Helper()
	bin := thanosharness.Require(t)
	bins := promharness.Require(t)
	dir := t.TempDir()
	run, om := simulateTo(t, v, dir)
	data := filepath.Join(dir, "data")
	if err := promharness.CreateBlocks(context.Background(), bins.Promtool, om, data, 0); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(om)
	srv := promharness.Start(t, promharness.Options{Binaries: bins, DataDir: data,
		ExternalLabels: map[string]string{thanosharness.ReplicaLabel: "0"}})
	q := thanosharness.Start(t, thanosharness.Options{Binary: bin, PrometheusURL: srv.URL(), TSDBPath: srv.DataDir()})
	run.q = newQuerier(t, q.URL())
	return run
}

// TestCalibrationHoldsOnThanos runs the calibration scenarios through a Thanos Querier over a
// real Prometheus: the querier evaluates PromQL itself on series the sidecar streams from the
// TSDB, and the drain rate and nominal hold to the same tolerances.
func TestCalibrationHoldsOnThanos(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real Thanos and Prometheus; skipped under -short")
	}
	for i, tc := range calibrationVariants() {
		t.Run(tc.v.key, func(t *testing.T) {
			run := onThanos(t, tc.v)
			if i == 0 {
				requireBackend(t, run.q, prom.BackendThanos)
			}
			checkCalibration(t, "thanos", run, tc.v.key, tc.wantRank)
		})
	}
}

// TestPromptP50TracksAShiftOnThanos is the prompt-shift p50 check through Thanos.
func TestPromptP50TracksAShiftOnThanos(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real Thanos and Prometheus; skipped under -short")
	}
	checkPromptShift(t, "thanos", onThanos(t, variant{key: "prompt-shift", scenario: "prompt-shift", seed: 1}))
}
