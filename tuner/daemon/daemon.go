// Package daemon runs gatetuner in-cluster: it builds a tuning target per
// configured EPP filter instance, runs a cycle per target on its cron
// schedule while it holds the leader Lease, and serves /metrics, /healthz,
// /readyz and the last decision records.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/robfig/cron/v3"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/estimator/prom"
	"github.com/gatetuner/gatetuner/exporter"
	"github.com/gatetuner/gatetuner/tuner"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/jsonenc"
	"github.com/gatetuner/gatetuner/tuner/leader"
	"github.com/gatetuner/gatetuner/tuner/sink"
)

// Deps are the daemon's injected dependencies; zero values get production defaults.
type Deps struct {
	Logger  *slog.Logger
	Metrics *exporter.Metrics
	Tracer  trace.Tracer
	// Clock is the time source of cycles and guards.
	Clock func() time.Time
	// Querier replaces the one built from the config (tests, the demo).
	Querier prom.Querier
	// Kube replaces the client built from the config.
	Kube kubernetes.Interface
	// Identity names this replica (leader election, history); default POD_NAME or the hostname.
	Identity string
	// ReadOnly opens every sink read-only (recommend).
	ReadOnly bool
	// SinkOptions adjusts every sink's options (tests, the demo's restart hook).
	SinkOptions func(*sink.Options)
	// Seed makes the Prometheus model reproducible.
	Seed uint64
}

// Daemon is a configured gatetuner.
type Daemon struct {
	cfg     *config.Config
	deps    Deps
	log     *slog.Logger
	tuner   *tuner.Tuner
	targets []*tuner.Target
	// groups partition the targets by EPP config location: targets sharing
	// one config are planned together and written in one write.
	groups  []*targetGroup
	kube    kubernetes.Interface
	closers []func()
	// streams are the targets' records streams, started by Run.
	streams []*tuner.RecordsStream
	// memory is what each target's cycles carry from one to the next.
	memory tuner.Memories

	mu      sync.Mutex
	reports map[string]*tuner.Report
	ready   atomic.Bool
	beat    atomic.Int64 // unix nanos of the scheduler's last heartbeat
	elector *leader.Elector
	q       prom.Querier // for the startup check
	// emb and scrape are the embedded Prometheus and its scrape job
	// (prometheus.url: embedded with scrape targets), started by Run.
	emb    *prom.Embedded
	scrape *prom.ScrapeConfig
}

// New builds the daemon's targets from the config. It starts nothing in
// the background (the embedded Prometheus's scraper and the records streams
// start in Run), so ctx bounds only the construction.
func New(_ context.Context, cfg *config.Config, deps Deps) (*Daemon, error) {
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	if deps.Metrics == nil {
		deps.Metrics = exporter.New("dev", "unknown")
	}
	if deps.Clock == nil {
		deps.Clock = time.Now
	}
	if deps.Identity == "" {
		deps.Identity = identity()
	}
	d := &Daemon{cfg: cfg, deps: deps, log: deps.Logger, reports: map[string]*tuner.Report{}}
	q := deps.Querier
	if q == nil {
		var err error
		if q, err = d.querier(); err != nil {
			return nil, err
		}
	}
	d.q = q
	d.kube = deps.Kube
	needKube := cfg.LeaderElection.Enabled
	for _, t := range cfg.Targets {
		needKube = needKube || t.ConfigMap != ""
	}
	if needKube && d.kube == nil {
		c, err := kubeClient(cfg.Kubernetes.Kubeconfig)
		if err != nil {
			return nil, err
		}
		d.kube = c
	}
	d.tuner = &tuner.Tuner{Clock: deps.Clock, Metrics: deps.Metrics, Tracer: deps.Tracer, Logger: deps.Logger, Seed: deps.Seed}
	for _, ct := range cfg.Targets {
		tg, err := d.buildTarget(ct, q)
		if err != nil {
			d.Close()
			if !strings.HasPrefix(err.Error(), "target "+ct.Name+":") { // no "target a: target a:"
				err = fmt.Errorf("target %s: %w", ct.Name, err)
			}
			return nil, err
		}
		d.targets = append(d.targets, tg)
	}
	if err := d.group(q); err != nil {
		d.Close()
		return nil, err
	}
	d.ready.Store(true)
	return d, nil
}

