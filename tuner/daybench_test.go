package tuner_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/estimator/prom"
	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenarios"
	"github.com/gatetuner/gatetuner/test/simenv"
	"github.com/gatetuner/gatetuner/tuner"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/sink"
)

// dayPool is a simulated prompt-shift pool in an embedded Prometheus and a
// tuner target over it (model source, mode off).
type dayPool struct {
	sc     *scenario.Scenario
	emb    *prom.Embedded
	prof   gate.Profile
	target *tuner.Target
	// end is where the simulated day's samples end.
	end time.Time
}

// simulatedPool simulates one prompt-shift day (2 h, six 20-minute phases)
// on a pool scaled to pods into an embedded Prometheus in dir.
func simulatedPool(b *testing.B, pods int, dir string) *dayPool {
	sc, err := scenarios.Load("prompt-shift")
	if err != nil {
		b.Fatal(err)
	}
	simenv.ScalePods(sc, pods)
	emb, err := prom.NewEmbedded(prom.EmbeddedConfig{Dir: dir, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	prof, err := gate.LookupProfile(gate.ProfileRouter202608)
	if err != nil {
		b.Fatal(err)
	}
	params := gate.DefaultParams()
	cur := params.Settings(prof.MissingSignal)
	_, end, err := simenv.Fill(context.Background(), emb, sc, fleetsim.Options{Seed: 1, SettingsFor: func(int) gate.Settings { return cur }})
	if err != nil {
		b.Fatal(err)
	}
	return &dayPool{sc: sc, emb: emb, prof: prof, end: end}
}

// targetOn builds the pool's tuner target over querier q with policy pol.
func (p *dayPool) targetOn(b *testing.B, dir string, q prom.Querier, pol config.Policy, clock func() time.Time) *tuner.Tuner {
	params := gate.DefaultParams()
	path, err := simenv.WriteEPPConfig(dir, p.sc, params.Settings(p.prof.MissingSignal), false)
	if err != nil {
		b.Fatal(err)
	}
	snk, err := sink.New(sink.Target{Name: p.sc.Target, File: path, Plugins: []string{p.sc.EPP.Plugin}, Profile: p.prof}, sink.Options{ReadOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	bs := p.sc.EPP.PrefixIndex.BlockSizeTokens
	pol.BlockSizeTokens = &bs
	est, err := estimator.New(q, clock, estimator.Config{Lookback: pol.Lookback})
	if err != nil {
		b.Fatal(err)
	}
	p.target = &tuner.Target{Config: config.Target{Name: p.sc.Target, File: path, Plugin: p.sc.EPP.Plugin, Profile: p.prof.Name, Policy: pol},
		Profile: p.prof, Sink: snk, Est: simenv.EstimatorTarget(p.sc)}
	return &tuner.Tuner{Estimator: est, Clock: clock, Seed: 1, Logger: quiet}
}

// cycleReport checks a day cycle's report and returns its queries and
// replayed decisions.
func cycleReport(b *testing.B, rep *tuner.Report) (tuner.DayQueries, tuner.ReplayView) {
	b.Helper()
	if rep.Recommendation == nil || rep.Recommendation.Evidence.Day == nil {
		b.Fatalf("no day evidence: %s %+v %s", rep.Result, rep.Hold, rep.Error)
	}
	ev := rep.Recommendation.Evidence
	q := ev.Day.Queries
	q.Queries += rep.Estimates.Queries.Queries
	return q, ev.Replay
}

// BenchmarkDayCycle times the day-level cycle (Prometheus model) of a
// 64-pod prompt-shift pool over one simulated day (2 h, six 20-minute
// windows) in the embedded Prometheus: "first" with no state (a fresh
// daemon: every window estimated and drawn), "later" a cycle 5 minutes
// after an earlier one (only the open window queried and drawn; the
// samples stop at the day's end, so the open window holds 5 minutes of
// nothing new). It reports the Prometheus queries per cycle (lookback
// estimate + windows) and the live heap after the cycle. The simulation
// and ingestion run before the timer.
func BenchmarkDayCycle(b *testing.B) {
	dir := b.TempDir()
	p := simulatedPool(b, 64, dir+"/tsdb")
	defer p.emb.Close()
	at := p.end.Add(7 * time.Second)
	pol := config.DefaultPolicy()
	pol.Lookback, pol.History, pol.DayLength, pol.WindowWidth = 20*time.Minute, p.sc.Duration(), p.sc.Duration(), 20*time.Minute
	newTuner := func() *tuner.Tuner { return p.targetOn(b, dir, p.emb, pol, func() time.Time { return at }) }
	ctx := context.Background()
	report := func(b *testing.B, rep *tuner.Report, cpu float64, n int) {
		q, rv := cycleReport(b, rep)
		b.ReportMetric(float64(q.Queries), "queries/cycle")
		b.ReportMetric(float64(q.SpansQueried), "windows-queried/cycle")
		b.ReportMetric(float64(rv.Decisions), "decisions-drawn/cycle")
		b.ReportMetric(cpu/float64(n), "cpu-s/op")
		b.ReportMetric(heapMB(), "heap-MB")
	}
	b.Run("first", func(b *testing.B) {
		var rep *tuner.Report
		cpu, n := cpuSeconds(), 0
		for b.Loop() {
			rep = newTuner().Cycle(ctx, p.target)
			n++
		}
		report(b, rep, cpuSeconds()-cpu, n)
	})
	b.Run("later", func(b *testing.B) {
		tu := newTuner()
		base := at
		tu.Cycle(ctx, p.target)
		var rep *tuner.Report
		cpu, n := cpuSeconds(), 0
		for b.Loop() {
			n++
			at = base.Add(time.Duration(n) * 5 * time.Minute)
			rep = tu.Cycle(ctx, p.target)
		}
		report(b, rep, cpuSeconds()-cpu, n)
		if rv := rep.Recommendation.Evidence.Replay; !rv.Continued {
			b.Fatalf("a later cycle rebuilt its replay: %+v", rv)
		}
	})
}

// BenchmarkDayCycle24h times the day-level cycle (Prometheus model,
// default policy: 24 h history of 1-hour windows, 2 h lookback) of a
// 64-pod pool over 24 h in the embedded Prometheus. The 24 h are the
// simulated 2-hour prompt-shift day (64 pods, 15 s scrapes) tiled twelve
// times — every series read back from the simulated TSDB at its scrape
// step and appended again 2 h, 4 h, … later, counters continued from
// where the tile before ended — plus 35 minutes of a thirteenth tile for
// the later cycles: the samples a real 24 h pool would have, without
// the ~6 GB of text a simulated 24 h would be. The first cycle (a new
// daemon) runs before the loop and is reported as first-s / first-cpu-s /
// first-queries; each timed iteration is a later cycle 5 minutes on.
// heap-MB is the process's live heap after the cycles, the embedded
// TSDB's included; GATETUNER_BENCH_HEAPPROFILE=file samples the cycles'
// allocations finely (every 4 KB) and writes the live heap's profile after
// them, to tell the Tuner's share (what it keeps from cycle to cycle);
// GATETUNER_BENCH_FIRSTCPUPROFILE=file profiles the first cycle's CPU;
// GATETUNER_BENCH_SAMPLING=1 measures the model's endpoint budget's
// sampling error (samplingError).
func BenchmarkDayCycle24h(b *testing.B) {
	dir := b.TempDir()
	p := simulatedPool(b, 64, dir+"/sim")
	day := p.sc.Duration()
	start := fleetsim.DefaultBaseTime()
	emb, err := prom.NewEmbedded(prom.EmbeddedConfig{Logger: quiet}) // a temporary TSDB without a WAL
	if err != nil {
		b.Fatal(err)
	}
	defer emb.Close()
	samples, series := tile(b, p.emb, emb, start, day, p.sc.ScrapeInterval, 24*time.Hour+35*time.Minute)
	if err := p.emb.Close(); err != nil {
		b.Fatal(err)
	}
	b.Logf("tiled %d series, %d samples over 24 h 35 min", series, samples)
	if os.Getenv("GATETUNER_BENCH_HEAPPROFILE") != "" {
		runtime.MemProfileRate = 4096 // the cycles' allocations, finely sampled
	}
	at := start.Add(24*time.Hour + 7*time.Second)
	tu := p.targetOn(b, dir, emb, config.DefaultPolicy(), func() time.Time { return at })
	ctx := context.Background()
	stop := startCPUProfile(b, os.Getenv("GATETUNER_BENCH_FIRSTCPUPROFILE"))
	wall, cpu := time.Now(), cpuSeconds()
	rep := tu.Cycle(ctx, p.target)
	firstWall, firstCPU := time.Since(wall).Seconds(), cpuSeconds()-cpu
	stop()
	fq, fr := cycleReport(b, rep)
	b.Logf("first cycle: %.1f s wall, %.1f s CPU, %d queries (%d windows), %d decisions drawn, heap %.1f MB, throughput %s",
		firstWall, firstCPU, fq.Queries, fq.SpansQueried, fr.Decisions, heapMB(), rep.Recommendation.Evidence.Throughput.Note)
	if os.Getenv("GATETUNER_BENCH_SAMPLING") != "" {
		samplingError(b, p, dir, emb, at, rep)
	}
	start0 := at
	cpu, n := cpuSeconds(), 0
	var lq tuner.DayQueries
	var lr tuner.ReplayView
	for b.Loop() {
		n++
		if n > 6 {
			b.Fatal("more than 6 later cycles: the tiles end 35 minutes after the day (use -benchtime Nx, N ≤ 6)")
		}
		at = start0.Add(time.Duration(n) * 5 * time.Minute)
		rep = tu.Cycle(ctx, p.target)
		lq, lr = cycleReport(b, rep)
		b.Logf("later cycle %d: %d queries, %d decisions drawn, throughput %s", n, lq.Queries, lr.Decisions, rep.Recommendation.Evidence.Throughput.Note)
		if !lr.Continued {
			b.Fatalf("a later cycle rebuilt its replay: %+v", lr)
		}
	}
	b.ReportMetric((cpuSeconds()-cpu)/float64(n), "cpu-s/op")
	b.ReportMetric(float64(lq.Queries), "queries/cycle")
	b.ReportMetric(float64(lr.Decisions), "decisions-drawn/cycle")
	b.ReportMetric(firstWall, "first-s")
	b.ReportMetric(firstCPU, "first-cpu-s")
	b.ReportMetric(float64(fq.Queries), "first-queries")
	b.ReportMetric(heapMB(), "heap-MB")
	if path := os.Getenv("GATETUNER_BENCH_HEAPPROFILE"); path != "" {
		writeHeapProfile(b, path)
	}
	runtime.KeepAlive(tu)
}

// samplingError measures what the model's endpoint budget costs in
// accuracy: the first cycle's day table at the default budget (rep) and at
// the full draws (50 a snapshot, budget off) of the same seed, each against
// the full draws of another seed — the sampling noise the full draws
// already carry. It logs the largest and median relative difference of the
// windows' scores (current settings, and each window's best) and the
// recommendation of each.
func samplingError(b *testing.B, p *dayPool, dir string, q prom.Querier, at time.Time, rep *tuner.Report) {
	ctx := context.Background()
	first := func(name string, seed uint64, budget int) *tuner.Report {
		sub := dir + "/" + name
		if err := os.MkdirAll(sub, 0o755); err != nil {
			b.Fatal(err)
		}
		pol := config.DefaultPolicy()
		pol.ModelEndpointBudget = &budget
		tu := p.targetOn(b, sub, q, pol, func() time.Time { return at })
		tu.Seed = seed
		wall, cpu := time.Now(), cpuSeconds()
		r := tu.Cycle(ctx, p.target)
		fq, fr := cycleReport(b, r)
		b.Logf("%s: first cycle %.1f s wall, %.1f s CPU, %d queries, %d decisions drawn", name, time.Since(wall).Seconds(), cpuSeconds()-cpu, fq.Queries, fr.Decisions)
		return r
	}
	full := first("full-seed-1", 1, math.MaxInt)
	other := first("full-seed-2", 2, math.MaxInt)
	score := func(v *float64) string {
		if v == nil {
			return "none"
		}
		return fmt.Sprintf("%.3f", *v)
	}
	describe := func(r *tuner.Report) string {
		rc := r.Recommendation
		return fmt.Sprintf("%s %.0f ms (day score %s vs current %s)", rc.Mode, rc.MaxTTFTPenaltyMs, score(rc.Evidence.Day.RecommendedScore), score(rc.Evidence.Day.CurrentScore))
	}
	budget := fmt.Sprintf("budget %d vs full, seed 1", *config.DefaultPolicy().ModelEndpointBudget)
	for _, c := range []struct {
		name string
		a, b *tuner.Report
	}{{budget, rep, full}, {"full seed 1 vs full seed 2", full, other}} {
		var cur, best, gain []float64
		wa, wb := c.a.Recommendation.Evidence.Day.Windows, c.b.Recommendation.Evidence.Day.Windows
		for i := range min(len(wa), len(wb)) {
			if x, y := wa[i].Current, wb[i].Current; x != nil && y != nil && *y > 0 {
				cur = append(cur, math.Abs(*x / *y - 1))
			}
			if x, y := wa[i].BestScore, wb[i].BestScore; x != nil && y != nil && *y > 0 {
				best = append(best, math.Abs(*x / *y - 1))
			}
			// What the 10 % rule reads: a window's score against the
			// current settings' in the same draws.
			if x, y, u, v := wa[i].Recommended, wa[i].Current, wb[i].Recommended, wb[i].Current; x != nil && y != nil && u != nil && v != nil && *y > 0 && *v > 0 {
				gain = append(gain, math.Abs(*x / *y - *u / *v))
			}
		}
		b.Logf("%s: window score difference, current settings max %.1f %% median %.1f %%, window's best max %.1f %% median %.1f %%, recommended/current max %.1f median %.1f points (%d windows); recommendations %s | %s",
			c.name, 100*maxOf(cur), 100*median(cur), 100*maxOf(best), 100*median(best), 100*maxOf(gain), 100*median(gain), len(cur), describe(c.a), describe(c.b))
	}
}

// maxOf is v's largest value (0 when empty).
func maxOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return slices.Max(v)
}

// median is v's upper median (0 when empty).
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return slices.Sorted(slices.Values(v))[len(v)/2]
}

// startCPUProfile profiles the CPU into path until the returned func is
// called; an empty path profiles nothing.
func startCPUProfile(b *testing.B, path string) func() {
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// writeHeapProfile writes the live heap's profile to path.
func writeHeapProfile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
}

// tile reads every series of src over [start, start+day) at step and
// appends it to dst repeatedly, each copy day later, up to start+until:
// gauges repeat, counters (_total, _count, _sum, _bucket) continue from the
// previous copy's last value. It returns the samples and series appended.
func tile(b *testing.B, src, dst *prom.Embedded, start time.Time, day, step, until time.Duration) (int, int) {
	ctx := context.Background()
	names := map[string]bool{}
	for t := start.Add(step); t.Before(start.Add(day)); t = t.Add(10 * time.Minute) {
		v, _, err := src.Query(ctx, `count by (__name__) ({__name__=~".+"})`, t)
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range v {
			names[string(s.Metric[model.MetricNameLabel])] = true
		}
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	samples, series := 0, 0
	for _, name := range sorted {
		m, _, err := src.QueryRange(ctx, fmt.Sprintf(`{__name__=%q}`, name), v1.Range{Start: start, End: start.Add(day - time.Millisecond), Step: step})
		if err != nil {
			b.Fatal(err)
		}
		counter := strings.HasSuffix(name, "_total") || strings.HasSuffix(name, "_count") || strings.HasSuffix(name, "_sum") || strings.HasSuffix(name, "_bucket")
		type tiled struct {
			ls   labels.Labels
			s    *model.SampleStream
			last float64
		}
		var all []tiled
		for _, s := range m {
			if len(s.Values) == 0 {
				continue
			}
			series++
			lb := labels.NewBuilder(labels.EmptyLabels())
			for k, v := range s.Metric {
				lb.Set(string(k), string(v))
			}
			all = append(all, tiled{lb.Labels(), s, float64(s.Values[len(s.Values)-1].Value)})
		}
		// One transaction per copy: the head buffers a transaction's samples.
		for c := 0; time.Duration(c)*day < until; c++ {
			app := dst.Appender(ctx)
			for _, x := range all {
				ls, s, last := x.ls, x.s, x.last
				for _, v := range s.Values {
					t := v.Timestamp.Time().Add(time.Duration(c) * day)
					if !t.Before(start.Add(until)) {
						break
					}
					val := float64(v.Value)
					if counter {
						val += float64(c) * last
					}
					if err := app.AddLabels(ls, t, val); err != nil {
						b.Fatal(err)
					}
					samples++
				}
			}
			if err := app.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	}
	return samples, series
}
