package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gatetuner/gatetuner/exporter"
	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenarios"
	"github.com/gatetuner/gatetuner/test/simenv"
	"github.com/gatetuner/gatetuner/tuner"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/daemon"
	"github.com/gatetuner/gatetuner/tuner/eppconfig"
	"github.com/gatetuner/gatetuner/tuner/jsonenc"
)

func init() { commands = append(commands, newRecommendCmd) }

type recommendOpts struct {
	config, target, output, patchFile string
	// Simulated world instead of a config.
	scenario, eppConfig, plugin, profile, phase string
	seed                                        uint64
	logLevel, logFormat                         string
	trace                                       traceFlags
}

func newRecommendCmd(a *app) *cobra.Command {
	var o recommendOpts
	cmd := &cobra.Command{
		Use:   "recommend (--config FILE [--target NAME] | --scenario NAME --epp-config FILE)",
		Short: "Dry run: one cycle; current against recommended settings, evidence, guards and the exact diff",
		Long: `recommend runs one tuning cycle per target without writing anything and prints the
current and recommended settings, the evidence (estimates, shadow of both, excess and
restart cost), the confidence, every guard with its verdict, and the exact diff the
daemon would write.

--output json prints the decision records; --output patch prints only the diff as a
patch (a/ b/ paths) for teams that change configs through Git. With --patch-file the
same change is spliced into that file instead (an EndpointPickerConfig or a ConfigMap
manifest in your repository), so 'git apply' takes it.

Without a config, --scenario runs the fleet simulator into an embedded Prometheus and
recommends for the EPP config given with --epp-config, as if it ran that fleet.

Exit codes (docs/cli.md): 0 every target has a recommendation that passed its guards
(or one equal to the current setting: "no change"), 1 a cycle errored, the target
cannot be edited or Prometheus could not be queried, 2 a usage or config error, 3 a
target held (with -o patch nothing of it is printed; the hold is on stderr).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runRecommend(cmd.Context(), a, &o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.config, "config", "", "daemon config file (targets, Prometheus)")
	f.StringVar(&o.target, "target", "", "only this target")
	f.StringVarP(&o.output, "output", "o", "text", "text, json or patch")
	f.StringVar(&o.patchFile, "patch-file", "", "with --output patch: splice the change into this file (EPP config or ConfigMap manifest) and print its patch")
	f.StringVar(&o.scenario, "scenario", "", "simulate this scenario (or YAML file) instead of reading Prometheus: "+strings.Join(scenarios.Names(), ", "))
	f.StringVar(&o.eppConfig, "epp-config", "", "with --scenario: the EPP config the fleet runs")
	f.StringVar(&o.plugin, "plugin", "", "with --scenario: the filter instance in --epp-config (default: the only one)")
	f.StringVar(&o.profile, "profile", gate.DefaultProfileName, "with --scenario: the EPP build profile")
	f.StringVar(&o.phase, "phase", "", "with --scenario: simulate up to this phase (default: all)")
	f.Uint64Var(&o.seed, "seed", 1, "with --scenario: simulator seed")
	addLogFlags(f, &o.logLevel, &o.logFormat)
	o.trace.register(f)
	return cmd
}

func runRecommend(ctx context.Context, a *app, o *recommendOpts) error {
	if o.config == "" {
		o.scenario = o.trace.scenario(o.scenario)
	}
	switch {
	case o.output != "text" && o.output != "json" && o.output != "patch":
		return usageErr("--output must be text, json or patch, got %q", o.output)
	case o.patchFile != "" && o.output != "patch":
		return usageErr("--patch-file goes with --output patch")
	case (o.config == "") == (o.scenario == ""):
		return usageErr("give either --config FILE or --scenario NAME --epp-config FILE")
	case o.scenario != "" && o.eppConfig == "":
		return usageErr("--scenario needs --epp-config (the EPP config the simulated fleet runs)")
	case o.plugin != "" && o.scenario == "":
		return usageErr("--plugin goes with --scenario (with --config, the target names its plugins)")
	}
	logger, err := newLogger(a, o.logLevel, o.logFormat)
	if err != nil {
		return err
	}
	var cfg *config.Config
	deps := daemon.Deps{Logger: logger, Metrics: exporter.New(version, commit), ReadOnly: true}
	if o.config != "" {
		if cfg, err = loadConfig(a, o.config); err != nil {
			return err
		}
		if cfg.Prometheus.URL == "embedded" {
			// A one-shot cycle starts no scraper (the daemon's Run does).
			return usageErr("recommend --config %s: prometheus.url is embedded, whose TSDB starts empty and fills only while `gatetuner run` scrapes: give recommend the URL of a Prometheus holding the pool's history", o.config)
		}
		cfg.LeaderElection.Enabled = false
	} else {
		var cleanup func()
		cfg, deps, cleanup, err = simulatedWorld(ctx, o, deps)
		if err != nil {
			return err
		}
		defer cleanup()
	}
	d, err := daemon.New(ctx, cfg, deps)
	if err != nil {
		return asUsage(err)
	}
	defer d.Close()
	reps, err := d.RunOnce(ctx, o.target)
	if err != nil {
		return asUsage(err)
	}
	switch o.output {
	case "json":
		if err := jsonenc.Encode(a.stdout, reps, "  "); err != nil {
			return err
		}
	case "patch":
		return writePatches(a.stdout, a.stderr, reps, o.patchFile, cfg)
	default:
		for _, r := range reps {
			writeReport(a.stdout, r)
		}
	}
	return cyclesExit(reps)
}

// simulatedWorld runs the scenario into an embedded Prometheus and returns a
// config with one file target (mode off) over the given EPP config.
func simulatedWorld(ctx context.Context, o *recommendOpts, deps daemon.Deps) (*config.Config, daemon.Deps, func(), error) {
	sc, err := o.trace.load(o.scenario)
	if err != nil {
		return nil, deps, nil, asUsage(err)
	}
	if o.phase != "" {
		if _, err := sc.PhaseIndex(o.phase); err != nil {
			return nil, deps, nil, usageErr("--phase: %v", err)
		}
	}
	prof, err := gate.LookupProfile(o.profile)
	if err != nil {
		return nil, deps, nil, asUsage(err)
	}
	data, err := os.ReadFile(o.eppConfig)
	if err != nil {
		return nil, deps, nil, usageErr("--epp-config: %v", err)
	}
	f, err := eppconfig.Parse(data, o.eppConfig)
	if err != nil {
		return nil, deps, nil, asUsage(err)
	}
	in, err := f.Select(eppconfig.Target{Plugin: o.plugin})
	if err != nil {
		return nil, deps, nil, asUsage(err)
	}
	params, err := in.Params(prof)
	if err != nil {
		return nil, deps, nil, asUsage(err)
	}
	pc := config.Prometheus{URL: "embedded"}
	emb, err := daemon.NewEmbeddedPrometheus(pc, nil, quietLogger())
	if err != nil {
		return nil, deps, nil, err
	}
	cleanup := func() { emb.Close() }
	cur := params.Settings(prof.MissingSignal)
	opt := fleetsim.Options{Seed: o.seed, Last: o.phase, SettingsFor: func(int) gate.Settings { return cur }}
	_, end, err := simenv.Fill(ctx, emb, sc, opt)
	if err != nil {
		cleanup()
		return nil, deps, nil, err
	}
	at := end.Add(7 * time.Second)
	t := simenv.ConfigTarget(sc, config.Target{File: o.eppConfig, Plugin: in.Plugin.Name, Key: in.Config.DataKey, Profile: prof.Name},
		simenv.Policy(sc, simenv.DryRunPolicy()))
	cfg := &config.Config{Prometheus: pc, Targets: []config.Target{t}}
	deps.Querier, deps.Clock, deps.Seed = emb, func() time.Time { return at }, o.seed
	return cfg, deps, cleanup, nil
}

func writePatches(w, stderr io.Writer, reps []*tuner.Report, patchFile string, cfg *config.Config) error {
	var worst error
	for _, r := range reps {
		if err := cycleOutcome(r); err != nil { // a held change is never printed
			fmt.Fprintf(stderr, "gatetuner: %v\n", err)
			if worst == nil || exitCode(err) == exitFailure {
				worst = err
			}
			continue
		}
		if len(r.NewConfig) == 0 {
			fmt.Fprintf(stderr, "gatetuner: %s: no change: the recommendation is the current setting (%s)\n", r.Target, holdText(r))
			continue
		}
		if patchFile == "" {
			name := r.Target
			for _, t := range cfg.Targets {
				if t.Name == r.Target && t.File != "" {
					name = repoPath(t.File)
				} else if t.Name == r.Target {
					name = fmt.Sprintf("%s/%s/%s", t.Namespace, t.ConfigMap, t.Key)
				}
			}
			fmt.Fprint(w, eppconfig.Diff("a/"+name, "b/"+name, r.OldConfig, r.NewConfig))
			continue
		}
		data, err := os.ReadFile(patchFile)
		if err != nil {
			return usageErr("--patch-file: %v", err)
		}
		f, err := eppconfig.Parse(data, patchFile)
		if err != nil {
			return asUsage(err)
		}
		var prof gate.Profile
		if prof, err = cfg.ResolveProfile(profileOf(cfg, r.Target)); err != nil {
			return asUsage(err)
		}
		changes := make([]eppconfig.Change, len(r.Changes))
		for i, c := range r.Changes {
			c.Target.DataKey = "" // the repository file may lay keys out differently
			changes[i] = c
		}
		base := eppconfig.Base{Data: r.OldConfig, Source: r.Source, Targets: make([]eppconfig.Target, len(r.Changes))}
		for i, c := range r.Changes {
			base.Targets[i] = c.Target
		}
		tokenBarOnly := func(s gate.Settings) bool { return tuner.TokenBarOnly(prof, s) }
		if err := f.CheckBase(base, changes, prof, tokenBarOnly); err != nil {
			return asUsage(fmt.Errorf("--patch-file %s: %w", patchFile, err))
		}
		out, err := f.Edit(changes, prof)
		if err != nil {
			return asUsage(fmt.Errorf("splice into %s: %w", patchFile, err))
		}
		name := repoPath(patchFile)
		fmt.Fprint(w, eppconfig.Diff("a/"+name, "b/"+name, data, out))
	}
	if worst != nil {
		return &exitError{code: exitCode(worst), err: fmt.Errorf("no patch for %d of %d targets (see above)", countFailed(reps), len(reps))}
	}
	return nil
}

// repoPath returns a file's path relative to the root of the Git work tree
// holding it (the directory with .git), with forward slashes, so that
// 'git apply' of a patch naming it works from that root. Outside a work
// tree it is the path as given.
func repoPath(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return filepath.ToSlash(path)
	}
	if resolved, err := filepath.EvalSymlinks(abs); err == nil {
		abs = resolved
	}
	for dir := filepath.Dir(abs); ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, ".git")); err == nil {
			if rel, err := filepath.Rel(dir, abs); err == nil {
				return filepath.ToSlash(rel)
			}
		}
		if parent := filepath.Dir(dir); parent == dir {
			break
		}
	}
	return strings.TrimPrefix(filepath.ToSlash(filepath.Clean(path)), "/")
}

func profileOf(cfg *config.Config, target string) string {
	for _, t := range cfg.Targets {
		if t.Name == target {
			return t.Profile
		}
	}
	return ""
}

func holdText(r *tuner.Report) string {
	if r.Hold != nil {
		return string(r.Hold.Reason) + ": " + r.Hold.Detail
	}
	return string(r.Result)
}

// cycleOutcome classifies one dry-run cycle: nil when it produced a
// recommendation that passed its guards (or one equal to the current
// setting), exit 1 when it could not run or could not edit the target or
// ask Prometheus, exit 3 when the tuner held.
func cycleOutcome(r *tuner.Report) error {
	switch {
	case r.Result == tuner.ResultError:
		return asFailure(fmt.Errorf("%s: the cycle failed: %s", r.Target, r.Error))
	case r.Hold != nil && r.Hold.Reason == tuner.HoldTargetError:
		return asFailure(fmt.Errorf("%s: cannot edit this target: %s", r.Target, r.Hold.Detail))
	}
	if pf := r.Estimates.QueryFailure(); pf != nil {
		return asFailure(fmt.Errorf("%s: Prometheus could not be queried (%s): %s", r.Target, pf.Code, pf.Detail))
	}
	if r.Result == tuner.ResultHeld && (r.Recommendation == nil || len(r.NewConfig) > 0) {
		return nothingErr("%s: held (%s): %s", r.Target, r.Hold.Reason, r.Hold.Detail)
	}
	return nil
}

// cyclesExit is the exit of a dry run over several targets: the first
// failure (exit 1), else the first hold (exit 3), else nil.
func cyclesExit(reps []*tuner.Report) error {
	var held error
	for _, r := range reps {
		err := cycleOutcome(r)
		if err == nil {
			continue
		}
		if exitCode(err) == exitFailure {
			return err
		}
		if held == nil {
			held = err
		}
	}
	return held
}

func countFailed(reps []*tuner.Report) int {
	n := 0
	for _, r := range reps {
		if cycleOutcome(r) != nil {
			n++
		}
	}
	return n
}
