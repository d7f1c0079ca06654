package tuner_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenarios"
	"github.com/gatetuner/gatetuner/test/simenv"
	"github.com/gatetuner/gatetuner/tuner"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/records"
	"github.com/gatetuner/gatetuner/tuner/sink"
)

// cycledRecords is a gate-records source that streams a day of decisions
// without storing it: decision i is the reference records' decision
// i mod n (a minute of simulated prompt-shift traffic on 16 endpoints),
// stamped start + i × every. It resumes by decision index.
type cycledRecords struct {
	recs  []tuner.Decision
	start time.Time
	every time.Duration
}

func (c *cycledRecords) Kind() string { return tuner.SourceKindRecords }

func (c *cycledRecords) Replay(ctx context.Context, from, to time.Time, fn func(*tuner.Decision) error) error {
	_, err := c.ReplayAfter(ctx, tuner.Mark{}, from, to, fn)
	return err
}

func (c *cycledRecords) ReplayAfter(ctx context.Context, mark tuner.Mark, from, to time.Time, fn func(*tuner.Decision) error) (tuner.Mark, error) {
	i := mark.Pos
	if first := int64((from.Sub(c.start) + c.every - 1) / c.every); i < first {
		i = first
	}
	var d tuner.Decision
	for ; ; i++ {
		ts := c.start.Add(time.Duration(i) * c.every)
		if !ts.Before(to) {
			return tuner.Mark{Pos: i, Resumable: true}, nil
		}
		if i%65536 == 0 && ctx.Err() != nil {
			return mark, ctx.Err()
		}
		d = c.recs[i%int64(len(c.recs))]
		d.TS = ts
		if err := fn(&d); err != nil {
			return mark, err
		}
	}
}

// loadReferenceDecisions reads the reference gate records into decisions.
func loadReferenceDecisions(b *testing.B) []tuner.Decision {
	f, err := os.Open("shadow/testdata/bench/records-16ep.jsonl.gz")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		b.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		b.Fatal(err)
	}
	rd := records.NewReader(bytes.NewReader(data), records.Options{})
	var out []tuner.Decision
	for {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			b.Fatal(err)
		}
		d := tuner.Decision{Endpoints: append([]gate.Endpoint(nil), rec.Endpoints...), PromptTokens: rec.PromptTokens,
			Observed: append([]byte(nil), rec.Observed.Outcome...)}
		if rec.Observed.Chosen != nil {
			d.Chosen = append([]byte(nil), rec.Observed.Chosen...)
		}
		for _, n := range rec.Names {
			d.Names = append(d.Names, append([]byte(nil), n...))
		}
		out = append(out, d)
	}
}

// fixedEstimates serves one conclusive lookback estimate (no per-window
// estimates: the records need none).
type fixedEstimates struct{ est *estimator.Estimates }

func (f fixedEstimates) Estimate(context.Context, estimator.Target, time.Time) (*estimator.Estimates, error) {
	return f.est, nil
}

// cpuSeconds is the process's user + system CPU time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// heapMB is the live heap after a collection.
func heapMB() float64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapAlloc) / 1e6
}

