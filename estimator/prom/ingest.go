package prom

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
	"github.com/prometheus/prometheus/storage"
)

// Sample is one value of one series at an explicit time.
type Sample struct {
	// Name is the metric name, e.g. "vllm:prompt_tokens_total".
	Name string
	// Labels are the series' other labels; empty values are dropped, as
	// in Prometheus.
	Labels map[string]string
	Value  float64
	Time   time.Time
}

// Appender is one write transaction against an Embedded TSDB; samples
// become visible to queries on Commit. It is not safe for concurrent use.
type Appender struct {
	app     storage.AppenderV2
	builder labels.ScratchBuilder
	n       int
	// last is each series' previous sample in this transaction: the TSDB
	// only checks committed data, and would drop a second value for the
	// same timestamp silently at Commit.
	last map[uint64]timedValue
}

type timedValue struct {
	ms int64
	v  float64
}

// Appender starts a transaction.
func (e *Embedded) Appender(ctx context.Context) *Appender {
	return &Appender{app: e.db.AppenderV2(ctx), builder: labels.NewScratchBuilder(8), last: map[uint64]timedValue{}}
}

// Add appends s. Within a series, samples may come in any order inside the
// out-of-order window. A sample that repeats its series' previous timestamp
// with the same value is ignored, with another value it is an error; a
// sample the TSDB rejects (too old, duplicate of a committed one) is an
// error too, and the transaction stays usable either way.
func (a *Appender) Add(s Sample) error {
	if s.Name == "" {
		return errors.New("append: sample without a metric name")
	}
	if _, ok := s.Labels[labels.MetricName]; ok {
		return fmt.Errorf("append %s: set the metric name in Name, not in Labels", s.Name)
	}
	a.builder.Reset()
	a.builder.Add(labels.MetricName, s.Name)
	for k, v := range s.Labels {
		if k == "" {
			return fmt.Errorf("append %s: empty label name", s.Name)
		}
		if v != "" {
			a.builder.Add(k, v)
		}
	}
	a.builder.Sort()
	return a.AddLabels(a.builder.Labels(), s.Time, s.Value)
}

// AddLabels appends a value for a series given as Prometheus labels
// (including __name__); the fast path for simulators.
func (a *Appender) AddLabels(ls labels.Labels, t time.Time, v float64) error {
	return a.add(ls, t.UnixMilli(), v)
}

func (a *Appender) add(ls labels.Labels, ms int64, v float64) error {
	h := ls.Hash()
	if prev, ok := a.last[h]; ok && prev.ms == ms {
		if math.Float64bits(prev.v) == math.Float64bits(v) {
			return nil
		}
		return fmt.Errorf("append %s @%s: %w (%v, then %v)", ls, time.UnixMilli(ms).UTC().Format(time.RFC3339Nano), storage.ErrDuplicateSampleForTimestamp, prev.v, v)
	}
	a.last[h] = timedValue{ms, v}
	if _, err := a.app.Append(0, ls, 0, ms, v, nil, nil, storage.AOptions{}); err != nil {
		return fmt.Errorf("append %s @%s: %w", ls, time.UnixMilli(ms).UTC().Format(time.RFC3339Nano), err)
	}
	a.n++
	return nil
}

// Commit makes the transaction's samples visible; the Appender is done.
func (a *Appender) Commit() error {
	if err := a.app.Commit(); err != nil {
		return fmt.Errorf("commit %d samples: %w", a.n, err)
	}
	return nil
}

// Rollback discards the transaction; the Appender is done.
func (a *Appender) Rollback() error {
	if err := a.app.Rollback(); err != nil {
		return fmt.Errorf("roll back %d samples: %w", a.n, err)
	}
	return nil
}

// Append writes samples in one transaction: all or none.
func (e *Embedded) Append(ctx context.Context, samples ...Sample) error {
	app := e.Appender(ctx)
	for _, s := range samples {
		if err := app.Add(s); err != nil {
			return errors.Join(err, app.Rollback())
		}
	}
	return app.Commit()
}

// Format names a text exposition format.
type Format int

