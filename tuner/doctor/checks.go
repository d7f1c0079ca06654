package doctor

import (
	"context"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/estimator/prom"
	"github.com/gatetuner/gatetuner/tuner"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/daemon"
	"github.com/gatetuner/gatetuner/tuner/sink"
)

// Names of the checks (docs/doctor.md has a row for each).
const (
	checkPrometheus     = "prometheus"
	checkBackend        = "backend"
	checkRBAC           = "rbac"
	checkConfig         = "config"
	checkEPPConfig      = "epp-config"
	checkProfile        = "profile"
	checkSeries         = "series"
	checkVLLMSeries     = "vllm-series"
	checkPodLabel       = "pod-label"
	checkEPPSeries      = "epp-series"
	checkInFlightSeries = "in-flight-series"
	checkProducer       = "in-flight-producer"
	checkSeriesEmpty    = "series-empty"
	checkEndpointJoin   = "endpoint-join"
	checkEPPReplicas    = "epp-replicas"
	checkEstimate       = "estimate"
	checkMonitors       = "monitors"
	checkPDRoles        = "pd-roles"
	checkRecords        = "records"
)

// check is one of doctor's checks: run reports its findings, each a
// Result under one of names (a check may report several findings, or a
// group of checks over one piece of evidence its members' verdicts).
type check interface {
	names() []string
	run(ctx context.Context, e *env) []Result
}

// checkFunc is a check made of its names and a function.
type checkFunc struct {
	ns []string
	fn func(ctx context.Context, e *env) []Result
}

func (c checkFunc) names() []string                          { return c.ns }
func (c checkFunc) run(ctx context.Context, e *env) []Result { return c.fn(ctx, e) }

// one makes a check of a function that reports one finding under name.
func one(name string, fn func(ctx context.Context, e *env) Result) check {
	return checkFunc{[]string{name}, func(ctx context.Context, e *env) []Result { return []Result{fn(ctx, e)} }}
}

// many makes a check of a function that reports findings under names.
func many(fn func(ctx context.Context, e *env) []Result, names ...string) check {
	return checkFunc{names, fn}
}

// clusterChecks run once, in order, before any target's.
func clusterChecks() []check {
	return []check{
		many(promChecks, checkPrometheus, checkBackend),
		one(checkRBAC, rbacCheck),
	}
}

// targetChecks run for each target, in order, once the daemon's view of
// it was built (a target it cannot build fails the config check alone).
func targetChecks() []check {
	return []check{
		one(checkEPPConfig, eppConfigCheck),
		one(checkProfile, profileCheck),
		many(seriesChecks, checkSeries, checkVLLMSeries, checkPodLabel, checkEPPSeries, checkInFlightSeries, checkProducer,
			checkSeriesEmpty, checkEndpointJoin, checkEPPReplicas, checkEstimate),
		many(monitorChecks, checkMonitors),
		one(checkPDRoles, pdRolesCheck),
		many(recordsCheck, checkRecords),
	}
}

// CheckNames are every check, in the order a report lists them.
func CheckNames() []string {
	var out []string
	for _, c := range clusterChecks() {
		out = append(out, c.names()...)
	}
	out = append(out, checkConfig)
	for _, c := range targetChecks() {
		out = append(out, c.names()...)
	}
	return out
}

// runChecks runs checks in order and returns their findings.
func runChecks(ctx context.Context, checks []check, e *env) []Result {
	out := []Result{}
	for _, c := range checks {
		out = append(out, c.run(ctx, e)...)
	}
	return out
}

// env is what the checks read: the clients, the config and the
// evaluation time; whether Prometheus answers; for a target's checks the
// target, the daemon's view of it, the EPP config it reads and the
// estimate.
type env struct {
	cfg            *config.Config
	at             time.Time
	q              *prom.HTTP
	kube           kubernetes.Interface
	dyn            dynamic.Interface
	kubeErr        error
	serviceAccount string
	leaderElection bool
	// promErr is why Prometheus cannot be queried (nil: it answered
	// vector(1), in promLatency).
	promErr     error
	promLatency time.Duration

	target config.Target
	tuned  *tuner.Target
	// epp is the target's EPP config as the daemon reads it (eppErr: why not).
	epp    *sink.Snapshot
	eppErr error
	// est is the estimate (nil when Prometheus cannot be queried or
	// estErr says why there is none).
	est    *estimator.Estimates
	estErr error
}

// clusterEnv asks Prometheus vector(1) and returns the env of the
// cluster's checks.
func (d *Doctor) clusterEnv(ctx context.Context) *env {
	e := &env{cfg: d.cfg, at: d.opt.At, q: d.q, kube: d.kube, dyn: d.dyn, kubeErr: d.kubeErr,
		serviceAccount: d.opt.ServiceAccount, leaderElection: d.opt.LeaderElection}
	start := time.Now()
	if _, _, err := d.q.Query(ctx, "vector(1)", d.opt.At); err != nil {
		e.promErr = err
	}
	e.promLatency = time.Since(start)
	return e
}

// target builds the daemon's view of one target, reads its EPP config,
// estimates (when Prometheus answers) and runs the target's checks.
func (d *Doctor) target(ctx context.Context, cluster *env, ct config.Target) TargetReport {
	out := TargetReport{Target: ct.Name, Checks: []Result{}}
	single := *d.cfg
	single.Targets = []config.Target{ct}
	dm, err := daemon.New(ctx, &single, daemon.Deps{Logger: d.opt.Logger, Querier: d.q, Kube: d.kube, ReadOnly: true,
		Clock: func() time.Time { return d.opt.At }})
	if err != nil {
		out.Checks = append(out.Checks, Result{Name: checkConfig, Status: StatusFail, Detail: err.Error(), Fix: "fix the target in the config (docs/config.md)"})
		return out
	}
	defer dm.Close()
	e := *cluster
	e.target, e.tuned = ct, dm.Targets()[0]
	e.epp, e.eppErr = e.tuned.Sink.Read(ctx)
	if e.promErr == nil {
		et := e.tuned.Est
		if et.InFlightProducer == "" && e.eppErr == nil {
			et.InFlightProducer = e.epp.Instances[0].Params.InFlightLoadProducerName
		}
		e.est, e.estErr = e.tuned.Estimator.Estimate(ctx, et, d.opt.At)
		if e.estErr == nil {
			out.Shape = e.est.Shape
		}
	}
	out.Checks = runChecks(ctx, targetChecks(), &e)
	return out
}
