package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/doctor"
	"github.com/gatetuner/gatetuner/tuner/jsonenc"
)

func init() { commands = append(commands, newDoctorCmd) }

type doctorOpts struct {
	config, target, output, prometheus, kubeconfig, at, serviceAccount string
	timeout                                                            time.Duration
}

func newDoctorCmd(a *app) *cobra.Command {
	var o doctorOpts
	cmd := &cobra.Command{
		Use:   "doctor --config FILE [--target NAME]",
		Short: "Check every target against your cluster and Prometheus: series, joins, EPP config, profile, monitors",
		Long: `doctor runs named checks for each target of the daemon's config against the real
Prometheus and API server: Prometheus reachable and which backend serves it; the
vLLM and EPP series the selectors find, the versions inferred from them, the joins
between in-flight endpoints, routed pods and vLLM pods, the pod label, the in-flight
producer, empty series and EPP replicas — each failure under the estimator's own
reason (docs/estimator.md); the EPP config and its filter's parameters; the EPP
Deployment's image tag against the configured profile; PodMonitors and
ServiceMonitors whose port cannot match; the records source when one is configured.
Every check passes, warns or fails with the exact reason and the fix (docs/doctor.md).
The checks: ` + strings.Join(doctor.CheckNames(), ", ") + `.

Exit codes (docs/cli.md): 0 every check passed or warned, 1 a check failed
(Prometheus unreachable included), 2 a usage or configuration error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDoctor(cmd.Context(), a, &o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.config, "config", "", "daemon config file (targets, Prometheus, Kubernetes)")
	f.StringVar(&o.target, "target", "", "only this target")
	f.StringVarP(&o.output, "output", "o", "text", "text or json")
	f.StringVar(&o.prometheus, "prometheus", "", "Prometheus-compatible API base URL (overrides prometheus.url)")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig path (overrides kubernetes.kubeconfig; default in-cluster, then ~/.kube/config)")
	f.StringVar(&o.at, "at", "", "evaluation time, RFC 3339 (default: now)")
	f.DurationVar(&o.timeout, "timeout", 3*time.Minute, "timeout of all checks")
	f.StringVar(&o.serviceAccount, "service-account", "", "the daemon's ServiceAccount, NAMESPACE/NAME, whose permissions the rbac check asks about (default: gatetuner in leaderElection.namespace, else gatetuner/gatetuner, as deploy/ and RenderRBAC name it)")
	return cmd
}

func runDoctor(ctx context.Context, a *app, o *doctorOpts) error {
	if o.output != "text" && o.output != "json" {
		return usageErr("--output must be text or json, got %q", o.output)
	}
	if o.timeout <= 0 {
		return usageErr("--timeout must be > 0")
	}
	at := time.Now()
	if o.at != "" {
		t, err := time.Parse(time.RFC3339, o.at)
		if err != nil {
			return usageErr("--at: want RFC 3339, got %q", o.at)
		}
		at = t
	}
	cfg, err := loadConfig(a, o.config)
	if err != nil {
		return err
	}
	leaderElection := cfg.LeaderElection.Enabled
	sa, err := doctorServiceAccount(o.serviceAccount)
	if err != nil {
		return err
	}
	if err := applyDoctorOverrides(cfg, o); err != nil {
		return err
	}
	var targets []config.Target
	for _, t := range cfg.Targets {
		if o.target == "" || t.Name == o.target {
			targets = append(targets, t)
		}
	}
	if len(targets) == 0 {
		return usageErr("--target %q: no such target in %s", o.target, o.config)
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	d, err := doctor.New(cfg, doctor.Options{At: at, ServiceAccount: sa, LeaderElection: leaderElection, Logger: quietLogger()})
	if err != nil {
		return asUsage(err)
	}
	defer d.Close()
	rep := d.Run(ctx, targets)
	if o.output == "json" {
		if err := jsonenc.Encode(a.stdout, rep, "  "); err != nil {
			return err
		}
	} else {
		writeDoctorText(a.stdout, rep)
	}
	return doctorExit(rep)
}

// doctorServiceAccount is --service-account, checked ("": the daemon's
// default, doctor.DefaultServiceAccount).
func doctorServiceAccount(flag string) (string, error) {
	if flag == "" {
		return "", nil
	}
	ns, name, ok := strings.Cut(flag, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return "", usageErr("--service-account: want NAMESPACE/NAME, got %q", flag)
	}
	return flag, nil
}

// applyDoctorOverrides applies --prometheus and --kubeconfig to the config.
func applyDoctorOverrides(cfg *config.Config, o *doctorOpts) error {
	if o.prometheus != "" {
		p, err := url.Parse(o.prometheus)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return usageErr("--prometheus: want http(s)://host[:port], got %q", o.prometheus)
		}
		cfg.Prometheus.URL = o.prometheus
	}
	if o.kubeconfig != "" {
		cfg.Kubernetes.Kubeconfig = o.kubeconfig
	}
	switch cfg.Prometheus.URL {
	case "":
		return usageErr("prometheus.url is required: doctor checks the Prometheus the daemon reads (or give --prometheus URL)")
	case "embedded":
		return usageErr("prometheus.url is embedded: doctor checks a real Prometheus (give --prometheus URL)")
	}
	cfg.LeaderElection.Enabled = false
	return nil
}

// doctorExit is 1 when a check failed, naming them; nil otherwise.
func doctorExit(rep *doctor.Report) error {
	var failed []string
	for _, c := range rep.Checks {
		if c.Status == doctor.StatusFail {
			failed = append(failed, c.Name+" ("+c.Detail+")")
		}
	}
	for _, t := range rep.Targets {
		for _, c := range t.Checks {
			if c.Status == doctor.StatusFail {
				failed = append(failed, t.Target+": "+c.Name)
			}
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return asFailure(fmt.Errorf("doctor: %d check(s) failed: %s", len(failed), strings.Join(failed, ", ")))
}

// writeDoctorText prints the report as tables a person reads: one per
// Prometheus and per target, the fix under each check that has one.
func writeDoctorText(w io.Writer, rep *doctor.Report) {
	fmt.Fprintf(w, "gatetuner doctor at %s\n\nPrometheus %s\n", rep.At.UTC().Format(time.RFC3339), rep.Prometheus)
	writeChecks(w, rep.Checks)
	for _, t := range rep.Targets {
		fmt.Fprintf(w, "\ntarget %s\n", t.Target)
		writeChecks(w, t.Checks)
	}
	fmt.Fprintf(w, "\nresult: %s\n", rep.Result)
}

func writeChecks(w io.Writer, cs []doctor.Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range cs {
		detail := c.Detail
		if c.Reason != "" {
			detail = c.Reason + ": " + detail
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", strings.ToUpper(c.Status), c.Name, detail)
		if c.Fix != "" {
			fmt.Fprintf(tw, "  \t\tfix: %s\n", c.Fix)
		}
	}
	tw.Flush()
}
