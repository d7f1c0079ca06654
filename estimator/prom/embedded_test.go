package prom_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/gatetuner/gatetuner/estimator/prom"
)

func quietEmbedded(t testing.TB, cfg prom.EmbeddedConfig) *prom.Embedded {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	return newEmbedded(t, cfg)
}

func one(t *testing.T, q prom.Querier, expr string, ts time.Time) float64 {
	t.Helper()
	v, _, err := q.Query(context.Background(), expr, ts)
	if err != nil {
		t.Fatal(err)
	}
	if len(v) != 1 {
		t.Fatalf("%s at %s: %d samples, want 1: %v", expr, ts.Format(time.RFC3339), len(v), v)
	}
	return float64(v[0].Value)
}

func TestEmbeddedAppendSeriesOneAfterAnother(t *testing.T) {
	e := quietEmbedded(t, prom.EmbeddedConfig{})
	ctx := context.Background()
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	// A simulator that writes pod-a's whole 6 h and then pod-b's: pod-b's
	// early samples are hours behind the head and go out of order.
	for p, pod := range []string{"pod-a", "pod-b"} {
		app := e.Appender(ctx)
		for i := 0; i <= 6*240; i++ {
			err := app.Add(prom.Sample{
				Name:   "vllm:prompt_tokens_total",
				Labels: map[string]string{"namespace": "llm", "pod": pod, "empty": ""},
				Value:  float64(i * 150 * (p + 1)),
				Time:   start.Add(time.Duration(i) * 15 * time.Second),
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := app.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range []time.Duration{10 * time.Minute, 3 * time.Hour, 5*time.Hour + 50*time.Minute} {
		ts := start.Add(h + 7*time.Second)
		if got := one(t, e, `rate(vllm:prompt_tokens_total{pod="pod-a"}[2m])`, ts); math.Abs(got-10) > 1e-9 {
			t.Errorf("pod-a rate at +%v = %v, want 10", h, got)
		}
		if got := one(t, e, `rate(vllm:prompt_tokens_total{pod="pod-b"}[2m])`, ts); math.Abs(got-20) > 1e-9 {
			t.Errorf("pod-b rate at +%v = %v, want 20", h, got)
		}
	}
	// Empty label values are dropped, as in Prometheus.
	v, _, err := e.Query(ctx, `count(vllm:prompt_tokens_total{empty=""})`, start.Add(time.Hour))
	if err != nil || len(v) != 1 || v[0].Value != 2 {
		t.Fatalf("empty labels: %v %v", v, err)
	}
	if _, ok := v[0].Metric["empty"]; ok {
		t.Fatal("empty label stored")
	}
}

func TestEmbeddedAppendRejects(t *testing.T) {
	e := quietEmbedded(t, prom.EmbeddedConfig{Retention: 24 * time.Hour})
	ctx := context.Background()
	now := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	base := prom.Sample{Name: "g", Labels: map[string]string{"pod": "a"}, Value: 1, Time: now}
	if err := e.Append(ctx, base); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		s    prom.Sample
	}{
		{"no metric name", prom.Sample{Value: 1, Time: now}},
		{"name in labels", prom.Sample{Name: "g", Labels: map[string]string{"__name__": "h"}, Time: now}},
		{"empty label name", prom.Sample{Name: "g", Labels: map[string]string{"": "x"}, Time: now}},
		{"same timestamp, other value", prom.Sample{Name: "g", Labels: map[string]string{"pod": "a"}, Value: 2, Time: now}},
		{"older than the out-of-order window", prom.Sample{Name: "g", Labels: map[string]string{"pod": "a"}, Value: 2, Time: now.Add(-25 * time.Hour)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ok := prom.Sample{Name: "g", Labels: map[string]string{"pod": "b"}, Value: 5, Time: now}
			if err := e.Append(ctx, ok, tc.s); err == nil {
				t.Fatal("accepted")
			}
			// All or nothing: the good sample of the batch was not written.
			v, _, err := e.Query(ctx, `g{pod="b"}`, now)
			if err != nil || len(v) != 0 {
				t.Fatalf("rolled-back sample visible: %v %v", v, err)
			}
		})
	}
}

func TestIngestTextFormatsAndOptions(t *testing.T) {
	e := quietEmbedded(t, prom.EmbeddedConfig{})
	ctx := context.Background()
	at := time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC)
	// Prometheus text: millisecond timestamps, one sample without a timestamp.
	text := fmt.Sprintf(`# HELP vllm:num_requests_waiting Waiting.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{pod="a"} 3 %d
vllm:num_requests_waiting{pod="b",cluster="own"} 4
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{pod="a",le="0.5"} 1 %[1]d
vllm:e2e_request_latency_seconds_bucket{pod="a",le="1"} 3 %[1]d
vllm:e2e_request_latency_seconds_bucket{pod="a",le="+Inf"} 4 %[1]d
vllm:e2e_request_latency_seconds_sum{pod="a"} 3.5 %[1]d
vllm:e2e_request_latency_seconds_count{pod="a"} 4 %[1]d
`, at.UnixMilli())
	st, err := e.IngestText(ctx, strings.NewReader(text), prom.IngestOptions{
		DefaultTime: at, Labels: map[string]string{"cluster": "c1", "namespace": "llm"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Samples != 7 {
		t.Fatalf("ingested %d samples, want 7", st.Samples)
	}
	if got := one(t, e, `vllm:num_requests_waiting{pod="a",cluster="c1",namespace="llm"}`, at); got != 3 {
		t.Errorf("pod a = %v", got)
	}
	// The text's own label wins over the added one (honor_labels).
	if got := one(t, e, `vllm:num_requests_waiting{pod="b",cluster="own",namespace="llm"}`, at); got != 4 {
		t.Errorf("pod b = %v", got)
	}
	// Prometheus 3 normalises le="1" to "1.0" for histograms.
	if got := one(t, e, `vllm:e2e_request_latency_seconds_bucket{le="1.0"}`, at); got != 3 {
		t.Errorf("le=1.0 bucket = %v", got)
	}
	if got := one(t, e, `histogram_quantile(0.5, vllm:e2e_request_latency_seconds_bucket)`, at); math.Abs(got-0.75) > 1e-12 {
		t.Errorf("median = %v, want 0.75", got)
	}

	// OpenMetrics: timestamps in seconds, detected by "# EOF".
	om := fmt.Sprintf("# TYPE vllm:generation_tokens counter\nvllm:generation_tokens_total{pod=\"a\"} 10 %d.5\n# EOF\n", at.Unix())
	if _, err := e.IngestText(ctx, strings.NewReader(om), prom.IngestOptions{}); err != nil {
		t.Fatal(err)
	}
	v, _, err := e.Query(ctx, `vllm:generation_tokens_total`, at.Add(time.Second))
	if err != nil || len(v) != 1 || v[0].Value != 10 {
		t.Fatalf("openmetrics sample: %v %v", v, err)
	}
	// An instant query reads the newest sample at or before ts.
	if v, _, _ := e.Query(ctx, `timestamp(vllm:generation_tokens_total)`, at.Add(time.Second)); len(v) != 1 || float64(v[0].Value) != float64(at.Unix())+0.5 {
		t.Fatalf("openmetrics timestamp: %v", v)
	}
}

func TestIngestTextErrorsNameTheLine(t *testing.T) {
	tests := []struct {
		name     string
		text     string
		opts     prom.IngestOptions
		wantLine int
	}{
		{"bad value", "a 1 1000\nb{x=\"y\"} notanumber 1000\nc 3 1000\n", prom.IngestOptions{}, 2},
		{"blank lines before the bad one", "a 1 1000\n\n\n}{ 1 1000\n", prom.IngestOptions{}, 4},
		{"bad first line", "{{{\n", prom.IngestOptions{}, 1},
		{"no timestamp and no default", "# TYPE a gauge\na 1 1000\nb 2\n", prom.IngestOptions{}, 3},
		{"openmetrics without EOF", "# TYPE a gauge\na 1 1\n", prom.IngestOptions{Format: prom.FormatOpenMetrics}, 3},
		// The parser notices the trailing data while reading "# EOF".
		{"openmetrics data after EOF", "a 1 1\n# EOF\nb 2 2\n", prom.IngestOptions{Format: prom.FormatOpenMetrics}, 2},
		{"duplicate sample with another value", "a 1 1000\na 2 1000\n", prom.IngestOptions{}, 2},
		{"unterminated label value", "a 1 1000\nb{pod=\"x} 1 1000\n", prom.IngestOptions{}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := quietEmbedded(t, prom.EmbeddedConfig{})
			_, err := e.IngestText(context.Background(), strings.NewReader(tc.text), tc.opts)
			var le *prom.LineError
			if !errors.As(err, &le) {
				t.Fatalf("got %v, want a *LineError", err)
			}
			if le.Line != tc.wantLine || !strings.Contains(err.Error(), fmt.Sprintf("line %d", tc.wantLine)) {
				t.Fatalf("error %q names line %d, want %d", err, le.Line, tc.wantLine)
			}
			// Nothing from a failed text is visible.
			v, _, qerr := e.Query(context.Background(), `count({__name__=~".+"})`, time.UnixMilli(1000))
			if qerr != nil || len(v) != 0 {
				t.Fatalf("partial ingest visible: %v %v", v, qerr)
			}
		})
	}
}

func TestEmbeddedQueryErrors(t *testing.T) {
	e := quietEmbedded(t, prom.EmbeddedConfig{MaxSamples: 10})
	ctx := context.Background()
	now := time.Date(2026, 11, 4, 0, 0, 0, 0, time.UTC)
	app := e.Appender(ctx)
	for i := range 100 {
		if err := app.Add(prom.Sample{Name: "g", Value: float64(i), Time: now.Add(time.Duration(i-100) * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		run  func() error
		want error
	}{
		{"parse error", func() error { _, _, err := e.Query(ctx, "rate(g[", now); return err }, prom.ErrBadQuery},
		{"too many samples", func() error { _, _, err := e.Query(ctx, "max_over_time(g[5m])", now); return err }, prom.ErrBadQuery},
		{"range vector from an instant query", func() error { _, _, err := e.Query(ctx, "g[1m]", now); return err }, prom.ErrBadQuery},
		{"string result", func() error { _, _, err := e.Query(ctx, `"hello"`, now); return err }, prom.ErrBadQuery},
		{"zero step", func() error {
			_, _, err := e.QueryRange(ctx, "g", v1.Range{Start: now, End: now.Add(time.Minute)})
			return err
		}, prom.ErrBadQuery},
		{"canceled context", func() error {
			c, cancel := context.WithCancel(ctx)
			cancel()
			_, _, err := e.Query(c, "g", now)
			return err
		}, prom.ErrCanceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.run(); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	// A scalar result is one unlabelled sample.
	if got := one(t, e, "scalar(g) * 2", now); got != 198 {
		t.Fatalf("scalar = %v", got)
	}
}

func TestEmbeddedTimeoutIsATimeout(t *testing.T) {
	e := quietEmbedded(t, prom.EmbeddedConfig{QueryTimeout: time.Nanosecond})
	_, _, err := e.Query(context.Background(), "vector(1)", time.Now())
	if !errors.Is(err, prom.ErrTimeout) {
		t.Fatalf("got %v, want ErrTimeout", err)
	}
}

func TestEmbeddedReopensItsDir(t *testing.T) {
	dir := t.TempDir()
	at := time.Date(2026, 11, 5, 0, 0, 0, 0, time.UTC)
	e, err := prom.NewEmbedded(prom.EmbeddedConfig{Dir: dir, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Append(context.Background(), prom.Sample{Name: "g", Value: 7, Time: at}); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e2 := quietEmbedded(t, prom.EmbeddedConfig{Dir: dir})
	if got := one(t, e2, "g", at); got != 7 {
		t.Fatalf("after reopen g = %v", got)
	}
}

// liveExposition is a /metrics endpoint in the text format whose content
// the test changes.
type liveExposition struct {
	mu   sync.Mutex
	body string
	fail bool
}

func (l *liveExposition) set(body string, fail bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.body, l.fail = body, fail
}

func (l *liveExposition) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail {
		http.Error(w, "engine down", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write([]byte(l.body))
}

// eventually polls q until check accepts its result, within 30 s.
func eventually(t *testing.T, q prom.Querier, expr string, check func(model.Vector) bool) model.Vector {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, _, err := q.Query(context.Background(), expr, time.Now())
		if err == nil && check(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never matched; last %v %v", expr, v, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestEmbeddedScraper(t *testing.T) {
	exp := &liveExposition{}
	exp.set(`# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{namespace="llm",pod="pod-live"} 5
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{namespace="llm",pod="pod-live"} 2
# TYPE vllm:request_prompt_tokens histogram
vllm:request_prompt_tokens_bucket{namespace="llm",pod="pod-live",le="100"} 1
vllm:request_prompt_tokens_bucket{namespace="llm",pod="pod-live",le="+Inf"} 2
vllm:request_prompt_tokens_sum{namespace="llm",pod="pod-live"} 300
vllm:request_prompt_tokens_count{namespace="llm",pod="pod-live"} 2
`, false)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: exp, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(l) }()
	t.Cleanup(func() { _ = hs.Close() })
	addr := l.Addr().String()

	e := quietEmbedded(t, prom.EmbeddedConfig{})
	s, err := e.StartScraper(context.Background(), prom.ScrapeConfig{
		Interval: 50 * time.Millisecond,
		Targets:  []prom.ScrapeTarget{{Job: "vllm", Addrs: []string{addr}, Labels: map[string]string{"cluster": "c1", "pod": "ignored"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()

	// Exposition labels win (pod), target labels fill in (cluster, job, instance).
	sel := `{namespace="llm",pod="pod-live",cluster="c1",job="vllm",instance="` + addr + `"}`
	eventually(t, e, `vllm:num_requests_waiting`+sel, func(v model.Vector) bool { return len(v) == 1 && v[0].Value == 5 })
	eventually(t, e, `up{job="vllm",instance="`+addr+`",cluster="c1"}`, func(v model.Vector) bool { return len(v) == 1 && v[0].Value == 1 })
	eventually(t, e, `vllm:request_prompt_tokens_bucket{le="100.0"}`, func(v model.Vector) bool { return len(v) == 1 && v[0].Value == 1 })

	// A series that disappears is marked stale: gone at once, not after 5 m.
	exp.set("# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{namespace=\"llm\",pod=\"pod-live\"} 6\n", false)
	eventually(t, e, `vllm:num_requests_running`, func(v model.Vector) bool { return len(v) == 0 })
	eventually(t, e, `vllm:num_requests_waiting`+sel, func(v model.Vector) bool { return len(v) == 1 && v[0].Value == 6 })

	// A failing target: up=0 and its series go stale.
	exp.set("", true)
	eventually(t, e, `up{job="vllm"}`, func(v model.Vector) bool { return len(v) == 1 && v[0].Value == 0 })
	eventually(t, e, `vllm:num_requests_waiting`, func(v model.Vector) bool { return len(v) == 0 })

	// Samples are stamped at scrape time: the range holds many scrapes.
	v := eventually(t, e, `count_over_time(up{job="vllm"}[1m])`, func(v model.Vector) bool { return len(v) == 1 && v[0].Value >= 5 })
	t.Logf("scrapes recorded: %v", v[0].Value)
	s.Stop()
	s.Stop() // idempotent
}

func TestStartScraperRejectsBadTargets(t *testing.T) {
	e := quietEmbedded(t, prom.EmbeddedConfig{})
	for _, tg := range []prom.ScrapeTarget{{Job: "x"}, {Job: "x", Addrs: []string{"http://host:1/metrics"}}, {Addrs: []string{""}}} {
		if _, err := e.StartScraper(context.Background(), prom.ScrapeConfig{Targets: []prom.ScrapeTarget{tg}}); err == nil {
			t.Errorf("accepted %+v", tg)
		}
	}
}

func TestEmbeddedObserver(t *testing.T) {
	var events []prom.QueryEvent
	e := quietEmbedded(t, prom.EmbeddedConfig{Observer: func(ev prom.QueryEvent) { events = append(events, ev) }})
	ctx := context.Background()
	_, _, _ = e.Query(ctx, "vector(1)", time.Now())
	_, _, _ = e.QueryRange(ctx, "vector(1)", v1.Range{Start: time.Now().Add(-time.Minute), End: time.Now(), Step: 10 * time.Second})
	_, _, _ = e.Query(ctx, "rate(", time.Now())
	if len(events) != 3 {
		t.Fatalf("events %+v", events)
	}
	if events[0].Backend != "embedded" || events[0].Type != prom.InstantQuery || events[0].Series != 1 || events[0].Err != nil {
		t.Errorf("instant event %+v", events[0])
	}
	if events[1].Type != prom.RangeQuery || events[1].Series != 1 {
		t.Errorf("range event %+v", events[1])
	}
	if !errors.Is(events[2].Err, prom.ErrBadQuery) {
		t.Errorf("error event %+v", events[2])
	}
}

func TestCloseStopsRunningScrapers(t *testing.T) {
	exp := &liveExposition{}
	exp.set("g 1\n", false)
	hs := &http.Server{Handler: exp, ReadHeaderTimeout: 5 * time.Second}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = hs.Serve(l) }()
	t.Cleanup(func() { _ = hs.Close() })
	e, err := prom.NewEmbedded(prom.EmbeddedConfig{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.StartScraper(context.Background(), prom.ScrapeConfig{Interval: 10 * time.Millisecond,
		Targets: []prom.ScrapeTarget{{Addrs: []string{l.Addr().String()}}}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, e, "g", func(v model.Vector) bool { return len(v) == 1 })
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.StartScraper(context.Background(), prom.ScrapeConfig{Targets: []prom.ScrapeTarget{{Addrs: []string{l.Addr().String()}}}}); err == nil {
		t.Fatal("scraper started on a closed Embedded")
	}
}
