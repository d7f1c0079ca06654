package prom_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/gatetuner/gatetuner/estimator/prom"
	"github.com/gatetuner/gatetuner/test/promharness"
)

// newEmbedded opens a throw-away Embedded closed at the end of the test.
func newEmbedded(t testing.TB, cfg prom.EmbeddedConfig) *prom.Embedded {
	t.Helper()
	e, err := prom.NewEmbedded(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("close embedded: %v", err)
		}
	})
	return e
}

// sameFloat treats NaN as equal to NaN and allows rounding differences.
func sameFloat(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	if math.IsInf(a, 0) || math.IsInf(b, 0) {
		return a == b
	}
	return math.Abs(a-b) <= 1e-9*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

func vectorDiff(a, b model.Vector) string {
	key := func(v model.Vector) map[string]*model.Sample {
		m := map[string]*model.Sample{}
		for _, s := range v {
			m[s.Metric.String()] = s
		}
		return m
	}
	ma, mb := key(a), key(b)
	var diffs []string
	for k, sa := range ma {
		sb, ok := mb[k]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("only in http: %s = %v", k, sa.Value))
		case !sameFloat(float64(sa.Value), float64(sb.Value)):
			diffs = append(diffs, fmt.Sprintf("%s: http %v, embedded %v", k, sa.Value, sb.Value))
		case sa.Timestamp != sb.Timestamp:
			diffs = append(diffs, fmt.Sprintf("%s: http @%v, embedded @%v", k, sa.Timestamp, sb.Timestamp))
		}
	}
	for k, sb := range mb {
		if _, ok := ma[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("only in embedded: %s = %v", k, sb.Value))
		}
	}
	sort.Strings(diffs)
	return strings.Join(diffs, "\n")
}

func matrixDiff(a, b model.Matrix) string {
	key := func(m model.Matrix) map[string]*model.SampleStream {
		out := map[string]*model.SampleStream{}
		for _, s := range m {
			out[s.Metric.String()] = s
		}
		return out
	}
	ma, mb := key(a), key(b)
	var diffs []string
	for k, sa := range ma {
		sb, ok := mb[k]
		if !ok {
			diffs = append(diffs, "only in http: "+k)
			continue
		}
		if len(sa.Values) != len(sb.Values) {
			diffs = append(diffs, fmt.Sprintf("%s: http %d points, embedded %d", k, len(sa.Values), len(sb.Values)))
			continue
		}
		for i := range sa.Values {
			pa, pb := sa.Values[i], sb.Values[i]
			if pa.Timestamp != pb.Timestamp || !sameFloat(float64(pa.Value), float64(pb.Value)) {
				diffs = append(diffs, fmt.Sprintf("%s point %d: http %v@%v, embedded %v@%v", k, i, pa.Value, pa.Timestamp, pb.Value, pb.Timestamp))
				break
			}
		}
	}
	for k := range mb {
		if _, ok := ma[k]; !ok {
			diffs = append(diffs, "only in embedded: "+k)
		}
	}
	sort.Strings(diffs)
	return strings.Join(diffs, "\n")
}

