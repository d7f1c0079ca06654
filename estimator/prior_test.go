package estimator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/estimator"
)

func TestCalibrationRecordPrior(t *testing.T) {
	cases := []struct {
		name, file, fingerprint string
		want                    float64
		errHas                  string
	}{
		{"usable record", "testdata/calibration-record-ok.json", "", 15928, ""},
		{"fingerprint matches", "testdata/calibration-record-ok.json", "sha256:qwen3-32b-h100-tp2", 15928, ""},
		{"fingerprint differs", "testdata/calibration-record-ok.json", "sha256:other", 0, "does not match"},
		{"placeholder record", "testdata/calibration-record-not-run.json", "", 0, "status"},
		{"missing file", "testdata/absent.json", "", 0, "no such file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := estimator.LoadCalibrationPrior(tc.file, tc.fingerprint)
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("err %v, want one mentioning %q", err, tc.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Value != tc.want || p.Origin != estimator.PriorCalibrationRecord {
				t.Fatalf("prior %+v, want %v from a calibration record", p, tc.want)
			}
		})
	}
}

// TestPriorStandsInOnlyUntilLiveEvidence checks a prior is reported,
// labelled, when a deployment never saturated; that live evidence replaces
// it; and that it never papers over broken data.
func TestPriorStandsInOnlyUntilLiveEvidence(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real Prometheus; skipped under -short")
	}
	prior, err := estimator.LoadCalibrationPrior("testdata/calibration-record-ok.json", "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	estimate := func(t *testing.T, run *simRun, at time.Time, p *estimator.Prior) *estimator.Estimates {
		t.Helper()
		lookback := time.Duration(run.truth.End-run.truth.Start) * time.Second
		est, err := estimator.New(run.q, fixedClock(at), estimator.Config{Lookback: lookback})
		if err != nil {
			t.Fatal(err)
		}
		target := run.target()
		target.Prior = p
		e, err := est.Estimate(ctx, target, at)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}

	t.Run("no saturation: the prior, labelled", func(t *testing.T) {
		run := fixture(t, variant{key: "quiet", scenario: "quiet", seed: 1})
		e := estimate(t, run, run.end(), prior)
		b := e.DrainRate
		if e.Status != estimator.StatusPrior || b.Status != estimator.StatusPrior || !b.Prior || b.Method != "prior" {
			t.Fatalf("status %s, drain %s prior=%v method %s", e.Status, b.Status, b.Prior, b.Method)
		}
		if *b.Value != 15928 || b.Confidence != estimator.DefaultPriorConfidence || !strings.HasPrefix(b.Source, estimator.PriorCalibrationRecord) {
			t.Fatalf("value %v confidence %v source %q", *b.Value, b.Confidence, b.Source)
		}
		if !e.HasReason(estimator.ReasonNoSaturatedWindows) || !e.HasWarning(estimator.ReasonPriorInUse) {
			t.Fatalf("reasons %v warnings %v", codes(e.Reasons), codes(e.Warnings))
		}
		if b.LowerBound == nil {
			t.Error("the per-request lower bound went missing next to the prior")
		}
	})
	t.Run("live evidence wins", func(t *testing.T) {
		run := fixture(t, variant{key: "calibration-15928", scenario: "calibration-15928", seed: 1})
		e := estimate(t, run, run.end(), prior)
		if e.Status != estimator.StatusOK || e.DrainRate.Prior || *e.DrainRate.Value == 15928 {
			t.Fatalf("status %s prior=%v value %v: want the live measurement", e.Status, e.DrainRate.Prior, *e.DrainRate.Value)
		}
	})
	t.Run("stale data is not covered by the prior", func(t *testing.T) {
		run := fixture(t, variant{key: "calibration-15928", scenario: "calibration-15928", seed: 1})
		e := estimate(t, run, run.end().Add(4*time.Minute), prior)
		if e.Status != estimator.StatusInconclusive || e.DrainRate.Value != nil || !e.HasReason(estimator.ReasonStaleSeries) {
			t.Fatalf("status %s value %v reasons %v: want inconclusive, stale, no value", e.Status, e.DrainRate.Value, codes(e.Reasons))
		}
	})
}
