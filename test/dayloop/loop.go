// Package dayloop runs gatetuner's daemon in closed loop over simulated days
// (the fleet simulator live, scraped into an embedded Prometheus at virtual
// time, the daemon's cycles, the operator rolling the EPP onto each write)
// and judges the last day against the EPP default and the best constant
// setting, for `gatetuner demo` and the tuner's proof tests.
package dayloop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/gatetuner/gatetuner/estimator/prom"
	"github.com/gatetuner/gatetuner/exporter"
	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim"
	"github.com/gatetuner/gatetuner/test/fleetsim/epp"
	"github.com/gatetuner/gatetuner/test/fleetsim/live"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/truth"
	"github.com/gatetuner/gatetuner/test/simenv"
	"github.com/gatetuner/gatetuner/tuner"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/daemon"
	"github.com/gatetuner/gatetuner/tuner/sink"
)

// Options configure one closed-loop run.
type Options struct {
	// Scenario is what the fleet plays (scenario.Days for several days).
	Scenario *scenario.Scenario
	// Profile is the simulated EPP's build profile.
	Profile gate.Profile
	// Source is the decision source: config.SourceModel (default) or
	// config.SourceRecords (the EPP's gate records, written to a file).
	Source string
	// Seed selects the simulator's streams and the model's draws.
	Seed uint64
	// CycleEvery is the simulated time between daemon cycles (0: 5m).
	CycleEvery time.Duration
	// RestartAfter is the simulated time between a write and the EPP's
	// restart onto it (0: 1m).
	RestartAfter time.Duration
	// Dir is the work folder (the EPP config, the TSDB, the records).
	Dir string
	// Policy is the target's policy (nil: simenv.Policy(Scenario,
	// simenv.LoopPolicy())).
	Policy *config.Policy
	// Logger receives the daemon's lines (nil: discarded).
	Logger *slog.Logger
	// Metrics is the daemon's registry (nil: a new one).
	Metrics *exporter.Metrics
	// Version and Commit label the registry built when Metrics is nil.
	Version, Commit string
	// Observer sees every cycle and restart as it happens (nil: none).
	Observer Observer
}

// Observer sees a run as it happens (the demo prints from it).
type Observer interface {
	// Cycle is called after each daemon cycle with its report.
	Cycle(at time.Time, phase string, r *tuner.Report)
	// Restarted is called when the EPP was rolled onto the written config
	// (err set when the restart failed).
	Restarted(at time.Time, phase string, st gate.Settings, err error)
}

// Apply is one write the EPP restarted onto.
type Apply struct {
	// Cycle is when the daemon wrote it, Restart when the EPP restarted,
	// both as offsets from the scenario's start.
	Cycle, Restart time.Duration
	// Phase is the phase the write happened in.
	Phase string
	// Settings are those the EPP restarted onto.
	Settings gate.Settings
	// Report is the cycle's report.
	Report *tuner.Report
}

// Result is what a run did and what really happened.
type Result struct {
	Truth   *truth.Truth
	Applies []Apply
	// Holds counts the held cycles by reason.
	Holds  map[string]int
	Cycles int
	// Wall is the run's wall time.
	Wall time.Duration
}

// Loop is a prepared closed loop; Run plays it once.
type Loop struct {
	opt      Options
	sc       *scenario.Scenario
	start    time.Time
	clk      *testingclock.FakeClock
	path     string
	live     *live.Fleet
	emb      *prom.Embedded
	d        *daemon.Daemon
	tg       *tuner.Target
	pol      config.Policy
	records  *os.File
	closers  []func()
	finished bool
}

