package prom

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/tsdb"
)

// Defaults applied by NewEmbedded to zero EmbeddedConfig fields.
const (
	DefaultRetention     = 15 * 24 * time.Hour
	DefaultLookbackDelta = 5 * time.Minute
	DefaultQueryTimeout  = 2 * time.Minute
	DefaultMaxSamples    = 50_000_000
)

// EmbeddedConfig configures an in-process TSDB and PromQL engine.
type EmbeddedConfig struct {
	// Dir is the TSDB folder, kept on Close (and reopened by a later
	// NewEmbedded, WAL included). Empty means a temporary folder that Close
	// removes, without a WAL.
	Dir string
	// Retention drops blocks older than this behind the newest sample;
	// zero means DefaultRetention.
	Retention time.Duration
	// OutOfOrderWindow accepts samples this far behind a series' newest one
	// (a simulator may push series one after another); zero means Retention,
	// negative disables out-of-order ingestion.
	OutOfOrderWindow time.Duration
	// LookbackDelta is how far back an instant selector looks; zero means
	// DefaultLookbackDelta (Prometheus' default).
	LookbackDelta time.Duration
	// QueryTimeout bounds one query; zero means DefaultQueryTimeout.
	QueryTimeout time.Duration
	// MaxSamples caps the samples one query may hold in memory; zero means
	// DefaultMaxSamples.
	MaxSamples int
	// Observer, if set, is told about every query.
	Observer Observer
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Now stamps scraped samples; defaults to time.Now.
	Now func() time.Time
}

// Embedded is a Querier over an in-process TSDB and the Prometheus PromQL
// engine, filled by Append/IngestText or by its scraper. It is safe for
// concurrent use; an Appender is not.
type Embedded struct {
	cfg    EmbeddedConfig
	db     *tsdb.DB
	engine *promql.Engine
	opts   promql.QueryOpts
	tmpDir string

	mu       sync.Mutex
	scrapers []*Scraper // stopped by Close
	closed   bool

	closeOnce sync.Once
	closeErr  error
}

var _ Querier = (*Embedded)(nil)

// NewEmbedded opens (or creates) the TSDB and the engine.
func NewEmbedded(cfg EmbeddedConfig) (*Embedded, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.OutOfOrderWindow == 0 {
		cfg.OutOfOrderWindow = cfg.Retention
	}
	if cfg.LookbackDelta <= 0 {
		cfg.LookbackDelta = DefaultLookbackDelta
	}
	if cfg.QueryTimeout <= 0 {
		cfg.QueryTimeout = DefaultQueryTimeout
	}
	if cfg.MaxSamples <= 0 {
		cfg.MaxSamples = DefaultMaxSamples
	}
	e := &Embedded{cfg: cfg}
	dir := cfg.Dir
	opts := tsdb.DefaultOptions()
	if dir == "" {
		d, err := os.MkdirTemp("", "gatetuner-tsdb-*")
		if err != nil {
			return nil, fmt.Errorf("create embedded tsdb dir: %w", err)
		}
		dir, e.tmpDir = d, d
		opts.WALSegmentSize = -1 // nothing to recover into a throw-away dir
	}
	opts.RetentionDuration = cfg.Retention.Milliseconds()
	if cfg.OutOfOrderWindow > 0 {
		opts.OutOfOrderTimeWindow = cfg.OutOfOrderWindow.Milliseconds()
	}
	db, err := tsdb.Open(dir, cfg.Logger.With("component", "embedded-tsdb"), nil, opts, nil)
	if err != nil {
		e.removeTmp()
		return nil, fmt.Errorf("open embedded tsdb %s: %w", dir, err)
	}
	e.db = db
	e.engine = promql.NewEngine(promql.EngineOpts{
		Logger:               cfg.Logger.With("component", "embedded-promql"),
		MaxSamples:           cfg.MaxSamples,
		Timeout:              cfg.QueryTimeout,
		LookbackDelta:        cfg.LookbackDelta,
		EnableAtModifier:     true,
		EnableNegativeOffset: true,
		NoStepSubqueryIntervalFn: func(int64) int64 {
			return time.Minute.Milliseconds()
		},
		Parser: parser.NewParser(parser.Options{}),
	})
	e.opts = promql.NewPrometheusQueryOpts(false, cfg.LookbackDelta, nil)
	return e, nil
}

// Close stops its scrapers, closes the engine and the TSDB and removes a
// temporary folder.
func (e *Embedded) Close() error {
	e.closeOnce.Do(func() {
		e.mu.Lock()
		scrapers := e.scrapers
		e.scrapers, e.closed = nil, true
		e.mu.Unlock()
		for _, s := range scrapers {
			s.Stop()
		}
		err := e.engine.Close()
		if cerr := e.db.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close embedded tsdb: %w", cerr))
		}
		e.removeTmp()
		e.closeErr = err
	})
	return e.closeErr
}

func (e *Embedded) removeTmp() {
	if e.tmpDir != "" {
		_ = os.RemoveAll(e.tmpDir)
	}
}

// Dir is the TSDB folder.
func (e *Embedded) Dir() string { return e.db.Dir() }

