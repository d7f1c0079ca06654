package export

import (
	"bufio"
	"encoding/binary"
	"io"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// --- rendering ---

func appendSample(b []byte, name, suffix, labels, extra string) []byte {
	b = append(b, name...)
	b = append(b, suffix...)
	if labels != "" || extra != "" {
		b = append(b, '{')
		b = append(b, labels...)
		if extra != "" {
			if labels != "" {
				b = append(b, ',')
			}
			b = append(b, extra...)
		}
		b = append(b, '}')
	}
	return append(b, ' ')
}

func appendFloat(b []byte, v float64) []byte {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.AppendInt(b, int64(v), 10)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}

func appendTS(b []byte, ms int64) []byte {
	b = append(b, ' ')
	b = strconv.AppendInt(b, ms/1000, 10)
	b = append(b, '.')
	r := ms % 1000
	b = append(b, byte('0'+r/100), byte('0'+r/10%10), byte('0'+r%10))
	return append(b, '\n')
}

func escapeHelp(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(s)
}

// WriteText renders the current values in the Prometheus text format 0.0.4
// (what a live /metrics serves).
func (c *Catalog) WriteText(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	var b []byte
	for fi := range c.fams {
		f := &c.fams[fi]
		name := f.name
		if f.typ == typCounter {
			name += "_total"
		}
		b = append(b[:0], "# HELP "...)
		b = append(b, name...)
		b = append(b, ' ')
		b = append(b, escapeHelp(f.help)...)
		b = append(b, "\n# TYPE "...)
		b = append(b, name...)
		b = append(b, ' ')
		b = append(b, f.typ.String()...)
		b = append(b, '\n')
		for mi := range f.metrics {
			m := &f.metrics[mi]
			if m.present != nil && !m.present() {
				continue
			}
			b = appendMetricNow(b, f, m, name)
		}
		if _, err := bw.Write(b); err != nil {
			return err
		}
	}
	return bw.Flush()
}

func appendMetricNow(b []byte, _ *familyDef, m *metricDef, name string) []byte {
	switch {
	case m.h != nil:
		var cum int64
		for i, le := range m.les {
			cum += m.h.Counts[i]
			b = appendSample(b, name, "_bucket", m.labels, `le="`+le+`"`)
			b = strconv.AppendInt(b, cum, 10)
			b = append(b, '\n')
		}
		b = appendSample(b, name, "_sum", m.labels, "")
		b = appendFloat(b, m.h.Sum)
		b = append(b, '\n')
		b = appendSample(b, name, "_count", m.labels, "")
		b = strconv.AppendInt(b, m.h.Count, 10)
		b = append(b, '\n')
	case m.geti != nil:
		b = appendSample(b, name, "", m.labels, "")
		b = strconv.AppendInt(b, m.geti(), 10)
		b = append(b, '\n')
	default:
		b = appendSample(b, name, "", m.labels, "")
		b = appendFloat(b, m.getf())
		b = append(b, '\n')
	}
	return b
}

// --- OpenMetrics with timestamps ---

// column holds one series' samples, delta-encoded: integers as zigzag
// varints of the difference, floats as the bit-reversed XOR with the
// previous value (a few bytes per sample).
type column struct {
	buf   []byte
	last  uint64
	float bool
}

func (c *column) appendInt(v int64) {
	d := v - int64(c.last)
	c.buf = binary.AppendUvarint(c.buf, uint64(d<<1)^uint64(d>>63))
	c.last = uint64(v)
}

func (c *column) appendFloat(v float64) {
	b := math.Float64bits(v)
	c.buf = binary.AppendUvarint(c.buf, bits.Reverse64(b^c.last))
	c.last = b
}

type colReader struct {
	c    *column
	off  int
	last uint64
}

func (r *colReader) nextInt() int64 {
	u, n := binary.Uvarint(r.c.buf[r.off:])
	r.off += n
	d := int64(u>>1) ^ -int64(u&1)
	r.last = uint64(int64(r.last) + d)
	return int64(r.last)
}

func (r *colReader) nextFloat() float64 {
	u, n := binary.Uvarint(r.c.buf[r.off:])
	r.off += n
	r.last ^= bits.Reverse64(u)
	return math.Float64frombits(r.last)
}

// OpenMetricsWriter writes OpenMetrics text with explicit timestamps.
type OpenMetricsWriter struct {
	cat         *Catalog
	w           *bufio.Writer
	interleaved bool
	ts          []int64    // ms, grouped layout
	cols        [][]column // per family-metric (flattened), grouped layout
	// runs are, per family-metric, the [start, end) index ranges into ts in
	// which the series existed (end -1: still open); on whether it does now.
	runs [][]int
	on   []bool
	b    []byte
	err  error
}

// NewOpenMetricsWriter writes cat's samples to w: grouped by family at
// Finish, or interleaved (every family at every scrape).
func NewOpenMetricsWriter(cat *Catalog, w io.Writer, interleaved bool) *OpenMetricsWriter {
	o := &OpenMetricsWriter{cat: cat, w: bufio.NewWriterSize(w, 256<<10), interleaved: interleaved}
	if !interleaved {
		for fi := range cat.fams {
			for mi := range cat.fams[fi].metrics {
				m := &cat.fams[fi].metrics[mi]
				var cols []column
				switch {
				case m.h != nil:
					cols = make([]column, len(m.les)+2)
					cols[len(m.les)].float = true
				case m.getf != nil:
					cols = []column{{float: true}}
				default:
					cols = []column{{}}
				}
				o.cols = append(o.cols, cols)
				if m.present != nil {
					o.runs, o.on = append(o.runs, nil), append(o.on, false)
				} else {
					o.runs, o.on = append(o.runs, []int{0, -1}), append(o.on, true)
				}
			}
		}
	}
	return o
}

func (o *OpenMetricsWriter) header(f *familyDef) {
	o.b = append(o.b, "# HELP "...)
	o.b = append(o.b, f.name...)
	o.b = append(o.b, ' ')
	o.b = append(o.b, escapeHelp(f.help)...)
	o.b = append(o.b, "\n# TYPE "...)
	o.b = append(o.b, f.name...)
	o.b = append(o.b, ' ')
	o.b = append(o.b, f.typ.String()...)
	o.b = append(o.b, '\n')
}

func (o *OpenMetricsWriter) flushBuf() {
	if o.err == nil && len(o.b) > 0 {
		_, o.err = o.w.Write(o.b)
	}
	o.b = o.b[:0]
}

// Scrape records (or, interleaved, writes) every series' value at ms.
func (o *OpenMetricsWriter) Scrape(ms int64) {
	if o.err != nil {
		return
	}
	if o.interleaved {
		for fi := range o.cat.fams {
			f := &o.cat.fams[fi]
			o.header(f)
			for mi := range f.metrics {
				if m := &f.metrics[mi]; m.present == nil || m.present() {
					o.appendPoint(f, m, ms, nil)
				}
			}
			o.flushBuf()
		}
		return
	}
	o.ts = append(o.ts, ms)
	k := 0
	for fi := range o.cat.fams {
		f := &o.cat.fams[fi]
		for mi := range f.metrics {
			m := &f.metrics[mi]
			cols := o.cols[k]
			if m.present != nil {
				if p := m.present(); p != o.on[k] {
					if p {
						o.runs[k] = append(o.runs[k], len(o.ts)-1, -1)
					} else {
						o.runs[k][len(o.runs[k])-1] = len(o.ts) - 1
					}
					o.on[k] = p
				}
				if !o.on[k] {
					k++
					continue
				}
			}
			k++
			switch {
			case m.h != nil:
				var cum int64
				for i := range m.les {
					cum += m.h.Counts[i]
					cols[i].appendInt(cum)
				}
				cols[len(m.les)].appendFloat(m.h.Sum)
				cols[len(m.les)+1].appendInt(m.h.Count)
			case m.geti != nil:
				cols[0].appendInt(m.geti())
			default:
				cols[0].appendFloat(m.getf())
			}
		}
	}
}

// appendPoint writes one metric's samples at ms, from the live values
// (readers == nil) or from stored columns.
func (o *OpenMetricsWriter) appendPoint(f *familyDef, m *metricDef, ms int64, rd []colReader) {
	name := f.name
	switch {
	case m.h != nil:
		var cum int64
		for i, le := range m.les {
			var v int64
			if rd != nil {
				v = rd[i].nextInt()
			} else {
				cum += m.h.Counts[i]
				v = cum
			}
			o.b = appendSample(o.b, name, "_bucket", m.labels, `le="`+le+`"`)
			o.b = strconv.AppendInt(o.b, v, 10)
			o.b = appendTS(o.b, ms)
		}
		sum, cnt := m.h.Sum, m.h.Count
		if rd != nil {
			sum, cnt = rd[len(m.les)].nextFloat(), rd[len(m.les)+1].nextInt()
		}
		o.b = appendSample(o.b, name, "_sum", m.labels, "")
		o.b = appendFloat(o.b, sum)
		o.b = appendTS(o.b, ms)
		o.b = appendSample(o.b, name, "_count", m.labels, "")
		o.b = strconv.AppendInt(o.b, cnt, 10)
		o.b = appendTS(o.b, ms)
	default:
		suffix := ""
		if f.typ == typCounter {
			suffix = "_total"
		}
		o.b = appendSample(o.b, name, suffix, m.labels, "")
		switch {
		case rd != nil && m.geti != nil:
			o.b = strconv.AppendInt(o.b, rd[0].nextInt(), 10)
		case rd != nil:
			o.b = appendFloat(o.b, rd[0].nextFloat())
		case m.geti != nil:
			o.b = strconv.AppendInt(o.b, m.geti(), 10)
		default:
			o.b = appendFloat(o.b, m.getf())
		}
		o.b = appendTS(o.b, ms)
	}
	if len(o.b) > 128<<10 {
		o.flushBuf()
	}
}

// Finish writes the stored samples family by family (grouped layout) and
// the closing "# EOF".
func (o *OpenMetricsWriter) Finish() error {
	if !o.interleaved && o.err == nil {
		k := 0
		var rd []colReader
		for fi := range o.cat.fams {
			f := &o.cat.fams[fi]
			o.header(f)
			for mi := range f.metrics {
				cols := o.cols[k]
				runs := o.runs[k]
				k++
				if len(runs) == 0 {
					continue
				}
				rd = rd[:0]
				for ci := range cols {
					rd = append(rd, colReader{c: &cols[ci]})
				}
				for ri := 0; ri+1 < len(runs); ri += 2 {
					end := runs[ri+1]
					if end < 0 {
						end = len(o.ts)
					}
					for _, ms := range o.ts[runs[ri]:end] {
						o.appendPoint(f, &f.metrics[mi], ms, rd)
					}
				}
				for ci := range cols {
					cols[ci] = column{}
				}
			}
			o.flushBuf()
		}
	}
	o.b = append(o.b, "# EOF\n"...)
	o.flushBuf()
	if o.err == nil {
		o.err = o.w.Flush()
	}
	return o.err
}
