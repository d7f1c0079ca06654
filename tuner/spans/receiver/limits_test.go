package receiver_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gatetuner/gatetuner/tuner/spans"
	"github.com/gatetuner/gatetuner/tuner/spans/receiver"
	"github.com/gatetuner/gatetuner/tuner/spans/spanstest"
	"github.com/gatetuner/gatetuner/tuner/spans/window"
)

func TestWrongOrMissingTokenIsRefused(t *testing.T) {
	r, set := start(t, "", receiver.Config{BearerToken: token}, window.Options{})
	body, _ := proto.Marshal(spanstest.Request(epp, []spanstest.Decision{spanstest.Sticky(1, "m", "r")}, time.Now().UnixNano(), rand.New(rand.NewPCG(1, 2))))
	for _, tok := range []string{"", "wrong", token + "x"} {
		resp, st := post(t, r.HTTPAddr(), "application/x-protobuf", "", tok, body)
		if resp.StatusCode != 401 || st.Code != int32(codes.Unauthenticated) || resp.Header.Get("WWW-Authenticate") == "" {
			t.Fatalf("token %q: %d %v", tok, resp.StatusCode, st)
		}
	}
	err := grpcExporter(t, r.GRPCAddr(), "wrong").ExportSpans(context.Background(), recorded(3))
	if status.Code(err) != codes.Unauthenticated && !strings.Contains(err.Error(), "Unauthenticated") {
		t.Fatalf("gRPC wrong token: %v", err)
	}
	if set.Window("glm").Len() != 0 {
		t.Fatal("an unauthenticated span was stored")
	}
	if resp, _ := post(t, r.HTTPAddr(), "application/x-protobuf", "", token, body); resp.StatusCode != 200 {
		t.Fatalf("right token: %d", resp.StatusCode)
	}
	if st := r.Stats(); st.Refused[receiver.RefusedAuth] != 4 {
		t.Fatalf("auth refusals %v", st.Refused)
	}
}

func TestOversizedBodiesAreRefused(t *testing.T) {
	r, set := start(t, "", receiver.Config{MaxBodyBytes: 100 << 10, MaxDecodedBytes: 200 << 10}, window.Options{})
	rng := rand.New(rand.NewPCG(3, 4))
	ds := make([]spanstest.Decision, 2000)
	for i := range ds {
		ds[i] = spanstest.Sticky(float64(i), "glm-5", "request-id-with-some-length")
	}
	big, _ := proto.Marshal(spanstest.Request(epp, ds, time.Now().UnixNano(), rng))
	if resp, st := post(t, r.HTTPAddr(), "application/x-protobuf", "", "", big); resp.StatusCode != 413 || st.Code != int32(codes.ResourceExhausted) {
		t.Fatalf("%d-byte body: %d %v", len(big), resp.StatusCode, st)
	}
	// The same body without a length (chunked) is cut at the bound.
	req, _ := http.NewRequest(http.MethodPost, "http://"+r.HTTPAddr()+receiver.TracesPath, io.MultiReader(bytes.NewReader(big)))
	req.Header.Set("Content-Type", "application/x-protobuf")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 413 || req.ContentLength != 0 {
		t.Fatalf("chunked %d-byte body: %d", len(big), resp.StatusCode)
	}
	// Small on the wire, large once decompressed.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(big)
	_ = zw.Close()
	if gz.Len() > 100<<10 || len(big) < 200<<10 {
		t.Fatalf("test body of %d bytes compresses to %d bytes", len(big), gz.Len())
	}
	if resp, _ := post(t, r.HTTPAddr(), "application/x-protobuf", "gzip", "", gz.Bytes()); resp.StatusCode != 413 {
		t.Fatalf("gzip bomb: %d", resp.StatusCode)
	}
	err = grpcExporter(t, r.GRPCAddr(), "").ExportSpans(context.Background(), recorded(2000))
	if status.Code(err) != codes.ResourceExhausted && !strings.Contains(err.Error(), "ResourceExhausted") {
		t.Fatalf("gRPC oversized: %v", err)
	}
	if set.Window("glm").Len() != 0 {
		t.Fatal("an oversized export was stored")
	}
	// The receiver still serves a sender within the bounds.
	if err := grpcExporter(t, r.GRPCAddr(), "").ExportSpans(context.Background(), recorded(10)); err != nil {
		t.Fatal(err)
	}
}

