package estimator_test

import (
	"bufio"
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/estimator/prom"
	"github.com/gatetuner/gatetuner/test/fleetsim"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenarios"
	"github.com/gatetuner/gatetuner/test/vmharness"
)

// Tolerances of the accuracy checks on other backends (docs/estimator.md, "Backends").
const (
	backendDrainTolerance   = 0.02
	backendNominalTolerance = 0.05
	backendP50Tolerance     = 0.15
)

// simulateTo runs the variant's scenario into an OpenMetrics file in dir, ending a couple of
// hours ago on an hour boundary (samples on the 15 s grid), as buildFixture does.
func simulateTo(t *testing.T, v variant, dir string) (*simRun, string) {
	t.Helper()
	sc, err := scenarios.Load(v.scenario)
	if err != nil {
		t.Fatal(err)
	}
	if v.edit != nil {
		v.edit(sc)
		if err := sc.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	base := time.Now().Add(-sc.Duration() - 2*time.Hour).Truncate(time.Hour)
	omPath := filepath.Join(dir, v.key+".om")
	f, err := os.Create(omPath)
	if err != nil {
		t.Fatal(err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	truth, err := fleetsim.Run(context.Background(), sc, fleetsim.Options{Seed: v.seed, BaseTime: base, Metrics: bw, MetricsOptions: v.metrics})
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("simulate %s: %v", v.scenario, err)
	}
	return &simRun{sc: sc, truth: truth, base: base}, omPath
}

// onVictoriaMetrics backfills the variant into a fresh VictoriaMetrics single-node that lives
// until the test ends.
func onVictoriaMetrics(t *testing.T, v variant) *simRun {
	t.Helper()
	bin := vmharness.Require(t)
	start := time.Now()
	run, om := simulateTo(t, v, t.TempDir())
	simulated := time.Since(start)
	s := vmharness.Start(t, vmharness.Options{Binary: bin})
	start = time.Now()
	if err := s.ImportFile(context.Background(), om); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(om); err == nil {
		t.Logf("%s: simulated in %s, imported %d MB into victoria-metrics in %s",
			v.key, simulated.Round(time.Millisecond), st.Size()>>20, time.Since(start).Round(time.Millisecond))
	}
	_ = os.Remove(om)
	run.q = newQuerier(t, s.URL())
	return run
}

func newQuerier(t *testing.T, url string) *prom.HTTP {
	t.Helper()
	q, err := prom.NewHTTP(prom.HTTPConfig{Address: url, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.Close)
	return q
}

// requireBackend fails unless the querier detects as want.
func requireBackend(t *testing.T, q *prom.HTTP, want prom.Backend) {
	t.Helper()
	info, err := q.DetectBackend(context.Background())
	if err != nil {
		t.Fatalf("detect backend: %v", err)
	}
	t.Logf("backend %s %s (%s)", info.Backend, info.Version, info.Evidence)
	if info.Backend != want {
		t.Fatalf("detected %s (%s), want %s", info.Backend, info.Evidence, want)
	}
}

// checkCalibration estimates the run at its end over its whole span and holds the drain rate
// and the nominal estimate to the backend tolerances, and the computed-token source to its
// rank; it logs one row of the docs' backend table.
func checkCalibration(t *testing.T, backend string, run *simRun, key string, wantRank int) {
	t.Helper()
	at := run.end()
	lookback := time.Duration(run.truth.End-run.truth.Start) * time.Second
	checkAt(t, backend, run, key, wantRank, at, lookback)
}

func checkAt(t *testing.T, backend string, run *simRun, key string, wantRank int, at time.Time, lookback time.Duration) {
	t.Helper()
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
	if e.Features.ComputedTokensRank != wantRank {
		t.Errorf("computed-token source %q (rank %d), want rank %d", e.Features.ComputedTokens, e.Features.ComputedTokensRank, wantRank)
	}
	b, n := e.DrainRate, e.Nominal
	if b.Status != estimator.StatusOK || b.Value == nil {
		t.Fatalf("drain rate %s: %+v", b.Status, b.Reasons)
	}
	if n.Status != estimator.StatusOK || n.Value == nil {
		t.Fatalf("nominal %s: %+v", n.Status, n.Reasons)
	}
	nominalTruth := run.sc.Pods.Engine.NominalRate
	rel, nrel := *b.Value/truth-1, *n.Value/nominalTruth-1
	t.Logf("| %s | %s | %.0f vs %.0f (%+.2f %%), %d windows (truth %d) | %.0f vs %.0f (%+.2f %%, %s) |",
		backend, key, *b.Value, truth, 100*rel, b.Windows, nTruth, *n.Value, nominalTruth, 100*nrel, n.Method)
	if math.Abs(rel) > backendDrainTolerance {
		t.Errorf("drain rate %.0f is %+.2f%% from the truth %.0f; want within %.0f%%", *b.Value, 100*rel, truth, 100*backendDrainTolerance)
	}
	if math.Abs(nrel) > backendNominalTolerance {
		t.Errorf("nominal %.0f is %+.2f%% from the truth %.0f; want within %.0f%%", *n.Value, 100*nrel, nominalTruth, 100*backendNominalTolerance)
	}
	if e.Status != estimator.StatusOK {
		t.Errorf("overall status %s, reasons %+v", e.Status, e.Reasons)
	}
}

// checkPromptShift is TestPromptP50TracksAShiftWithinOneLookback on a backend: the p50 prompt
// length matches the first phase before the shift and the last phase from one lookback after
// it, within backendP50Tolerance.
func checkPromptShift(t *testing.T, backend string, run *simRun) {
	t.Helper()
	if len(run.truth.Phases) < 2 {
		t.Fatalf("prompt-shift has %d phases, want a before and an after", len(run.truth.Phases))
	}
	before, after := run.truth.Phases[0], run.truth.Phases[len(run.truth.Phases)-1]
	const lookback = 10 * time.Minute
	shiftEnd := run.base.Add(time.Duration(after.Start * float64(time.Second)))
	end := run.base.Add(time.Duration(after.End * float64(time.Second)))
	est, err := estimator.New(run.q, time.Now, estimator.Config{Lookback: lookback})
	if err != nil {
		t.Fatal(err)
	}
	worst := 0.0
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
		worst = math.Max(worst, math.Abs(rel))
		if math.Abs(rel) > backendP50Tolerance {
			t.Errorf("at shift%+v: p50 %.0f is %.1f%% from the %s truth %.0f; want within %.0f%%",
				at.Sub(shiftEnd), *p.P50, 100*rel, phase, truth, 100*backendP50Tolerance)
		}
	}
	check(run.base.Add(time.Duration(before.End*float64(time.Second))+offGrid), before.PromptTokens.P50, before.Name)
	n := 1
	for at := shiftEnd.Add(lookback + offGrid); !at.After(end.Add(offGrid)); at = at.Add(150 * time.Second) {
		check(at, after.PromptTokens.P50, after.Name)
		n++
	}
	t.Logf("| %s | prompt-shift p50 | worst of %d checks %.1f %% from the phase truth |", backend, n, 100*worst)
}

// TestCalibrationHoldsOnVictoriaMetrics runs the calibration scenarios (and their older-vLLM
// emulations) through a real VictoriaMetrics single-node: MetricsQL's rate and increase count
// from the last sample before the window and do not extrapolate, and still the drain rate
// holds within 2 % and the nominal within 5 % of the simulator's truth.
func TestCalibrationHoldsOnVictoriaMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real VictoriaMetrics; skipped under -short")
	}
	for i, tc := range calibrationVariants() {
		t.Run(tc.v.key, func(t *testing.T) {
			run := onVictoriaMetrics(t, tc.v)
			if i == 0 {
				requireBackend(t, run.q, prom.BackendVictoriaMetrics)
			}
			checkCalibration(t, "victoriametrics", run, tc.v.key, tc.wantRank)
		})
	}
}