// discard is the logger used when none is given.
func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// New builds the fleet, the embedded Prometheus and the daemon; the EPP
// starts on the EPP defaults. Close releases them.
func New(ctx context.Context, opt Options) (*Loop, error) {
	if opt.Scenario == nil {
		return nil, errors.New("dayloop: no scenario")
	}
	if opt.CycleEvery == 0 {
		opt.CycleEvery = 5 * time.Minute
	}
	if opt.RestartAfter == 0 {
		opt.RestartAfter = time.Minute
	}
	if opt.Source == "" {
		opt.Source = config.SourceModel
	}
	if opt.Source != config.SourceModel && opt.Source != config.SourceRecords {
		return nil, fmt.Errorf("dayloop: decision source %q: want %s or %s", opt.Source, config.SourceModel, config.SourceRecords)
	}
	sc := opt.Scenario
	if opt.CycleEvery < sc.ScrapeInterval {
		return nil, fmt.Errorf("dayloop: cycles every %s are shorter than the scrape interval (%s)", opt.CycleEvery, sc.ScrapeInterval)
	}
	if opt.Dir == "" {
		return nil, errors.New("dayloop: no work folder")
	}
	l := &Loop{opt: opt, sc: sc, start: fleetsim.DefaultBaseTime()}
	if err := l.build(ctx); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

func (l *Loop) build(ctx context.Context) error {
	opt, sc := l.opt, l.sc
	l.clk = testingclock.NewFakeClock(l.start)
	now := l.clk.Now
	var err error
	if l.path, err = simenv.WriteEPPConfig(opt.Dir, sc, epp.DefaultSettings(), false); err != nil {
		return fmt.Errorf("dayloop: write the EPP config: %w", err)
	}
	lopt := live.Options{Seed: opt.Seed, Start: l.start, Now: now, Logger: discard(),
		Settings: epp.ConfigFile{Path: l.path, Plugin: sc.EPP.Plugin, Profile: opt.Profile}}
	recPath := filepath.Join(opt.Dir, "records.jsonl")
	if opt.Source == config.SourceRecords {
		if l.records, err = os.Create(recPath); err != nil {
			return fmt.Errorf("dayloop: records file: %w", err)
		}
		l.closers = append(l.closers, func() { _ = l.records.Close() })
		lopt.Records = l.records
	}
	if l.live, err = live.New(sc, lopt); err != nil {
		return err
	}
	metrics := opt.Metrics
	if metrics == nil {
		metrics = exporter.New(opt.Version, opt.Commit)
	}
	metrics.Leader.Set(1) // one daemon, no election
	if l.emb, err = prom.NewEmbedded(prom.EmbeddedConfig{Dir: filepath.Join(opt.Dir, "tsdb"), Now: now, Logger: discard(),
		Observer: daemon.QueryObserver(metrics)}); err != nil {
		return err
	}
	l.closers = append(l.closers, func() { _ = l.emb.Close() })
	l.pol = simenv.Policy(sc, simenv.LoopPolicy())
	if opt.Policy != nil {
		l.pol = *opt.Policy
	}
	l.pol.DecisionSource = opt.Source
	t := simenv.ConfigTarget(sc, config.Target{File: l.path, Plugin: sc.EPP.Plugin, Profile: opt.Profile.Name}, l.pol)
	if opt.Source == config.SourceRecords {
		t.Records = config.Records{File: recPath}
	}
	logger := opt.Logger
	if logger == nil {
		logger = discard()
	}
	cfg := &config.Config{Prometheus: config.Prometheus{URL: "embedded"}, Targets: []config.Target{t}}
	if l.d, err = daemon.New(ctx, cfg, daemon.Deps{Logger: logger, Metrics: metrics, Querier: l.emb, Clock: now, Seed: opt.Seed,
		SinkOptions: func(so *sink.Options) { so.Clock = l.clk; so.Identity = "gatetuner-dayloop" }}); err != nil {
		return err
	}
	l.closers = append(l.closers, func() { l.d.Close() })
	l.tg = l.d.Targets()[0]
	return nil
}

// Path is the EPP config file the daemon edits.
func (l *Loop) Path() string { return l.path }

// Handler serves the daemon's /metrics, /healthz, /readyz and /reports.
func (l *Loop) Handler() http.Handler { return l.d.Handler() }

// Start is the wall time of the scenario's start (virtual).
func (l *Loop) Start() time.Time { return l.start }

// TargetPolicy is the policy the daemon runs with.
func (l *Loop) TargetPolicy() config.Policy { return l.pol }

// Close releases the daemon, the TSDB and the records file.
func (l *Loop) Close() {
	for i := len(l.closers) - 1; i >= 0; i-- {
		l.closers[i]()
	}
	l.closers = nil
}

// Run plays the whole scenario: a scrape every scrape interval, a daemon
// cycle every CycleEvery, and RestartAfter after each applied write the EPP
// restarts onto the file (as an operator's rollout would).
func (l *Loop) Run(ctx context.Context) (*Result, error) {
	if l.finished {
		return nil, errors.New("dayloop: a loop runs once")
	}
	l.finished = true
	wall := time.Now()
	res := &Result{Holds: map[string]int{}}
	end := l.start.Add(l.sc.Duration())
	var pending *Apply
	nextCycle := l.start.Add(l.opt.CycleEvery)
	for vt := l.start.Add(l.sc.ScrapeInterval); !vt.After(end); vt = vt.Add(l.sc.ScrapeInterval) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		l.clk.SetTime(vt)
		if err := l.scrape(ctx, vt); err != nil {
			return nil, err
		}
		if pending != nil && !vt.Before(l.start.Add(pending.Cycle+l.opt.RestartAfter)) {
			if err := l.restart(ctx, vt, pending, res); err != nil {
				return nil, err
			}
			pending = nil
		}
		if vt.Before(nextCycle) {
			continue
		}
		nextCycle = nextCycle.Add(l.opt.CycleEvery)
		reps, err := l.d.RunOnce(ctx, "")
		if err != nil {
			return nil, err
		}
		r := reps[0]
		res.Cycles++
		if l.opt.Observer != nil {
			l.opt.Observer.Cycle(vt, l.live.Phase(), r)
		}
		switch {
		case r.Result == tuner.ResultApplied:
			pending = &Apply{Cycle: vt.Sub(l.start), Phase: l.live.Phase(), Report: r}
		case r.Hold != nil:
			res.Holds[string(r.Hold.Reason)]++
		}
	}
	if l.records != nil {
		if err := l.records.Sync(); err != nil {
			return nil, fmt.Errorf("dayloop: records: %w", err)
		}
	}
	res.Truth = l.live.Truth()
	res.Wall = time.Since(wall)
	return res, nil
}

// restart rolls the EPP onto the written config and tells the sink.
func (l *Loop) restart(ctx context.Context, vt time.Time, a *Apply, res *Result) error {
	rerr := l.live.Restart(ctx)
	if rerr == nil {
		if err := l.tg.Sink.MarkRestarted(ctx, vt); err != nil && !errors.Is(err, sink.ErrNoPendingRestart) {
			return err
		}
		a.Restart = vt.Sub(l.start)
		a.Settings = l.live.Settings()
		res.Applies = append(res.Applies, *a)
	}
	if l.opt.Observer != nil {
		l.opt.Observer.Restarted(vt, l.live.Phase(), l.live.Settings(), rerr)
	}
	return nil
}

// scrape scrapes the simulated fleet once and stores the samples at vt.
func (l *Loop) scrape(ctx context.Context, vt time.Time) error {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil).WithContext(ctx)
	l.live.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		return fmt.Errorf("scrape the simulated fleet: HTTP %d: %s", rec.Code, rec.Body.String())
	}
	_, err := l.emb.IngestText(ctx, bytes.NewReader(rec.Body.Bytes()), prom.IngestOptions{Format: prom.FormatPrometheusText, DefaultTime: vt})
	return err
}
