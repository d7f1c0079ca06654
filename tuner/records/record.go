// Package records reads gate records: JSON lines, one prefix-cache-affinity
// filter decision's exact input each (the format is in docs/records.md).
//
// The Reader streams: memory stays flat however long the input, and a
// record's byte fields are valid only until the next call to Next.
package records

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/internal/lines"
)

// Record is one filter decision's input.
type Record struct {
	// Line is the 1-based line number in the input.
	Line int
	// TS is the decision time; zero when absent.
	TS time.Time
	// RequestID, Target and Plugin alias the reader's buffers.
	RequestID, Target, Plugin []byte
	// PromptTokens is the request's prompt length; -1 when absent.
	PromptTokens int64
	// Endpoints are the candidates in input order; Names[i] names Endpoints[i].
	Endpoints []gate.Endpoint
	Names     [][]byte
	// Observed is what the live EPP did, when recorded.
	Observed Observed
}

// Observed is the live EPP's decision for a record.
type Observed struct {
	// Present: the record has an "observed" object.
	Present bool
	// Outcome is the raw outcome label; Known when it is one gate knows.
	Outcome      []byte
	KnownOutcome bool
	Parsed       gate.Outcome
	// Chosen is the endpoint the EPP picked, if recorded.
	Chosen []byte
}

// LineError describes a bad line.
type LineError struct {
	Line   int
	Reason string
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Reason) }

// Options select and bound what the reader accepts.
type Options struct {
	// Strict stops at the first bad line (Next returns its *LineError).
	Strict bool
	// Target and Plugin, when set, skip records naming another one (records
	// without the field are kept).
	Target, Plugin string
	// MaxLineBytes bounds one line (default 16 MiB); longer lines are bad.
	MaxLineBytes int
	// KeepBadLines bounds how many bad lines are kept for the report (default 100).
	KeepBadLines int
}

// Stats counts what the reader has seen.
type Stats struct {
	Read    int64 `json:"read"`
	Bad     int64 `json:"bad"`
	Skipped int64 `json:"skipped"`
}

// Reader streams records from JSON lines.
type Reader struct {
	lr       *lines.Reader
	opts     Options
	sc       scanner
	rec      Record
	names    []byte // arena for endpoint names and other strings of one record
	stats    Stats
	badLines []LineError
}

// NewReader returns a reader over r.
func NewReader(r io.Reader, opts Options) *Reader {
	if opts.MaxLineBytes <= 0 {
		opts.MaxLineBytes = 16 << 20
	}
	if opts.KeepBadLines <= 0 {
		opts.KeepBadLines = 100
	}
	// The input is checked for gzip at the first Next (a constructor that
	// cannot fail must not block on stdin).
	return &Reader{lr: lines.NewReader(r, 1<<20, opts.MaxLineBytes), opts: opts}
}

// Stats returns the counts so far.
func (r *Reader) Stats() Stats { return r.stats }

// BadLines returns the first bad lines (up to Options.KeepBadLines).
func (r *Reader) BadLines() []LineError { return r.badLines }

// Next returns the next accepted record, or io.EOF at the end. In strict
// mode a bad line ends reading with its *LineError; otherwise it is counted
// and skipped. Other errors are I/O failures.
func (r *Reader) Next() (*Record, error) {
	for {
		line, overlong, err := r.lr.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, io.EOF
			}
			return nil, fmt.Errorf("read records: %w", err)
		}
		var reason string
		switch {
		case overlong: // one bad line, not cut into several
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
		if (r.opts.Target != "" && len(r.rec.Target) > 0 && string(r.rec.Target) != r.opts.Target) ||
			(r.opts.Plugin != "" && len(r.rec.Plugin) > 0 && string(r.rec.Plugin) != r.opts.Plugin) {
			r.stats.Skipped++
			continue
		}
		r.stats.Read++
		return &r.rec, nil
	}
}

// keep copies b into the record's arena.
func (r *Reader) keep(b []byte) []byte {
	start := len(r.names)
	r.names = append(r.names, b...)
	return r.names[start:len(r.names):len(r.names)]
}

// decode parses one line into r.rec; it returns the reason the line is bad, or "".
func (r *Reader) decode(line []byte) string {
	rec := &r.rec
	*rec = Record{Line: r.lr.Line(), PromptTokens: -1, Endpoints: rec.Endpoints[:0], Names: rec.Names[:0]}
	r.names = r.names[:0]
	sc := &r.sc
	sc.reset(line)
	var reason string
	haveEndpoints := false
	err := sc.object(func(key []byte) error {
		var err error
		switch string(key) {
		case "ts":
			if sc.isNull() {
				return nil
			}
			var s []byte
			if s, err = sc.stringBytes(); err == nil {
				if rec.TS, err = time.Parse(time.RFC3339Nano, string(s)); err != nil {
					reason = fmt.Sprintf("ts: not an RFC 3339 time: %q", truncate(s))
					return errType
				}
			}
		case "requestId":
			rec.RequestID, err = r.optString(&reason, "requestId")
		case "target":
			rec.Target, err = r.optString(&reason, "target")
		case "plugin":
			rec.Plugin, err = r.optString(&reason, "plugin")
		case "promptTokens":
			if sc.isNull() {
				return nil
			}
			if rec.PromptTokens, err = sc.count(); err != nil {
				reason = countReason("promptTokens", err)
			}
		case "endpoints":
			if sc.isNull() {
				return nil
			}
			if sc.peek() != '[' {
				reason = "endpoints: not an array"
				return errType
			}
			haveEndpoints = true
			err = r.endpoints(&reason)
		case "observed":
			if sc.isNull() {
				return nil
			}
			err = r.observed(&reason)
		default:
			err = sc.skipValue() // unknown keys are ignored (forward compatible)
		}
		return err
	})
	switch {
	case reason != "":
		return reason
	case err != nil:
		return "not valid JSON"
	case sc.peek() != 0:
		return "not valid JSON: trailing data after the record"
	case !haveEndpoints:
		return "no endpoints array"
	}
	return ""
}

