package daemon

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gatetuner/gatetuner/exporter"
	"github.com/gatetuner/gatetuner/test/promharness"
	"github.com/gatetuner/gatetuner/tuner"
	"github.com/gatetuner/gatetuner/tuner/config"
)

// TestStartupCheckSaysWhatCannotWork: an unreachable Prometheus and a
// missing target file show at startup — a warning, gatetuner_target_up 0
// and a report in /reports — while /readyz keeps its meaning; a reachable
// (real) Prometheus and a readable file raise nothing.
func TestStartupCheckSaysWhatCannotWork(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Prometheus")
	}
	srv := promharness.Start(t, promharness.Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte(eppText), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.yaml")
	for _, tc := range []struct {
		name, url string
		file      string
		want      []string // checks that fail
	}{
		{"all well", srv.URL(), good, nil},
		{"Prometheus unreachable", down, good, []string{"prometheus"}},
		{"target file missing", srv.URL(), missing, []string{"epp-config"}},
		{"both", down, missing, []string{"prometheus", "epp-config"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := config.DefaultPolicy()
			cfg := &config.Config{Prometheus: config.Prometheus{URL: tc.url, Timeout: 5 * time.Second},
				Targets: []config.Target{{Name: "a", File: tc.file, Selector: config.Selector{VLLM: `namespace="x"`, EPP: `namespace="x"`}, Policy: pol}}}
			var logs strings.Builder
			metrics := exporter.New("test", "test")
			d, err := New(context.Background(), cfg, Deps{Metrics: metrics, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			h := d.Handler()
			get := func(path string) (int, string) {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
				b, _ := io.ReadAll(rec.Body)
				return rec.Code, string(b)
			}
			readyBefore, _ := get("/readyz")
			ps := d.StartupCheck(context.Background())
			var got []string
			for _, p := range ps {
				got = append(got, p.Check)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("problems %v, want checks %v", ps, tc.want)
			}
			if readyAfter, _ := get("/readyz"); readyAfter != readyBefore {
				t.Errorf("/readyz %d → %d: the startup check must not change it", readyBefore, readyAfter)
			}
			_, body := get("/reports")
			var reps []tuner.Report
			if err := json.Unmarshal([]byte(body), &reps); err != nil {
				t.Fatalf("/reports: %v: %s", err, body)
			}
			if len(tc.want) == 0 {
				if len(reps) != 0 || strings.Contains(logs.String(), "level=WARN") {
					t.Fatalf("a working target was reported: %s\n%s", body, logs.String())
				}
				return
			}
			if up := testutil.ToFloat64(metrics.TargetUp.WithLabelValues("a")); up != 0 {
				t.Errorf("gatetuner_target_up = %v, want 0", up)
			}
			if len(reps) != 1 || reps[0].Result != tuner.ResultError || !strings.Contains(reps[0].Error, "startup check") {
				t.Fatalf("/reports = %s", body)
			}
			for _, c := range tc.want {
				if !strings.Contains(reps[0].Error, c) || !strings.Contains(logs.String(), "check="+c) {
					t.Errorf("%s not in the report %q or the warnings:\n%s", c, reps[0].Error, logs.String())
				}
			}
			if tc.file == missing && !strings.Contains(reps[0].Error, "missing.yaml") {
				t.Errorf("the report does not name the file: %q", reps[0].Error)
			}
		})
	}
}
