package live

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/test/fleetsim/internal/fleettest"
	"github.com/gatetuner/gatetuner/test/promharness"
)

// TestLiveFleetScrapedByARealPrometheus serves a live fleet on loopback and
// lets a real Prometheus scrape it at real time.
func TestLiveFleetScrapedByARealPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real Prometheus scraping in real time")
	}
	bin := promharness.Require(t)
	sc := fleettest.Load(t, "quiet")
	live, err := New(sc, Options{Seed: 1, TimeScale: 60})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: live, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- live.Run(ctx, 50*time.Millisecond) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("live run: %v", err)
		}
	})
	srv := promharness.Start(t, promharness.Options{Binaries: bin, ScrapeInterval: time.Second,
		Targets: []promharness.Target{{Job: "fleet", Addrs: []string{ln.Addr().String()}}}})
	deadline := time.Now().Add(60 * time.Second)
	for {
		n, ok := fleettest.Scalar(t, srv, `count(vllm:num_requests_running)`, time.Now())
		g, ok2 := fleettest.Scalar(t, srv, `sum(vllm:generation_tokens_total)`, time.Now())
		if ok && ok2 && int(n) == sc.Pods.Count && g > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus never saw %d pods generating (count %v, tokens %v)\n%s", sc.Pods.Count, n, g, srv.LogTail(20))
		}
		time.Sleep(500 * time.Millisecond)
	}
	// The EPP's in-flight series appear only at an endpoint's first request
	// (docs/exporters.md): wait, within the same deadline, until every
	// endpoint has had one.
	for {
		eps, ok := fleettest.Scalar(t, srv, `count(llm_d_epp_inflight_tokens)`, time.Now())
		if ok && int(eps) == sc.Pods.Count {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("llm_d_epp_inflight_tokens has %v endpoints, want %d", eps, sc.Pods.Count)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
