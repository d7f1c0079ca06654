package receiver_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gatetuner/gatetuner/tuner/spans"
	"github.com/gatetuner/gatetuner/tuner/spans/receiver"
	"github.com/gatetuner/gatetuner/tuner/spans/spanstest"
	"github.com/gatetuner/gatetuner/tuner/spans/window"
)

var epp = spans.Resource{ServiceName: "llm-d-router/epp", Namespace: "llm", Pod: "glm-epp-7d9f-abcde"}

const token = "s3cret-token"

// start runs a receiver on loopback ports into a set with one target.
func start(t *testing.T, dir string, cfg receiver.Config, wo window.Options) (*receiver.Receiver, *window.Set) {
	t.Helper()
	router, err := spans.NewRouter([]spans.Target{{Name: "glm", Namespace: "llm", PodPattern: "glm-epp-.*"}})
	if err != nil {
		t.Fatal(err)
	}
	set, err := window.OpenSet(dir, router, wo)
	if err != nil {
		t.Fatal(err)
	}
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	r := receiver.New(cfg, set)
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.Shutdown(ctx)
		_ = set.Close()
	})
	return r, set
}

// provider is the EPP's tracing setup pointed at the receiver: the resource
// the chart sets, a batch processor that blocks instead of dropping.
func provider(t *testing.T, exp sdktrace.SpanExporter) *sdktrace.TracerProvider {
	t.Helper()
	res := resource.NewSchemaless(spanstest.ResourceAttrs(epp)...)
	return sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithBatcher(exp, sdktrace.WithBlocking(), sdktrace.WithMaxQueueSize(8192),
			sdktrace.WithMaxExportBatchSize(512), sdktrace.WithBatchTimeout(50*time.Millisecond)),
	)
}

func grpcExporter(t *testing.T, addr, tok string, opts ...otlptracegrpc.Option) *otlptrace.Exporter {
	t.Helper()
	opts = append([]otlptracegrpc.Option{otlptracegrpc.WithEndpoint(addr), otlptracegrpc.WithInsecure(),
		otlptracegrpc.WithHeaders(map[string]string{"authorization": "Bearer " + tok}),
		otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig{Enabled: false})}, opts...)
	exp, err := otlptracegrpc.New(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exp.Shutdown(context.Background()) })
	return exp
}

// recorded returns n ended EPP-shaped spans from the SDK, for direct
// ExportSpans calls.
func recorded(n int) []sdktrace.ReadOnlySpan {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithResource(resource.NewSchemaless(spanstest.ResourceAttrs(epp)...)),
		sdktrace.WithSpanProcessor(rec))
	tr := spanstest.Tracer(tp)
	for i := range n {
		spanstest.Emit(context.Background(), tr, spanstest.Sticky(float64(i), "glm-5", fmt.Sprintf("r-%d", i)))
	}
	return rec.Ended()
}

// The proof: the EPP's own exporter library sends 20,000 spans/s for 10 s
// and the receiver stores every one (counts, not time: the achieved rate
// is logged).
func TestSDKExporterAt20kSpansPerSecondLosesNone(t *testing.T) {
	if testing.Short() {
		t.Skip("10 s of load")
	}
	r, set := start(t, "", receiver.Config{BearerToken: token}, window.Options{MaxSpans: 1 << 18})
	tp := provider(t, grpcExporter(t, r.GRPCAddr(), token))
	tr := spanstest.Tracer(tp)
	// Paced by the clock, not by ticks (a late tick catches up): 20,000
	// spans for every second since the start, 200,000 in all.
	const rate, want = 20000, 200000
	startAt := time.Now()
	for sent := 0; sent < want; time.Sleep(5 * time.Millisecond) {
		due := min(want, int(time.Since(startAt).Seconds()*rate))
		for ; sent < due; sent++ {
			spanstest.Emit(context.Background(), tr, spanstest.Sticky(float64(sent%5000), "glm-5", fmt.Sprintf("r-%d", sent)))
		}
	}
	produced := time.Since(startAt)
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := r.Stats()
	t.Logf("%d spans produced in %v (%.0f spans/s); receiver: %d requests, refused %v", want, produced,
		want/produced.Seconds(), st.Requests, st.Refused)
	if got := set.Window("glm").Len(); got != want || st.Spans.Gate != want || st.Spans.MalformedTotal() != 0 {
		t.Fatalf("stored %d of %d spans; stats %+v", got, want, st)
	}
}

