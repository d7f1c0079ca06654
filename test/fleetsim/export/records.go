package export

import (
	"bufio"
	"io"
	"strconv"
	"time"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim/engine"
	"github.com/gatetuner/gatetuner/test/fleetsim/epp"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
)

// RecordWriter writes gate records (DESIGN.md's JSON-lines format), one per
// filter decision, with what the simulated EPP did as "observed".
type RecordWriter struct {
	w      *bufio.Writer
	target []byte // JSON-quoted
	plugin []byte
	names  [][]byte // JSON-quoted pod names
	base   time.Time
	b      []byte
	err    error
}

// NewRecordWriter writes sc's gate records to w, timestamps from base (the
// wall time of scenario time 0), endpoints named as shape x names them.
func NewRecordWriter(w io.Writer, sc *scenario.Scenario, base time.Time, x *scenario.ExportShape) *RecordWriter {
	rw := &RecordWriter{w: bufio.NewWriterSize(w, 256<<10), base: base.UTC(),
		target: strconv.AppendQuote(nil, sc.Target), plugin: strconv.AppendQuote(nil, sc.EPP.Plugin)}
	for i := 0; i < x.Endpoints(sc); i++ {
		rw.names = append(rw.names, strconv.AppendQuote(nil, x.RecordName(sc, i)))
	}
	return rw
}

// appendTime renders base+ns as RFC 3339 UTC with milliseconds.
func appendTime(b []byte, base time.Time, ns int64) []byte {
	t := base.Add(time.Duration(ns)).Truncate(time.Millisecond)
	return t.AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
}

// Write writes r's decision over every endpoint (eps their gate inputs).
func (rw *RecordWriter) Write(r *engine.Request, eps []gate.Endpoint, dec *epp.Decision) {
	rw.WritePool(r, eps, dec, nil)
}

// WritePool writes a decision over the endpoints pool (eps[i] is endpoint
// pool[i]; nil: every endpoint, in order), as a P/D profile's gate sees them.
func (rw *RecordWriter) WritePool(r *engine.Request, eps []gate.Endpoint, dec *epp.Decision, pool []int) {
	if rw.err != nil {
		return
	}
	name := func(i int) []byte {
		if pool != nil {
			return rw.names[pool[i]]
		}
		return rw.names[i]
	}
	chosen := dec.Chosen
	if pool != nil {
		chosen = dec.GateChosen
	}
	b := rw.b[:0]
	b = append(b, `{"ts":"`...)
	b = appendTime(b, rw.base, r.Arrival)
	b = append(b, `","requestId":"r-`...)
	b = strconv.AppendInt(b, r.ID, 10)
	b = append(b, `","target":`...)
	b = append(b, rw.target...)
	b = append(b, `,"plugin":`...)
	b = append(b, rw.plugin...)
	b = append(b, `,"promptTokens":`...)
	b = strconv.AppendInt(b, int64(r.Prompt), 10)
	b = append(b, `,"endpoints":[`...)
	for i := range eps {
		e := &eps[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = append(b, name(i)...)
		b = append(b, `,"matchBlocks":`...)
		b = strconv.AppendInt(b, int64(e.MatchBlocks), 10)
		b = append(b, `,"totalBlocks":`...)
		b = strconv.AppendInt(b, int64(e.TotalBlocks), 10)
		b = append(b, `,"blockSizeTokens":`...)
		b = strconv.AppendInt(b, int64(e.BlockSizeTokens), 10)
		b = append(b, `,"inFlightTokens":`...)
		b = strconv.AppendInt(b, e.InFlightTokens, 10)
		b = append(b, `,"inFlightRequests":`...)
		b = strconv.AppendInt(b, e.InFlightRequests, 10)
		b = append(b, '}')
	}
	b = append(b, `],"observed":{"outcome":"`...)
	b = append(b, dec.Outcome.String()...)
	b = append(b, `","chosen":`...)
	b = append(b, name(chosen)...)
	b = append(b, "}}\n"...)
	rw.b = b
	_, rw.err = rw.w.Write(b)
}

// Flush writes what is buffered.
func (rw *RecordWriter) Flush() error {
	if rw.err == nil {
		rw.err = rw.w.Flush()
	}
	return rw.err
}
