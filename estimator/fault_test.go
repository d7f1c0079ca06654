package estimator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/estimator/prom"
)

// fault rewrites what a real Prometheus answers: a status code instead of
// the answer, a delay, or an edit of each returned series.
type fault struct {
	// status, when it returns non-zero, answers the query with that code.
	status func(q string) int
	// delay holds every answer back (the request's context still ends it).
	delay time.Duration
	// series edits one returned series (its "metric" labels and its
	// "value" or "values"); returning false drops it.
	series func(q string, s map[string]any) bool
}

type queryKey struct{}

// faultProxy starts an HTTP server that forwards to target through f.
func faultProxy(t *testing.T, target string, f fault) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	director := rp.Director
	rp.Director = func(r *http.Request) {
		director(r)
		r.Header.Del("Accept-Encoding") // keep bodies plain for rewriting
	}
	rp.ModifyResponse = func(resp *http.Response) error {
		q, _ := resp.Request.Context().Value(queryKey{}).(string)
		if f.series == nil || resp.StatusCode != http.StatusOK {
			return nil
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return err
		}
		var doc map[string]any
		if err := json.Unmarshal(body, &doc); err != nil {
			return err
		}
		if data, ok := doc["data"].(map[string]any); ok {
			if res, ok := data["result"].([]any); ok {
				kept := []any{}
				for _, x := range res {
					if s, ok := x.(map[string]any); ok && f.series(q, s) {
						kept = append(kept, s)
					}
				}
				data["result"] = kept
			}
		}
		out, err := json.Marshal(doc)
		if err != nil {
			return err
		}
		resp.Body = io.NopCloser(bytes.NewReader(out))
		resp.ContentLength = int64(len(out))
		resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
		return nil
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		q := r.URL.Query().Get("query")
		if form, err := url.ParseQuery(string(body)); err == nil && form.Get("query") != "" {
			q = form.Get("query")
		}
		if f.delay > 0 {
			select {
			case <-time.After(f.delay):
			case <-r.Context().Done():
				return
			}
		}
		if f.status != nil {
			if code := f.status(q); code != 0 {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(code)
				errType := "internal"
				if code == http.StatusBadRequest {
					errType = "bad_data"
				}
				fmt.Fprintf(w, `{"status":"error","errorType":%q,"error":"injected fault"}`, errType)
				return
			}
		}
		rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), queryKey{}, q)))
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// setValues replaces every sample value of s with v.
func setValues(s map[string]any, v string) {
	if pair, ok := s["value"].([]any); ok && len(pair) == 2 {
		pair[1] = v
	}
	if vals, ok := s["values"].([]any); ok {
		for _, p := range vals {
			if pair, ok := p.([]any); ok && len(pair) == 2 {
				pair[1] = v
			}
		}
	}
}

func labelOf(s map[string]any, name string) string {
	m, _ := s["metric"].(map[string]any)
	v, _ := m[name].(string)
	return v
}