// Text formats IngestText reads.
const (
	// FormatAuto is OpenMetrics when the text ends with "# EOF", else
	// the Prometheus text format.
	FormatAuto Format = iota
	// FormatOpenMetrics is OpenMetrics 1.0 text: timestamps in seconds,
	// "# EOF" at the end; what `promtool tsdb create-blocks-from
	// openmetrics` backfills.
	FormatOpenMetrics
	// FormatPrometheusText is the text/plain 0.0.4 format: timestamps in
	// milliseconds.
	FormatPrometheusText
)

// IngestOptions configure IngestText.
type IngestOptions struct {
	Format Format
	// DefaultTime stamps samples that carry no timestamp; when zero such a
	// sample is an error.
	DefaultTime time.Time
	// Labels are added to every series that does not already have them
	// (honor_labels semantics: the text wins).
	Labels map[string]string
}

// IngestStats count what IngestText wrote.
type IngestStats struct {
	Samples int
	Lines   int
}

// LineError is a text ingestion error at a 1-based line.
type LineError struct {
	Line int
	// Text is the line, shortened.
	Text string
	Err  error
}

// Error names the line.
func (e *LineError) Error() string {
	if e.Text == "" {
		return fmt.Sprintf("line %d: %v", e.Line, e.Err)
	}
	return fmt.Sprintf("line %d: %v (line: %q)", e.Line, e.Err, e.Text)
}

// Unwrap returns the cause.
func (e *LineError) Unwrap() error { return e.Err }

// IngestText parses an exposition with textparse (Prometheus' own parsers)
// and writes every sample in one transaction: on any error nothing is
// written, and the error is a *LineError naming the line. Classic
// histograms and summaries land as their _bucket/_sum/_count series.
func (e *Embedded) IngestText(ctx context.Context, r io.Reader, opts IngestOptions) (IngestStats, error) {
	buf, err := io.ReadAll(r)
	if err != nil {
		return IngestStats{}, fmt.Errorf("read exposition: %w", err)
	}
	format := opts.Format
	if format == FormatAuto {
		format = FormatPrometheusText
		if bytes.HasSuffix(bytes.TrimRight(buf, " \t\r\n"), []byte("# EOF")) {
			format = FormatOpenMetrics
		}
	}
	// Both lexers want a final newline; adding it here keeps every returned
	// slice inside buf, which is how errors find their line.
	if len(buf) > 0 && buf[len(buf)-1] != '\n' {
		buf = append(buf, '\n')
	}
	var p textparse.Parser
	switch format {
	case FormatOpenMetrics:
		p = textparse.NewOpenMetricsParser(buf, labels.NewSymbolTable())
	case FormatPrometheusText:
		p = textparse.NewPromParser(buf, labels.NewSymbolTable(), false)
	default:
		return IngestStats{}, fmt.Errorf("unknown exposition format %d", format)
	}
	in := ingest{buf: buf, parser: p, extra: sortedLabels(opts.Labels)}
	if !opts.DefaultTime.IsZero() {
		in.defaultMs, in.hasDefault = opts.DefaultTime.UnixMilli(), true
	}
	app := e.Appender(ctx)
	n, err := in.run(app)
	stats := IngestStats{Lines: bytes.Count(buf, []byte{'\n'})}
	if err != nil {
		return stats, errors.Join(err, app.Rollback())
	}
	if err := app.Commit(); err != nil {
		return stats, err
	}
	stats.Samples = n
	return stats, nil
}

