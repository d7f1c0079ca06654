package spans_test

import (
	"bytes"
	"errors"
	"io"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/gatetuner/gatetuner/tuner/spans"
)

// extractChecked extracts req and holds the counts' invariants.
func extractChecked(t *testing.T, req *coltracepb.ExportTraceServiceRequest) {
	var c spans.Counts
	var n uint64
	spans.Extract(req, &c, func(gs *spans.GateSpan) {
		n++
		if gs.HasSticky && gs.Sticky > gs.Candidates || gs.EndNano < gs.StartNano {
			t.Fatalf("accepted an inconsistent span %+v", gs)
		}
		in := spans.NewInterner()
		r, _ := in.Record(gs)
		if spans.DecodeRecord(r.AppendBinary(nil)) != r {
			t.Fatalf("record does not round-trip: %+v", r)
		}
	})
	if c.Gate != n+c.MalformedTotal() || c.Spans != c.Gate+c.Skipped {
		t.Fatalf("counts do not add up: accepted %d, %+v", n, c)
	}
	if c.MalformedTotal() > 0 && c.FirstFault == "" {
		t.Fatal("a malformed span without a message")
	}
}

func FuzzExtractProtobuf(f *testing.F) {
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		req := &coltracepb.ExportTraceServiceRequest{}
		if proto.Unmarshal(b, req) != nil {
			return
		}
		extractChecked(t, req)
	})
}

func FuzzDecodeJSON(f *testing.F) {
	f.Add([]byte(`{"resourceSpans":[]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		req := &coltracepb.ExportTraceServiceRequest{}
		if spans.DecodeJSON(b, req) != nil {
			return
		}
		extractChecked(t, req)
		// What decodes encodes and decodes back to the same request.
		out, err := spans.MarshalJSON(req)
		if err != nil {
			t.Fatalf("marshal a decoded request: %v", err)
		}
		back := &coltracepb.ExportTraceServiceRequest{}
		if err := spans.DecodeJSON(out, back); err != nil {
			t.Fatalf("decode our own line: %v\n%s", err, out)
		}
		if !proto.Equal(req, back) {
			t.Fatalf("round trip differs:\n%s", out)
		}
	})
}

func FuzzFileReader(f *testing.F) {
	f.Add([]byte("{}\n{\"resourceSpans\":[]}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr := spans.NewFileReader(bytes.NewReader(b), 4096)
		for range len(b) + 2 {
			req, err := fr.Next()
			var le *spans.LineError
			switch {
			case errors.Is(err, io.EOF):
				return
			case errors.As(err, &le):
				continue
			case err != nil:
				return // a bad gzip stream ends the input
			}
			extractChecked(t, req)
		}
		t.Fatal("reader did not reach the end")
	})
}
