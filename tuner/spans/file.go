package spans

import (
	"bufio"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/gatetuner/gatetuner/internal/lines"
)

// The file format of batch mode is OTLP JSON lines, what the OpenTelemetry
// Collector's file exporter writes: one ExportTraceServiceRequest per line
// in the OTLP JSON encoding (protobuf JSON with lowerCamelCase names,
// int64 as strings, enums as numbers, and trace and span ids as hex strings,
// not base64), plain or gzip-compressed.

// DecodeJSON decodes one OTLP JSON ExportTraceServiceRequest into req.
// Unknown fields are ignored, as OTLP receivers must. Ids may be hex (OTLP
// JSON) or base64 (plain protobuf JSON).
func DecodeJSON(b []byte, req *coltracepb.ExportTraceServiceRequest) error {
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, req); err != nil {
		return fmt.Errorf("OTLP JSON: %w", err)
	}
	forEachSpan(req, func(sp *tracepb.Span) {
		sp.TraceId = hexID(sp.TraceId, 16)
		sp.SpanId = hexID(sp.SpanId, 8)
		sp.ParentSpanId = hexID(sp.ParentSpanId, 8)
		for _, l := range sp.Links {
			l.TraceId = hexID(l.TraceId, 16)
			l.SpanId = hexID(l.SpanId, 8)
		}
	})
	return nil
}

func forEachSpan(req *coltracepb.ExportTraceServiceRequest, fn func(*tracepb.Span)) {
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				fn(sp)
			}
		}
	}
}

// hexID undoes protobuf JSON's base64 reading of an OTLP JSON hex id: the
// 2n hex characters of an n-byte id are valid base64 and decode to 3n/2
// bytes, whose base64 encoding gives the hex string back.
func hexID(b []byte, n int) []byte {
	if len(b) != n*3/2 {
		return b
	}
	id, err := hex.DecodeString(base64.StdEncoding.EncodeToString(b))
	if err != nil {
		return b
	}
	return id
}

// hexAsBase64 is the inverse: bytes whose base64 encoding is id's hex.
func hexAsBase64(id []byte) []byte {
	b, err := base64.StdEncoding.DecodeString(hex.EncodeToString(id))
	if err != nil { // only for lengths not a multiple of 2 bytes
		return id
	}
	return b
}

// MarshalJSON encodes req in the OTLP JSON encoding (hex ids), one line
// without the newline.
func MarshalJSON(req *coltracepb.ExportTraceServiceRequest) ([]byte, error) {
	c := proto.Clone(req).(*coltracepb.ExportTraceServiceRequest)
	forEachSpan(c, func(sp *tracepb.Span) {
		sp.TraceId, sp.SpanId = hexAsBase64(sp.TraceId), hexAsBase64(sp.SpanId)
		if len(sp.ParentSpanId) > 0 {
			sp.ParentSpanId = hexAsBase64(sp.ParentSpanId)
		}
		for _, l := range sp.Links {
			l.TraceId, l.SpanId = hexAsBase64(l.TraceId), hexAsBase64(l.SpanId)
		}
	})
	b, err := (protojson.MarshalOptions{UseEnumNumbers: true}).Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("OTLP JSON: %w", err)
	}
	return b, nil
}

// FileWriter writes OTLP JSON lines.
type FileWriter struct {
	w *bufio.Writer
}

// NewFileWriter writes to w; call Flush at the end.
func NewFileWriter(w io.Writer) *FileWriter { return &FileWriter{w: bufio.NewWriter(w)} }

// Write appends one request as a line.
func (f *FileWriter) Write(req *coltracepb.ExportTraceServiceRequest) error {
	b, err := MarshalJSON(req)
	if err != nil {
		return err
	}
	if _, err := f.w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write OTLP JSON line: %w", err)
	}
	return nil
}

// Flush writes out what is buffered.
func (f *FileWriter) Flush() error {
	if err := f.w.Flush(); err != nil {
		return fmt.Errorf("write OTLP JSON lines: %w", err)
	}
	return nil
}

// DefaultMaxLine bounds one line of an OTLP JSON file (64 MiB).
const DefaultMaxLine = 64 << 20

// LineError is a line of an OTLP JSON file that could not be used.
type LineError struct {
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

// ErrLineTooLong is a line over the reader's bound.
var ErrLineTooLong = errors.New("line longer than the bound")

// FileReader reads OTLP JSON lines, plain or gzip (told by the magic bytes).
type FileReader struct {
	lr  *lines.Reader
	req coltracepb.ExportTraceServiceRequest
}

// NewFileReader reads r; a line over maxLine bytes is an error (≤ 0:
// DefaultMaxLine).
func NewFileReader(r io.Reader, maxLine int) *FileReader {
	if maxLine <= 0 {
		maxLine = DefaultMaxLine
	}
	return &FileReader{lr: lines.NewReader(r, 1<<16, maxLine)}
}

// Next returns the next line's request, valid until the next call; blank
// lines are skipped. It returns io.EOF at the end, a *LineError for a line
// that is over-long or not OTLP JSON (the reader can go on past it), and
// other errors for a failed read.
func (f *FileReader) Next() (*coltracepb.ExportTraceServiceRequest, error) {
	for {
		line, overlong, err := f.lr.Next()
		if err != nil {
			return nil, err
		}
		if overlong {
			return nil, &LineError{Line: f.lr.Line(), Err: ErrLineTooLong}
		}
		if lines.ContentLen(line) == 0 {
			continue
		}
		f.req.Reset()
		if err := DecodeJSON(line, &f.req); err != nil {
			return nil, &LineError{Line: f.lr.Line(), Err: err}
		}
		return &f.req, nil
	}
}

// Close releases the decompressor.
func (f *FileReader) Close() error { return f.lr.Close() }
