package daemon

import (
	"context"
	"fmt"
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

	"github.com/gatetuner/gatetuner/exporter"
	"github.com/gatetuner/gatetuner/tuner/config"
)

// TestEmbeddedScraperStartsInRun: with prometheus.url embedded, New and a
// one-shot RunOnce scrape nothing; Run starts the scraper (its samples are
// in the embedded TSDB) and stops it when Run returns.
func TestEmbeddedScraperStartsInRun(t *testing.T) {
	var scrapes atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		scrapes.Add(1)
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintln(w, "# TYPE scrape_test_value gauge\nscrape_test_value 42")
	}))
	defer srv.Close()

	dir := t.TempDir()
	file := filepath.Join(dir, "epp.yaml")
	if err := os.WriteFile(file, []byte(eppText), 0o644); err != nil {
		t.Fatal(err)
	}
	pol := config.DefaultPolicy()
	pol.Schedule = "@every 1h"
	ct := config.Target{Name: "t", File: file, Selector: config.Selector{VLLM: `namespace="x"`, EPP: `namespace="x"`}, Policy: pol}
	cfg := &config.Config{Prometheus: config.Prometheus{URL: "embedded", Scrape: []string{strings.TrimPrefix(srv.URL, "http://")},
		ScrapeInterval: 200 * time.Millisecond}, Targets: []config.Target{ct}}
	d, err := New(context.Background(), cfg, Deps{Metrics: exporter.New("test", "test"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()

	time.Sleep(500 * time.Millisecond) // more than two intervals
	if n := scrapes.Load(); n != 0 {
		t.Fatalf("New scraped %d times; the scraper starts in Run", n)
	}
	if _, err := d.RunOnce(context.Background(), "t"); err != nil {
		t.Fatal(err)
	}
	if n := scrapes.Load(); n != 0 {
		t.Fatalf("RunOnce scraped %d times; a one-shot cycle starts no background work", n)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	deadline := time.Now().Add(20 * time.Second)
	for scrapes.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := scrapes.Load(); n < 2 {
		cancel()
		t.Fatalf("Run scraped %d times in 20s at a 200ms interval", n)
	}
	v, _, err := d.q.Query(context.Background(), "scrape_test_value", time.Now())
	if err != nil || len(v) != 1 || v[0].Value != 42 {
		t.Errorf("the embedded TSDB after Run's scrapes: %v, %v; want scrape_test_value 42", v, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	after := scrapes.Load()
	time.Sleep(500 * time.Millisecond)
	if n := scrapes.Load(); n != after {
		t.Errorf("%d scrapes after Run returned; the scraper stops with Run", n-after)
	}
}
