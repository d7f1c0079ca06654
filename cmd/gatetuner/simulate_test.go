package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSimulateExportersFlagShapesTheMetrics(t *testing.T) {
	dir := t.TempDir()
	m := filepath.Join(dir, "m.om")
	code, _, errs := gt(t, "", "simulate", "--scenario", "calibration-1970", "--last", "warm", "--metrics", m,
		"--exporters", "llm-d-2026,dpRanks=2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	data, err := os.ReadFile(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`endpoint_name="llama-3-2-3b-cpu-decode-0-rank-1"`, `exported_namespace="llm-d"`, "vllm:num_requests_waiting_by_reason"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(string(data), `endpoint="8001"`) {
		t.Error("rank 1's vLLM port was scraped; llm-d's PodMonitor scrapes 8000 only")
	}
}

func TestSimulateRejectsABadExportShape(t *testing.T) {
	for _, spec := range []string{"nope", "llm-d-2026,dpRanks=0", "llm-d-2026,colour=red"} {
		code, _, errs := gt(t, "", "simulate", "--scenario", "calibration-1970", "--exporters", spec)
		if code != 2 || !strings.Contains(errs, "--exporters") {
			t.Errorf("--exporters %s: exit %d, stderr %q; want 2 naming the flag", spec, code, errs)
		}
	}
}