func identity() string {
	if p := os.Getenv("POD_NAME"); p != "" {
		return p
	}
	if h, err := os.Hostname(); err == nil {
		return h
	}
	return "gatetuner"
}

func kubeClient(kubeconfig string) (kubernetes.Interface, error) {
	rc, err := RESTConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(rc)
}

// RESTConfig is how the daemon reaches the API server: the kubeconfig at
// the path, else in-cluster, else the default kubeconfig loading rules.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	var rc *rest.Config
	var err error
	if kubeconfig == "" {
		rc, err = rest.InClusterConfig()
		if errors.Is(err, rest.ErrNotInCluster) {
			rc, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), nil).ClientConfig()
		}
	} else {
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	rc.UserAgent = "gatetuner"
	return rc, nil
}

func (d *Daemon) querier() (prom.Querier, error) {
	p := d.cfg.Prometheus
	observer := QueryObserver(d.deps.Metrics)
	switch p.URL {
	case "":
		return nil, errors.New("prometheus.url is required (an http(s) URL, or embedded)")
	case "embedded":
		emb, err := NewEmbeddedPrometheus(p, observer, d.log.With("component", "embedded-prometheus"))
		if err != nil {
			return nil, err
		}
		var targets []prom.ScrapeTarget
		for _, a := range p.Scrape {
			targets = append(targets, prom.ScrapeTarget{Job: "gatetuner-scrape", Addrs: []string{a}})
		}
		if len(targets) > 0 {
			d.scrape = &prom.ScrapeConfig{Targets: targets, Interval: p.ScrapeInterval}
		}
		d.emb = emb
		d.closers = append(d.closers, func() { emb.Close() })
		return emb, nil
	}
	h, err := NewHTTPQuerier(p, observer, d.log)
	if err != nil {
		return nil, fmt.Errorf("prometheus: %w", err)
	}
	d.closers = append(d.closers, h.Close)
	return h, nil
}

// NewEmbeddedPrometheus is the one construction of the in-process
// Prometheus (prometheus.url: embedded) — the daemon's, estimate's and
// recommend's: a TSDB in a temporary folder that Close removes, each query
// bounded by p.Timeout. Filling it (scraper, simulator) is the caller's.
// observer and logger may be nil.
func NewEmbeddedPrometheus(p config.Prometheus, observer prom.Observer, logger *slog.Logger) (*prom.Embedded, error) {
	return prom.NewEmbedded(prom.EmbeddedConfig{QueryTimeout: p.Timeout, Observer: observer, Logger: logger})
}

// NewHTTPQuerier is the one construction of a Prometheus HTTP API client
// from the prometheus: section (the daemon's and the CLI's); observer and
// logger may be nil.
func NewHTTPQuerier(p config.Prometheus, observer prom.Observer, logger *slog.Logger) (*prom.HTTP, error) {
	return prom.NewHTTP(prom.HTTPConfig{Address: p.URL, BearerTokenFile: p.BearerTokenFile, Headers: p.Headers, Timeout: p.Timeout,
		TLS:      prom.TLSConfig{CAFile: p.CAFile, CertFile: p.CertFile, KeyFile: p.KeyFile, ServerName: p.ServerName, InsecureSkipVerify: p.InsecureSkipVerify},
		Observer: observer, Logger: logger})
}

