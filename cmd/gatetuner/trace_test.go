package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestSimulateLiveTraceIsCompressedInContent: simulate --live --trace with
// --time-scale serves the trace's pool on /metrics at real time (it used to
// refuse: traces could not be compressed), says the trace keeps its rate
// while the scenario is compressed, and ends with the trace's summary.
func TestSimulateLiveTraceIsCompressedInContent(t *testing.T) {
	if testing.Short() {
		t.Skip("serves a live simulated pool for a few seconds")
	}
	addr := closedPort(t)
	var wg sync.WaitGroup
	var out, errs strings.Builder
	code := -1
	wg.Add(1)
	go func() {
		defer wg.Done()
		code = run(context.Background(), []string{"simulate", "--live", "--trace", "../../test/fleetsim/traces/mooncake-conversation.jsonl.gz",
			"--pods", "4", "--trace-utilization", "0.5", "--time-scale", "6", "--listen", addr, "--duration", "8s"},
			strings.NewReader(""), &out, &errs)
	}()
	var prompt bool
	for deadline := time.Now().Add(8 * time.Second); time.Now().Before(deadline) && !prompt; time.Sleep(500 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, l := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(l, "vllm:prompt_tokens_total{") && !strings.HasSuffix(l, " 0") {
				prompt = true
			}
		}
	}
	wg.Wait()
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out.String(), errs.String())
	}
	if !prompt {
		t.Errorf("/metrics never showed prompt tokens while serving:\n%s", out.String())
	}
	for _, want := range []string{"serving trace-saturation's metrics", "at scale ", "phases 6× shorter",
		"(picked for 50 % prefill utilization)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