func sortedLabels(m map[string]string) []labels.Label {
	out := make([]labels.Label, 0, len(m))
	for k, v := range m {
		if k != "" && v != "" {
			out = append(out, labels.Label{Name: k, Value: v})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// ingest walks one parsed exposition into an Appender.
type ingest struct {
	buf        []byte
	parser     textparse.Parser
	extra      []labels.Label
	defaultMs  int64
	hasDefault bool
	// seen, when not nil, collects series stamped with defaultMs (not with
	// their own timestamp), for staleness tracking.
	seen map[uint64]labels.Labels

	lastOff int  // offset of the last entry parsed, for error lines
	marked  bool // lastOff is set
}

// run appends every sample and returns how many were written.
func (in *ingest) run(app *Appender) (int, error) {
	var (
		ls labels.Labels
		lb = labels.NewBuilder(labels.EmptyLabels())
		n0 = app.n
	)
	for {
		entry, err := in.parser.Next()
		if errors.Is(err, io.EOF) {
			return app.n - n0, nil
		}
		if err != nil {
			return app.n - n0, in.errAfterLast(err)
		}
		switch entry {
		case textparse.EntryType:
			name, _ := in.parser.Type()
			in.mark(name)
		case textparse.EntryHelp:
			name, _ := in.parser.Help()
			in.mark(name)
		case textparse.EntryUnit:
			name, _ := in.parser.Unit()
			in.mark(name)
		case textparse.EntryComment:
			in.mark(in.parser.Comment())
		case textparse.EntryHistogram:
			series, _, _, _ := in.parser.Histogram()
			in.mark(series)
			return app.n - n0, in.errAt(in.lastOff, errors.New("native histograms are not supported"))
		case textparse.EntrySeries:
			series, ts, v := in.parser.Series()
			in.mark(series)
			in.parser.Labels(&ls)
			var ms int64
			switch {
			case ts != nil:
				ms = *ts
			case in.hasDefault:
				ms = in.defaultMs
			default:
				return app.n - n0, in.errAt(in.lastOff, errors.New("sample has no timestamp"))
			}
			if !ls.Has(labels.MetricName) || ls.Get(labels.MetricName) == "" {
				return app.n - n0, in.errAt(in.lastOff, errors.New("series without a metric name"))
			}
			if name, dup := ls.HasDuplicateLabelNames(); dup {
				return app.n - n0, in.errAt(in.lastOff, fmt.Errorf("label %q given twice", name))
			}
			hasEmpty := false
			ls.Range(func(l labels.Label) { hasEmpty = hasEmpty || l.Value == "" })
			if len(in.extra) > 0 || hasEmpty {
				// Empty values mean "no such label", as in a Prometheus scrape.
				lb.Reset(ls)
				ls.Range(func(l labels.Label) {
					if l.Value == "" {
						lb.Del(l.Name)
					}
				})
				for _, l := range in.extra {
					if lb.Get(l.Name) == "" {
						lb.Set(l.Name, l.Value)
					}
				}
				ls = lb.Labels()
			}
			if err := app.add(ls, ms, v); err != nil {
				return app.n - n0, in.errAt(in.lastOff, err)
			}
			if in.seen != nil && ts == nil {
				in.seen[ls.Hash()] = ls
			}
		}
	}
}

// mark records where the entry whose bytes are b starts. The parsers hand
// out sub-slices of buf, so b's offset follows from the capacities; the
// address check ignores any slice the parser allocated itself.
func (in *ingest) mark(b []byte) {
	if len(b) == 0 {
		return
	}
	if off := cap(in.buf) - cap(b); off >= 0 && off < len(in.buf) && &in.buf[off] == &b[0] {
		in.lastOff, in.marked = off, true
	}
}

// errAt wraps err with the line holding offset off.
func (in *ingest) errAt(off int, err error) error {
	line := 1 + bytes.Count(in.buf[:off], []byte{'\n'})
	return &LineError{Line: line, Text: lineText(in.buf, off), Err: err}
}

// errAfterLast blames a parse error on the first non-blank line after the
// last entry parsed; every entry of both formats is one line.
func (in *ingest) errAfterLast(err error) error {
	off := 0
	if in.marked {
		nl := bytes.IndexByte(in.buf[in.lastOff:], '\n')
		if nl < 0 {
			off = len(in.buf)
		} else {
			off = in.lastOff + nl + 1
		}
	}
	for off < len(in.buf) {
		end := bytes.IndexByte(in.buf[off:], '\n')
		if end < 0 {
			end = len(in.buf) - off
		}
		if len(bytes.TrimSpace(in.buf[off:off+end])) > 0 {
			break
		}
		off += end + 1
	}
	if off > len(in.buf) {
		off = len(in.buf)
	}
	return in.errAt(off, err)
}

func lineText(buf []byte, off int) string {
	if off >= len(buf) {
		return ""
	}
	end := bytes.IndexByte(buf[off:], '\n')
	if end < 0 {
		end = len(buf) - off
	}
	s := string(bytes.TrimRight(buf[off:off+end], "\r"))
	const maxShown = 120
	if len(s) > maxShown {
		s = s[:maxShown] + "…"
	}
	return s
}