func (d *Daemon) buildTarget(ct config.Target, q prom.Querier) (*tuner.Target, error) {
	prof, err := d.cfg.ResolveProfile(ct.Profile)
	if err != nil {
		return nil, err
	}
	st := sink.Target{Name: ct.Name, Namespace: ct.Namespace, ConfigMap: ct.ConfigMap, Key: ct.Key, Deployment: ct.Deployment,
		File: ct.File, StateFile: ct.StateFile, Profile: prof}
	if ct.Plugin != "" {
		st.Plugins = []string{ct.Plugin}
	}
	if !st.IsFile() {
		st.Mode = sink.ModeConfigMap
		if ct.Mode == config.ModeRollout {
			st.Mode = sink.ModeRollout
		}
	}
	sk, err := sink.New(st, d.sinkOptions(ct, q))
	if err != nil {
		return nil, err
	}
	et := estimator.Target{Name: ct.Name, VLLMSelector: ct.Selector.VLLM, EPPSelector: ct.Selector.EPP, MaxNumBatchedTokens: ct.MaxNumBatchedTokens,
		SyncedEPPReplicas: ct.SyncedEPPReplicas, PDGateProfile: ct.PDGateProfile}
	switch {
	case ct.PriorPPT > 0:
		et.Prior = &estimator.Prior{Value: ct.PriorPPT, Origin: estimator.PriorConfigured, Detail: "config priorPPT"}
	case ct.CalibrationFile != "":
		if et.Prior, err = estimator.LoadCalibrationPrior(ct.CalibrationFile, ""); err != nil {
			return nil, fmt.Errorf("calibrationFile: %w", err)
		}
	}
	if err := et.Validate(); err != nil {
		return nil, err
	}
	est, err := estimator.New(q, d.deps.Clock, estimator.Config{Lookback: ct.Lookback, Window: ct.SaturationWindow, SnapshotStep: ct.SnapshotStep})
	if err != nil {
		return nil, err
	}
	tg := &tuner.Target{Config: ct, Profile: prof, Sink: sk, Est: et, Estimator: est}
	if ct.DecisionSource == config.SourceRecords {
		switch {
		case ct.Records.File != "":
			tg.Records = &tuner.RecordsFile{Path: ct.Records.File, Target: ct.Name, Plugin: ct.Plugin}
		case ct.Records.URL != "":
			s := &tuner.RecordsStream{URL: ct.Records.URL, Target: ct.Name, Plugin: ct.Plugin, Retention: ct.History}
			d.watchStream(ct.Name, s)
			d.streams = append(d.streams, s)
			tg.Records = s
		}
	}
	return tg, nil
}

// sinkOptions are the sink options of a configured target.
func (d *Daemon) sinkOptions(ct config.Target, q prom.Querier) sink.Options {
	so := sink.Options{Client: d.kube, Identity: d.deps.Identity, Logger: d.log, ReadOnly: d.deps.ReadOnly || ct.Mode == config.ModeOff,
		RolloutTimeout: ct.Verification.RolloutTimeout}
	if ct.Mode == config.ModeRollout {
		so.Verify = &sink.Verify{Querier: q, Selector: ct.Selector.EPP, VLLMSelector: ct.Selector.VLLM,
			Margin: ct.Verification.TTFTMargin, Window: ct.Verification.Window, Warmup: ct.Verification.Warmup}
	}
	if d.deps.SinkOptions != nil {
		d.deps.SinkOptions(&so)
	}
	return so
}

// targetGroup is the targets sharing one EPP config location; joint (set
// when there are several) manages all their filter instances.
type targetGroup struct {
	members []*tuner.Target
	joint   sink.Sink
}