func TestAFloodingPeerIsToldToRetryLater(t *testing.T) {
	r, set := start(t, "", receiver.Config{PeerSpansPerSecond: 100, PeerBurst: 200, RetryAfter: 2 * time.Second}, window.Options{})
	rng := rand.New(rand.NewPCG(5, 6))
	ds := make([]spanstest.Decision, 150)
	for i := range ds {
		ds[i] = spanstest.Sticky(1, "m", "r")
	}
	body, _ := proto.Marshal(spanstest.Request(epp, ds, time.Now().UnixNano(), rng))
	if resp, _ := post(t, r.HTTPAddr(), "application/x-protobuf", "", "", body); resp.StatusCode != 200 {
		t.Fatalf("first: %d", resp.StatusCode)
	}
	resp, st := post(t, r.HTTPAddr(), "application/x-protobuf", "", "", body)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "2" || st.Code != int32(codes.ResourceExhausted) {
		t.Fatalf("second: %d %q %v", resp.StatusCode, resp.Header.Get("Retry-After"), st)
	}
	err := grpcExporter(t, r.GRPCAddr(), "").ExportSpans(context.Background(), recorded(150))
	s, _ := status.FromError(err)
	var retry *errdetails.RetryInfo
	for _, d := range s.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			retry = ri
		}
	}
	if s.Code() != codes.ResourceExhausted || retry == nil || retry.RetryDelay.AsDuration() != 2*time.Second {
		t.Fatalf("gRPC flood: %v (retry %v)", err, retry)
	}
	if got := set.Window("glm").Len(); got != 150 {
		t.Fatalf("stored %d", got)
	}
	if st := r.Stats(); st.Refused[receiver.RefusedThrottled] != 2 || st.DroppedSpans != 300 {
		t.Fatalf("stats %+v", st)
	}
}

func TestPartialSuccessNamesTheRejectedSpans(t *testing.T) {
	r, set := start(t, "", receiver.Config{}, window.Options{})
	rng := rand.New(rand.NewPCG(7, 8))
	now := time.Now().UnixNano()
	req := spanstest.Request(epp, []spanstest.Decision{spanstest.Sticky(1, "m", "r"),
		{Outcome: "load_override", Candidates: 4, Sticky: 1, HasSticky: true, Threshold: 0.8}}, now, rng)
	other := spanstest.Request(spans.Resource{Namespace: "elsewhere", Pod: "x"}, []spanstest.Decision{spanstest.Sticky(1, "m", "r")}, now, rng)
	req.ResourceSpans = append(req.ResourceSpans, other.ResourceSpans...)
	body, _ := proto.Marshal(req)
	resp, _ := post(t, r.HTTPAddr(), "application/x-protobuf", "", "", body)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	// post drained the body; send again and read the response.
	res := exportHTTP(t, r.HTTPAddr(), body)
	ps := res.GetPartialSuccess()
	if ps.GetRejectedSpans() != 2 || !strings.Contains(ps.GetErrorMessage(), "1 malformed (inconsistent)") ||
		!strings.Contains(ps.GetErrorMessage(), "1 matching no target") {
		t.Fatalf("partial success %v", ps)
	}
	if got := set.Window("glm").Len(); got != 2 {
		t.Fatalf("stored %d", got)
	}
}

func exportHTTP(t *testing.T, addr string, body []byte) *coltracepb.ExportTraceServiceResponse {
	t.Helper()
	resp, err := httpPost(addr, body)
	if err != nil {
		t.Fatal(err)
	}
	res := &coltracepb.ExportTraceServiceResponse{}
	if err := proto.Unmarshal(resp, res); err != nil {
		t.Fatal(err)
	}
	return res
}

func TestSpansSurviveARestartAndATornTail(t *testing.T) {
	dir := t.TempDir()
	wo := window.Options{MaxAge: time.Hour}
	r, set := start(t, dir, receiver.Config{}, wo)
	if err := grpcExporter(t, r.GRPCAddr(), "").ExportSpans(context.Background(), recorded(1000)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := set.Close(); err != nil {
		t.Fatal(err)
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "glm", "seg-*.gts"))
	if len(segs) == 0 {
		t.Fatal("no segment written")
	}
	last := segs[len(segs)-1]
	fi, _ := os.Stat(last)
	if err := os.Truncate(last, fi.Size()-7); err != nil {
		t.Fatal(err)
	}
	r2, set2 := start(t, dir, receiver.Config{}, wo)
	w := set2.Window("glm")
	if w.Len() != 999 || w.Stats().TornBytes != 53-7 {
		t.Fatalf("after restart: %d records, %+v", w.Len(), w.Stats())
	}
	if err := grpcExporter(t, r2.GRPCAddr(), "").ExportSpans(context.Background(), recorded(5)); err != nil {
		t.Fatal(err)
	}
	if w.Len() != 1004 {
		t.Fatalf("after new spans: %d", w.Len())
	}
}