// Query evaluates q at ts; see Querier.
func (e *Embedded) Query(ctx context.Context, q string, ts time.Time) (model.Vector, v1.Warnings, error) {
	start := time.Now()
	vec, w, err := runQuery(ctx, q, func() (promql.Query, error) {
		return e.engine.NewInstantQuery(ctx, e.db, e.opts, q, ts)
	}, func(v parser.Value) (model.Vector, error) { return toVector(q, v) })
	e.observe(InstantQuery, q, start, len(vec), w, err)
	return vec, w, err
}

// QueryRange evaluates q over r; see Querier.
func (e *Embedded) QueryRange(ctx context.Context, q string, r v1.Range) (model.Matrix, v1.Warnings, error) {
	start := time.Now()
	if r.Step <= 0 {
		err := &Error{Kind: KindBadQuery, Query: q, Attempts: 1, Err: errors.New("range query step must be positive")}
		e.observe(RangeQuery, q, start, 0, nil, err)
		return nil, nil, err
	}
	if r.End.Before(r.Start) {
		err := &Error{Kind: KindBadQuery, Query: q, Attempts: 1, Err: errors.New("range query end is before its start")}
		e.observe(RangeQuery, q, start, 0, nil, err)
		return nil, nil, err
	}
	m, w, err := runQuery(ctx, q, func() (promql.Query, error) {
		return e.engine.NewRangeQuery(ctx, e.db, e.opts, q, r.Start, r.End, r.Step)
	}, func(v parser.Value) (model.Matrix, error) { return toMatrix(q, v) })
	e.observe(RangeQuery, q, start, len(m), w, err)
	return m, w, err
}

// runQuery builds, executes and converts one query.
func runQuery[T any](ctx context.Context, q string, mk func() (promql.Query, error), conv func(parser.Value) (T, error)) (T, v1.Warnings, error) {
	var zero T
	qry, err := mk()
	if err != nil {
		return zero, nil, &Error{Kind: KindBadQuery, Query: q, Attempts: 1, Err: err}
	}
	defer qry.Close()
	res := qry.Exec(ctx)
	warn, _ := res.Warnings.AsStrings(q, 0, 0)
	if res.Err != nil {
		return zero, warn, &Error{Kind: execKind(ctx, res.Err), Query: q, Attempts: 1, Err: res.Err}
	}
	out, err := conv(res.Value)
	if err != nil {
		return zero, warn, err
	}
	return out, warn, nil
}

func execKind(ctx context.Context, err error) Kind {
	var (
		timeout promql.ErrQueryTimeout
		cancel  promql.ErrQueryCanceled
		storage promql.ErrStorage
	)
	switch {
	case errors.As(err, &timeout):
		return KindTimeout
	case errors.As(err, &cancel), errors.Is(err, context.Canceled):
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return KindTimeout
		}
		return KindCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return KindTimeout
	case errors.As(err, &storage):
		return KindUnavailable
	}
	// Too many samples, bad label set, and other evaluation errors: the
	// HTTP API answers these with 422 "execution".
	return KindBadQuery
}

func (e *Embedded) observe(t QueryType, q string, start time.Time, series int, w v1.Warnings, err error) {
	if e.cfg.Observer == nil {
		return
	}
	e.cfg.Observer(QueryEvent{Backend: "embedded", Type: t, Query: q, Attempts: 1,
		Duration: time.Since(start), Series: series, Warnings: len(w), Err: err})
}

func toMetric(ls labels.Labels) model.Metric {
	m := make(model.Metric, ls.Len())
	ls.Range(func(l labels.Label) {
		m[model.LabelName(l.Name)] = model.LabelValue(l.Value)
	})
	return m
}

func toVector(q string, v parser.Value) (model.Vector, error) {
	switch x := v.(type) {
	case promql.Vector:
		out := make(model.Vector, 0, len(x))
		for _, s := range x {
			if s.H != nil {
				return nil, &Error{Kind: KindBadResponse, Query: q, Attempts: 1, Err: errors.New("native histogram results are not supported")}
			}
			out = append(out, &model.Sample{Metric: toMetric(s.Metric), Value: model.SampleValue(s.F), Timestamp: model.Time(s.T)})
		}
		return out, nil
	case promql.Scalar:
		return model.Vector{{Metric: model.Metric{}, Value: model.SampleValue(x.V), Timestamp: model.Time(x.T)}}, nil
	}
	return nil, &Error{Kind: KindBadQuery, Query: q, Attempts: 1, Err: fmt.Errorf("instant query yields a %s, want a vector or scalar", v.Type())}
}

func toMatrix(q string, v parser.Value) (model.Matrix, error) {
	x, ok := v.(promql.Matrix)
	if !ok {
		return nil, &Error{Kind: KindBadResponse, Query: q, Attempts: 1, Err: fmt.Errorf("range query yields a %s", v.Type())}
	}
	out := make(model.Matrix, 0, len(x))
	for _, s := range x {
		if len(s.Histograms) > 0 {
			return nil, &Error{Kind: KindBadResponse, Query: q, Attempts: 1, Err: errors.New("native histogram results are not supported")}
		}
		ss := &model.SampleStream{Metric: toMetric(s.Metric), Values: make([]model.SamplePair, len(s.Floats))}
		for i, p := range s.Floats {
			ss.Values[i] = model.SamplePair{Timestamp: model.Time(p.T), Value: model.SampleValue(p.F)}
		}
		out = append(out, ss)
	}
	return out, nil
}