// TestVictoriaMetricsRangeQueriesKeepTheGrid pins the one correction: over a 2 h lookback (60
// two-minute windows, above VictoriaMetrics' 50-point realignment threshold) ending 17 min
// before the run's end, the querier's nocache=1 keeps VictoriaMetrics' windows on the
// estimator's grid, so it finds as many saturated windows as Prometheus on the same data and
// the nominal holds (without it, v1.151.0 shifts every window back onto multiples of 2 min:
// measured 10 windows against Prometheus' 11, nominal −2.45 % instead of +1.96 %).
func TestVictoriaMetricsRangeQueriesKeepTheGrid(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real VictoriaMetrics and Prometheus; skipped under -short")
	}
	v := calibrationVariants()[0].v
	vm, pr := onVictoriaMetrics(t, v), fixture(t, v)
	const lookback = 2 * time.Hour
	windows := map[string]int{}
	for name, run := range map[string]*simRun{"victoriametrics": vm, "prometheus": pr} {
		at := run.end().Add(-17 * time.Minute)
		est, err := estimator.New(run.q, fixedClock(at), estimator.Config{Lookback: lookback})
		if err != nil {
			t.Fatal(err)
		}
		e, err := est.Estimate(context.Background(), run.target(), at)
		if err != nil {
			t.Fatal(err)
		}
		if e.DrainRate.Status != estimator.StatusOK {
			t.Fatalf("%s: drain rate %s %+v", name, e.DrainRate.Status, e.DrainRate.Reasons)
		}
		windows[name] = e.DrainRate.Windows
		checkAt(t, name, run, v.key+" (2 h lookback, end − 17 min)", calibrationVariants()[0].wantRank, at, lookback)
	}
	if windows["victoriametrics"] != windows["prometheus"] {
		t.Errorf("victoria-metrics found %d saturated windows, prometheus %d on the same data: the range query left the grid",
			windows["victoriametrics"], windows["prometheus"])
	}
}

// TestPromptP50TracksAShiftOnVictoriaMetrics is the prompt-shift p50 check on VictoriaMetrics.
func TestPromptP50TracksAShiftOnVictoriaMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real VictoriaMetrics; skipped under -short")
	}
	checkPromptShift(t, "victoriametrics", onVictoriaMetrics(t, variant{key: "prompt-shift", scenario: "prompt-shift", seed: 1}))
}

// TestBackendDetection checks each real backend is told apart from the others.
func TestBackendDetection(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real Prometheus and VictoriaMetrics; skipped under -short")
	}
	pr := fixture(t, variant{key: "quiet", scenario: "quiet", seed: 1})
	requireBackend(t, pr.q, prom.BackendPrometheus)
	s := vmharness.Start(t, vmharness.Options{})
	requireBackend(t, newQuerier(t, s.URL()), prom.BackendVictoriaMetrics)
}
