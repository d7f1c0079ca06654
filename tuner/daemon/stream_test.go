package daemon

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/estimator/prom"
	"github.com/gatetuner/gatetuner/exporter"
	"github.com/gatetuner/gatetuner/tuner"
	"github.com/gatetuner/gatetuner/tuner/config"
)

// TestRecordsStreamStartsInRunAndItsHealthIsAHold: New starts no
// background work; once Run starts the stream, a stream that cannot connect
// holds its target records-unavailable (naming the error) and exports
// gatetuner_records_stream_up 0; once it connects, the hold and the 0 go.
func TestRecordsStreamStartsInRunAndItsHealthIsAHold(t *testing.T) {
	var up atomic.Bool
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if !up.Load() {
			http.Error(w, "warming up", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()

	dir := t.TempDir()
	file := filepath.Join(dir, "epp.yaml")
	if err := os.WriteFile(file, []byte(eppText), 0o644); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	emb, err := prom.NewEmbedded(prom.EmbeddedConfig{Dir: filepath.Join(dir, "tsdb"), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	pol := config.DefaultPolicy()
	pol.Schedule, pol.DecisionSource = "@every 1h", config.SourceRecords
	ct := config.Target{Name: "t", File: file, Selector: config.Selector{VLLM: `namespace="x"`, EPP: `namespace="x"`}, Policy: pol,
		Records: config.Records{URL: srv.URL}}
	metrics := exporter.New("test", "test")
	d, err := New(context.Background(), &config.Config{Prometheus: config.Prometheus{URL: "embedded"}, Targets: []config.Target{ct}},
		Deps{Querier: emb, Metrics: metrics, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()

	hold := func() *tuner.Hold {
		t.Helper()
		reps, err := d.RunOnce(context.Background(), "t")
		if err != nil {
			t.Fatal(err)
		}
		return reps[0].Hold
	}
	gauge := func() string {
		t.Helper()
		rec := httptest.NewRecorder()
		d.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		for _, l := range strings.Split(rec.Body.String(), "\n") {
			if strings.HasPrefix(l, `gatetuner_records_stream_up{target="t"}`) {
				return strings.Fields(l)[1]
			}
		}
		t.Fatalf("no gatetuner_records_stream_up in /metrics")
		return ""
	}
	eventually := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	time.Sleep(200 * time.Millisecond)
	if n := requests.Load(); n != 0 {
		t.Fatalf("New connected the stream (%d requests): background work belongs in Run", n)
	}
	if h := hold(); h == nil || h.Reason != tuner.HoldRecordsUnavailable || !strings.Contains(h.Detail, "not started") {
		t.Fatalf("before Run: hold %+v, want records-unavailable (not started)", h)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	eventually("the stream's first attempt", func() bool { return requests.Load() > 0 })
	eventually("the stream's error", func() bool {
		h := hold()
		return h != nil && h.Reason == tuner.HoldRecordsUnavailable && strings.Contains(h.Detail, "HTTP 503")
	})
	if g := gauge(); g != "0" {
		t.Errorf("gatetuner_records_stream_up = %s while down, want 0", g)
	}

	up.Store(true)
	eventually("the stream to connect", func() bool { return gauge() == "1" })
	if h := hold(); h != nil && h.Reason == tuner.HoldRecordsUnavailable {
		t.Errorf("connected stream still holds: %+v", h)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended (a stream still running?)")
	}
}
