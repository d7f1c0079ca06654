package tuner

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/decide"
)

func TestWindowIndexOfTheDailyCycle(t *testing.T) {
	day := decide.Clock{Length: 24 * time.Hour, Width: time.Hour}
	sim := decide.Clock{Length: 2 * time.Hour, Width: 20 * time.Minute}
	base := fleetsim.DefaultBaseTime()
	at := func(h, m int) time.Time { return time.Date(2026, 12, 1, h, m, 0, 0, time.UTC) }
	for _, tc := range []struct {
		name  string
		clock decide.Clock
		t     time.Time
		want  int
	}{
		{"09:30 is in the 09:00 window", day, at(9, 30), 9},
		{"the last second of the day is in the last window", day, at(23, 59).Add(59 * time.Second), 23},
		{"midnight starts window 0 again", day, at(0, 0).Add(24 * time.Hour), 0},
		{"another day's 09:30 merges into the same window", day, at(9, 30).Add(72 * time.Hour), 9},
		{"a time zone does not move the window (UTC)", day, at(9, 30).In(time.FixedZone("x", 5*3600)), 9},
		{"the simulated day starts at fleetsim's base time", sim, base, 0},
		{"a simulated phase is a window", sim, base.Add(25 * time.Minute), 1},
		{"the last phase of the simulated day", sim, base.Add(119 * time.Minute), 5},
		{"the second simulated day's third phase merges with the first day's", sim, base.Add(2*time.Hour + 45*time.Minute), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.clock.Index(tc.t); got != tc.want {
				t.Errorf("index(%s) = %d, want %d", tc.t, got, tc.want)
			}
		})
	}
	if l := day.Label(9); l != "09:00–10:00" {
		t.Errorf("label %q", l)
	}
	if l := sim.Label(1); l != "+00:20–+00:40" {
		t.Errorf("simulated label %q", l)
	}
	if n := day.Next(at(10, 5), 9); !n.Equal(at(9, 0).Add(24 * time.Hour)) {
		t.Errorf("next 09:00 after 10:05 = %s", n)
	}
	if n := day.Next(at(8, 5), 9); !n.Equal(at(9, 0)) {
		t.Errorf("next 09:00 after 08:05 = %s", n)
	}
}

func TestSpansSplitTheHistoryAtWindowBoundaries(t *testing.T) {
	c := decide.Clock{Length: 24 * time.Hour, Width: time.Hour}
	from := time.Date(2026, 12, 1, 8, 30, 0, 0, time.UTC)
	got := c.Spans(from, from.Add(105*time.Minute))
	want := []struct {
		from, to string
		index    int
	}{{"08:30", "09:00", 8}, {"09:00", "10:00", 9}, {"10:00", "10:15", 10}}
	if len(got) != len(want) {
		t.Fatalf("spans %+v", got)
	}
	for i, w := range want {
		if got[i].From.Format("15:04") != w.from || got[i].To.Format("15:04") != w.to || got[i].Index != w.index {
			t.Errorf("span %d = %s–%s #%d, want %s–%s #%d", i, got[i].From.Format("15:04"), got[i].To.Format("15:04"), got[i].Index, w.from, w.to, w.index)
		}
	}
}

// spanEstimates is an estimator with span estimates whose request rate is
// the span's hour (so windows differ) and which counts its calls.
type spanEstimates struct {
	mu    sync.Mutex
	spans []string
}

func (s *spanEstimates) Estimate(context.Context, estimator.Target, time.Time) (*estimator.Estimates, error) {
	return &estimator.Estimates{Queries: estimator.QueryStats{Queries: 10}}, nil
}

func (s *spanEstimates) EstimateSpan(_ context.Context, _ estimator.Target, from, to time.Time) (*estimator.Estimates, error) {
	s.mu.Lock()
	s.spans = append(s.spans, from.Format("15:04")+"–"+to.Format("15:04"))
	s.mu.Unlock()
	rate, cached, prompt := float64(1+from.Hour()), 1000.0, 2000.0
	e := &estimator.Estimates{Queries: estimator.QueryStats{Queries: 7}, RequestRate: estimator.Scalar{Value: &rate},
		Cached: estimator.Distribution{Mean: &cached}, Prompt: estimator.Distribution{Mean: &prompt}}
	e.Routing.Endpoints = []estimator.EndpointShare{{Endpoint: "a", Share: 0.5}, {Endpoint: "b", Share: 0.5}}
	return e, nil
}

func (s *spanEstimates) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.spans
	s.spans = nil
	return out
}

func TestWindowEstimatesAreIncremental(t *testing.T) {
	est := &spanEstimates{}
	pol := config.DefaultPolicy()
	pol.History = 3 * time.Hour
	tg := &Target{Config: config.Target{Name: "t", Policy: pol}, Estimator: est}
	now := time.Date(2026, 12, 1, 12, 10, 0, 0, time.UTC)
	lookback := &estimator.Estimates{Queries: estimator.QueryStats{Queries: 10}}
	cycle := func(mem *Memory, now time.Time) *decide.Day {
		d, _ := (&Tuner{}).daySpans(context.Background(), tg, mem, gate.Params{}, lookback, estimateOf(lookback), WindowView{From: now.Add(-pol.History), To: now}, now)
		return d
	}
	mem := &Memory{}
	first := cycle(mem, now)
	if got := strings.Join(est.take(), " "); got != "09:10–10:00 10:00–11:00 11:00–12:00 12:00–12:10" {
		t.Fatalf("first cycle queried %s", got)
	}
	if q := first.Queries; q.SpansQueried != 4 || q.SpansCached != 0 || q.Queries != 28 {
		t.Errorf("first cycle queries %+v", q)
	}
	second := cycle(mem, now.Add(5*time.Minute))
	if got := strings.Join(est.take(), " "); got != "09:15–10:00 12:00–12:15" {
		t.Fatalf("second cycle queried %s, want only the open window (and the history's new first span)", got)
	}
	if q := second.Queries; q.SpansQueried != 2 || q.SpansCached != 2 {
		t.Errorf("second cycle queries %+v", q)
	}
	// The cache holds only spans still inside the history.
	if n := len(mem.days); n != 3 {
		t.Errorf("cache holds %d spans, want the 3 complete ones", n)
	}
	// A fresh memory (a daemon restart) rebuilds from Prometheus.
	cycle(&Memory{}, now.Add(5*time.Minute))
	if got := est.take(); len(got) != 4 {
		t.Errorf("a fresh tuner queried %v, want every span", got)
	}
}
