// Package live runs a simulated fleet in real time: it serves the current
// metrics on /metrics, takes its gate settings from an EPP config (a file or
// a ConfigMap) and plays the EPP's rollouts.
package live

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim"
	"github.com/gatetuner/gatetuner/test/fleetsim/epp"
	"github.com/gatetuner/gatetuner/test/fleetsim/export"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/truth"
)

// Options configure a live Fleet.
type Options struct {
	// Seed selects the random streams, as for fleetsim.Run.
	Seed uint64
	// TimeScale compresses the scenario's content: phase durations (and
	// diurnal periods) are divided by it; rates, think times and the engines
	// run at real speed. 0 means 1.
	TimeScale float64
	// Start is the wall time of scenario time 0 (zero: Now() at New).
	Start time.Time
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Settings is where the EPP reads its gate settings when it starts and
	// on every Restart (nil: the scenario's parameters, phase by phase,
	// until the first RestartWith).
	Settings epp.SettingsSource
	// Records, when set, receives a gate record per decision.
	Records io.Writer
	// MetricsOptions shape /metrics (Interleaved does not apply).
	MetricsOptions export.MetricsOptions
	// ScrapeInterval is the truth's sampling grid (0: the scenario's).
	ScrapeInterval time.Duration
	// Logger receives restarts and failed restarts (nil: slog.Default()).
	Logger *slog.Logger
}

// Fleet is a fleet running in real time: each Advance moves the simulation to
// the clock's now, ServeHTTP serves the current metrics (as a real
// Prometheus would scrape them, stamped at scrape time), and Restart plays
// an EPP rollout. Fleet is safe for concurrent use.
type Fleet struct {
	mu       sync.Mutex
	s        *fleetsim.Sim
	start    time.Time
	now      func() time.Time
	src      epp.SettingsSource
	healthy  bool
	restarts int
	lastErr  error
	log      *slog.Logger
}

// New builds a live fleet for the scenario. It fails when the settings
// source fails at start.
func New(sc *scenario.Scenario, opt Options) (*Fleet, error) {
	scale := opt.TimeScale
	if scale == 0 {
		scale = 1
	}
	csc := sc // uncompressed: trace scenarios run live at their own speed
	if scale != 1 {
		var err error
		if csc, err = sc.Compressed(scale); err != nil {
			return nil, err
		}
	}
	now := opt.Now
	if now == nil {
		now = time.Now
	}
	start := opt.Start
	if start.IsZero() {
		start = now()
	}
	l := &Fleet{start: start, now: now, src: opt.Settings, healthy: true, log: opt.Logger}
	if l.log == nil {
		l.log = slog.Default()
	}
	ropt := fleetsim.Options{Seed: opt.Seed, BaseTime: start, ScrapeInterval: opt.ScrapeInterval, Records: opt.Records,
		MetricsOptions: opt.MetricsOptions}
	ropt.MetricsOptions.Interleaved = false
	s, err := fleetsim.NewOpenEnded(csc, ropt)
	if err != nil {
		return nil, err
	}
	if l.src != nil {
		st, err := l.src.LoadSettings()
		if err != nil {
			return nil, fmt.Errorf("live %s: EPP cannot start: %w", sc.Name, err)
		}
		s.Pin(st)
	}
	l.s = s
	return l, nil
}

func (l *Fleet) simTime(t time.Time) int64 {
	d := t.Sub(l.start)
	if d < 0 {
		return 0
	}
	return int64(d)
}

// AdvanceTo moves the simulation to wall time t (never backwards).
func (l *Fleet) AdvanceTo(ctx context.Context, t time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.advanceLocked(ctx, t)
}

func (l *Fleet) advanceLocked(ctx context.Context, t time.Time) error {
	target := l.simTime(t)
	if target <= l.s.Now() {
		return nil
	}
	if err := l.s.Advance(ctx, target); err != nil {
		return err
	}
	return l.s.FlushRecords()
}

// Advance moves the simulation to the clock's now.
func (l *Fleet) Advance(ctx context.Context) error { return l.AdvanceTo(ctx, l.now()) }

// Run advances the simulation every tick until ctx ends; it returns nil
// when ctx is cancelled.
func (l *Fleet) Run(ctx context.Context, tick time.Duration) error {
	if tick <= 0 {
		tick = 100 * time.Millisecond
	}
	tk := time.NewTicker(tick)
	defer tk.Stop()
	for {
		if err := l.Advance(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tk.C:
		}
	}
}

// ServeHTTP serves every pod's vLLM metrics and the EPP's metrics as they
// are at the clock's now (Prometheus text format 0.0.4; series carry their
// namespace and pod labels, so scrape with honor_labels).
func (l *Fleet) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.advanceLocked(r.Context(), l.now()); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	if err := l.s.WriteMetrics(w); err != nil {
		l.log.Debug("fleetsim: write /metrics", "err", err)
	}
}

// Restart plays an EPP rollout: the EPP pods restart, re-read their
// settings from the source and start with an empty prefix index and
// in-flight accounting (affinity is lost until it re-warms). When the source
// fails (e.g. a key the build rejects), the new pods never become ready: the
// old pods keep serving with the old settings and index, Healthy reports
// false, and the error is returned. Without a source it restarts with the
// settings in force.
func (l *Fleet) Restart(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.advanceLocked(ctx, l.now()); err != nil {
		return err
	}
	st := l.s.Settings()
	if l.src != nil {
		var err error
		st, err = l.src.LoadSettings()
		if err != nil {
			l.healthy = false
			l.lastErr = err
			l.log.Warn("fleetsim: EPP rollout stuck, new pods crash-loop; old pods keep serving", "err", err)
			return fmt.Errorf("EPP restart: %w", err)
		}
	}
	l.restartLocked(st)
	return nil
}

// RestartWith restarts the EPP with the given settings (see Restart).
func (l *Fleet) RestartWith(ctx context.Context, st gate.Settings) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.advanceLocked(ctx, l.now()); err != nil {
		return err
	}
	l.restartLocked(st)
	return nil
}

func (l *Fleet) restartLocked(st gate.Settings) {
	l.s.Pin(st)
	l.s.RestartEPP()
	l.healthy = true
	l.lastErr = nil
	l.restarts++
	l.log.Info("fleetsim: EPP restarted", "settings", st.String(), "restarts", l.restarts)
}

// Healthy reports whether the EPP's last rollout succeeded.
func (l *Fleet) Healthy() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.healthy
}

// LastError is the error of the last failed restart (nil when healthy).
func (l *Fleet) LastError() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastErr
}

// Restarts counts successful restarts.
func (l *Fleet) Restarts() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.restarts
}

// Settings returns the gate settings the serving EPP uses.
func (l *Fleet) Settings() gate.Settings {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s.Settings()
}

// Phase returns the name of the phase the simulation is in.
func (l *Fleet) Phase() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s.Phase()
}

// Now returns the wall time the simulation has reached.
func (l *Fleet) Now() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.start.Add(time.Duration(l.s.Now()))
}

// Truth returns the ground truth up to the time the simulation has reached
// (requests still waiting for their first token count as unfinished).
func (l *Fleet) Truth() *truth.Truth {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s.Truth()
}
