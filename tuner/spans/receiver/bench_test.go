//go:build unix

package receiver_test

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"syscall"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/gatetuner/gatetuner/tuner/spans/receiver"
	"github.com/gatetuner/gatetuner/tuner/spans/spanstest"
	"github.com/gatetuner/gatetuner/tuner/spans/window"
)

// batchSize is the SDK batch processor's default export size.
const batchSize = 512

// benchRequest is one export of batchSize EPP-shaped spans with the mix of
// decisions of a busy pool.
func benchRequest(now int64) *coltracepb.ExportTraceServiceRequest {
	rng := rand.New(rand.NewPCG(1, 2))
	ds := make([]spanstest.Decision, batchSize)
	for i := range ds {
		switch i % 4 {
		case 0:
			ds[i] = spanstest.Decision{Outcome: "no_match", Candidates: 8, HasSticky: true, Threshold: 0.8, Model: "glm-5", RequestID: "chatcmpl-0123456789abcdef"}
		case 1:
			ds[i] = spanstest.Decision{Outcome: "load_override", Candidates: 8, Sticky: 1, HasSticky: true, Threshold: 0.8,
				PenaltyMs: 9000 + float64(i), HasPenalty: true, Model: "glm-5", RequestID: "chatcmpl-0123456789abcdef"}
		default:
			ds[i] = spanstest.Sticky(float64(i), "glm-5", "chatcmpl-0123456789abcdef")
		}
	}
	return spanstest.Request(epp, ds, now, rng)
}

// benchReceiver runs a receiver with a window large enough that the
// benchmark measures ingest, not eviction.
func benchReceiver(b *testing.B) *receiver.Receiver {
	b.Helper()
	r, _ := start(&testing.T{}, "", receiver.Config{PeerSpansPerSecond: 1e12, PeerBurst: 1 << 30},
		window.Options{MaxSpans: 1 << 20, MaxAge: 24 * time.Hour})
	return r
}

// cpuTime is the process's user+system CPU time: on shared cores the wall
// time of a benchmark is an upper bound, its CPU time is what it costs.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportSpans reports wall and CPU time per span; cpu0 is cpuTime at the
// start (the CPU time includes the benchmark's own client).
func reportSpans(b *testing.B, cpu0 time.Duration) {
	n := float64(b.N * batchSize)
	cpu := cpuTime() - cpu0
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/span")
	b.ReportMetric(n/b.Elapsed().Seconds(), "spans/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/n, "cpu-ns/span")
	b.ReportMetric(n/cpu.Seconds(), "spans/cpu-s")
}

func BenchmarkIngestHTTPProtobuf(b *testing.B) {
	r := benchReceiver(b)
	body, _ := proto.Marshal(benchRequest(time.Now().UnixNano()))
	url := "http://" + r.HTTPAddr() + receiver.TracesPath
	client := &http.Client{}
	b.SetBytes(int64(len(body)))
	cpu0 := cpuTime()
	for b.Loop() {
		resp, err := client.Post(url, "application/x-protobuf", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	reportSpans(b, cpu0)
}

func BenchmarkIngestGRPC(b *testing.B) {
	r := benchReceiver(b)
	req := benchRequest(time.Now().UnixNano())
	conn, err := grpc.NewClient(r.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	client := coltracepb.NewTraceServiceClient(conn)
	b.SetBytes(int64(proto.Size(req)))
	cpu0 := cpuTime()
	for b.Loop() {
		if _, err := client.Export(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
	reportSpans(b, cpu0)
}

// BenchmarkIngestCore is the work behind either transport without the
// network: decode the protobuf, extract, route, append to a window.
func BenchmarkIngestCore(b *testing.B) {
	_, set := start(&testing.T{}, "", receiver.Config{}, window.Options{MaxSpans: 1 << 20, MaxAge: 24 * time.Hour})
	body, _ := proto.Marshal(benchRequest(time.Now().UnixNano()))
	b.SetBytes(int64(len(body)))
	cpu0 := cpuTime()
	for b.Loop() {
		req := &coltracepb.ExportTraceServiceRequest{}
		if err := proto.Unmarshal(body, req); err != nil {
			b.Fatal(err)
		}
		if in, err := set.Ingest(req); err != nil || in.Stored != batchSize {
			b.Fatalf("%+v %v", in, err)
		}
	}
	reportSpans(b, cpu0)
}