// BenchmarkDayCycleRecords times the day-level cycle with gate records at
// 200 req/s over a day (17.28M decisions; GATETUNER_BENCH_HOURS shortens
// the day) against the router-2026-08 candidates of prompt-shift (83): the
// first cycle (a new daemon replays the whole day) runs before the loop
// and is reported as first-s / first-cpu-s; each timed iteration is a
// later cycle 5 minutes on, which replays only the 60k new decisions. The
// records are streamed from a generator, not stored. heap-MB is the live
// heap after the cycles, tuner-heap-MB what the Tuner holds from cycle to
// cycle (the heap freed when it is dropped).
func BenchmarkDayCycleRecords(b *testing.B) {
	hours := 24.0
	if v := os.Getenv("GATETUNER_BENCH_HOURS"); v != "" {
		h, err := strconv.ParseFloat(v, 64)
		if err != nil || h <= 0 {
			b.Fatalf("GATETUNER_BENCH_HOURS=%q: want a positive number", v)
		}
		hours = h
	}
	sc, err := scenarios.Load("prompt-shift")
	if err != nil {
		b.Fatal(err)
	}
	prof, err := gate.LookupProfile(gate.ProfileRouter202608)
	if err != nil {
		b.Fatal(err)
	}
	params := gate.DefaultParams()
	cur := params.Settings(prof.MissingSignal)
	dir := b.TempDir()
	path, err := simenv.WriteEPPConfig(dir, sc, cur, false)
	if err != nil {
		b.Fatal(err)
	}
	snk, err := sink.New(sink.Target{Name: sc.Target, File: path, Plugins: []string{sc.EPP.Plugin}, Profile: prof}, sink.Options{ReadOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	src := &cycledRecords{recs: loadReferenceDecisions(b), start: start, every: 5 * time.Millisecond}
	f := func(v float64) *float64 { return &v }
	est := &estimator.Estimates{Status: estimator.StatusOK,
		DrainRate:   estimator.RateEstimate{Status: estimator.StatusOK, Value: f(15928), Confidence: 0.9, Method: "saturated-windows"},
		RequestRate: estimator.Scalar{Status: estimator.StatusOK, Value: f(200)},
		Prompt:      estimator.Distribution{Status: estimator.StatusOK, Mean: f(30000)},
		Cached:      estimator.Distribution{Status: estimator.StatusOK, Mean: f(20000)}}
	pol := config.DefaultPolicy()
	bs := sc.EPP.PrefixIndex.BlockSizeTokens
	pol.BlockSizeTokens = &bs
	target := &tuner.Target{Config: config.Target{Name: sc.Target, File: path, Plugin: sc.EPP.Plugin, Profile: prof.Name, Policy: pol},
		Profile: prof, Sink: snk, Est: simenv.EstimatorTarget(sc), Records: src, Estimator: fixedEstimates{est}}
	at := start.Add(time.Duration(hours * float64(time.Hour)))
	tu := &tuner.Tuner{Clock: func() time.Time { return at }, Seed: 1, Logger: quiet}
	ctx := context.Background()
	wall, cpu := time.Now(), cpuSeconds()
	rep := tu.Cycle(ctx, target)
	firstWall, firstCPU := time.Since(wall).Seconds(), cpuSeconds()-cpu
	if rep.Recommendation == nil {
		b.Fatalf("first cycle: %s %+v %s", rep.Result, rep.Hold, rep.Error)
	}
	first := rep.Recommendation.Evidence.Replay
	b.Logf("first cycle: %.1f s wall, %.1f s CPU, %d decisions × %d candidates, heap %.1f MB", firstWall, firstCPU, first.Decisions,
		rep.Recommendation.Evidence.Candidates, heapMB())
	cpu = cpuSeconds()
	var later tuner.ReplayView
	n := 0
	for b.Loop() {
		n++
		at = at.Add(5 * time.Minute)
		rep = tu.Cycle(ctx, target)
		later = rep.Recommendation.Evidence.Replay
		if !later.Continued {
			b.Fatalf("a later cycle rebuilt its replay: %+v", later)
		}
	}
	b.ReportMetric((cpuSeconds()-cpu)/float64(n), "cpu-s/op")
	b.ReportMetric(firstWall, "first-s")
	b.ReportMetric(firstCPU, "first-cpu-s")
	b.ReportMetric(float64(first.Decisions), "first-decisions")
	b.ReportMetric(float64(later.Decisions), "decisions/op")
	b.ReportMetric(float64(rep.Recommendation.Evidence.Candidates), "candidates")
	b.ReportMetric(heapMB(), "heap-MB")
	held := heapMB()
	tu, target = nil, nil
	b.ReportMetric(held-heapMB(), "tuner-heap-MB")
}
