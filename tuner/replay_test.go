package tuner

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/exporter"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/sink"
)

// replayStart is where the retimed reference records begin (06:00 UTC).
var replayStart = time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)

// retimedRecords are the reference gate records (a minute of simulated
// traffic on 16 endpoints) re-stamped 2.8 s apart from replayStart, so
// they cover three hour-windows: one JSON line each, with its time.
func retimedRecords(t testing.TB) ([]string, []time.Time) {
	t.Helper()
	f, err := os.Open("shadow/testdata/bench/records-16ep.jsonl.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	var ts []time.Time
	for i, l := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var rec map[string]any
		if err := json.Unmarshal(l, &rec); err != nil {
			t.Fatal(err)
		}
		at := replayStart.Add(time.Duration(i) * 2800 * time.Millisecond)
		rec["ts"] = at.Format(time.RFC3339Nano)
		b, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		lines, ts = append(lines, string(b)+"\n"), append(ts, at)
	}
	return lines, ts
}

// recordsWriter appends the retimed records to a file as time passes.
type recordsWriter struct {
	t     testing.TB
	path  string
	lines []string
	ts    []time.Time
	next  int
}

func newRecordsWriter(t testing.TB) *recordsWriter {
	lines, ts := retimedRecords(t)
	return &recordsWriter{t: t, path: filepath.Join(t.TempDir(), "records.jsonl"), lines: lines, ts: ts}
}