// TestSamePromQLSameAnswerOverHTTPAndEmbedded backfills one OpenMetrics text
// into a real Prometheus (promtool) and into Embedded (IngestText) and asks
// both the estimator's kind of queries.
func TestSamePromQLSameAnswerOverHTTPAndEmbedded(t *testing.T) {
	// 3 h of 15 s scrapes, ending an hour ago.
	start := time.Now().Add(-4 * time.Hour).Truncate(time.Hour)
	const steps = 720
	text := fleetText(start, steps, []string{"pod-a", "pod-b", "pod-c"}, 42)

	srv := promharness.Start(t, promharness.Options{DataDir: promharness.BackfillString(t, text)})
	httpQ, err := prom.NewHTTP(prom.HTTPConfig{Address: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer httpQ.Close()

	emb := newEmbedded(t, prom.EmbeddedConfig{})
	stats, err := emb.IngestText(context.Background(), strings.NewReader(text), prom.IngestOptions{Format: prom.FormatOpenMetrics})
	if err != nil {
		t.Fatal(err)
	}
	if want := 3 * steps * (1 + 1 + len(promptBuckets) + 3); stats.Samples != want {
		t.Fatalf("ingested %d samples, want %d", stats.Samples, want)
	}

	// Query times sit 7 s after a scrape: Prometheus 2.x range selectors
	// include a sample exactly at the window's start, 3.x do not.
	at := func(d time.Duration) time.Time { return start.Add(d + 7*time.Second) }
	instants := []string{
		`rate(vllm:prompt_tokens_total[2m])`,
		`sum by (namespace, pod) (rate(vllm:prompt_tokens_total[5m]))`,
		`increase(vllm:prompt_tokens_total[30m])`,
		`histogram_quantile(0.5, sum by (le) (rate(vllm:request_prompt_tokens_bucket[5m])))`,
		`histogram_quantile(0.9, sum by (pod, le) (rate(vllm:request_prompt_tokens_bucket[10m])))`,
		`sum by (pod) (rate(vllm:request_prompt_tokens_sum[5m])) / sum by (pod) (rate(vllm:request_prompt_tokens_count[5m]))`,
		`min_over_time(vllm:num_requests_waiting[2m])`,
		`avg_over_time(vllm:num_requests_waiting[10m])`,
		`vllm:num_requests_waiting`,
		`scalar(sum(vllm:num_requests_waiting))`,
		`count(vllm:request_prompt_tokens_bucket)`,
	}
	ctx := context.Background()
	for _, q := range instants {
		for _, d := range []time.Duration{20 * time.Minute, 90*time.Minute + 3*15*time.Second, 179 * time.Minute} {
			ts := at(d)
			want, _, err := httpQ.Query(ctx, q, ts)
			if err != nil {
				t.Fatalf("http: %v", err)
			}
			got, _, err := emb.Query(ctx, q, ts)
			if err != nil {
				t.Fatalf("embedded: %v", err)
			}
			if len(want) == 0 {
				t.Fatalf("%s at %s: real Prometheus returned nothing; the fixture is broken", q, ts.Format(time.RFC3339))
			}
			if diff := vectorDiff(want, got); diff != "" {
				t.Errorf("%s at %s differs:\n%s", q, ts.Format(time.RFC3339), diff)
			}
			if d == 20*time.Minute {
				t.Logf("%s = %v (%d series, first %v)", q, ts.Format(time.RFC3339), len(got), got[0].Value)
			}
		}
	}

	ranges := []string{
		`rate(vllm:prompt_tokens_total[2m])`,
		`histogram_quantile(0.5, sum by (le) (rate(vllm:request_prompt_tokens_bucket[5m])))`,
		`max_over_time(vllm:num_requests_waiting[1m]) > 0`,
	}
	r := v1.Range{Start: at(10 * time.Minute), End: at(170 * time.Minute), Step: 15 * time.Second}
	for _, q := range ranges {
		want, _, err := httpQ.QueryRange(ctx, q, r)
		if err != nil {
			t.Fatalf("http: %v", err)
		}
		got, _, err := emb.QueryRange(ctx, q, r)
		if err != nil {
			t.Fatalf("embedded: %v", err)
		}
		if len(want) == 0 {
			t.Fatalf("%s: real Prometheus returned nothing; the fixture is broken", q)
		}
		if diff := matrixDiff(want, got); diff != "" {
			t.Errorf("range %s differs:\n%s", q, diff)
		}
		t.Logf("range %s: %d series, %d points in the first", q, len(got), len(got[0].Values))
	}

	// Both sides reject a broken query the same way, without retrying.
	for name, q := range map[string]prom.Querier{"http": httpQ, "embedded": emb} {
		_, _, err := q.Query(ctx, `rate(vllm:prompt_tokens_total[2m]`, at(time.Hour))
		if !errors.Is(err, prom.ErrBadQuery) {
			t.Errorf("%s: broken query gave %v, want ErrBadQuery", name, err)
		}
		_, _, err = q.Query(ctx, `vllm:num_requests_waiting[5m]`, at(time.Hour))
		if !errors.Is(err, prom.ErrBadQuery) {
			t.Errorf("%s: range-vector instant query gave %v, want ErrBadQuery", name, err)
		}
	}
}

// TestHTTPAgainstStoppedPrometheusIsUnavailable stops a real server and
// checks the querier reports it unavailable, then recovers after a restart.
func TestHTTPAgainstStoppedPrometheusIsUnavailable(t *testing.T) {
	srv := promharness.Start(t, promharness.Options{})
	var events []prom.QueryEvent
	q, err := prom.NewHTTP(prom.HTTPConfig{
		Address:  srv.URL(),
		Retry:    prom.RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond},
		Observer: func(ev prom.QueryEvent) { events = append(events, ev) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	if _, _, err := q.Query(ctx, "vector(1)", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	_, _, err = q.Query(ctx, "vector(1)", time.Now())
	var qe *prom.Error
	if !errors.As(err, &qe) || qe.Kind != prom.KindUnavailable || qe.Attempts != 2 {
		t.Fatalf("query against a stopped server: %v, want KindUnavailable after 2 attempts", err)
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	v, _, err := q.Query(ctx, "vector(1)", time.Now())
	if err != nil || len(v) != 1 || v[0].Value != 1 {
		t.Fatalf("after restart: %v %v", v, err)
	}
	if len(events) != 3 || events[1].Err == nil || events[1].Attempts != 2 || events[0].Err != nil || events[0].Series != 1 {
		t.Fatalf("observer saw %+v", events)
	}
}