// group partitions the targets by config location. Targets sharing one
// config (filter instances of one ConfigMap key or file) must agree on the
// mode, deployment, profile and schedule, and name their plugins: the EPP
// restarts onto a whole config, so their edits are written together.
func (d *Daemon) group(q prom.Querier) error {
	byLoc := map[string]*targetGroup{}
	for _, tg := range d.targets {
		loc := tg.Sink.Target().Location()
		g, ok := byLoc[loc]
		if !ok {
			g = &targetGroup{}
			byLoc[loc] = g
			d.groups = append(d.groups, g)
		}
		g.members = append(g.members, tg)
	}
	for _, g := range d.groups {
		if len(g.members) < 2 {
			continue
		}
		first := g.members[0].Config
		var sts []sink.Target
		var names []string
		for _, m := range g.members {
			names = append(names, m.Config.Name)
			sts = append(sts, m.Sink.Target())
			if m.Config.Mode != first.Mode || m.Config.Schedule != first.Schedule {
				return fmt.Errorf("targets %s and %s share %s: give them the same mode and schedule (their edits are written together)",
					first.Name, m.Config.Name, m.Sink.Target().Location())
			}
		}
		merged, err := sink.Merge(sts...)
		if err != nil {
			return fmt.Errorf("targets %s share one config: %w", strings.Join(names, ", "), err)
		}
		if g.joint, err = sink.New(merged, d.sinkOptions(first, q)); err != nil {
			return fmt.Errorf("targets %s: joint sink: %w", strings.Join(names, ", "), err)
		}
		d.log.Info("targets share one EPP config: planned together, written in one write", "targets", names, "location", merged.Location())
	}
	return nil
}

// QueryObserver reports every Prometheus query's latency and error kind
// in the metrics.
func QueryObserver(m *exporter.Metrics) prom.Observer {
	return func(ev prom.QueryEvent) {
		kind := ""
		if ev.Err != nil {
			kind = prom.KindOf(ev.Err).String()
		}
		m.ObserveQuery(ev.Backend, ev.Duration, kind)
	}
}

// Targets returns the configured targets.
func (d *Daemon) Targets() []*tuner.Target { return d.targets }

// RunOnce runs one cycle for each target now, or for the named target's
// group (the targets sharing its EPP config), returning the named one's report.
// It starts no background work: an embedded Prometheus is not scraped, so a
// one-shot cycle reads what its querier already holds.
func (d *Daemon) RunOnce(ctx context.Context, name string) ([]*tuner.Report, error) {
	var out []*tuner.Report
	for _, g := range d.groups {
		if name != "" && !slices.ContainsFunc(g.members, func(tg *tuner.Target) bool { return tg.Config.Name == name }) {
			continue
		}
		for _, rep := range d.cycle(ctx, g) {
			if name == "" || rep.Target == name {
				out = append(out, rep)
			}
		}
	}
	if name != "" && len(out) == 0 {
		var names []string
		for _, tg := range d.targets {
			names = append(names, tg.Config.Name)
		}
		return nil, fmt.Errorf("no target named %q (configured: %v)", name, names)
	}
	return out, nil
}

// cycle runs one group's cycle, never letting a panic escape.
func (d *Daemon) cycle(ctx context.Context, g *targetGroup) (reps []*tuner.Report) {
	defer func() {
		if r := recover(); r != nil {
			reps = nil
			for _, tg := range g.members {
				d.log.Error("cycle panicked", "target", tg.Config.Name, "panic", r)
				reps = append(reps, &tuner.Report{Target: tg.Config.Name, At: d.deps.Clock(), Result: tuner.ResultError, Error: fmt.Sprintf("panic: %v", r)})
				d.deps.Metrics.Cycles.WithLabelValues(tg.Config.Name, string(tuner.ResultError)).Inc()
			}
		}
		d.mu.Lock()
		for _, rep := range reps {
			d.reports[rep.Target] = rep
		}
		d.mu.Unlock()
	}()
	return d.tuner.CycleGroupWith(ctx, &d.memory, g.members, g.joint)
}

// watchStream exports a records stream's health as
// gatetuner_records_stream_up{target} (1 connected, 0 down; a down stream
// holds its target records-unavailable).
func (d *Daemon) watchStream(target string, s *tuner.RecordsStream) {
	d.deps.Metrics.StreamUp.Watch(target, func() bool { return s.Err() == nil })
	d.closers = append(d.closers, func() { d.deps.Metrics.StreamUp.Forget(target) })
}

