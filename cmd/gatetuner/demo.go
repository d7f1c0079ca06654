package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/gatetuner/gatetuner/estimator/prom"
	"github.com/gatetuner/gatetuner/exporter"
	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim"
	"github.com/gatetuner/gatetuner/test/simenv"
	"github.com/gatetuner/gatetuner/tuner"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/daemon"
	"github.com/gatetuner/gatetuner/tuner/sink"
)

func init() { commands = append(commands, newDemoCmd) }

type demoOpts struct {
	scenario, profile, address, dir string
	plugin                          string
	seed                            uint64
	cycleEvery, restartAfter        time.Duration
	keepServing                     time.Duration
	verbose                         bool
	trace                           traceFlags
}

// pluginName is what --plugin accepts: a name that is a plain YAML scalar.
var pluginName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

func newDemoCmd(a *app) *cobra.Command {
	var o demoOpts
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "The main job on an embedded default: a simulated llm-d pool whose gate drifts, tuned live",
		Long: `demo runs gatetuner's whole loop on a simulated pool, with nothing to install:
the fleet simulator plays a compressed day of the prompt-shift scenario (mean prompts
grow from ~5k to ~78k tokens, so a static gate bar goes stale) and serves its vLLM and
EPP metrics; an embedded Prometheus scrapes them; every few simulated minutes the
daemon estimates, replays the gate in shadow for the current and candidate settings,
and — inside its guards, in configmap mode — edits an EPP config file in a temporary
folder. The simulated EPP restarts onto each edit, as an operator's rollout would.

One line per cycle shows the numbers; each applied diff is printed; /metrics serves
the daemon's metrics throughout. The summary compares the wrongly-held rate and TTFT
with the same day (same seed) run on the untouched default settings.

Simulated time runs as fast as the machine allows, so the guards' clocks are scaled
to the compressed day. The day and the default replay for the summary take about 21 s
with a prebuilt binary on two idle cores (docs/benchmarks.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDemo(cmd.Context(), a, &o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.scenario, "scenario", "prompt-shift", "scenario: "+strings.Join(fleetsim.ScenarioNames(), ", "))
	f.StringVar(&o.plugin, "plugin", "", "name of the filter instance in the demo's EPP config, which the daemon manages (default: the scenario's)")
	f.StringVar(&o.profile, "profile", gate.ProfileRouter202608, "EPP build profile of the simulated EPP ("+gate.ProfilePenaltyMode+" lets the tuner use penaltyMode: matchedTokens)")
	f.Uint64Var(&o.seed, "seed", 1, "simulator seed")
	f.DurationVar(&o.cycleEvery, "cycle-every", 5*time.Minute, "simulated time between cycles")
	f.DurationVar(&o.restartAfter, "restart-after", time.Minute, "simulated time between a write and the EPP's restart onto it")
	f.StringVar(&o.address, "metrics-address", "127.0.0.1:0", "serve the daemon's /metrics, /healthz, /readyz, /reports here")
	f.DurationVar(&o.keepServing, "keep-serving", 0, "keep serving /metrics this long after the summary (for a scraper)")
	f.StringVar(&o.dir, "dir", "", "work folder (default: a temporary folder, removed at the end)")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "log the daemon's own lines")
	o.trace.register(f)
	return cmd
}

func runDemo(ctx context.Context, a *app, o *demoOpts) error {
	sc, err := o.trace.load(o.scenario)
	if err != nil {
		return asUsage(err)
	}
	prof, err := gate.LookupProfile(o.profile)
	if err != nil {
		return asUsage(err)
	}
	if o.plugin != "" {
		if !pluginName.MatchString(o.plugin) {
			return usageErr("--plugin %q: a plugin name is letters, digits, '.', '_' and '-'", o.plugin)
		}
		sc.EPP.Plugin = o.plugin
	}
	if o.cycleEvery < sc.ScrapeInterval {
		return usageErr("--cycle-every must be at least the scrape interval (%s)", sc.ScrapeInterval)
	}
	dir := o.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "gatetuner-demo-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	out := a.stdout
	start := fleetsim.DefaultBaseTime()
	clk := testingclock.NewFakeClock(start)
	now := clk.Now

	// The EPP config the simulated EPP runs and the daemon edits.
	base := fleetsim.DefaultSettings()
	path, err := simenv.WriteEPPConfig(dir, sc, base, false)
	if err != nil {
		return err
	}
	live, err := fleetsim.NewLive(sc, fleetsim.LiveOptions{Seed: o.seed, Start: start, Now: now,
		Settings: fleetsim.EPPConfigFile{Path: path, Plugin: sc.EPP.Plugin, Profile: prof}, Logger: quietLogger()})
	if err != nil {
		return err
	}
	metrics := exporter.New(version, commit)
	metrics.Leader.Set(1) // one daemon, no election
	emb, err := prom.NewEmbedded(prom.EmbeddedConfig{Dir: filepath.Join(dir, "tsdb"), Now: now, Logger: quietLogger(),
		Observer: daemon.QueryObserver(metrics)})
	if err != nil {
		return err
	}
	defer emb.Close()

	logger := quietLogger()
	if o.verbose {
		if logger, err = newLogger(a, "info", "text"); err != nil {
			return err
		}
	}
	pol := simPolicy(sc)
	pol.Mode = config.ModeConfigMap
	pol.Lookback = 15 * time.Minute
	// One simulated day: no day of history yet to choose an auto window from.
	pol.ApplyWindow = &config.ApplyWindow{Always: true}
	et := simenv.EstimatorTarget(sc)
	cfg := &config.Config{Prometheus: config.Prometheus{URL: "embedded"}, Targets: []config.Target{{
		Name: sc.Target, File: path, Plugin: sc.EPP.Plugin, Profile: prof.Name, MaxNumBatchedTokens: sc.Pods.Engine.MaxNumBatchedTokens,
		Selector: config.Selector{VLLM: et.VLLMSelector, EPP: et.EPPSelector}, Policy: pol,
	}}}
	d, err := daemon.New(ctx, cfg, daemon.Deps{Logger: logger, Metrics: metrics, Querier: emb, Clock: now, Seed: o.seed,
		SinkOptions: func(so *sink.Options) { so.Clock = clk; so.Identity = "gatetuner-demo" }})
	if err != nil {
		return err
	}
	defer d.Close()
	tg := d.Targets()[0]

	ln, err := net.Listen("tcp", o.address)
	if err != nil {
		return usageErr("--metrics-address: %v", err)
	}
	srv := &http.Server{Handler: d.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	fmt.Fprintf(out, "gatetuner demo: %s, %d pods, %s simulated in %d phases; profile %s\n", sc.Name, sc.Pods.Count, sc.Duration(), len(sc.Phases), prof.Name)
	fmt.Fprintf(out, "EPP config: %s (starts at the EPP defaults: %s)\n", path, (&base).String())
	fmt.Fprintf(out, "metrics:    http://%s/metrics   decision records: http://%s/reports\n", ln.Addr(), ln.Addr())
	fmt.Fprintf(out, "bar:        the queued prefill a request's cached pod may carry before the gate sends it elsewhere;\n")
	fmt.Fprintf(out, "            bar = maxTTFTPenaltyMs × peakPrefillThroughput / 1000 = %s\n", barFormula(base.MaxTTFTPenaltyMs, base.PeakPrefillThroughput))
	fmt.Fprintf(out, "wh:         wrongly held — pinned to a pod whose queue cost more than re-prefilling elsewhere (the shadow's estimate now → recommended)\n\n")
	barW := 22
	if prof.Accepts(gate.KeyPenaltyMode) {
		barW = 32 // room for a mode change ("static 71,676→matchedTokens 17,919")
	}
	fmt.Fprintf(out, "%-8s %-9s %-12s %-*s %-10s %-10s %-5s %s\n", "time", "phase", "result", barW, "bar (tokens) now→rec", "wh now", "wh rec", "conf", "why")

	wall := time.Now()
	end := start.Add(sc.Duration())
	var pendingSince time.Time
	var applies int
	var changes []phaseChange
	var lastWhy string
	holds := map[string]int{}
	nextCycle := start.Add(o.cycleEvery)
	for vt := start.Add(sc.ScrapeInterval); !vt.After(end); vt = vt.Add(sc.ScrapeInterval) {
		if err := ctx.Err(); err != nil {
			return err
		}
		clk.SetTime(vt)
		if err := scrapeInto(ctx, live, emb, vt); err != nil {
			return err
		}
		if !pendingSince.IsZero() && !vt.Before(pendingSince.Add(o.restartAfter)) {
			// The operator rolls the EPP onto the written config.
			if err := live.Restart(ctx); err != nil {
				fmt.Fprintf(out, "%s EPP restart failed: %v\n", clock(vt, start), err)
			} else if err := tg.Sink.MarkRestarted(ctx, vt); err != nil && !errors.Is(err, sink.ErrNoPendingRestart) {
				return err
			}
			st := live.Settings()
			fmt.Fprintf(out, "%s          EPP restarted onto the new config: %s\n", clock(vt, start), st.String())
			changes = append(changes, phaseChange{at: vt.Sub(start), phase: live.Phase(), bar: st.BarTokens(), why: lastWhy})
			pendingSince = time.Time{}
		}
		if vt.Before(nextCycle) {
			continue
		}
		nextCycle = nextCycle.Add(o.cycleEvery)
		reps, err := d.RunOnce(ctx, "")
		if err != nil {
			return err
		}
		r := reps[0]
		printCycle(out, r, vt, start, live.Phase(), pol, barW)
		switch {
		case r.Result == tuner.ResultApplied:
			applies++
			pendingSince = vt
			lastWhy = cycleWhy(r, pol)
			writeApplied(out, r, path)
		case r.Hold != nil:
			holds[string(r.Hold.Reason)]++
		}
	}
	fmt.Fprintf(out, "\nsimulated %s in %s\n", sc.Duration(), time.Since(wall).Round(time.Second))
	if err := summarize(ctx, out, sc, o.seed, live.Truth(), applies, holds, changes); err != nil {
		return err
	}
	if o.keepServing > 0 {
		fmt.Fprintf(out, "serving http://%s/metrics for %s more\n", ln.Addr(), o.keepServing)
		select {
		case <-ctx.Done():
		case <-time.After(o.keepServing):
		}
	}
	return nil
}

// scrapeInto scrapes the simulated fleet once and stores the samples at vt.
func scrapeInto(ctx context.Context, live *fleetsim.Live, emb *prom.Embedded, vt time.Time) error {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil).WithContext(ctx)
	live.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		return fmt.Errorf("scrape the simulated fleet: HTTP %d: %s", rec.Code, rec.Body.String())
	}
	_, err := emb.IngestText(ctx, bytes.NewReader(rec.Body.Bytes()), prom.IngestOptions{Format: prom.FormatPrometheusText, DefaultTime: vt})
	return err
}

func clock(vt, start time.Time) string {
	d := vt.Sub(start)
	return fmt.Sprintf("%02d:%02d:%02d", int(d.Hours()), int(d.Minutes())%60, int(d.Seconds())%60)
}

func printCycle(w io.Writer, r *tuner.Report, vt, start time.Time, phase string, pol config.Policy, barW int) {
	barNow, barRec, whNow, whRec, conf := bar(r.Current.BarTokens), "-", "-", "-", "-"
	if rec := r.Recommendation; rec != nil {
		barRec = bar(rec.EffectiveBarTokens)
		whNow, whRec = pctp(rec.Evidence.Shadow.Current.Rates.WronglyHeld), pctp(rec.Evidence.Shadow.Recommended.Rates.WronglyHeld)
		conf = fmt.Sprintf("%.2f", rec.Confidence)
		if rec.Mode != r.Current.Mode {
			barRec = rec.Mode + " " + barRec
		}
	}
	fmt.Fprintf(w, "%-8s %-9s %-12s %-*s %-10s %-10s %-5s %s\n", clock(vt, start), phase, r.Result, barW, barNow+"→"+barRec, whNow, whRec, conf, cycleWhy(r, pol))
}

// summarize compares the tuned day with the same day on the default settings.
func summarize(ctx context.Context, w io.Writer, sc *fleetsim.Scenario, seed uint64, tuned *fleetsim.Truth, applies int, holds map[string]int, changes []phaseChange) error {
	def := fleetsim.DefaultSettings()
	base, err := fleetsim.Run(ctx, sc, fleetsim.Options{Seed: seed, SettingsFor: func(int) gate.Settings { return def }})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\n%-10s %-26s %-26s\n", "phase", "wrongly held  default→tuned", "TTFT p90 (s) default→tuned")
	for _, p := range base.Phases {
		tp := tuned.Phase(p.Name)
		if tp == nil {
			continue
		}
		fmt.Fprintf(w, "%-10s %-26s %-26s\n", p.Name, pctp(p.WronglyHeldRate)+" → "+pctp(tp.WronglyHeldRate),
			fmt.Sprintf("%.2f → %.2f", p.TTFT.P90, tp.TTFT.P90))
	}
	bo, to := base.Overall, tuned.Overall
	fmt.Fprintf(w, "%-10s %-26s %-26s\n", "whole run", pctp(bo.WronglyHeldRate)+" → "+pctp(to.WronglyHeldRate), fmt.Sprintf("%.2f → %.2f", bo.TTFT.P90, to.TTFT.P90))
	fmt.Fprintln(w)
	writeCosts(w, base, tuned, def.BarTokens(), changes)
	var hs []string
	for k, v := range holds {
		hs = append(hs, fmt.Sprintf("%s ×%d", k, v))
	}
	sort.Strings(hs)
	fmt.Fprintf(w, "\napplies: %d   holds: %s\n", applies, strings.Join(hs, ", "))
	fmt.Fprintln(w, overallVerdict(bo, to))
	return nil
}
