package estimator_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/estimator/prom"
	"github.com/gatetuner/gatetuner/test/fleetsim"
	"github.com/gatetuner/gatetuner/test/fleetsim/export"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenarios"
	"github.com/gatetuner/gatetuner/test/fleetsim/truth"
	"github.com/gatetuner/gatetuner/test/promharness"
)

// offGrid shifts query times off the 15 s scrape grid: Prometheus 2.x range
// selectors include a sample exactly at the window's start, 3.x do not.
const offGrid = 7 * time.Second

// simRun is one simulator run backfilled into its own real Prometheus.
type simRun struct {
	sc    *scenario.Scenario
	truth *truth.Truth
	base  time.Time
	srv   *promharness.Server
	q     *prom.HTTP
	// omBytes is the size of the backfilled OpenMetrics text.
	omBytes int64
	// records is the gate records file ("" unless the variant asked for one).
	records string
}

// end is the wall time of the end of the measured range, off the grid.
func (r *simRun) end() time.Time {
	return r.base.Add(time.Duration(r.truth.End*float64(time.Second)) + offGrid)
}

// phaseEnd is the wall time the named phase ends, off the grid.
func (r *simRun) phaseEnd(t *testing.T, name string) time.Time {
	t.Helper()
	p := r.truth.Phase(name)
	if p == nil {
		t.Fatalf("truth of %s has no phase %q", r.sc.Name, name)
	}
	return r.base.Add(time.Duration(p.End*float64(time.Second)) + offGrid)
}

// target is the estimator target for the run's fleet.
func (r *simRun) target() estimator.Target {
	return estimator.Target{
		Name:                r.sc.Target,
		VLLMSelector:        fmt.Sprintf(`namespace=%q,pod=~%q`, r.sc.Namespace, r.sc.Pods.NamePrefix+"-[0-9]+"),
		EPPSelector:         fmt.Sprintf(`pod=%q`, r.sc.EPP.Pod),
		MaxNumBatchedTokens: r.sc.Pods.Engine.MaxNumBatchedTokens,
		MaxNumSeqs:          r.sc.Pods.Engine.MaxNumSeqs,
	}
}

// fixtures holds one backfilled Prometheus per scenario variant for the
// whole test binary; TestMain stops them.
var fixtures = struct {
	mu   sync.Mutex
	dir  string
	runs map[string]*fixtureEntry
}{runs: map[string]*fixtureEntry{}}

type fixtureEntry struct {
	once sync.Once
	run  *simRun
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	fixtures.mu.Lock()
	for _, f := range fixtures.runs {
		if f.run != nil {
			if f.run.q != nil {
				f.run.q.Close()
			}
			if err := f.run.srv.Close(); err != nil {
				fmt.Fprintf(os.Stderr, "stop prometheus: %v\n", err)
			}
		}
	}
	if fixtures.dir != "" {
		_ = os.RemoveAll(fixtures.dir)
	}
	fixtures.mu.Unlock()
	os.Exit(code)
}

// variant names a simulator run: a scenario, an edit and options.
type variant struct {
	key      string
	scenario string
	seed     uint64
	edit     func(*scenario.Scenario)
	metrics  export.MetricsOptions
	// exporters overrides the scenario's export shape (nil: its own).
	exporters *scenario.ExportShape
	// records writes the run's gate records to simRun.records.
	records bool
}

// fixture simulates the variant once per test binary, backfills its
// OpenMetrics output with promtool and starts a real Prometheus on it.
func fixture(t testing.TB, v variant) *simRun {
	t.Helper()
	bins := promharness.Require(t)
	fixtures.mu.Lock()
	if fixtures.dir == "" {
		d, err := os.MkdirTemp("", "estimator-fixtures-*")
		if err != nil {
			fixtures.mu.Unlock()
			t.Fatal(err)
		}
		fixtures.dir = d
	}
	e, ok := fixtures.runs[v.key]
	if !ok {
		e = &fixtureEntry{}
		fixtures.runs[v.key] = e
	}
	dir := filepath.Join(fixtures.dir, v.key)
	fixtures.mu.Unlock()
	e.once.Do(func() { e.run, e.err = buildFixture(bins, v, dir) })
	if e.err != nil {
		t.Fatalf("fixture %s: %v", v.key, e.err)
	}
	return e.run
}

func buildFixture(bins promharness.Binaries, v variant, dir string) (*simRun, error) {
	sc, err := scenarios.Load(v.scenario)
	if err != nil {
		return nil, err
	}
	if v.edit != nil {
		v.edit(sc)
		if err := sc.Validate(); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// Ending a couple of hours ago keeps every block inside retention and
	// in the past; the hour boundary keeps samples on a 15 s grid.
	base := time.Now().Add(-sc.Duration() - 2*time.Hour).Truncate(time.Hour)
	omPath := filepath.Join(dir, "metrics.om")
	f, err := os.Create(omPath)
	if err != nil {
		return nil, err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	opt := fleetsim.Options{Seed: v.seed, BaseTime: base, Metrics: bw, MetricsOptions: v.metrics, Exporters: v.exporters}
	var recPath string
	var rf *os.File
	if v.records {
		recPath = filepath.Join(dir, "records.jsonl")
		if rf, err = os.Create(recPath); err != nil {
			_ = f.Close()
			return nil, err
		}
		opt.Records = rf
	}
	truth, err := fleetsim.Run(context.Background(), sc, opt)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if rf != nil {
		if cerr := rf.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return nil, fmt.Errorf("simulate %s: %w", v.scenario, err)
	}
	st, err := os.Stat(omPath)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	data := filepath.Join(dir, "data")
	if err := promharness.CreateBlocks(ctx, bins.Promtool, omPath, data, 0); err != nil {
		return nil, err
	}
	_ = os.Remove(omPath)
	work := filepath.Join(dir, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, err
	}
	srv, err := promharness.New(ctx, promharness.Options{Binaries: bins, DataDir: data, WorkDir: work})
	if err != nil {
		return nil, err
	}
	q, err := prom.NewHTTP(prom.HTTPConfig{Address: srv.URL(), Timeout: time.Minute})
	if err != nil {
		_ = srv.Close()
		return nil, err
	}
	return &simRun{sc: sc, truth: truth, base: base, srv: srv, q: q, omBytes: st.Size(), records: recPath}, nil
}

// drainTruth is the simulator's pooled drain-rate truth over the windows
// inside [from, to]: per pod the time-weighted mean of its saturated
// windows' drain rate, then the median over pods (as the estimator pools).
func drainTruth(tr *truth.Truth, base, from, to time.Time) (float64, int) {
	type acc struct{ work, sec float64 }
	per := map[string]*acc{}
	n := 0
	for _, w := range tr.Windows {
		ws := base.Add(time.Duration(w.Start * float64(time.Second)))
		we := base.Add(time.Duration(w.End * float64(time.Second)))
		if ws.Before(from) || we.After(to) {
			continue
		}
		a := per[w.Pod]
		if a == nil {
			a = &acc{}
			per[w.Pod] = a
		}
		d := w.End - w.Start
		a.work += w.DrainRate * d
		a.sec += d
		n++
	}
	var vs []float64
	for _, a := range per {
		vs = append(vs, a.work/a.sec)
	}
	return medianOf(vs), n
}

func medianOf(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := append([]float64(nil), vs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// fixedClock returns a clock stuck at t.
func fixedClock(t time.Time) func() time.Time { return func() time.Time { return t } }
