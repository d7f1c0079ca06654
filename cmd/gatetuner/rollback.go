package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/sink"
)

func init() { commands = append(commands, newRollbackCmd) }

// rollbackOpts are the rollback command's flags.
type rollbackOpts struct {
	target     string
	kubeconfig string
	namespace  string
	configMap  string
	key        string
	plugins    []string
	deployment string
	profile    string
	mode       string
	file       string
	stateFile  string
	to         int
	dryRun     bool
	timeout    time.Duration
	identity   string
}

func newRollbackCmd(a *app) *cobra.Command {
	o := &rollbackOpts{}
	cmd := &cobra.Command{
		Use:   "rollback --target T (--file PATH | --namespace NS --configmap CM [--key KEY]) [--to N]",
		Short: "Restore a target's earlier gate settings from its apply history",
		Long: `rollback restores the owned values (maxTTFTPenaltyMs, peakPrefillThroughput, penaltyMode)
that a history entry replaced: entry N with --to N, by default the last apply. It writes
through the same guarded path as the daemon: re-read, resourceVersion precondition, an
Event on the ConfigMap, and in rollout mode a restart of the EPP Deployment, awaited.
A failure hold left by an automatic rollback does not block it; a pause does.

The history lives in the ConfigMap's gatetuner.dev/history annotation (or, for --file,
in PATH.gatetuner.json). --dry-run prints the diff only. Without --key the ConfigMap's
data key is the one whose EPP config holds the plugin, as for a daemon target (none or
several is a usage error naming the keys).

Exit codes (docs/cli.md): 0 restored, or nothing to restore; 1 a failed write or
rollout; 2 a usage error, or a config or ConfigMap that is missing or malformed;
3 held (the target is paused).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, err := o.sinkTarget()
			if err != nil {
				return asUsage(err)
			}
			if o.to < 0 {
				return usageErr("--to must be a history entry number (1, 2, …), got %d", o.to)
			}
			sopts := sink.Options{
				Identity:       o.identity,
				ReadOnly:       o.dryRun,
				RolloutTimeout: o.timeout,
				Logger:         slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
			}
			if !t.IsFile() {
				client, ns, err := kubeClient(o.kubeconfig)
				if err != nil {
					return err
				}
				if t.Namespace == "" {
					t.Namespace = ns
				}
				sopts.Client = client
			}
			return runRollback(cmd.Context(), a, t, sopts, o.to, o.dryRun)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.target, "target", "", "label of the target (history, Events, messages); required")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
	f.StringVar(&o.namespace, "namespace", "", "namespace of the EPP ConfigMap and Deployment (default: the kubeconfig context's)")
	f.StringVar(&o.configMap, "configmap", "", "EPP ConfigMap name")
	f.StringVar(&o.key, "key", "", "ConfigMap data key holding the EPP config (e.g. default-plugins.yaml; default: the one data key whose config holds the plugin)")
	f.StringArrayVar(&o.plugins, "plugin", nil, "prefix-cache-affinity-filter instance name; repeat for several (default: the only instance)")
	f.StringVar(&o.deployment, "deployment", "", "EPP Deployment (required with --mode rollout)")
	f.StringVar(&o.profile, "profile", gate.DefaultProfileName, "EPP build profile ("+strings.Join(gate.ProfileNames(), ", ")+")")
	f.StringVar(&o.mode, "mode", string(sink.ModeConfigMap), "configmap (write only; the EPP runs it after its next restart) or rollout (restart the Deployment and wait)")
	f.StringVar(&o.file, "file", "", "EPP config file instead of a ConfigMap (state in FILE"+sink.SidecarSuffix+" unless --state-file)")
	f.StringVar(&o.stateFile, "state-file", "", "with --file: the target's state file (as the daemon's stateFile)")
	f.IntVar(&o.to, "to", 0, "history entry whose previous values to restore (default: the last apply)")
	f.BoolVar(&o.dryRun, "dry-run", false, "print the diff only; write nothing")
	f.DurationVar(&o.timeout, "timeout", config.DefaultPolicy().Verification.RolloutTimeout, "how long to wait for the EPP rollout (rollout mode)")
	f.StringVar(&o.identity, "identity", defaultIdentity(), "who is rolling back, recorded in the history")
	return cmd
}

// sinkTarget builds the target from the flags. (A daemon config resolves to
// the same sink.Target; runRollback does not care where it came from.)
func (o *rollbackOpts) sinkTarget() (sink.Target, error) {
	if o.target == "" {
		return sink.Target{}, errors.New("--target is required")
	}
	prof, err := gate.LookupProfile(o.profile)
	if err != nil {
		return sink.Target{}, fmt.Errorf("--profile: %w", err)
	}
	t := sink.Target{Name: o.target, Plugins: o.plugins, Profile: prof}
	if o.file != "" {
		if o.configMap != "" || o.namespace != "" || o.deployment != "" || o.kubeconfig != "" {
			return sink.Target{}, errors.New("--file cannot be combined with --kubeconfig, --namespace, --configmap or --deployment")
		}
		if o.mode != string(sink.ModeConfigMap) {
			return sink.Target{}, errors.New("--mode applies to ConfigMap targets only")
		}
		t.File, t.Key, t.StateFile = o.file, o.key, o.stateFile
		return t, t.Validate()
	}
	if o.stateFile != "" {
		return sink.Target{}, errors.New("--state-file goes with --file")
	}
	if o.configMap == "" {
		return sink.Target{}, errors.New("name the target's config: --configmap (and --key when several data keys hold the plugin), or --file")
	}
	mode, err := sink.ParseMode(o.mode)
	if err != nil {
		return sink.Target{}, fmt.Errorf("--mode: %w", err)
	}
	t.Namespace, t.ConfigMap, t.Key, t.Deployment, t.Mode = o.namespace, o.configMap, o.key, o.deployment, mode
	if t.Namespace == "" {
		// Filled from the kubeconfig context; validate the rest now.
		probe := t
		probe.Namespace = "default"
		return t, probe.Validate()
	}
	return t, t.Validate()
}

// kubeClient builds a client from a kubeconfig (or the usual defaults) and
// returns the context's namespace.
func kubeClient(kubeconfig string) (kubernetes.Interface, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", asUsage(fmt.Errorf("kubeconfig: %w", err))
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, "", asUsage(fmt.Errorf("kubeconfig namespace: %w", err))
	}
	cfg.UserAgent = "gatetuner-rollback/" + version
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("kubernetes client: %w", err)
	}
	return client, ns, nil
}

func defaultIdentity() string {
	user := os.Getenv("USER")
	if user == "" {
		user = "unknown"
	}
	host, err := os.Hostname()
	if err != nil {
		host = "localhost"
	}
	return "gatetuner-rollback:" + user + "@" + host
}

// runRollback restores history entry `to` (0: the last apply) of target t.
func runRollback(ctx context.Context, a *app, t sink.Target, opts sink.Options, to int, dryRun bool) error {
	s, err := sink.New(t, opts)
	if err != nil {
		return asUsage(err)
	}
	snap, err := s.Read(ctx)
	if err != nil {
		// A config that is not there or not readable is the caller's to fix.
		if errors.Is(err, fs.ErrNotExist) || apierrors.IsNotFound(err) || errors.Is(err, sink.ErrMalformed) {
			return asUsage(err)
		}
		return err
	}
	changes, en, err := sink.RestoreChanges(snap, to)
	if err != nil {
		return asUsage(err)
	}
	out := a.stdout
	fmt.Fprintf(out, "%s: restoring the values history entry %d (%s %s by %s) replaced\n",
		snap.Target, en.Seq, en.Kind, en.At.Format(time.RFC3339), orDash(en.By))
	if snap.Target.Mode == sink.ModeConfigMap && en.Mode == string(sink.ModeRollout) && !t.IsFile() {
		fmt.Fprintf(out, "note: entry %d was rolled out; with --mode configmap the EPP keeps its config until it restarts\n", en.Seq)
	}
	_, diff, err := snap.Preview(changes)
	if err != nil {
		return err
	}
	if diff == "" {
		fmt.Fprintln(out, "the config already holds those values: nothing to write")
		return nil
	}
	if dryRun {
		fmt.Fprint(out, diff)
		fmt.Fprintln(out, "dry run: nothing written")
		return nil
	}
	res, err := s.Apply(ctx, snap, changes, sink.Meta{
		Kind:   sink.KindRollback,
		Undoes: en.Seq,
		Reason: fmt.Sprintf("rollback of entry %d by %s", en.Seq, opts.Identity),
	})
	if err != nil {
		return err
	}
	switch res.Outcome {
	case sink.OutcomeHeld:
		return nothingErr("rollback held: %s", res.Hold)
	case sink.OutcomeUnchanged:
		fmt.Fprintln(out, "the config already holds those values: nothing written")
		return nil
	}
	fmt.Fprint(out, res.Diff)
	fmt.Fprintf(out, "written as history entry %d (config sha256 %s)", res.Entry.Seq, res.ConfigHash)
	switch {
	case res.Pending:
		fmt.Fprintf(out, "; the EPP runs it after its next restart\n")
	case res.Entry.EffectiveAt != nil:
		fmt.Fprintf(out, "; the EPP runs it since %s\n", res.Entry.EffectiveAt.Format(time.RFC3339))
	default:
		fmt.Fprintln(out)
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
