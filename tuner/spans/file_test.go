package spans_test

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/spans"
	"github.com/gatetuner/gatetuner/tuner/spans/spanstest"
)

func TestFileReadsTheCollectorFileExportersLines(t *testing.T) {
	f, err := os.Open("testdata/collector-file-exporter.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fr := spans.NewFileReader(f, 0)
	var got []spans.GateSpan
	var c spans.Counts
	for {
		req, err := fr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		spans.Extract(req, &c, func(gs *spans.GateSpan) { got = append(got, *gs) })
	}
	if len(got) != 2 || c.Skipped != 1 || c.MalformedTotal() != 0 {
		t.Fatalf("%d spans, counts %+v", len(got), c)
	}
	g := got[0]
	if hex.EncodeToString(g.TraceID[:]) != "5b8efff798038103d269b633813fc60c" || hex.EncodeToString(g.SpanID[:]) != "eee19b7ec3c1b174" {
		t.Fatalf("ids %x %x", g.TraceID, g.SpanID)
	}
	if g.Outcome != gate.OutcomeSticky || g.PenaltyMs != 1234.5 || g.Sticky != 2 || g.Candidates != 8 || g.Model != "glm-5" ||
		g.RequestID != "r-1" || g.Resource.Pod != "glm-epp-7d9f-abcde" || g.EndNano != 1764403200000012000 {
		t.Fatalf("span %+v", g)
	}
	if got[1].Outcome != gate.OutcomeNoMatch || got[1].Resource.ServiceName != "" {
		t.Fatalf("second span %+v", got[1])
	}
}

func TestFileRoundTripsRequestsPlainAndGzip(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	var reqs []*coltracepb.ExportTraceServiceRequest
	for i := range 5 {
		reqs = append(reqs, spanstest.Request(pool, []spanstest.Decision{spanstest.Sticky(float64(i), "m", "r"),
			{Outcome: "exploration", Candidates: 3, Threshold: 0.8}}, 5e18+int64(i), rng))
	}
	var plain bytes.Buffer
	w := spans.NewFileWriter(&plain)
	for _, r := range reqs {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	// OTLP JSON: ids in hex, one request per line.
	tid := reqs[0].ResourceSpans[0].ScopeSpans[0].Spans[0].TraceId
	if !strings.Contains(plain.String(), `"`+hex.EncodeToString(tid)+`"`) || strings.Count(plain.String(), "\n") != 5 {
		t.Fatalf("not OTLP JSON lines:\n%s", plain.String())
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(plain.Bytes())
	_ = zw.Close()
	for name, in := range map[string][]byte{"plain": plain.Bytes(), "gzip": gz.Bytes()} {
		fr := spans.NewFileReader(bytes.NewReader(in), 0)
		for i, want := range reqs {
			got, err := fr.Next()
			if err != nil {
				t.Fatalf("%s line %d: %v", name, i+1, err)
			}
			if !proto.Equal(got, want) {
				t.Fatalf("%s line %d differs", name, i+1)
			}
		}
		if _, err := fr.Next(); !errors.Is(err, io.EOF) {
			t.Fatalf("%s: want EOF, got %v", name, err)
		}
	}
}

func TestFileNamesABadLineAndGoesOn(t *testing.T) {
	in := "{\"resourceSpans\":[]}\nnot json\n" + strings.Repeat("x", 200) + "\n{}\n"
	fr := spans.NewFileReader(strings.NewReader(in), 100)
	var lines []int
	var le *spans.LineError
	for {
		_, err := fr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if errors.As(err, &le) {
			lines = append(lines, le.Line)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(lines) != 2 || lines[0] != 2 || lines[1] != 3 {
		t.Fatalf("bad lines %v", lines)
	}
}
