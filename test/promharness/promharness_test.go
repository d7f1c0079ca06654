package promharness_test

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/gatetuner/gatetuner/test/promharness"
)

// backfillText builds OpenMetrics text for one vLLM pod: a prompt-token
// counter rising 150 tokens per 15 s scrape (10 tok/s) for the first hour
// from start, then 300 per scrape (20 tok/s) for the second, and a waiting
// queue gauge cycling 0..6.
func backfillText(start time.Time) string {
	var b strings.Builder
	const lbl = `{namespace="llm",pod="pod-a",model_name="m",engine="0"}`
	b.WriteString("# TYPE vllm:prompt_tokens counter\n")
	total := 0.0
	for i := 0; i <= 480; i++ {
		if i > 0 {
			if i <= 240 {
				total += 150
			} else {
				total += 300
			}
		}
		fmt.Fprintf(&b, "vllm:prompt_tokens_total%s %g %d\n", lbl, total, start.Add(time.Duration(i)*15*time.Second).Unix())
	}
	b.WriteString("# TYPE vllm:num_requests_waiting gauge\n")
	for i := 0; i <= 480; i++ {
		fmt.Fprintf(&b, "vllm:num_requests_waiting%s %d %d\n", lbl, i%7, start.Add(time.Duration(i)*15*time.Second).Unix())
	}
	b.WriteString("# EOF\n")
	return b.String()
}

func scalarOf(t *testing.T, v model.Value) float64 {
	t.Helper()
	vec, ok := v.(model.Vector)
	if !ok {
		t.Fatalf("result is %s, want vector", v.Type())
	}
	if len(vec) != 1 {
		t.Fatalf("result has %d samples, want 1: %v", len(vec), vec)
	}
	return float64(vec[0].Value)
}

