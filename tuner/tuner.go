package tuner

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/exporter"
	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/sink"
)

// Estimator estimates a target's live numbers (estimator.Estimator): the
// port the gather stage reads the lookback's estimates through.
type Estimator interface {
	Estimate(ctx context.Context, t estimator.Target, at time.Time) (*estimator.Estimates, error)
}

// SpanEstimator estimates over an explicit span (estimator.Estimator's
// EstimateSpan): each window of the day gets its own estimates, and the
// last minutes' traffic prices a restart now.
type SpanEstimator interface {
	EstimateSpan(ctx context.Context, t estimator.Target, from, to time.Time) (*estimator.Estimates, error)
}

// Target is one tuning target at run time.
type Target struct {
	Config  config.Target
	Profile gate.Profile
	Sink    sink.Sink
	Est     estimator.Target
	// Records is an exact decision source; nil means the Prometheus model.
	Records DecisionSource
	// Estimator, when set, replaces the Tuner's for this target.
	Estimator Estimator
}

// Tuner runs guarded tuning cycles. It keeps no per-target state: what a
// target's cycles carry from one to the next is its Memory, which the
// caller owns (the daemon keeps one per target; Cycle and CycleGroup use
// the Tuner's own Memories).
type Tuner struct {
	// Estimator serves targets that have none of their own.
	Estimator Estimator
	// Clock is the time source (time.Now when nil).
	Clock   func() time.Time
	Metrics *exporter.Metrics
	Tracer  trace.Tracer
	Logger  *slog.Logger
	// Seed makes the Prometheus model's draws reproducible.
	Seed uint64

	// memory serves Cycle and CycleGroup.
	memory Memories
}

func (t *Tuner) now() time.Time {
	if t.Clock != nil {
		return t.Clock()
	}
	return time.Now()
}

func (t *Tuner) tracer() trace.Tracer {
	if t.Tracer != nil {
		return t.Tracer
	}
	return noop.NewTracerProvider().Tracer(exporter.TracerName)
}

func (t *Tuner) log() *slog.Logger {
	if t.Logger != nil {
		return t.Logger
	}
	return slog.Default()
}

func (t *Tuner) stage(ctx context.Context, name string) (context.Context, trace.Span) {
	return t.tracer().Start(ctx, "gatetuner."+name)
}

// estimatorFor is the target's estimator, or the Tuner's.
func (t *Tuner) estimatorFor(tg *Target) Estimator {
	if tg.Estimator != nil {
		return tg.Estimator
	}
	return t.Estimator
}
