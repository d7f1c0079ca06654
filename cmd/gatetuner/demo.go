package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/dayloop"
	"github.com/gatetuner/gatetuner/test/fleetsim"
	"github.com/gatetuner/gatetuner/test/fleetsim/epp"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenarios"
	"github.com/gatetuner/gatetuner/test/fleetsim/truth"
	"github.com/gatetuner/gatetuner/test/simenv"
	"github.com/gatetuner/gatetuner/tuner"
	"github.com/gatetuner/gatetuner/tuner/config"
)

func init() { commands = append(commands, newDemoCmd) }

type demoOpts struct {
	scenario, profile, address, dir string
	plugin                          string
	seed                            uint64
	days                            int
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
the fleet simulator plays two compressed days of the prompt-shift scenario (each day
the mean prompt grows from ~5k to ~78k tokens, so a static gate bar goes stale; day 2
has the same shape with new draws) and serves its vLLM and EPP metrics; an embedded
Prometheus scrapes them; every few simulated minutes the daemon estimates, replays
the gate in shadow for the current and candidate settings, and — inside its guards,
in configmap mode — edits an EPP config file in a temporary folder. The simulated
EPP restarts onto each edit, as an operator's rollout would.

One line per cycle shows the numbers; each applied diff is printed; /metrics serves
the daemon's metrics throughout. The summary judges the last day, which the tuner
had not seen when it chose: per phase, the wrongly-held rate and TTFT p90 against
the same day (same seed) run on the untouched default settings, and when it applied.

Simulated time runs as fast as the machine allows, so the guards' clocks are scaled
to the compressed day (docs/benchmarks.md has the run time).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDemo(cmd.Context(), a, &o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.scenario, "scenario", "prompt-shift", "scenario: "+strings.Join(scenarios.Names(), ", "))
	f.StringVar(&o.plugin, "plugin", "", "name of the filter instance in the demo's EPP config, which the daemon manages (default: the scenario's)")
	f.StringVar(&o.profile, "profile", gate.ProfileRouter202608, "EPP build profile of the simulated EPP ("+gate.ProfilePenaltyMode+" lets the tuner use penaltyMode: matchedTokens)")
	f.Uint64Var(&o.seed, "seed", 1, "simulator seed")
	f.IntVar(&o.days, "days", 2, "simulated days (the scenario's phases repeated; the last day is judged against the default)")
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
	one, err := o.trace.load(o.scenario)
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
		one.EPP.Plugin = o.plugin
	}
	if o.cycleEvery < one.ScrapeInterval {
		return usageErr("--cycle-every must be at least the scrape interval (%s)", one.ScrapeInterval)
	}
	if o.days < 1 {
		return usageErr("--days must be at least 1, got %d", o.days)
	}
	sc, err := scenario.Days(one, o.days)
	if err != nil {
		return asUsage(err)
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
	logger := quietLogger()
	if o.verbose {
		if logger, err = newLogger(a, "info", "text"); err != nil {
			return err
		}
	}
	pol := simenv.Policy(sc, simenv.LoopPolicy())
	if sc.DayCount() == 1 {
		// One simulated day: no day of history yet to choose an auto window from.
		pol.ApplyWindow = &config.ApplyWindow{Always: true}
	}
	pr := &demoPrinter{w: out, pol: pol}
	loop, err := dayloop.New(ctx, dayloop.Options{Scenario: sc, Profile: prof, Seed: o.seed, CycleEvery: o.cycleEvery,
		RestartAfter: o.restartAfter, Dir: dir, Policy: &pol, Logger: logger, Version: version, Commit: commit, Observer: pr})
	if err != nil {
		return err
	}
	defer loop.Close()
	pr.start, pr.path, pr.pol = loop.Start(), loop.Path(), loop.TargetPolicy()

	ln, err := net.Listen("tcp", o.address)
	if err != nil {
		return usageErr("--metrics-address: %v", err)
	}
	srv := &http.Server{Handler: loop.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	base := epp.DefaultSettings()
	fmt.Fprintf(out, "gatetuner demo: %s, %d pods, %d simulated day(s) of %s in %d phases; profile %s\n", one.Name, sc.Pods.Count, sc.DayCount(), sc.DayDuration(), len(one.Phases), prof.Name)
	fmt.Fprintf(out, "EPP config: %s (starts at the EPP defaults: %s)\n", loop.Path(), (&base).String())
	fmt.Fprintf(out, "metrics:    http://%s/metrics   decision records: http://%s/reports\n", ln.Addr(), ln.Addr())
	fmt.Fprintf(out, "bar:        the queued prefill a request's cached pod may carry before the gate sends it elsewhere;\n")
	fmt.Fprintf(out, "            bar = maxTTFTPenaltyMs × peakPrefillThroughput / 1000 = %s\n", barFormula(base.MaxTTFTPenaltyMs, base.PeakPrefillThroughput))
	fmt.Fprintf(out, "wh:         wrongly held — pinned to a pod whose queue cost more than re-prefilling elsewhere (the shadow's estimate now → recommended)\n\n")
	pr.barW = 22
	if prof.Accepts(gate.KeyPenaltyMode) {
		pr.barW = 32 // room for a mode change ("static 71,676→matchedTokens 17,919")
	}
	fmt.Fprintf(out, "%-8s %-12s %-12s %-*s %-10s %-10s %-5s %s\n", "time", "phase", "result", pr.barW, "bar (tokens) now→rec", "wh now", "wh rec", "conf", "why")

	res, err := loop.Run(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nsimulated %s in %s\n", sc.Duration(), res.Wall.Round(time.Second))
	if err := summarize(ctx, out, sc, o.seed, res, pr.changes); err != nil {
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

// demoPrinter prints the closed loop's cycles and restarts as they happen.
type demoPrinter struct {
	w       io.Writer
	start   time.Time
	path    string
	pol     config.Policy
	barW    int
	lastWhy string
	changes []phaseChange
}

func (p *demoPrinter) Cycle(vt time.Time, phase string, r *tuner.Report) {
	printCycle(p.w, r, vt, p.start, phase, p.pol, p.barW)
	if r.Result == tuner.ResultApplied {
		p.lastWhy = cycleWhy(r, p.pol)
		if rec := r.Recommendation; rec != nil && rec.Evidence.Day != nil && rec.Evidence.Day.ApplyWindow != nil {
			fmt.Fprintf(p.w, "           apply window: %s\n", rec.Evidence.Day.ApplyWindow.Detail)
		}
		writeApplied(p.w, r, p.path)
	}
}

func (p *demoPrinter) Restarted(vt time.Time, phase string, st gate.Settings, err error) {
	if err != nil {
		fmt.Fprintf(p.w, "%s EPP restart failed: %v\n", clock(vt, p.start), err)
		return
	}
	fmt.Fprintf(p.w, "%s              EPP restarted onto the new config: %s\n", clock(vt, p.start), st.String())
	p.changes = append(p.changes, phaseChange{at: vt.Sub(p.start), phase: phase, bar: st.BarTokens(), why: p.lastWhy})
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
	fmt.Fprintf(w, "%-8s %-12s %-12s %-*s %-10s %-10s %-5s %s\n", clock(vt, start), phase, r.Result, barW, barNow+"→"+barRec, whNow, whRec, conf, cycleWhy(r, pol))
}

// summarize compares the last simulated day, tuned, with the same day
// (same seed) on the untouched default settings.
func summarize(ctx context.Context, w io.Writer, sc *scenario.Scenario, seed uint64, res *dayloop.Result, changes []phaseChange) error {
	def := epp.DefaultSettings()
	day := sc.DayCount()
	whole, err := fleetsim.Run(ctx, sc, fleetsim.Options{Seed: seed, SettingsFor: func(int) gate.Settings { return def }})
	if err != nil {
		return err
	}
	base, tuned := lastDay(whole, day), res.Truth
	fmt.Fprintf(w, "\nday %d, which the tuner had not seen (new draws of the same daily shape), against the same day on the EPP defaults:\n", day)
	fmt.Fprintf(w, "%-10s %-26s %-26s\n", "phase", "wrongly held  default→tuned", "TTFT p90 (s) default→tuned")
	for _, p := range base.Phases {
		tp := tuned.Phase(p.Name)
		if tp == nil {
			continue
		}
		_, name, _ := scenario.SplitDayPhase(p.Name)
		fmt.Fprintf(w, "%-10s %-26s %-26s\n", name, pctp(p.WronglyHeldRate)+" → "+pctp(tp.WronglyHeldRate),
			fmt.Sprintf("%.2f → %.2f", p.TTFT.P90, tp.TTFT.P90))
	}
	bo, to := base.Days[day-1], tuned.Days[day-1]
	label := fmt.Sprintf("day %d", day)
	if day == 1 {
		label = "whole run"
	}
	fmt.Fprintf(w, "%-10s %-26s %-26s\n", label, pctp(bo.WronglyHeldRate)+" → "+pctp(to.WronglyHeldRate), fmt.Sprintf("%.2f → %.2f", bo.TTFT.P90, to.TTFT.P90))
	if day > 1 {
		wo, wt := whole.Overall, tuned.Overall
		fmt.Fprintf(w, "%-10s %-26s %-26s\n", "whole run", pctp(wo.WronglyHeldRate)+" → "+pctp(wt.WronglyHeldRate), fmt.Sprintf("%.2f → %.2f", wo.TTFT.P90, wt.TTFT.P90))
	}
	fmt.Fprintln(w)
	writeCosts(w, base, tuned, def.BarTokens(), changes)
	var hs []string
	for k, v := range res.Holds {
		hs = append(hs, fmt.Sprintf("%s ×%d", k, v))
	}
	sort.Strings(hs)
	var when []string
	for _, a := range res.Applies {
		when = append(when, fmt.Sprintf("%s in %s", clockOf(a.Restart), a.Phase))
	}
	fmt.Fprintf(w, "\napplies: %d", len(res.Applies))
	if len(when) > 0 {
		fmt.Fprintf(w, " (EPP restarts at %s)", strings.Join(when, ", "))
	}
	fmt.Fprintf(w, "   holds: %s\n", strings.Join(hs, ", "))
	fmt.Fprintln(w, overallVerdict(bo, to))
	return nil
}

// lastDay is tr with only day's phases (the per-day pools kept).
func lastDay(tr *truth.Truth, day int) *truth.Truth {
	c := *tr
	c.Phases = nil
	for _, p := range tr.Phases {
		if d, _, ok := scenario.SplitDayPhase(p.Name); ok && d == day {
			c.Phases = append(c.Phases, p)
		}
	}
	return &c
}
