package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim"
	"github.com/gatetuner/gatetuner/test/fleetsim/epp"
	"github.com/gatetuner/gatetuner/test/fleetsim/export"
	simlive "github.com/gatetuner/gatetuner/test/fleetsim/live"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenarios"
	"github.com/gatetuner/gatetuner/test/fleetsim/truth"
	"github.com/gatetuner/gatetuner/test/fleetsim/workload"
)

func init() { commands = append(commands, newSimulateCmd) }

type simulateOpts struct {
	scenario, eppConfig, plugin, profile string
	seed                                 uint64
	first, last, baseTime                string
	metrics, records, truth              string
	legacy                               bool
	exporters                            string
	// live
	live                                              bool
	listen                                            string
	timeScale                                         float64
	kubeconfig, namespace, configMap, key, deployment string
	duration                                          time.Duration
	trace                                             traceFlags
}

func newSimulateCmd(a *app) *cobra.Command {
	var o simulateOpts
	cmd := &cobra.Command{
		Use:   "simulate --scenario NAME [flags]",
		Short: "Run the fleet simulator: a simulated llm-d pool for what-if runs",
		Long: `simulate runs a simulated llm-d pool (vLLM engines with chunked prefill and prefix
caches behind an EPP running the exact gate) through a scenario, deterministically for
a seed. Batch mode writes OpenMetrics with timestamps (--metrics, for promtool
backfill), gate records (--records) and ground truth (--truth), and prints per-phase
outcomes. --epp-config replays the scenario with that config's gate settings.

--live serves /metrics in real time and takes its settings from --epp-config, or
from a ConfigMap through the Kubernetes API while playing the EPP Deployment's pods (a
pod-template change restarts the simulated EPP, and the Deployment's status is updated
as its controller would). --time-scale compresses the scenario in content, not in
clock: phases, diurnal periods and a trace envelope's hours are that many times
shorter, while request rates, think times, a trace's gaps and the engines run at real
speed (a live Prometheus stamps samples at scrape time). A trace (--trace, or a trace
scenario) keeps its own rate: --trace-scale or --trace-utilization set it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runSimulate(cmd.Context(), a, &o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.scenario, "scenario", "", "scenario name or YAML file: "+strings.Join(scenarios.Names(), ", "))
	f.Uint64Var(&o.seed, "seed", 1, "random seed (same seed, same output)")
	f.StringVar(&o.eppConfig, "epp-config", "", "take the gate settings from this EPP config instead of the scenario's")
	f.StringVar(&o.plugin, "plugin", "", "filter instance in the EPP config (default: the scenario's plugin, else the only one)")
	f.StringVar(&o.profile, "profile", "", "EPP build profile (default: the scenario's)")
	f.StringVar(&o.first, "first", "", "first measured phase")
	f.StringVar(&o.last, "last", "", "last measured phase")
	f.StringVar(&o.baseTime, "base-time", "", "wall time of scenario time 0 (RFC 3339; default 2026-11-29T00:00:00Z)")
	f.StringVar(&o.metrics, "metrics", "", "write OpenMetrics text with timestamps here")
	f.StringVar(&o.records, "records", "", "write gate records (JSON lines) here")
	f.StringVar(&o.truth, "truth", "", "write the ground truth JSON here (- for stdout)")
	f.BoolVar(&o.legacy, "legacy-vllm", false, "emulate older vLLM builds (no prompt_tokens_by_source_total, no prompt_tokens_cached_total)")
	f.StringVar(&o.exporters, "exporters", "", "export shape NAME[,key=value...] overriding the scenario's (shapes: "+
		strings.Join(scenario.ExportShapeNames(), ", ")+"; default "+scenario.DefaultExportShape+"; fields as in the scenario's exporters:)")
	f.BoolVar(&o.live, "live", false, "run in real time, serving /metrics")
	f.StringVar(&o.listen, "listen", "127.0.0.1:9400", "with --live: serve /metrics here")
	f.Float64Var(&o.timeScale, "time-scale", 1, "with --live: divide phase durations (and diurnal periods, a trace envelope's hours) by this; rates and a trace's gaps are unchanged")
	f.DurationVar(&o.duration, "duration", 0, "with --live: stop after this long (default: the compressed scenario's length)")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "with --live: read settings from a ConfigMap through this kubeconfig")
	f.StringVar(&o.namespace, "namespace", "", "with --live: the EPP ConfigMap's and Deployment's namespace")
	f.StringVar(&o.configMap, "configmap", "", "with --live: the EPP ConfigMap")
	f.StringVar(&o.key, "key", "", "with --live: the ConfigMap data key")
	f.StringVar(&o.deployment, "deployment", "", "with --live: play this EPP Deployment's pods")
	o.trace.register(f)
	return cmd
}

func runSimulate(ctx context.Context, a *app, o *simulateOpts) error {
	sc, prof, plugin, err := o.load()
	if err != nil {
		return err
	}
	if o.live {
		return runSimulateLive(ctx, a, o, sc, prof, plugin)
	}
	opt, err := o.batchOptions(prof, plugin)
	if err != nil {
		return err
	}
	var files []*atomicFile
	open := func(path string) (io.Writer, error) {
		f, err := createAtomic(path)
		if err != nil {
			return nil, usageErr("%v", err)
		}
		files = append(files, f)
		return f, nil
	}
	defer func() {
		for _, f := range files {
			f.Abort()
		}
	}()
	if o.metrics != "" {
		if opt.Metrics, err = open(o.metrics); err != nil {
			return err
		}
	}
	if o.records != "" {
		if opt.Records, err = open(o.records); err != nil {
			return err
		}
	}
	tr, err := fleetsim.Run(ctx, sc, opt)
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	for _, f := range files {
		if err := f.Commit(); err != nil {
			return err
		}
	}
	if o.truth == "-" {
		return tr.WriteJSON(a.stdout)
	}
	if err := o.writeTruth(tr); err != nil {
		return err
	}
	writeTruthText(a.stdout, sc, tr)
	writeTraceText(a.stdout, tr)
	return nil
}

// load loads the scenario with the --exporters shape, the profile, and the
// filter instance of --epp-config (checked as every other command reads it).
func (o *simulateOpts) load() (*scenario.Scenario, gate.Profile, string, error) {
	o.scenario = o.trace.scenario(o.scenario)
	if o.scenario == "" {
		return nil, gate.Profile{}, "", usageErr("--scenario is required (%s, or a YAML file)", strings.Join(scenarios.Names(), ", "))
	}
	sc, err := o.trace.load(o.scenario)
	if err != nil {
		return nil, gate.Profile{}, "", asUsage(err)
	}
	if o.exporters != "" {
		x, err := scenario.ParseExportShape(o.exporters)
		if err != nil {
			return nil, gate.Profile{}, "", usageErr("--exporters: %v", err)
		}
		sc.Exporters = &x
	}
	prof := sc.EPP.Profile
	if o.profile != "" {
		if prof, err = gate.LookupProfile(o.profile); err != nil {
			return nil, gate.Profile{}, "", asUsage(err)
		}
	}
	for _, ph := range []struct{ flag, name string }{{"--first", o.first}, {"--last", o.last}} {
		if ph.name == "" {
			continue
		}
		if _, err := sc.PhaseIndex(ph.name); err != nil {
			return nil, gate.Profile{}, "", usageErr("%s: %v", ph.flag, err)
		}
	}
	if o.eppConfig == "" {
		return sc, prof, o.plugin, nil
	}
	plugin := o.plugin
	if plugin == "" {
		plugin = sc.EPP.Plugin
		// As --help says: the scenario's plugin, else the config's only instance.
		if _, _, err := loadFilter(o.eppConfig, plugin, "", prof); err != nil {
			plugin = ""
		}
	}
	// The same reader as every other command: one file:line per error.
	if _, _, err := loadFilter(o.eppConfig, plugin, "", prof); err != nil {
		return nil, gate.Profile{}, "", asUsage(err)
	}
	return sc, prof, plugin, nil
}

// batchOptions are the batch run's options: seed, measured phases, base
// time, the legacy vLLM names, and --epp-config's settings.
func (o *simulateOpts) batchOptions(prof gate.Profile, plugin string) (fleetsim.Options, error) {
	opt := fleetsim.Options{Seed: o.seed, First: o.first, Last: o.last, MetricsOptions: export.MetricsOptions{LegacyVLLM: o.legacy}}
	if o.baseTime != "" {
		t, err := time.Parse(time.RFC3339, o.baseTime)
		if err != nil {
			return opt, usageErr("--base-time: %v", err)
		}
		opt.BaseTime = t
	}
	if o.eppConfig != "" {
		s, err := (epp.ConfigFile{Path: o.eppConfig, Plugin: plugin, Profile: prof}).LoadSettings()
		if err != nil {
			return opt, asUsage(err)
		}
		opt.SettingsFor = func(int) gate.Settings { return s }
	}
	return opt, nil
}

// writeTruth writes the ground truth JSON to --truth (atomically), when given.
func (o *simulateOpts) writeTruth(tr *truth.Truth) error {
	if o.truth == "" {
		return nil
	}
	f, err := createAtomic(o.truth)
	if err != nil {
		return usageErr("--truth: %v", err)
	}
	defer f.Abort()
	if err := tr.WriteJSON(f); err != nil {
		return err
	}
	return f.Commit()
}

func writeTruthText(w io.Writer, sc *scenario.Scenario, tr *truth.Truth) {
	fmt.Fprintf(w, "%s: %d pods, seed %d\n", sc.Name, sc.Pods.Count, tr.Seed)
	fmt.Fprintf(w, "%-10s %-28s %8s %9s %10s %10s %11s %9s %10s\n", "phase", "settings", "req/s", "prompt", "TTFT p50", "TTFT p90", "cache hit", "wr.held", "drain")
	for _, p := range tr.Phases {
		drain := "-"
		if p.PooledDrainRate != nil {
			drain = num(*p.PooledDrainRate)
		}
		st := fmt.Sprintf("%s bar %s", p.Settings.Mode, num(p.Settings.BarTokens))
		fmt.Fprintf(w, "%-10s %-28s %8.1f %9s %9.2fs %9.2fs %10.1f%% %9s %10s\n", p.Name, st, p.RequestRate, num(p.PromptTokens.Mean),
			p.TTFT.P50, p.TTFT.P90, p.CacheHitRate*100, pctp(p.WronglyHeldRate), drain)
	}
}

func runSimulateLive(ctx context.Context, a *app, o *simulateOpts, sc *scenario.Scenario, prof gate.Profile, plugin string) error {
	lo := simlive.Options{Seed: o.seed, TimeScale: o.timeScale, Logger: quietLogger()}
	var client kubernetes.Interface
	switch {
	case o.configMap != "":
		if o.namespace == "" {
			return usageErr("--configmap needs --namespace")
		}
		rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: o.kubeconfig}, nil).ClientConfig()
		if err != nil {
			return usageErr("--kubeconfig: %v", err)
		}
		if client, err = kubernetes.NewForConfig(rc); err != nil {
			return asUsage(err)
		}
		lo.Settings = simlive.ConfigMapSettings{Client: client, Namespace: o.namespace, Name: o.configMap, Key: o.key, Plugin: plugin, Profile: prof}
	case o.eppConfig != "":
		lo.Settings = epp.ConfigFile{Path: o.eppConfig, Plugin: plugin, Profile: prof}
	}
	live, err := simlive.New(sc, lo)
	if err != nil {
		return asUsage(err)
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return usageErr("--listen: %v", err)
	}
	srv := &http.Server{Handler: live, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	dur := o.duration
	if dur == 0 {
		dur = time.Duration(float64(sc.Duration()) / max(o.timeScale, 1))
	}
	ctx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	if client != nil && o.deployment != "" {
		go func() {
			if err := simlive.PlayEPP(ctx, client, o.namespace, o.deployment, live, 2*time.Second, quietLogger()); err != nil && ctx.Err() == nil {
				fmt.Fprintf(a.stderr, "gatetuner: playing deployment %s: %v\n", o.deployment, err)
			}
		}()
	}
	fmt.Fprintf(a.stdout, "serving %s's metrics at http://%s/metrics for %s\n", sc.Name, ln.Addr(), dur)
	if tt := live.Truth().Trace; tt != nil {
		writeLiveTraceText(a.stdout, sc, tt, o.timeScale)
	}
	err = live.Run(ctx, time.Second)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return err
	}
	tr := live.Truth()
	writeTruthText(a.stdout, sc, tr)
	writeTraceText(a.stdout, tr)
	return nil
}

// writeLiveTraceText says how a live run shapes its trace: the trace keeps
// its own rate, --time-scale compresses the phases and the envelope's hours.
func writeLiveTraceText(w io.Writer, sc *scenario.Scenario, tt *workload.TraceTruth, timeScale float64) {
	if timeScale <= 0 {
		timeScale = 1
	}
	fmt.Fprintf(w, "trace %s at scale %.4g: its own rate (--trace-scale or --trace-utilization set it)", tt.File, tt.Scale)
	if timeScale != 1 {
		fmt.Fprintf(w, "; phases %g× shorter", timeScale)
		if len(sc.Trace.Envelope) > 0 {
			fmt.Fprintf(w, ", an envelope hour lasts %s", time.Duration(float64(sc.Trace.HourLength())/timeScale).Round(time.Millisecond))
		}
	}
	fmt.Fprintln(w)
}
