// Package doctor checks a daemon config's targets against the real
// Prometheus and API server: each check passes, warns or fails with the
// exact reason and the fix (docs/doctor.md). The checks are a table of
// named checks run in order over what the doctor gathered (env); the
// report and its JSON are this package's, the text is the CLI's.
package doctor

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/gatetuner/gatetuner/estimator/prom"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/daemon"
)

// Check statuses, in increasing severity (skip: not run because a check
// it depends on failed).
const (
	StatusPass = "pass"
	StatusWarn = "warn"
	StatusFail = "fail"
	StatusSkip = "skip"
)

// Result is one named check's verdict (docs/doctor.md, JSON schema).
type Result struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	// Reason is the estimator's reason code (or doctor's own) of a warning or failure.
	Reason string `json:"reason,omitempty"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// TargetReport is one target's checks.
type TargetReport struct {
	Target string   `json:"target"`
	Checks []Result `json:"checks"`
	// Shape is what the estimator inferred about the exporters (docs/estimator.md).
	Shape any `json:"shape,omitempty"`
}

// Report is the whole run.
type Report struct {
	At         time.Time      `json:"at"`
	Prometheus string         `json:"prometheus"`
	Checks     []Result       `json:"checks"`
	Targets    []TargetReport `json:"targets"`
	// Result is the worst status: pass, warn or fail.
	Result string `json:"result"`
}

// Options are what a doctor run needs besides the config.
type Options struct {
	// At is the evaluation time.
	At time.Time
	// ServiceAccount is the daemon's, NAMESPACE/NAME, whose permissions
	// the rbac check asks about ("": DefaultServiceAccount).
	ServiceAccount string
	// LeaderElection says whether the daemon elects a leader (the rbac
	// check asks for the Lease permissions then).
	LeaderElection bool
	// Logger receives the lines of the daemon doctor builds per target.
	Logger *slog.Logger
}

// Doctor holds what every target's checks share: the config, the
// evaluation time, the Prometheus client and the API server clients.
type Doctor struct {
	cfg  *config.Config
	opt  Options
	q    *prom.HTTP
	kube kubernetes.Interface
	dyn  dynamic.Interface
	// kubeErr is why there is no API server access.
	kubeErr error
}

// New builds the Prometheus client and, when a kubeconfig (or the
// cluster) gives access, the API server clients (their absence is a
// check's warning, not an error). Close releases them.
func New(cfg *config.Config, opt Options) (*Doctor, error) {
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.ServiceAccount == "" {
		opt.ServiceAccount = DefaultServiceAccount(cfg)
	}
	q, err := daemon.NewHTTPQuerier(cfg.Prometheus, nil, opt.Logger)
	if err != nil {
		return nil, fmt.Errorf("prometheus: %w", err)
	}
	d := &Doctor{cfg: cfg, opt: opt, q: q}
	rc, err := daemon.RESTConfig(cfg.Kubernetes.Kubeconfig)
	if err == nil {
		if d.kube, err = kubernetes.NewForConfig(rc); err == nil {
			d.dyn, err = dynamic.NewForConfig(rc)
		}
	}
	if err != nil {
		d.kube, d.dyn, d.kubeErr = nil, nil, err
	}
	return d, nil
}

// DefaultServiceAccount is the daemon's ServiceAccount as deploy/ and
// sink.RenderRBAC name it: gatetuner in the leader election's namespace,
// else gatetuner/gatetuner.
func DefaultServiceAccount(cfg *config.Config) string {
	ns := cfg.LeaderElection.Namespace
	if ns == "" {
		ns = "gatetuner"
	}
	return ns + "/gatetuner"
}

// Close releases the Prometheus client.
func (d *Doctor) Close() { d.q.Close() }

// Run checks Prometheus and the daemon's permissions, then every target.
func (d *Doctor) Run(ctx context.Context, targets []config.Target) *Report {
	e := d.clusterEnv(ctx)
	rep := &Report{At: d.opt.At, Prometheus: d.cfg.Prometheus.URL, Checks: runChecks(ctx, clusterChecks(), e), Targets: []TargetReport{}}
	for _, ct := range targets {
		rep.Targets = append(rep.Targets, d.target(ctx, e, ct))
	}
	rep.Result = StatusPass
	for _, c := range rep.Checks {
		rep.Result = worst(rep.Result, c.Status)
	}
	for _, t := range rep.Targets {
		for _, c := range t.Checks {
			rep.Result = worst(rep.Result, c.Status)
		}
	}
	return rep
}

// worst returns the more severe of two statuses (skip counts as pass).
func worst(a, b string) string {
	rank := map[string]int{StatusPass: 0, StatusSkip: 0, StatusWarn: 1, StatusFail: 2}
	if rank[b] > rank[a] {
		return b
	}
	return a
}
