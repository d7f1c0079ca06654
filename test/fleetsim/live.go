package fleetsim

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/gatetuner/gatetuner/gate"
)

// LiveOptions configure a Live fleet.
type LiveOptions struct {
	// Seed selects the random streams, as for Run.
	Seed uint64
	// TimeScale compresses the scenario's content: phase durations (and
	// diurnal periods) are divided by it; rates, think times and the engines
	// run at real speed. 0 means 1.
	TimeScale float64
	// Start is the wall time of scenario time 0 (zero: Now() at NewLive).
	Start time.Time
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Settings is where the EPP reads its gate settings when it starts and
	// on every Restart (nil: the scenario's parameters, phase by phase,
	// until the first RestartWith).
	Settings SettingsSource
	// Records, when set, receives a gate record per decision.
	Records io.Writer
	// MetricsOptions shape /metrics (Interleaved does not apply).
	MetricsOptions MetricsOptions
	// ScrapeInterval is the truth's sampling grid (0: the scenario's).
	ScrapeInterval time.Duration
	// Logger receives restarts and failed restarts (nil: slog.Default()).
	Logger *slog.Logger
}

// Live is a fleet running in real time: each Advance moves the simulation to
// the clock's now, ServeHTTP serves the current metrics (as a real
// Prometheus would scrape them, stamped at scrape time), and Restart plays
// an EPP rollout. Live is safe for concurrent use.
type Live struct {
	mu       sync.Mutex
	s        *sim
	start    time.Time
	now      func() time.Time
	src      SettingsSource
	healthy  bool
	restarts int
	lastErr  error
	log      *slog.Logger
}

// NewLive builds a live fleet for the scenario. It fails when the settings
// source fails at start.
func NewLive(sc *Scenario, opt LiveOptions) (*Live, error) {
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
	l := &Live{start: start, now: now, src: opt.Settings, healthy: true, log: opt.Logger}
	if l.log == nil {
		l.log = slog.Default()
	}
	ropt := Options{Seed: opt.Seed, BaseTime: start, ScrapeInterval: opt.ScrapeInterval, Records: opt.Records,
		MetricsOptions: opt.MetricsOptions}
	ropt.MetricsOptions.Interleaved = false
	s, err := newSim(csc, ropt, true)
	if err != nil {
		return nil, err
	}
	if l.src != nil {
		st, err := l.src.LoadSettings()
		if err != nil {
			return nil, fmt.Errorf("live %s: EPP cannot start: %w", sc.Name, err)
		}
		s.pin(st)
	}
	l.s = s
	return l, nil
}

// pin fixes the EPP's settings whatever the phase.
func (s *sim) pin(st gate.Settings) {
	for i := range s.settings {
		s.settings[i] = st
	}
	s.epp.settings = st
}

func (l *Live) simTime(t time.Time) int64 {
	d := t.Sub(l.start)
	if d < 0 {
		return 0
	}
	return int64(d)
}

// AdvanceTo moves the simulation to wall time t (never backwards).
func (l *Live) AdvanceTo(ctx context.Context, t time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.advanceLocked(ctx, t)
}

func (l *Live) advanceLocked(ctx context.Context, t time.Time) error {
	target := l.simTime(t)
	if target <= l.s.now {
		return nil
	}
	if err := l.s.advance(ctx, target); err != nil {
		return err
	}
	if l.s.rec != nil {
		return l.s.rec.flush()
	}
	return nil
}

// Advance moves the simulation to the clock's now.
func (l *Live) Advance(ctx context.Context) error { return l.AdvanceTo(ctx, l.now()) }

// Run advances the simulation every tick until ctx ends; it returns nil
// when ctx is cancelled.
func (l *Live) Run(ctx context.Context, tick time.Duration) error {
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
func (l *Live) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.advanceLocked(r.Context(), l.now()); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	if err := l.s.cat.writeText(w); err != nil {
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
func (l *Live) Restart(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.advanceLocked(ctx, l.now()); err != nil {
		return err
	}
	st := l.s.epp.settings
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
func (l *Live) RestartWith(ctx context.Context, st gate.Settings) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.advanceLocked(ctx, l.now()); err != nil {
		return err
	}
	l.restartLocked(st)
	return nil
}

func (l *Live) restartLocked(st gate.Settings) {
	l.s.pin(st)
	l.s.epp.restart()
	l.healthy = true
	l.lastErr = nil
	l.restarts++
	l.log.Info("fleetsim: EPP restarted", "settings", st.String(), "restarts", l.restarts)
}

// Healthy reports whether the EPP's last rollout succeeded.
func (l *Live) Healthy() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.healthy
}

// LastError is the error of the last failed restart (nil when healthy).
func (l *Live) LastError() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastErr
}

// Restarts counts successful restarts.
func (l *Live) Restarts() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.restarts
}

// Settings returns the gate settings the serving EPP uses.
func (l *Live) Settings() gate.Settings {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s.epp.settings
}

// Phase returns the name of the phase the simulation is in.
func (l *Live) Phase() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s.sc.Phases[l.s.cur].Name
}

// Now returns the wall time the simulation has reached.
func (l *Live) Now() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.start.Add(time.Duration(l.s.now))
}

// Truth returns the ground truth up to the time the simulation has reached
// (requests still waiting for their first token count as unfinished).
func (l *Live) Truth() *Truth {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s.truth()
}