func TestSDKHTTPExporterSendsProtobufAndJSON(t *testing.T) {
	r, set := start(t, "", receiver.Config{BearerToken: token}, window.Options{})
	for i, enc := range []otlptracehttp.Encoding{otlptracehttp.EncodingProtobuf, otlptracehttp.EncodingJSON} {
		exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpoint(r.HTTPAddr()), otlptracehttp.WithInsecure(),
			otlptracehttp.WithEncoding(enc), otlptracehttp.WithCompression(otlptracehttp.GzipCompression),
			otlptracehttp.WithHeaders(map[string]string{"Authorization": "Bearer " + token}))
		if err != nil {
			t.Fatal(err)
		}
		if err := exp.ExportSpans(context.Background(), recorded(1000)); err != nil {
			t.Fatalf("encoding %d: %v", enc, err)
		}
		_ = exp.Shutdown(context.Background())
		if got := set.Window("glm").Len(); got != 1000*(i+1) {
			t.Fatalf("encoding %d: stored %d", enc, got)
		}
	}
	v := set.Window("glm").View(time.Time{}, time.Time{})
	last := &v.Records[len(v.Records)-1]
	if v.Tables.Model(last) != "glm-5" || last.PenaltyMs != 999 || last.Flags&spans.FlagRequestID == 0 {
		t.Fatalf("JSON-sent record %+v", *last)
	}
}

func post(t *testing.T, addr, ctype, enc, tok string, body []byte) (*http.Response, *rpcstatus.Status) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+receiver.TracesPath, bytes.NewReader(body))
	req.Header.Set("Content-Type", ctype)
	if enc != "" {
		req.Header.Set("Content-Encoding", enc)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	st := &rpcstatus.Status{}
	if resp.StatusCode != http.StatusOK {
		if err := proto.Unmarshal(b, st); err != nil && ctype == "application/x-protobuf" {
			t.Fatalf("error body is no Status: %v", err)
		}
	}
	return resp, st
}

// rawCodec sends bytes as they are, to put garbage on the gRPC wire.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)   { return v.([]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error { *(v.(*[]byte)) = b; return nil }
func (rawCodec) Name() string                    { return "proto" }

func TestGarbageGets4xxAndTheNextGoodSenderIsServed(t *testing.T) {
	r, set := start(t, "", receiver.Config{BearerToken: token}, window.Options{})
	garbage := []byte("\xff\xff\xff\xff not a protobuf \x00\x01")
	if resp, st := post(t, r.HTTPAddr(), "application/x-protobuf", "", token, garbage); resp.StatusCode != 400 ||
		!strings.Contains(st.Message, "not an ExportTraceServiceRequest") || st.Code != int32(codes.InvalidArgument) {
		t.Fatalf("protobuf garbage: %d %v", resp.StatusCode, st)
	}
	if resp, _ := post(t, r.HTTPAddr(), "application/json", "", token, []byte(`{"resourceSpans": 7`)); resp.StatusCode != 400 {
		t.Fatalf("JSON garbage: %d", resp.StatusCode)
	}
	if resp, _ := post(t, r.HTTPAddr(), "application/x-protobuf", "gzip", token, garbage); resp.StatusCode != 400 {
		t.Fatalf("bad gzip: %d", resp.StatusCode)
	}
	if resp, _ := post(t, r.HTTPAddr(), "text/plain", "", token, garbage); resp.StatusCode != 415 {
		t.Fatalf("text/plain: %d", resp.StatusCode)
	}
	conn, err := grpc.NewClient(r.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var out []byte
	ctx := withToken(context.Background(), token)
	err = conn.Invoke(ctx, "/opentelemetry.proto.collector.trace.v1.TraceService/Export", garbage, &out, grpc.ForceCodec(rawCodec{}))
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("gRPC garbage: %v (server %+v)", err, r.Stats().Refused)
	}
	exp := grpcExporter(t, r.GRPCAddr(), token)
	if err := exp.ExportSpans(context.Background(), recorded(10)); err != nil {
		t.Fatalf("good sender after garbage: %v", err)
	}
	if got := set.Window("glm").Len(); got != 10 {
		t.Fatalf("stored %d", got)
	}
	st := r.Stats()
	if st.Refused[receiver.RefusedMalformed] != 4 || st.Refused[receiver.RefusedUnsupported] != 1 {
		t.Fatalf("refusals %v", st.Refused)
	}
}

func withToken(ctx context.Context, tok string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
}

func httpPost(addr string, body []byte) ([]byte, error) {
	resp, err := http.Post("http://"+addr+receiver.TracesPath, "application/x-protobuf", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}
