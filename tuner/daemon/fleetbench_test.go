package daemon

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gatetuner/gatetuner/exporter"
	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenarios"
	"github.com/gatetuner/gatetuner/test/promharness"
	"github.com/gatetuner/gatetuner/test/simenv"

	"github.com/gatetuner/gatetuner/tuner/config"
)

// fanOut copies OpenMetrics text (families one after another, "# EOF"
// last) to w with every family's samples repeated once per namespace,
// `namespace="from"` rewritten to each: one pool becomes many.
func fanOut(r io.Reader, w io.Writer, from string, to []string) error {
	br := bufio.NewReaderSize(r, 1<<20)
	bw := bufio.NewWriterSize(w, 1<<20)
	old := []byte(`namespace="` + from + `"`)
	var header, body []byte
	flush := func() error {
		if _, err := bw.Write(header); err != nil {
			return err
		}
		for _, ns := range to {
			if _, err := bw.Write(bytes.ReplaceAll(body, old, []byte(`namespace="`+ns+`"`))); err != nil {
				return err
			}
		}
		header, body = header[:0], body[:0]
		return nil
	}
	for {
		line, err := br.ReadBytes('\n')
		switch {
		case bytes.HasPrefix(line, []byte("# EOF")):
			if err := flush(); err != nil {
				return err
			}
			if _, err := bw.Write(line); err != nil {
				return err
			}
			return bw.Flush()
		case bytes.HasPrefix(line, []byte("#")):
			if len(body) > 0 {
				if err := flush(); err != nil {
					return err
				}
			}
			header = append(header, line...)
		default:
			body = append(body, line...)
		}
		if err != nil {
			return fmt.Errorf("fan out: %w (no # EOF)", err)
		}
	}
}

func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// histogramSum is the sum and count of a histogram vector's series.
func histogramSum(t testing.TB, m *exporter.Metrics, name string) (float64, uint64) {
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	var n uint64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.GetMetric() {
			h := s.GetHistogram()
			sum += h.GetSampleSum()
			n += h.GetSampleCount()
		}
	}
	return sum, n
}