// TestFaultsAreInconclusiveWithTheRightReason puts an injecting proxy in
// front of a real Prometheus holding calibration-15928 and checks every
// fault ends Inconclusive with its reason, without a panic, while the same
// estimator over the clean server is conclusive.
func TestFaultsAreInconclusiveWithTheRightReason(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real Prometheus; skipped under -short")
	}
	run := fixture(t, variant{key: "calibration-15928", scenario: "calibration-15928", seed: 1})
	at := run.end()
	lookback := time.Duration(run.truth.End-run.truth.Start) * time.Second
	victim := run.sc.PodName(1)
	isVLLM := func(q string) bool { return strings.Contains(q, "vllm:") }

	cases := []struct {
		name string
		f    fault
		// timeout is the querier's per-query timeout (0: 30s).
		timeout time.Duration
		part    string
		want    estimator.ReasonCode
		// drainOK: the fault concerns the EPP only; the drain rate stands.
		drainOK bool
	}{
		{name: "5xx", f: fault{status: func(string) int { return http.StatusServiceUnavailable }},
			part: "drainRate", want: estimator.ReasonPrometheusUnavailable},
		{name: "timeout", f: fault{delay: 3 * time.Second}, timeout: 300 * time.Millisecond,
			part: "drainRate", want: estimator.ReasonPrometheusTimeout},
		{name: "bad query", f: fault{status: func(string) int { return http.StatusBadRequest }},
			part: "drainRate", want: estimator.ReasonBadQuery},
		{name: "empty results", f: fault{series: func(string, map[string]any) bool { return false }},
			part: "drainRate", want: estimator.ReasonNoSeries},
		{name: "5xx on window queries only", f: fault{status: func(q string) int {
			if strings.Contains(q, "min_over_time") {
				return http.StatusBadGateway
			}
			return 0
		}}, part: "drainRate", want: estimator.ReasonPrometheusUnavailable},
		{name: "NaN computed-token rate", f: fault{series: func(q string, s map[string]any) bool {
			if strings.Contains(q, "rate(vllm:prompt_tokens_by_source_total") {
				setValues(s, "NaN")
			}
			return true
		}}, part: "drainRate", want: estimator.ReasonNonFinite},
		{name: "Inf KV usage", f: fault{series: func(q string, s map[string]any) bool {
			if strings.Contains(q, "max_over_time(vllm:kv_cache_usage_perc") {
				setValues(s, "+Inf")
			}
			return true
		}}, part: "drainRate", want: estimator.ReasonNonFinite},
		{name: "NaN prompt buckets", f: fault{series: func(q string, s map[string]any) bool {
			if strings.Contains(q, "vllm:request_prompt_tokens_bucket") {
				setValues(s, "NaN")
			}
			return true
		}}, part: "promptTokens", want: estimator.ReasonNonFinite},
		{name: "counter reset in every window", f: fault{series: func(q string, s map[string]any) bool {
			if strings.Contains(q, "resets(") {
				setValues(s, "1")
			}
			return true
		}}, part: "drainRate", want: estimator.ReasonCounterReset},
		{name: "one pod's vLLM series missing", f: fault{series: func(q string, s map[string]any) bool {
			return !isVLLM(q) || labelOf(s, "pod") != victim
		}}, part: "drainRate", want: estimator.ReasonPartialPodCoverage},
		{name: "one pod lacks the KV gauge", f: fault{series: func(q string, s map[string]any) bool {
			return labelOf(s, "pod") != victim || labelOf(s, "__name__") != "vllm:kv_cache_usage_perc"
		}}, part: "drainRate", want: estimator.ReasonPartialPodCoverage},
		{name: "EPP unavailable", f: fault{status: func(q string) int {
			if strings.Contains(q, "llm_d_epp_") && !isVLLM(q) {
				return http.StatusServiceUnavailable
			}
			return 0
		}}, part: "inFlight", want: estimator.ReasonPrometheusUnavailable, drainOK: true},
		{name: "EPP fails after detection", f: fault{status: func(q string) int {
			if strings.Contains(q, "llm_d_epp_") && !isVLLM(q) && !strings.HasPrefix(q, "group by") {
				return http.StatusServiceUnavailable
			}
			return 0
		}}, part: "routing", want: estimator.ReasonPrometheusUnavailable, drainOK: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			addr := faultProxy(t, run.srv.URL(), tc.f)
			timeout := tc.timeout
			if timeout == 0 {
				timeout = 30 * time.Second
			}
			q, err := prom.NewHTTP(prom.HTTPConfig{Address: addr, Timeout: timeout,
				Retry: prom.RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond}})
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			clock := at
			est, err := estimator.New(q, func() time.Time { return clock }, estimator.Config{Lookback: lookback})
			if err != nil {
				t.Fatal(err)
			}
			e, err := est.Estimate(context.Background(), run.target(), at)
			if err != nil {
				t.Fatalf("a data fault surfaced as an error: %v", err)
			}
			if !hasPartReason(e, tc.part, tc.want) {
				t.Fatalf("%s reasons %+v lack %s", tc.part, e.Reasons, tc.want)
			}
			if tc.part == "drainRate" || tc.part == "promptTokens" {
				if e.Status != estimator.StatusInconclusive {
					t.Fatalf("status %s, want inconclusive", e.Status)
				}
				if e.DrainRate.Status == estimator.StatusOK && tc.part == "drainRate" {
					t.Fatalf("drain rate ok despite %s", tc.want)
				}
			}
			if tc.drainOK && (e.DrainRate.Status != estimator.StatusOK || e.Status != estimator.StatusOK) {
				t.Fatalf("an EPP fault broke the drain rate: %s, reasons %v", e.DrainRate.Status, codes(e.Reasons))
			}
			if _, err := json.Marshal(e); err != nil {
				t.Fatalf("estimates do not encode: %v", err)
			}
			t.Logf("%s: status %s, reasons %v", tc.name, e.Status, codes(e.Reasons))
		})
	}
}

func hasPartReason(e *estimator.Estimates, part string, code estimator.ReasonCode) bool {
	for _, r := range e.Reasons {
		if r.Part == part && r.Code == code {
			return true
		}
	}
	return false
}

