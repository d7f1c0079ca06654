package daemon

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/estimator/prom"
	"github.com/gatetuner/gatetuner/exporter"
	"github.com/gatetuner/gatetuner/tuner"
	"github.com/gatetuner/gatetuner/tuner/config"
)

const eppText = `apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: prefix-cache-affinity-filter
  parameters:
    maxTTFTPenaltyMs: 18000
`

// TestScheduleKeepsGoingPastABrokenTarget: cycles run on their schedule for
// every target; a target whose config cannot be read errors without stopping
// the others; Run returns once its context ends; the HTTP surface answers.
func TestScheduleKeepsGoingPastABrokenTarget(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte(eppText), 0o644); err != nil {
		t.Fatal(err)
	}
	emb, err := prom.NewEmbedded(prom.EmbeddedConfig{Dir: filepath.Join(dir, "tsdb"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	pol := config.DefaultPolicy()
	pol.Schedule = "@every 1s"
	pol.Lookback = 10 * time.Minute
	pol.History = pol.Lookback // the evidence the test filled (history no longer follows the lookback)
	mk := func(name, file string) config.Target {
		return config.Target{Name: name, File: file, Selector: config.Selector{VLLM: `namespace="x"`, EPP: `namespace="x"`}, Policy: pol}
	}
	cfg := &config.Config{Prometheus: config.Prometheus{URL: "embedded"},
		Targets: []config.Target{mk("good", good), mk("broken", filepath.Join(dir, "missing.yaml"))}}
	metrics := exporter.New("test", "test")
	d, err := New(context.Background(), cfg, Deps{Querier: emb, Metrics: metrics, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3500*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/reports")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var reps []tuner.Report
	if err := json.NewDecoder(resp.Body).Decode(&reps); err != nil {
		t.Fatal(err)
	}
	byName := map[string]tuner.Report{}
	for _, r := range reps {
		byName[r.Target] = r
	}
	if r, ok := byName["broken"]; !ok || r.Result != tuner.ResultError {
		t.Fatalf("broken target: %+v", r)
	}
	if r, ok := byName["good"]; !ok || r.Result == tuner.ResultError {
		t.Fatalf("good target did not cycle past the broken one: %+v", r)
	}
	// With no data in Prometheus the good target holds and says why.
	if r := byName["good"]; r.Result != tuner.ResultHeld || r.Hold == nil {
		t.Fatalf("good target without data: %s %+v, want held", r.Result, r.Hold)
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %v %v", path, err, resp.Status)
		}
		resp.Body.Close()
	}
}