// BenchmarkFleet50x8 runs one daemon replica over 50 targets of 8 pods each
// against a real Prometheus (test/promharness): the prompt-shift day (2 h,
// six 20-minute windows) simulated on 8 pods, its OpenMetrics samples
// repeated under 50 namespaces and backfilled with promtool. A round is
// every target's cycle at once, as the daemon's cron starts them on a
// shared 5-minute schedule. The first round (a new replica: every window of
// every target estimated) runs before the loop and is reported as
// first-round-s / first-cpu-s / first-queries; each timed iteration is a
// later round 5 minutes on. queries/round is the sum of
// gatetuner_cycle_prometheus_queries over the targets, query-s/round the
// Prometheus time those queries took (gatetuner_query_duration_seconds).
func BenchmarkFleet50x8(b *testing.B) {
	const targets, pods = 50, 8
	bins := promharness.Require(b)
	sc, err := scenarios.Load("prompt-shift")
	if err != nil {
		b.Fatal(err)
	}
	simenv.ScalePods(sc, pods)
	dir := b.TempDir()
	one := filepath.Join(dir, "one.om")
	f, err := os.Create(one)
	if err != nil {
		b.Fatal(err)
	}
	prof, err := gate.LookupProfile(gate.ProfileRouter202608)
	if err != nil {
		b.Fatal(err)
	}
	params := gate.DefaultParams()
	cur := params.Settings(prof.MissingSignal)
	tr, err := fleetsim.Run(context.Background(), sc, fleetsim.Options{Seed: 1, Metrics: f, SettingsFor: func(int) gate.Settings { return cur }})
	if err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	base := fleetsim.DefaultBaseTime()
	end := base.Add(time.Duration(tr.End * float64(time.Second)))
	var names []string
	for i := range targets {
		names = append(names, fmt.Sprintf("t%02d", i))
	}
	all := filepath.Join(dir, "fleet.om")
	in, err := os.Open(one)
	if err != nil {
		b.Fatal(err)
	}
	out, err := os.Create(all)
	if err != nil {
		b.Fatal(err)
	}
	if err := fanOut(in, out, sc.Namespace, names); err != nil {
		b.Fatal(err)
	}
	_ = in.Close()
	if err := out.Close(); err != nil {
		b.Fatal(err)
	}
	st, _ := os.Stat(all)
	_ = os.Remove(one)
	setup := time.Now()
	data := promharness.BackfillFile(b, all)
	b.Logf("backfilled %.2f GB of OpenMetrics (%d targets × %d pods, 2 h) in %s", float64(st.Size())/1e9, targets, pods, time.Since(setup).Round(time.Second))
	_ = os.Remove(all)
	srv := promharness.Start(b, promharness.Options{Binaries: bins, DataDir: data, Retention: 365 * 24 * time.Hour})

	pol := config.DefaultPolicy()
	pol.Lookback, pol.History, pol.DayLength, pol.WindowWidth = 20*time.Minute, sc.Duration(), sc.Duration(), 20*time.Minute
	bs := sc.EPP.PrefixIndex.BlockSizeTokens
	pol.BlockSizeTokens = &bs
	et := simenv.EstimatorTarget(sc)
	cfg := &config.Config{Prometheus: config.DefaultPrometheus()}
	cfg.Prometheus.URL = srv.URL()
	for _, ns := range names {
		s := *sc
		s.Namespace = ns
		if err := os.MkdirAll(filepath.Join(dir, ns), 0o755); err != nil {
			b.Fatal(err)
		}
		path, err := simenv.WriteEPPConfig(filepath.Join(dir, ns), &s, cur, false)
		if err != nil {
			b.Fatal(err)
		}
		tet := simenv.EstimatorTarget(&s)
		cfg.Targets = append(cfg.Targets, config.Target{Name: ns, File: path, Plugin: sc.EPP.Plugin, Profile: prof.Name,
			MaxNumBatchedTokens: et.MaxNumBatchedTokens, Selector: config.Selector{VLLM: tet.VLLMSelector, EPP: tet.EPPSelector}, Policy: pol})
	}
	// Mid-day, so that later rounds have new samples to read.
	at := base.Add(90*time.Minute + 7*time.Second)
	if !at.Before(end) {
		b.Fatalf("the simulated day ends at %s", end)
	}
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return at }
	metrics := exporter.New("bench", "bench")
	d, err := New(context.Background(), cfg, Deps{Metrics: metrics, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: clock, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	round := func() (wall, cpu, queries, querySeconds float64, replayed float64) {
		qs0, _ := histogramSum(b, metrics, "gatetuner_query_duration_seconds")
		start, c0 := time.Now(), processCPU()
		var wg sync.WaitGroup
		for _, ns := range names {
			wg.Add(1)
			go func() {
				defer wg.Done()
				reps, err := d.RunOnce(context.Background(), ns)
				if err != nil || len(reps) != 1 || reps[0].Recommendation == nil {
					b.Errorf("%s: %v %+v", ns, err, reps)
				}
			}()
		}
		wg.Wait()
		wall, cpu = time.Since(start).Seconds(), processCPU()-c0
		for _, ns := range names {
			queries += testutil.ToFloat64(metrics.CycleQueries.WithLabelValues(ns))
			replayed += testutil.ToFloat64(metrics.CycleReplayed.WithLabelValues(ns))
		}
		qs1, _ := histogramSum(b, metrics, "gatetuner_query_duration_seconds")
		return wall, cpu, queries, qs1 - qs0, replayed
	}
	fw, fc, fq, fqs, fr := round()
	b.Logf("first round: %.1f s wall, %.1f s CPU, %.0f queries (%.1f query-s), %.0f decisions drawn", fw, fc, fq, fqs, fr)
	var lc, lq, lqs, lr float64
	n := 0
	for b.Loop() {
		n++
		if n > 4 {
			b.Fatal("more than 4 later rounds: the simulated day ends (use -benchtime Nx, N ≤ 4)")
		}
		mu.Lock()
		at = at.Add(5 * time.Minute)
		mu.Unlock()
		_, c, q, qs, r := round()
		lc, lq, lqs, lr = lc+c, lq+q, lqs+qs, lr+r
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	k := float64(n)
	b.ReportMetric(lc/k, "cpu-s/round")
	b.ReportMetric(lq/k, "queries/round")
	b.ReportMetric(lqs/k, "query-s/round")
	b.ReportMetric(lr/k, "decisions/round")
	b.ReportMetric(fw, "first-round-s")
	b.ReportMetric(fc, "first-cpu-s")
	b.ReportMetric(fq, "first-queries")
	b.ReportMetric(float64(ms.HeapAlloc)/1e6, "heap-MB")
}
