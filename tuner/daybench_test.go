package tuner_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/estimator/prom"
	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim"
	"github.com/gatetuner/gatetuner/test/simenv"
	"github.com/gatetuner/gatetuner/tuner"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/sink"
)

// BenchmarkDayCycle times the day-level cycle (Prometheus model) of a
// 64-pod prompt-shift pool over one simulated day (2 h, six 20-minute
// windows) in the embedded Prometheus: "first" with an empty window cache
// (a fresh daemon: every window estimated), "later" with the completed
// windows cached (only the open window queried). It reports the Prometheus
// queries per cycle and the live heap after the cycle. The simulation and
// backfill run before the timer.
func BenchmarkDayCycle(b *testing.B) {
	sc, err := fleetsim.LoadScenario("prompt-shift")
	if err != nil {
		b.Fatal(err)
	}
	scale := float64(64) / float64(sc.Pods.Count)
	sc.Pods.Count = 64
	for i := range sc.Phases {
		sc.Phases[i].RequestRate *= scale
	}
	ctx := context.Background()
	dir := b.TempDir()
	emb, err := prom.NewEmbedded(prom.EmbeddedConfig{Dir: dir + "/tsdb", Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer emb.Close()
	prof, err := gate.LookupProfile(gate.ProfileRouter202608)
	if err != nil {
		b.Fatal(err)
	}
	params := gate.DefaultParams()
	cur := params.Settings(prof.MissingSignal)
	_, end, err := simenv.Fill(ctx, emb, sc, fleetsim.Options{Seed: 1, SettingsFor: func(int) gate.Settings { return cur }})
	if err != nil {
		b.Fatal(err)
	}
	at := end.Add(7 * time.Second)
	path, err := simenv.WriteEPPConfig(dir, sc, cur, false)
	if err != nil {
		b.Fatal(err)
	}
	snk, err := sink.New(sink.Target{Name: sc.Target, File: path, Plugins: []string{sc.EPP.Plugin}, Profile: prof}, sink.Options{ReadOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	pol := config.DefaultPolicy()
	pol.Lookback, pol.History, pol.DayLength, pol.WindowWidth = 20*time.Minute, sc.Duration(), sc.Duration(), 20*time.Minute
	bs := sc.EPP.PrefixIndex.BlockSizeTokens
	pol.BlockSizeTokens = &bs
	est, err := estimator.New(emb, func() time.Time { return at }, estimator.Config{Lookback: pol.Lookback})
	if err != nil {
		b.Fatal(err)
	}
	target := &tuner.Target{Config: config.Target{Name: sc.Target, File: path, Plugin: sc.EPP.Plugin, Profile: prof.Name, Policy: pol},
		Profile: prof, Sink: snk, Est: simenv.EstimatorTarget(sc)}
	newTuner := func() *tuner.Tuner {
		return &tuner.Tuner{Estimator: est, Clock: func() time.Time { return at }, Seed: 1, Logger: quiet}
	}
	report := func(b *testing.B, rep *tuner.Report) {
		b.Helper()
		if rep.Recommendation == nil || rep.Recommendation.Evidence.Day == nil {
			b.Fatalf("no day evidence: %s %+v", rep.Result, rep.Hold)
		}
		q := rep.Recommendation.Evidence.Day.Queries
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b.ReportMetric(float64(q.Queries), "queries/cycle")
		b.ReportMetric(float64(q.SpansQueried), "windows-queried/cycle")
		b.ReportMetric(float64(ms.HeapAlloc)/1e6, "heap-MB")
	}
	b.Run("first", func(b *testing.B) {
		var rep *tuner.Report
		for range b.N {
			rep = newTuner().Cycle(ctx, target)
		}
		report(b, rep)
	})
	b.Run("later", func(b *testing.B) {
		tu := newTuner()
		tu.Cycle(ctx, target)
		b.ResetTimer()
		var rep *tuner.Report
		for range b.N {
			rep = tu.Cycle(ctx, target)
		}
		report(b, rep)
	})
}