// Run starts the background work — the embedded Prometheus's scraper, the
// records streams and the heartbeat — and schedules the cycles until ctx
// ends: directly, or only while this replica holds the leader Lease. It
// returns after running cycles finish and the streams and the scraper stop.
func (d *Daemon) Run(ctx context.Context) error {
	if d.scrape != nil {
		sc, err := d.emb.StartScraper(ctx, *d.scrape)
		if err != nil {
			return fmt.Errorf("embedded prometheus: start scraper: %w", err)
		}
		defer sc.Stop()
	}
	var streams sync.WaitGroup
	defer streams.Wait()
	for _, s := range d.streams {
		streams.Go(func() { s.Run(ctx) })
	}
	go d.heartbeat(ctx)
	le := d.cfg.LeaderElection
	if !le.Enabled {
		d.deps.Metrics.Leader.Set(1)
		d.schedule(ctx)
		return nil
	}
	el, err := leader.New(leader.Config{Client: d.kube, Namespace: le.Namespace, Name: le.Name, Identity: d.deps.Identity,
		LeaseDuration: le.LeaseDuration, RenewDeadline: le.RenewDeadline, RetryPeriod: le.RetryPeriod, Logger: d.log})
	if err != nil {
		return err
	}
	d.elector = el
	return el.Run(ctx, func(lctx context.Context) {
		d.deps.Metrics.Leader.Set(1)
		defer d.deps.Metrics.Leader.Set(0)
		d.schedule(lctx)
	})
}

// schedule runs each target's cycle on its cron schedule until ctx ends,
// skipping a run while the previous one is still going.
func (d *Daemon) schedule(ctx context.Context) {
	c := cron.New(cron.WithParser(cron.NewParser(cron.Minute|cron.Hour|cron.Dom|cron.Month|cron.Dow|cron.Descriptor)),
		cron.WithChain(cron.Recover(cronLogger{d.log}), cron.SkipIfStillRunning(cronLogger{d.log})))
	for _, g := range d.groups {
		g := g
		if _, err := c.AddFunc(g.members[0].Config.Schedule, func() { d.cycle(ctx, g) }); err != nil {
			d.log.Error("schedule", "target", g.members[0].Config.Name, "error", err)
		}
	}
	d.log.Info("scheduling cycles", "targets", len(d.targets), "identity", d.deps.Identity)
	c.Start()
	<-ctx.Done()
	stop := c.Stop()
	select {
	case <-stop.Done():
	case <-time.After(2 * time.Minute):
		d.log.Warn("cycles still running after 2m; leaving them")
	}
}

func (d *Daemon) heartbeat(ctx context.Context) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	d.beat.Store(time.Now().UnixNano())
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			d.beat.Store(time.Now().UnixNano())
		}
	}
}

type cronLogger struct{ l *slog.Logger }

func (c cronLogger) Info(msg string, kv ...any) { c.l.Debug("cron: "+msg, kv...) }
func (c cronLogger) Error(err error, msg string, kv ...any) {
	c.l.Error("cron: "+msg, append(kv, "error", err)...)
}

// Handler serves /metrics, /healthz, /readyz and /reports.
func (d *Daemon) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(d.deps.Metrics.Registry, promhttp.HandlerOpts{Registry: d.deps.Metrics.Registry}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		// Alive: the process runs and its scheduler's heartbeat is recent.
		// A Prometheus outage is not ill health: it shows as holds and metrics.
		if last := d.beat.Load(); last != 0 && time.Since(time.Unix(0, last)) > time.Minute {
			http.Error(w, "scheduler heartbeat stale", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !d.ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/reports", func(w http.ResponseWriter, _ *http.Request) {
		d.mu.Lock()
		var reps []*tuner.Report
		for _, r := range d.reports {
			reps = append(reps, r)
		}
		d.mu.Unlock()
		sort.Slice(reps, func(i, j int) bool { return reps[i].Target < reps[j].Target })
		w.Header().Set("Content-Type", "application/json")
		_ = jsonenc.Encode(w, reps, "  ")
	})
	return mux
}

// Close releases the daemon's resources.
func (d *Daemon) Close() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
	d.closers = nil
}
