package fleetsim

import (
	"bufio"
	"io"
	"strconv"
	"time"

	"github.com/gatetuner/gatetuner/gate"
)

// recordWriter writes gate records (DESIGN.md's JSON-lines format), one per
// filter decision, with what the simulated EPP did as "observed".
type recordWriter struct {
	w      *bufio.Writer
	target []byte // JSON-quoted
	plugin []byte
	names  [][]byte // JSON-quoted pod names
	base   time.Time
	b      []byte
	err    error
}

func newRecordWriter(w io.Writer, sc *Scenario, base time.Time, x *ExportShape) *recordWriter {
	rw := &recordWriter{w: bufio.NewWriterSize(w, 256<<10), base: base.UTC(),
		target: strconv.AppendQuote(nil, sc.Target), plugin: strconv.AppendQuote(nil, sc.EPP.Plugin)}
	for i := 0; i < x.endpoints(sc); i++ {
		rw.names = append(rw.names, strconv.AppendQuote(nil, x.recordName(sc, i)))
	}
	return rw
}

// appendTime renders base+ns as RFC 3339 UTC with milliseconds.
func appendTime(b []byte, base time.Time, ns int64) []byte {
	t := base.Add(time.Duration(ns)).Truncate(time.Millisecond)
	return t.AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
}

func (rw *recordWriter) write(r *request, eps []gate.Endpoint, dec *decision) {
	rw.writePool(r, eps, dec, nil)
}

// writePool writes a decision over the endpoints pool (eps[i] is endpoint
// pool[i]; nil: every endpoint, in order), as a P/D profile's gate sees them.
func (rw *recordWriter) writePool(r *request, eps []gate.Endpoint, dec *decision, pool []int) {
	if rw.err != nil {
		return
	}
	name := func(i int) []byte {
		if pool != nil {
			return rw.names[pool[i]]
		}
		return rw.names[i]
	}
	chosen := dec.chosen
	if pool != nil {
		chosen = dec.gateChosen
	}
	b := rw.b[:0]
	b = append(b, `{"ts":"`...)
	b = appendTime(b, rw.base, r.arrival)
	b = append(b, `","requestId":"r-`...)
	b = strconv.AppendInt(b, r.id, 10)
	b = append(b, `","target":`...)
	b = append(b, rw.target...)
	b = append(b, `,"plugin":`...)
	b = append(b, rw.plugin...)
	b = append(b, `,"promptTokens":`...)
	b = strconv.AppendInt(b, int64(r.prompt), 10)
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
	b = append(b, dec.outcome.String()...)
	b = append(b, `","chosen":`...)
	b = append(b, name(chosen)...)
	b = append(b, "}}\n"...)
	rw.b = b
	_, rw.err = rw.w.Write(b)
}

func (rw *recordWriter) flush() error {
	if rw.err == nil {
		rw.err = rw.w.Flush()
	}
	return rw.err
}
