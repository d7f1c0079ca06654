package tuner

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/exporter"
	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/sink"
)

// Estimator estimates a target's live numbers (estimator.Estimator).
type Estimator interface {
	Estimate(ctx context.Context, t estimator.Target, at time.Time) (*estimator.Estimates, error)
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

// Tuner runs guarded tuning cycles.
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

	// counted is, per target, the end of the last window whose decisions
	// went into the shadow counters (windows overlap from cycle to cycle).
	countedMu sync.Mutex
	counted   map[string]time.Time

	// announced is, per target, the recommendation hash whose awaiting
	// approval was last announced in an Event (approve mode).
	announcedMu sync.Mutex
	announced   map[string]string
	// joinAnnounced is, per target, the join reasons last announced in
	// Events (guarded by announcedMu).
	joinAnnounced map[string][]string
	// days holds, per target, the completed windows' estimates (day.go).
	dayMu sync.Mutex
	days  map[string]*dayCache
	// replays holds, per target, the shadow replay carried from cycle to
	// cycle (replay.go).
	replayMu sync.Mutex
	replays  map[string]*replayStream
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

// freshSince returns where this cycle's counter increments start: the end of
// the target's last counted window, or from when there is none.
func (t *Tuner) freshSince(target string, from time.Time) time.Time {
	t.countedMu.Lock()
	defer t.countedMu.Unlock()
	if c, ok := t.counted[target]; ok && c.After(from) {
		return c
	}
	return from
}

func (t *Tuner) markCounted(target string, to time.Time) {
	t.countedMu.Lock()
	defer t.countedMu.Unlock()
	if t.counted == nil {
		t.counted = map[string]time.Time{}
	}
	t.counted[target] = to
}