func TestBackfilledDataIsQueryableInThePast(t *testing.T) {
	start := time.Now().Add(-3 * time.Hour).Truncate(time.Minute)
	dir := promharness.BackfillString(t, backfillText(start))
	srv := promharness.Start(t, promharness.Options{DataDir: dir})
	ctx := context.Background()

	tests := []struct {
		name string
		q    string
		at   time.Time
		want float64
	}{
		// 7 s past a scrape so the 2 m window holds the same 8 samples in
		// every Prometheus version (range selectors became left-open in 3.0).
		{"rate in the first hour", `rate(vllm:prompt_tokens_total{pod="pod-a"}[2m])`, start.Add(30*time.Minute + 7*time.Second), 10},
		{"rate in the second hour", `rate(vllm:prompt_tokens_total{pod="pod-a"}[2m])`, start.Add(90*time.Minute + 7*time.Second), 20},
		// The second hour's 240 scrapes of 300 tokens each.
		{"increase over the second hour", `increase(vllm:prompt_tokens_total[1h])`, start.Add(2 * time.Hour), 240 * 300},
		{"gauge at a scrape", `vllm:num_requests_waiting{namespace="llm",pod="pod-a"}`, start.Add(100 * 15 * time.Second), 100 % 7},
		{"gauge max over a window", `max_over_time(vllm:num_requests_waiting[2m])`, start.Add(20*time.Minute + 7*time.Second), 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, warn, err := srv.Query(ctx, tc.q, tc.at)
			if err != nil {
				t.Fatal(err)
			}
			if len(warn) > 0 {
				t.Logf("warnings: %v", warn)
			}
			got := scalarOf(t, v)
			if math.Abs(got-tc.want) > 1e-9*math.Max(1, math.Abs(tc.want)) {
				t.Fatalf("%s at %s = %v, want %v", tc.q, tc.at.Format(time.RFC3339), got, tc.want)
			}
		})
	}

	t.Run("no data after the backfilled range", func(t *testing.T) {
		v, _, err := srv.Query(ctx, `vllm:num_requests_waiting`, start.Add(3*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if vec := v.(model.Vector); len(vec) != 0 {
			t.Fatalf("got %v, want no samples an hour after the last backfilled one", vec)
		}
	})

	t.Run("range query sees both phases", func(t *testing.T) {
		v, _, err := srv.QueryRange(ctx, `rate(vllm:prompt_tokens_total[2m])`, v1.Range{
			Start: start.Add(10*time.Minute + 7*time.Second), End: start.Add(110*time.Minute + 7*time.Second), Step: 10 * time.Minute,
		})
		if err != nil {
			t.Fatal(err)
		}
		m := v.(model.Matrix)
		if len(m) != 1 || len(m[0].Values) != 11 {
			t.Fatalf("got %v, want one series with 11 points", m)
		}
		for i, p := range m[0].Values {
			want := 10.0
			if i > 5 {
				want = 20
			}
			if math.Abs(float64(p.Value)-want) > 1e-9*want {
				t.Errorf("point %d at %s = %v, want %v", i, p.Timestamp.Time().UTC().Format(time.RFC3339), p.Value, want)
			}
		}
	})
}

func TestMultiDayBackfillLoads(t *testing.T) {
	// Three days of one-minute samples ending an hour ago: promtool cuts
	// them into 2 h blocks and the server must load every one of them.
	end := time.Now().Add(-time.Hour).Truncate(time.Minute)
	start := end.Add(-72 * time.Hour)
	var b strings.Builder
	b.WriteString("# TYPE gatetuner_backfill_probe gauge\n")
	for ts := start; !ts.After(end); ts = ts.Add(time.Minute) {
		fmt.Fprintf(&b, "gatetuner_backfill_probe{pod=\"p\"} %d %d\n", ts.Unix(), ts.Unix())
	}
	b.WriteString("# EOF\n")
	srv := promharness.Start(t, promharness.Options{DataDir: promharness.BackfillString(t, b.String())})
	ctx := context.Background()
	for _, at := range []time.Time{start, start.Add(25*time.Hour + 30*time.Second), end} {
		v, _, err := srv.Query(ctx, `gatetuner_backfill_probe`, at)
		if err != nil {
			t.Fatal(err)
		}
		want := float64(at.Truncate(time.Minute).Unix())
		if got := scalarOf(t, v); got != want {
			t.Errorf("at %s got %v, want %v", at.Format(time.RFC3339), got, want)
		}
	}
	// 30 s past a sample, so 2.x's closed and 3.x's left-open windows agree:
	// every sample after start, 3*24*60 of them.
	v, _, err := srv.Query(ctx, `count_over_time(gatetuner_backfill_probe[3d])`, end.Add(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got := scalarOf(t, v); got != 72*60 {
		t.Fatalf("count over 3 days = %v, want %d", got, 72*60)
	}
}

// exposition is a tiny /metrics endpoint whose gauge value the test sets.
type exposition struct{ waiting atomic.Int64 }

func (e *exposition) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprintf(w, "# TYPE vllm:num_requests_waiting gauge\n"+
		"vllm:num_requests_waiting{namespace=\"llm\",pod=\"pod-live\",model_name=\"m\",engine=\"0\"} %d\n", e.waiting.Load())
}

func serveLoopback(t *testing.T, h http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String()
}

// waitFor polls q until it returns one sample equal to want; bounded by ctx.
func waitFor(ctx context.Context, t *testing.T, srv *promharness.Server, q string, want float64) time.Time {
	t.Helper()
	var last string
	for {
		now := time.Now()
		v, _, err := srv.Query(ctx, q, now)
		if err == nil {
			if vec := v.(model.Vector); len(vec) == 1 && float64(vec[0].Value) == want {
				return now
			}
			last = v.String()
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never returned %v: last %s", q, want, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func TestLiveScrapeStopAndRestartKeepData(t *testing.T) {
	exp := &exposition{}
	exp.waiting.Store(7)
	addr := serveLoopback(t, exp)
	srv := promharness.Start(t, promharness.Options{
		ScrapeInterval: time.Second,
		Targets:        []promharness.Target{{Job: "vllm", Addrs: []string{addr}, Labels: map[string]string{"cluster": "c1"}}},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// honor_labels keeps the exposition's namespace/pod; target labels are added.
	q := `vllm:num_requests_waiting{namespace="llm",pod="pod-live",cluster="c1",job="vllm",instance="` + addr + `"}`
	sawSeven := waitFor(ctx, t, srv, q, 7)
	exp.waiting.Store(9)
	waitFor(ctx, t, srv, q, 9)

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if srv.Running() {
		t.Fatal("server still running after Stop")
	}
	if _, _, err := srv.Query(ctx, "up", time.Now()); err == nil {
		t.Fatal("query succeeded against a stopped server")
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	// The sample scraped before the stop survives the restart (WAL replay).
	v, _, err := srv.Query(ctx, q, sawSeven)
	if err != nil {
		t.Fatal(err)
	}
	if got := scalarOf(t, v); got != 7 {
		t.Fatalf("after restart %s at %s = %v, want 7", q, sawSeven.Format(time.RFC3339Nano), got)
	}
	// And scraping resumes on the same port and config.
	exp.waiting.Store(11)
	waitFor(ctx, t, srv, q, 11)
}

func TestSetTargetsReloadsScrapeConfig(t *testing.T) {
	exp := &exposition{}
	exp.waiting.Store(3)
	srv := promharness.Start(t, promharness.Options{ScrapeInterval: time.Second})
	addr := serveLoopback(t, exp)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := srv.SetTargets(ctx, []promharness.Target{{Job: "late", Addrs: []string{addr}}}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, srv, `vllm:num_requests_waiting{job="late",pod="pod-live"}`, 3)
}

func TestBackfillReportsPromtoolError(t *testing.T) {
	b := promharness.Require(t)
	dir := t.TempDir()
	input := dir + "/bad.om"
	if err := os.WriteFile(input, []byte("this is not openmetrics\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := promharness.CreateBlocks(context.Background(), b.Promtool, input, dir+"/out", 0)
	if err == nil {
		t.Fatal("promtool accepted garbage")
	}
	if !strings.Contains(err.Error(), "stderr:") || len(err.Error()) < len("promtool tsdb create-blocks-from")+40 {
		t.Fatalf("error does not carry promtool's output: %v", err)
	}
	t.Logf("promtool error surfaced as: %v", err)
}