// until appends the records stamped before now; it returns how many.
func (w *recordsWriter) until(now time.Time) int {
	w.t.Helper()
	f, err := os.OpenFile(w.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		w.t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for ; w.next < len(w.lines) && w.ts[w.next].Before(now); w.next++ {
		if _, err := f.WriteString(w.lines[w.next]); err != nil {
			w.t.Fatal(err)
		}
		n++
	}
	return n
}

// replayEstimator serves the lookback estimates with a settable drain rate
// (and interval).
type replayEstimator struct {
	drain float64
	iv    *estimator.Interval
}

func (e *replayEstimator) Estimate(_ context.Context, _ estimator.Target, now time.Time) (*estimator.Estimates, error) {
	est := cycleEstimates(now)
	d := e.drain
	est.DrainRate.Value, est.DrainRate.Interval = &d, e.iv
	return est, nil
}

// evidenceOf is a report's evidence as JSON, without what says how the
// cycle got it (the replay view, the windows' estimates queried or cached).
func evidenceOf(t *testing.T, rep *Report) string {
	t.Helper()
	if rep.Recommendation == nil {
		t.Fatalf("no recommendation: %s %+v %s", rep.Result, rep.Hold, rep.Error)
	}
	ev := rep.Recommendation.Evidence
	ev.Replay = ReplayView{}
	if ev.Day != nil {
		day := *ev.Day
		day.Queries = DayQueries{}
		ev.Day = &day
	}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestIncrementalRecordsReplayEqualsAFullReplay: a daemon cycling while
// the records file grows replays only the new records each cycle, and its
// evidence — every candidate's per-window scores, feedback outcomes and
// tallies — is number for number a fresh daemon's that replays the whole
// file at the last cycle.
func TestIncrementalRecordsReplayEqualsAFullReplay(t *testing.T) {
	w := newRecordsWriter(t)
	src := &RecordsFile{Path: w.path}
	tg, _ := cycleTarget(t, config.ModeOff, &replayEstimator{drain: 8000}, src)
	clock := replayStart
	tu := &Tuner{Clock: func() time.Time { return clock }, Logger: quietLogger()}
	var rep *Report
	for i, at := range []time.Duration{70 * time.Minute, 95 * time.Minute, 125 * time.Minute, 185 * time.Minute} {
		clock = replayStart.Add(at)
		n := w.until(clock)
		rep = tu.Cycle(context.Background(), tg)
		rv := rep.Recommendation.Evidence.Replay
		t.Logf("cycle %d at %s: %d new records, window %d decisions, replay %+v", i, clock.Format("15:04"), n, rep.Recommendation.Evidence.Window.Decisions, rv)
		if rv.Decisions != int64(n) || (i > 0) != rv.Continued {
			t.Fatalf("cycle %d replayed %d decisions (continued %v, rebuilt %q); %d were new", i, rv.Decisions, rv.Continued, rv.Rebuilt, n)
		}
	}
	fresh := (&Tuner{Clock: func() time.Time { return clock }, Logger: quietLogger()}).Cycle(context.Background(), tg)
	if fv := fresh.Recommendation.Evidence.Replay; fv.Decisions != int64(len(w.lines)) || fv.Continued {
		t.Fatalf("the fresh daemon replayed %+v, want all %d records", fv, len(w.lines))
	}
	sameEvidence(t, evidenceOf(t, rep), evidenceOf(t, fresh))
	if rep.Recommendation.Evidence.Window.Decisions != int64(len(w.lines)) {
		t.Fatalf("evidence without the whole file: %d decisions", rep.Recommendation.Evidence.Window.Decisions)
	}
}

// TestReplayStreamIsRebuiltWhenItsInputsChange: the cache key. A cycle
// continues the stream only for the inputs it was computed from; each
// change rebuilds it from the source and names why.
func TestReplayStreamIsRebuiltWhenItsInputsChange(t *testing.T) {
	for _, tc := range []struct {
		name string
		// change happens between the two cycles.
		change    func(t *testing.T, tg *Target, est *replayEstimator, path string, w *recordsWriter)
		continued bool
		rebuilt   string
		held      bool
	}{
		{name: "nothing changed", continued: true},
		{name: "the drain rate moves within 5 %: held", continued: true, held: true,
			change: func(_ *testing.T, _ *Target, est *replayEstimator, _ string, _ *recordsWriter) { est.drain = 8300 }},
		{name: "the drain rate moves more", rebuilt: "the prefill rates moved",
			change: func(_ *testing.T, _ *Target, est *replayEstimator, _ string, _ *recordsWriter) { est.drain = 9000 }},
		{name: "the drain rate moves more, but its interval holds the stream's: held", continued: true, held: true,
			change: func(_ *testing.T, _ *Target, est *replayEstimator, _ string, _ *recordsWriter) {
				est.drain, est.iv = 9000, &estimator.Interval{Low: 7900, High: 10100}
			}},
		{name: "the drain rate moves more, out of its interval", rebuilt: "the prefill rates moved",
			change: func(_ *testing.T, _ *Target, est *replayEstimator, _ string, _ *recordsWriter) {
				est.drain, est.iv = 9000, &estimator.Interval{Low: 8500, High: 9500}
			}},
		{name: "the settings in force change (a person's edit): other candidates", rebuilt: "the candidates changed",
			change: func(t *testing.T, _ *Target, _ *replayEstimator, path string, _ *recordsWriter) {
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, bytes.Replace(b, []byte("maxTTFTPenaltyMs: 30000"), []byte("maxTTFTPenaltyMs: 20000"), 1), 0o644); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "the day's windows change", rebuilt: "the day's windows changed",
			change: func(_ *testing.T, tg *Target, _ *replayEstimator, _ string, _ *recordsWriter) {
				tg.Config.Policy.WindowWidth = 30 * time.Minute
			}},
		{name: "a change took effect", rebuilt: "a change took effect",
			change: func(t *testing.T, _ *Target, _ *replayEstimator, path string, _ *recordsWriter) {
				at := replayStart.Add(80 * time.Minute)
				b, _ := json.Marshal(map[string]any{"version": 1, "effectiveAt": at, "history": []any{}})
				if err := os.WriteFile(sink.SidecarPath(path), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "the records file is replaced", rebuilt: "replaced or truncated",
			change: func(t *testing.T, _ *Target, _ *replayEstimator, _ string, w *recordsWriter) {
				if err := os.Rename(w.path, w.path+".1"); err != nil {
					t.Fatal(err)
				}
				w.next = 0
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newRecordsWriter(t)
			est := &replayEstimator{drain: 8000}
			tg, path := cycleTarget(t, config.ModeOff, est, &RecordsFile{Path: w.path})
			clock := replayStart.Add(70 * time.Minute)
			tu := &Tuner{Clock: func() time.Time { return clock }, Logger: quietLogger()}
			w.until(clock)
			tu.Cycle(context.Background(), tg)
			if tc.change != nil {
				tc.change(t, tg, est, path, w)
			}
			clock = replayStart.Add(100 * time.Minute)
			n := w.until(clock)
			rep := tu.Cycle(context.Background(), tg)
			if rep.Recommendation == nil {
				t.Fatalf("no recommendation: %s %+v", rep.Result, rep.Hold)
			}
			rv := rep.Recommendation.Evidence.Replay
			if rv.Continued != tc.continued || !strings.Contains(rv.Rebuilt, tc.rebuilt) || rv.RatesHeld != tc.held {
				t.Fatalf("replay %+v, want continued %v rebuilt %q held %v", rv, tc.continued, tc.rebuilt, tc.held)
			}
			if tc.continued && rv.Decisions != int64(n) {
				t.Errorf("continued stream replayed %d decisions, %d were new", rv.Decisions, n)
			}
			if !tc.continued && rv.Decisions != rep.Recommendation.Evidence.Window.Decisions {
				t.Errorf("rebuilt stream replayed %d decisions, the history holds %d", rv.Decisions, rep.Recommendation.Evidence.Window.Decisions)
			}
			if tp := rep.Recommendation.Evidence.Throughput; tc.held && (tp.Value != 8000 || !strings.Contains(tp.Note, "held")) {
				t.Errorf("held rate: throughput %+v, want 8000 held", tp)
			}
		})
	}
}

// TestReplayStreamDropsSpansLeavingTheHistory: memory is bounded by the
// history — a span is dropped once the history's start passes it.
func TestReplayStreamDropsSpansLeavingTheHistory(t *testing.T) {
	w := newRecordsWriter(t)
	tg, _ := cycleTarget(t, config.ModeOff, &replayEstimator{drain: 8000}, &RecordsFile{Path: w.path})
	tg.Config.Policy.History = 2 * time.Hour
	clock := replayStart.Add(170 * time.Minute)
	tu := &Tuner{Clock: func() time.Time { return clock }, Logger: quietLogger()}
	w.until(clock)
	tu.Cycle(context.Background(), tg)
	if n := len(tu.memory.m["t"].carry.Spans()); n != 3 {
		t.Fatalf("%d spans held, want 06:00, 07:00, 08:00", n)
	}
	clock = replayStart.Add(190 * time.Minute) // the history now starts at 07:00
	rep := tu.Cycle(context.Background(), tg)
	spans := tu.memory.m["t"].carry.Spans()
	if n := len(spans); n != 2 || !rep.Recommendation.Evidence.Replay.Continued {
		t.Fatalf("%d spans held after the history moved (continued %+v), want 2", n, rep.Recommendation.Evidence.Replay)
	}
	if slices.ContainsFunc(spans, replayStart.Equal) {
		t.Errorf("the 06:00 span is still held")
	}
	if got := rep.Recommendation.Evidence.Window.Decisions; got != int64(countFrom(w.ts, replayStart.Add(time.Hour))) {
		t.Errorf("the evidence holds %d decisions, want those from 07:00", got)
	}
}

func countFrom(ts []time.Time, from time.Time) int {
	n := 0
	for _, t := range ts {
		if !t.Before(from) {
			n++
		}
	}
	return n
}

// modelSpans is a span estimator whose estimates are a function of the
// span alone: snapshots every 15 s over three endpoints whose loads follow
// the time, a request rate and prompt/cached distributions that follow
// the hour.
type modelSpans struct{ queried int }

func (m *modelSpans) Estimate(_ context.Context, _ estimator.Target, now time.Time) (*estimator.Estimates, error) {
	e := m.span(now.Add(-time.Hour), now)
	e.Queries.Queries = 10
	lb := cycleEstimates(now)
	e.DrainRate, e.Nominal = lb.DrainRate, lb.Nominal
	return e, nil
}

func (m *modelSpans) EstimateSpan(_ context.Context, _ estimator.Target, from, to time.Time) (*estimator.Estimates, error) {
	m.queried++
	e := m.span(from, to)
	e.Queries.Queries = 7
	return e, nil
}

func (m *modelSpans) span(from, to time.Time) *estimator.Estimates {
	f := func(v float64) *float64 { return &v }
	h := float64(from.Hour())
	e := &estimator.Estimates{At: to, Status: estimator.StatusOK,
		RequestRate: estimator.Scalar{Status: estimator.StatusOK, Value: f(4 + h)},
		Prompt: estimator.Distribution{Status: estimator.StatusOK, Mean: f(9000 + 500*h),
			Buckets: []estimator.Bucket{{Lower: 0, Upper: 4000, Count: 3}, {Lower: 4000, Upper: 16000, Count: 5}, {Lower: 16000, Upper: 64000, Count: 1 + h/4}}},
		Cached: estimator.Distribution{Status: estimator.StatusOK, Mean: f(8000),
			Buckets: []estimator.Bucket{{Lower: 0, Upper: 3600, Count: 3}, {Lower: 3600, Upper: 14400, Count: 5}, {Lower: 14400, Upper: 57600, Count: 1 + h/4}}},
		Routing: estimator.Routing{Endpoints: []estimator.EndpointShare{{Endpoint: "a", Share: 0.5}, {Endpoint: "b", Share: 0.3}, {Endpoint: "c", Share: 0.2}}},
	}
	e.InFlight = estimator.InFlight{Status: estimator.StatusOK, StepSeconds: 15}
	for s := from.Truncate(15 * time.Second); s.Before(to); s = s.Add(15 * time.Second) {
		if s.Before(from) || s.Before(replayStart) { // the pool starts at 06:00
			continue
		}
		x := float64(s.Unix() % 7919)
		snap := estimator.Snapshot{Time: s}
		for i, name := range []string{"a", "b", "c"} {
			snap.Endpoints = append(snap.Endpoints, estimator.EndpointLoad{Endpoint: name, Tokens: math.Mod(x*float64(37+i*11), 60000)})
		}
		e.InFlight.Snapshots = append(e.InFlight.Snapshots, snap)
	}
	return e
}

// TestIncrementalModelReplayEqualsAFullReplay: with the Prometheus model a
// later cycle draws only the windows not yet complete, and its evidence is
// number for number a fresh daemon's that draws every window again.
func TestIncrementalModelReplayEqualsAFullReplay(t *testing.T) {
	est := &modelSpans{}
	tg, _ := cycleTarget(t, config.ModeOff, est, nil)
	clock := replayStart
	metrics := exporter.New("test", "test")
	tu := &Tuner{Clock: func() time.Time { return clock }, Logger: quietLogger(), Seed: 5, Metrics: metrics}
	var rep *Report
	for i, at := range []time.Duration{70 * time.Minute, 95 * time.Minute, 125 * time.Minute, 185 * time.Minute} {
		clock = replayStart.Add(at)
		rep = tu.Cycle(context.Background(), tg)
		if rep.Recommendation == nil {
			t.Fatalf("cycle %d: %s %+v %s", i, rep.Result, rep.Hold, rep.Error)
		}
		rv := rep.Recommendation.Evidence.Replay
		// The cycle's cost is exported: the lookback's 10 queries and 7 per
		// window not cached; the decisions it drew.
		q := rep.Recommendation.Evidence.Day.Queries
		if got := testutil.ToFloat64(metrics.CycleQueries.WithLabelValues("t")); got != float64(10+7*q.SpansQueried) || (i > 0 && q.SpansQueried > 2) {
			t.Errorf("cycle %d: gatetuner_cycle_prometheus_queries %v with %d windows queried", i, got, q.SpansQueried)
		}
		if got := testutil.ToFloat64(metrics.CycleReplayed.WithLabelValues("t")); got != float64(rv.Decisions) {
			t.Errorf("cycle %d: gatetuner_cycle_replayed_decisions %v, replayed %d", i, got, rv.Decisions)
		}
		if (i > 0) != rv.Continued {
			t.Fatalf("cycle %d: %+v", i, rv)
		}
		// Only the open window is drawn again, and a window that completed
		// since the last cycle once more, from its final estimates (15-s
		// snapshots, at most 50 draws each).
		if open := clock.Sub(clock.Truncate(time.Hour)) + time.Hour; i > 0 && rv.Decisions > int64(open/(15*time.Second))*50 {
			t.Errorf("cycle %d drew %d decisions, more than the open window's", i, rv.Decisions)
		}
	}
	fresh := (&Tuner{Clock: func() time.Time { return clock }, Logger: quietLogger(), Seed: 5}).Cycle(context.Background(), tg)
	if fresh.Recommendation.Evidence.Replay.Continued {
		t.Fatal("a fresh daemon continued a stream")
	}
	sameEvidence(t, evidenceOf(t, rep), evidenceOf(t, fresh))
	if d := rep.Recommendation.Evidence.Window.Decisions; d == 0 {
		t.Fatal("no decisions drawn")
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// sameEvidence fails at the first difference between two evidence texts.
func sameEvidence(t *testing.T, got, want string) {
	t.Helper()
	if got == want {
		return
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	lo := max(i-300, 0)
	t.Fatalf("incremental evidence differs from a full replay's at byte %d:\n…%s\n…%s", i, got[lo:min(i+200, len(got))], want[lo:min(i+200, len(want))])
}

// TestConcurrentCyclesOfOneTargetDoNotShareAStream: a manual cycle during a
// scheduled one takes no stream the other is replaying into (run with -race).
func TestConcurrentCyclesOfOneTargetDoNotShareAStream(t *testing.T) {
	w := newRecordsWriter(t)
	tg, _ := cycleTarget(t, config.ModeOff, &replayEstimator{drain: 8000}, &RecordsFile{Path: w.path})
	clock := replayStart.Add(70 * time.Minute)
	w.until(clock)
	tu := &Tuner{Clock: func() time.Time { return clock }, Logger: quietLogger()}
	tu.Cycle(context.Background(), tg)
	want := evidenceOf(t, tu.Cycle(context.Background(), tg))
	done := make(chan string, 2)
	for range 2 {
		go func() { done <- evidenceOf(t, tu.Cycle(context.Background(), tg)) }()
	}
	for range 2 {
		if got := <-done; got != want {
			sameEvidence(t, got, want)
		}
	}
}

// TestHistoryStartPassingASpanKeepsTheCarriedState: once the history's
// start passes a span, the span's tallies leave the evidence but its effect
// on the candidates' carried load stays: the window tallies (decisions,
// verdicts, excess) are a fresh daemon's exactly, the feedback outcomes
// may differ by what the carried state brings into the oldest window — the
// test logs by how much (docs/tuner.md, "Cost").
func TestHistoryStartPassingASpanKeepsTheCarriedState(t *testing.T) {
	w := newRecordsWriter(t)
	tg, _ := cycleTarget(t, config.ModeOff, &replayEstimator{drain: 8000}, &RecordsFile{Path: w.path})
	tg.Config.Policy.History = 2 * time.Hour
	clock := replayStart.Add(70 * time.Minute)
	tu := &Tuner{Clock: func() time.Time { return clock }, Logger: quietLogger()}
	w.until(clock)
	tu.Cycle(context.Background(), tg)
	clock = replayStart.Add(185 * time.Minute) // the history now starts at 07:00: 06:00 left
	w.until(clock)
	inc := tu.Cycle(context.Background(), tg).Recommendation.Evidence
	full := (&Tuner{Clock: func() time.Time { return clock }, Logger: quietLogger()}).Cycle(context.Background(), tg).Recommendation.Evidence
	if !inc.Replay.Continued || inc.Window != full.Window {
		t.Fatalf("incremental %+v window %+v, fresh window %+v", inc.Replay, inc.Window, full.Window)
	}
	worst, worstLabel := 0.0, ""
	var diffs []float64
	for i, c := range inc.Objective.Candidates {
		f := full.Objective.Candidates[i]
		if c.ExcessTokens != f.ExcessTokens || c.Label != f.Label {
			t.Fatalf("candidate %s: excess %v, a fresh daemon's %v: the tallies must not depend on the carried state", c.Label, c.ExcessTokens, f.ExcessTokens)
		}
		if f.FeedbackP90 > 0 {
			d := math.Abs(c.FeedbackP90/f.FeedbackP90 - 1)
			diffs = append(diffs, d)
			if d > worst {
				worst, worstLabel = d, c.Label
			}
		}
	}
	slices.Sort(diffs)
	same := 0
	for _, d := range diffs {
		if d == 0 {
			same++
		}
	}
	t.Logf("candidates: %d, feedback p90 identical for %d, median difference %.2f %%", len(diffs), same, 100*diffs[len(diffs)/2])
	for k, win := range inc.Day.Windows {
		if fw := full.Day.Windows[k]; win.Decisions != fw.Decisions || win.Requests != fw.Requests {
			t.Fatalf("window %s: %d decisions, a fresh daemon's %d", win.Label, win.Decisions, fw.Decisions)
		}
	}
	t.Logf("feedback TTFT p90 over the history: largest difference from a fresh daemon %.2f %% (%s); recommended %s vs %s",
		100*worst, worstLabel, inc.Objective.Recommended.Settings, full.Objective.Recommended.Settings)
}