func codes(rs []estimator.Reason) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Part+":"+string(r.Code))
	}
	return out
}

// TestStaleAndMissingDataAreInconclusive asks a real Prometheus about times
// after the data stopped and about a selector that matches nothing.
func TestStaleAndMissingDataAreInconclusive(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real Prometheus; skipped under -short")
	}
	run := fixture(t, variant{key: "calibration-15928", scenario: "calibration-15928", seed: 1})
	lookback := time.Duration(run.truth.End-run.truth.Start) * time.Second
	nothing := run.target()
	nothing.VLLMSelector = `namespace="no-such-namespace"`
	nothing.EPPSelector = `namespace="no-such-namespace"`
	cases := []struct {
		name string
		at   time.Time
		t    estimator.Target
		want estimator.ReasonCode
	}{
		{"samples older than StaleAfter", run.end().Add(4 * time.Minute), run.target(), estimator.ReasonStaleSeries},
		{"no sample within the lookback delta", run.end().Add(30 * time.Minute), run.target(), estimator.ReasonStaleSeries},
		{"selector matches nothing", run.end(), nothing, estimator.ReasonNoSeries},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			est, err := estimator.New(run.q, fixedClock(tc.at), estimator.Config{Lookback: lookback})
			if err != nil {
				t.Fatal(err)
			}
			e, err := est.Estimate(context.Background(), tc.t, tc.at)
			if err != nil {
				t.Fatal(err)
			}
			if e.Status != estimator.StatusInconclusive || !hasPartReason(e, "drainRate", tc.want) {
				t.Fatalf("status %s, reasons %v; want inconclusive with drainRate:%s", e.Status, codes(e.Reasons), tc.want)
			}
			t.Logf("reasons %v", codes(e.Reasons))
		})
	}
}

// TestLastGoodEstimateIsKeptAndAged estimates once on clean data, then
// through a failing proxy, and checks the last good estimate comes back,
// aged by the injected clock, never replaced by a default.
func TestLastGoodEstimateIsKeptAndAged(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real Prometheus; skipped under -short")
	}
	run := fixture(t, variant{key: "calibration-15928", scenario: "calibration-15928", seed: 1})
	at := run.end()
	lookback := time.Duration(run.truth.End-run.truth.Start) * time.Second
	failing := true
	addr := faultProxy(t, run.srv.URL(), fault{status: func(string) int {
		if failing {
			return http.StatusServiceUnavailable
		}
		return 0
	}})
	q, err := prom.NewHTTP(prom.HTTPConfig{Address: addr, Retry: prom.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	now := at
	est, err := estimator.New(q, func() time.Time { return now }, estimator.Config{Lookback: lookback, FreshnessHalfLife: 6 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	first, err := est.Estimate(ctx, run.target(), at)
	if err != nil {
		t.Fatal(err)
	}
	if first.Status != estimator.StatusInconclusive || first.LastGood != nil || first.DrainRate.Value != nil {
		t.Fatalf("first estimate through a failing Prometheus: status %s, last good %v, value %v; want inconclusive with nothing",
			first.Status, first.LastGood, first.DrainRate.Value)
	}
	failing = false
	good, err := est.Estimate(ctx, run.target(), at)
	if err != nil {
		t.Fatal(err)
	}
	if good.Status != estimator.StatusOK {
		t.Fatalf("clean estimate: %s %v", good.Status, codes(good.Reasons))
	}
	failing = true
	now = at.Add(6 * time.Hour)
	bad, err := est.Estimate(ctx, run.target(), now)
	if err != nil {
		t.Fatal(err)
	}
	if bad.Status != estimator.StatusInconclusive || bad.DrainRate.Value != nil {
		t.Fatalf("failing estimate: status %s, value %v", bad.Status, bad.DrainRate.Value)
	}
	lg := bad.LastGood
	if lg == nil {
		t.Fatal("the last good estimate was not kept")
	}
	if *lg.DrainRate.Value != *good.DrainRate.Value || !lg.At.Equal(good.At) {
		t.Errorf("last good %v at %v, want %v at %v", *lg.DrainRate.Value, lg.At, *good.DrainRate.Value, good.At)
	}
	if lg.AgeSeconds != (6 * time.Hour).Seconds() {
		t.Errorf("age %vs, want %vs", lg.AgeSeconds, (6 * time.Hour).Seconds())
	}
	if want := good.DrainRate.Confidence / 2; lg.AgedConfidence < want-0.002 || lg.AgedConfidence > want+0.002 {
		t.Errorf("aged confidence %v, want %v (one half-life)", lg.AgedConfidence, want)
	}
}
