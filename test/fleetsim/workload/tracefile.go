package workload

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/gatetuner/gatetuner/internal/lines"
)

// TraceBlockTokens is the Mooncake traces' prefix block size: hash_ids[k]
// names prompt tokens [512k, 512(k+1)).
const TraceBlockTokens = 512

// TraceRecord is one request of a Mooncake-format trace (JSON lines:
// timestamp in ms from the trace start, input_length, output_length,
// hash_ids = the prompt's 512-token prefix blocks, the last maybe partial).
type TraceRecord struct {
	// Line is the 1-based line number in the (decompressed) input.
	Line int
	// TimestampMs is the arrival, in milliseconds from the trace start.
	TimestampMs  int64
	InputLength  int32
	OutputLength int32
	// HashIDs alias the reader's buffer: valid until the next call to Next.
	HashIDs []int64
}

// TraceReaderOptions bound what the reader accepts.
type TraceReaderOptions struct {
	// Strict stops at the first bad line (Next returns its *LineError).
	Strict bool
	// MaxLineBytes bounds one line (default 16 MiB); longer lines are bad.
	MaxLineBytes int
	// KeepBadLines bounds how many bad lines are kept for the report (default 100).
	KeepBadLines int
}

// LineError is a bad trace line: its number and why it was rejected.
type LineError struct {
	Line   int    `json:"line"`
	Reason string `json:"reason"`
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Reason) }

// TraceReadStats count what a trace reader has seen.
type TraceReadStats struct {
	Read int64 `json:"read"`
	Bad  int64 `json:"bad"`
}

// TraceReader streams trace records from plain or gzip-compressed JSON lines
// (detected by the gzip magic bytes): memory stays flat however long the
// trace. Bad lines are counted and skipped, or stop reading when strict.
type TraceReader struct {
	lr       *lines.Reader
	opts     TraceReaderOptions
	lastTS   int64
	rec      TraceRecord
	raw      traceLine
	stats    TraceReadStats
	badLines []LineError
}

type traceLine struct {
	Timestamp    json.RawMessage `json:"timestamp"`
	InputLength  json.RawMessage `json:"input_length"`
	OutputLength json.RawMessage `json:"output_length"`
	HashIDs      json.RawMessage `json:"hash_ids"`
}

// NewTraceReader returns a reader over r, decompressing it when it starts
// with the gzip magic bytes.
func NewTraceReader(r io.Reader, opts TraceReaderOptions) (*TraceReader, error) {
	if opts.MaxLineBytes <= 0 {
		opts.MaxLineBytes = 16 << 20
	}
	if opts.KeepBadLines <= 0 {
		opts.KeepBadLines = 100
	}
	tr := &TraceReader{lr: lines.NewReader(r, 64<<10, opts.MaxLineBytes), opts: opts, lastTS: -1}
	if err := tr.lr.Sniff(); err != nil {
		return nil, fmt.Errorf("read trace: %w", err)
	}
	return tr, nil
}

// Stats returns the counts so far.
func (r *TraceReader) Stats() TraceReadStats { return r.stats }

// BadLines returns the first bad lines (up to KeepBadLines).
func (r *TraceReader) BadLines() []LineError { return r.badLines }

// Next returns the next accepted record, or io.EOF at the end. In strict
// mode a bad line ends reading with its *LineError; otherwise it is counted
// and skipped. Other errors are I/O or decompression failures.
func (r *TraceReader) Next() (*TraceRecord, error) {
	for {
		line, overlong, err := r.lr.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, io.EOF
			}
			return nil, fmt.Errorf("read trace: %w", err)
		}
		var reason string
		switch {
		case overlong:
			reason = fmt.Sprintf("line longer than %d bytes", r.opts.MaxLineBytes)
		case len(bytes.TrimSpace(line)) == 0:
			continue
		default:
			reason = r.decode(line)
		}
		if reason != "" {
			r.stats.Bad++
			le := LineError{Line: r.lr.Line(), Reason: reason}
			if len(r.badLines) < r.opts.KeepBadLines {
				r.badLines = append(r.badLines, le)
			}
			if r.opts.Strict {
				return nil, &le
			}
			continue
		}
		r.stats.Read++
		r.lastTS = r.rec.TimestampMs
		return &r.rec, nil
	}
}

// decode parses one line into r.rec; it returns the reason the line is bad, or "".
func (r *TraceReader) decode(line []byte) string {
	if b := bytes.TrimSpace(line); b[0] != '{' {
		if json.Valid(b) {
			return "not a JSON object"
		}
		return "not valid JSON"
	}
	raw := &r.raw
	*raw = traceLine{}
	if err := json.Unmarshal(line, raw); err != nil {
		return "not valid JSON"
	}
	rec := &r.rec
	*rec = TraceRecord{Line: r.lr.Line(), HashIDs: rec.HashIDs[:0]}
	ts, reason := traceInt(raw.Timestamp, "timestamp", 0, math.MaxInt64/int64(1e6))
	if reason != "" {
		return reason
	}
	if ts < r.lastTS {
		return fmt.Sprintf("timestamp: %d goes back before the previous record's %d (records must be in arrival order)", ts, r.lastTS)
	}
	in, reason := traceInt(raw.InputLength, "input_length", 1, math.MaxInt32)
	if reason != "" {
		return reason
	}
	out, reason := traceInt(raw.OutputLength, "output_length", 0, math.MaxInt32)
	if reason != "" {
		return reason
	}
	if len(raw.HashIDs) == 0 || string(raw.HashIDs) == "null" {
		return "hash_ids: missing"
	}
	if err := json.Unmarshal(raw.HashIDs, &rec.HashIDs); err != nil || bytes.Contains(raw.HashIDs, []byte("null")) {
		return "hash_ids: not a list of integers"
	}
	if len(rec.HashIDs) == 0 {
		return "hash_ids: empty"
	}
	for i, id := range rec.HashIDs {
		if id < 0 {
			return fmt.Sprintf("hash_ids[%d]: negative id %d", i, id)
		}
	}
	nb := int64(len(rec.HashIDs))
	if lo, hi := (nb-1)*TraceBlockTokens, nb*TraceBlockTokens; in <= lo || in > hi {
		return fmt.Sprintf("input_length: %d tokens do not fit %d hash_ids of %d tokens (want %d..%d)", in, nb, TraceBlockTokens, lo+1, hi)
	}
	rec.TimestampMs, rec.InputLength, rec.OutputLength = ts, int32(in), int32(out)
	return ""
}

// traceInt reads a required integer field within [lo, hi] (a JSON number
// without a fraction; 1e3 and 1000.0 are accepted as 1000).
func traceInt(raw json.RawMessage, field string, lo, hi int64) (int64, string) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, field + ": missing"
	}
	if c := raw[0]; c != '-' && (c < '0' || c > '9') {
		return 0, fmt.Sprintf("%s: not a number: %s", field, truncateStr(string(raw)))
	}
	v, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(string(raw), 64)
		if ferr != nil || f != math.Trunc(f) || math.Abs(f) >= 1<<53 {
			return 0, fmt.Sprintf("%s: not an integer: %s", field, truncateStr(string(raw)))
		}
		v = int64(f)
	}
	if v < lo || v > hi {
		return 0, fmt.Sprintf("%s: %d out of range [%d, %d]", field, v, lo, hi)
	}
	return v, ""
}

func truncateStr(s string) string {
	if len(s) > 40 {
		return s[:40]
	}
	return s
}

// Close releases the decompressor (the underlying reader is the caller's).
func (r *TraceReader) Close() error { return r.lr.Close() }