func (r *Reader) optString(reason *string, field string) ([]byte, error) {
	if r.sc.isNull() {
		return nil, nil
	}
	if r.sc.peek() != '"' {
		*reason = field + ": not a string"
		return nil, errType
	}
	s, err := r.sc.stringBytes()
	if err != nil {
		return nil, err
	}
	return r.keep(s), nil
}

func countReason(field string, err error) string {
	switch {
	case errors.Is(err, errNegative):
		return field + ": negative count"
	case errors.Is(err, errType):
		return field + ": not a non-negative integer"
	case errors.Is(err, errRange):
		return field + ": out of range"
	}
	return "not valid JSON"
}

func (r *Reader) endpoints(reason *string) error {
	sc := &r.sc
	sc.pos++ // '['
	if sc.peek() == ']' {
		sc.pos++
		return nil
	}
	for i := 0; ; i++ {
		if sc.peek() != '{' {
			if sc.skipValue() != nil {
				return errSyntax
			}
			*reason = fmt.Sprintf("endpoints[%d]: not an object", i)
			return errType
		}
		var e gate.Endpoint
		var name []byte
		matchKey := false // matchBlocks or totalBlocks present
		err := sc.object(func(key []byte) error {
			switch string(key) {
			case "name":
				if sc.isNull() {
					return nil
				}
				if sc.peek() != '"' {
					*reason = fmt.Sprintf("endpoints[%d].name: not a string", i)
					return errType
				}
				s, err := sc.stringBytes()
				name = r.keep(s)
				return err
			case "matchBlocks":
				return r.intField(&e.MatchBlocks, &matchKey, i, "matchBlocks", reason)
			case "totalBlocks":
				return r.intField(&e.TotalBlocks, &matchKey, i, "totalBlocks", reason)
			case "blockSizeTokens":
				var ignored bool
				return r.intField(&e.BlockSizeTokens, &ignored, i, "blockSizeTokens", reason)
			case "inFlightTokens":
				return r.countField(&e.InFlightTokens, &e.HasLoad, i, "inFlightTokens", reason)
			case "inFlightRequests":
				var ignored bool
				return r.countField(&e.InFlightRequests, &ignored, i, "inFlightRequests", reason)
			case "predictedTTFTMs":
				if sc.isNull() {
					return nil
				}
				v, err := sc.float()
				if err != nil {
					*reason = fmt.Sprintf("endpoints[%d].predictedTTFTMs: not a number or \"NaN\", \"+Inf\", \"-Inf\"", i)
					return err
				}
				e.HasPrediction, e.PredictedTTFTMs = true, v
				return nil
			}
			return sc.skipValue()
		})
		if err != nil {
			return err
		}
		// Match info is present when matchBlocks or totalBlocks is; a lone
		// blockSizeTokens does not make it present.
		e.HasMatch = matchKey
		r.rec.Endpoints = append(r.rec.Endpoints, e)
		r.rec.Names = append(r.rec.Names, name)
		switch sc.peek() {
		case ',':
			sc.pos++
		case ']':
			sc.pos++
			return nil
		default:
			return errSyntax
		}
	}
}

const maxInt32 = 1<<31 - 1

// countField reads a non-negative count into dst (null leaves it absent).
func (r *Reader) countField(dst *int64, present *bool, i int, field string, reason *string) error {
	if r.sc.isNull() {
		return nil
	}
	v, err := r.sc.count()
	if err != nil {
		*reason = countReason(fmt.Sprintf("endpoints[%d].%s", i, field), err)
		return err
	}
	*dst, *present = v, true
	return nil
}

// intField reads a non-negative block count that fits an int32 into dst.
func (r *Reader) intField(dst *int, present *bool, i int, field string, reason *string) error {
	var v int64
	var ok bool
	if err := r.countField(&v, &ok, i, field, reason); err != nil || !ok {
		return err
	}
	if v > maxInt32 {
		*reason = fmt.Sprintf("endpoints[%d].%s: out of range", i, field)
		return errRange
	}
	*dst, *present = int(v), true
	return nil
}

func (r *Reader) observed(reason *string) error {
	sc := &r.sc
	if sc.peek() != '{' {
		*reason = "observed: not an object"
		return errType
	}
	o := &r.rec.Observed
	o.Present = true
	return sc.object(func(key []byte) error {
		switch string(key) {
		case "outcome":
			s, err := r.optString(reason, "observed.outcome")
			o.Outcome = s
			if s != nil {
				o.Parsed, o.KnownOutcome = gate.ParseOutcome(string(s))
			}
			return err
		case "chosen":
			s, err := r.optString(reason, "observed.chosen")
			o.Chosen = s
			return err
		}
		return sc.skipValue()
	})
}

func truncate(b []byte) []byte {
	if len(b) > 40 {
		return b[:40]
	}
	return b
}
