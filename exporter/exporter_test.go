package exporter

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetricsAreRegisteredWithTheirPrefix(t *testing.T) {
	m := New("v1.2.3", "abc")
	m.DrainRate.WithLabelValues("qwen").Set(4783)
	m.Holds.WithLabelValues("qwen", "deadband").Inc()
	m.ObserveQuery("http", 20*time.Millisecond, "timeout")
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, mf := range mfs {
		seen[mf.GetName()] = true
		if !strings.HasPrefix(mf.GetName(), "gatetuner_") && !strings.HasPrefix(mf.GetName(), "go_") && !strings.HasPrefix(mf.GetName(), "process_") {
			t.Errorf("metric %s lacks the gatetuner_ prefix", mf.GetName())
		}
	}
	for _, name := range []string{"gatetuner_drain_rate_tokens_per_second", "gatetuner_holds_total", "gatetuner_query_errors_total", "gatetuner_build_info"} {
		if !seen[name] {
			t.Errorf("%s not exposed", name)
		}
	}
	if got := testutil.ToFloat64(m.QueryErrors.WithLabelValues("http", "timeout")); got != 1 {
		t.Fatalf("query errors = %v", got)
	}
}

func TestTracingIsOffWithoutOTELVariables(t *testing.T) {
	tr, err := SetupTracing(context.Background(), func(string) string { return "" }, "v")
	if err != nil || tr.Exporting {
		t.Fatalf("tracing = %+v, %v", tr, err)
	}
	_, span := tr.Tracer.Start(context.Background(), "cycle")
	if span.IsRecording() {
		t.Fatal("span recorded with tracing off")
	}
	span.End()
}

// TestTracingExportsOverOTLPHTTP: with OTEL_EXPORTER_OTLP_ENDPOINT set,
// spans are POSTed to /v1/traces.
func TestTracingExportsOverOTLPHTTP(t *testing.T) {
	var posts atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/traces" && len(body) > 0 {
			posts.Add(1)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL, "OTEL_SERVICE_NAME": "gatetuner-test"}
	tr, err := SetupTracing(context.Background(), func(k string) string { return env[k] }, "v")
	if err != nil || !tr.Exporting {
		t.Fatalf("tracing = %+v, %v", tr, err)
	}
	_, span := tr.Tracer.Start(context.Background(), "cycle")
	span.End()
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if posts.Load() == 0 {
		t.Fatal("no span reached the OTLP endpoint")
	}
	if _, err := SetupTracing(context.Background(), func(k string) string {
		return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL, "OTEL_TRACES_EXPORTER": "zipkin"}[k]
	}, "v"); err == nil {
		t.Fatal("unsupported exporter accepted")
	}
}
