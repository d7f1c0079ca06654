package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/estimator/prom"
	"github.com/gatetuner/gatetuner/exporter"
	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/daemon"
)

// Names of the Prometheus, config and records checks (docs/doctor.md).
const (
	checkPrometheus = "prometheus"
	checkBackend    = "backend"
	checkConfig     = "config"
	checkEPPConfig  = "epp-config"
	checkSeries     = "series"
	checkRecords    = "records"
)

// doctorCheckNames are every check, in the order a report lists them
// (docs/doctor.md has a row for each).
var doctorCheckNames = []string{checkPrometheus, checkBackend, checkRBAC, checkConfig, checkEPPConfig, checkProfile, checkSeries,
	checkVLLMSeries, checkPodLabel, checkEPPSeries, checkInFlightSeries, checkProducer, checkSeriesEmpty, checkEndpointJoin,
	checkEPPReplicas, checkEstimate, checkMonitors, checkPDRoles, checkRecords}

// doctor holds what every target's checks share: the config, the
// evaluation time, the Prometheus client and the API server clients.
type doctor struct {
	cfg     *config.Config
	at      time.Time
	q       *prom.HTTP
	kube    kubernetes.Interface
	dyn     dynamic.Interface
	kubeErr error // why there is no API server access
	promErr error // set by promChecks when Prometheus cannot be queried
	// serviceAccount is the daemon's, NAMESPACE/NAME (the rbac check).
	serviceAccount string
}

func newDoctor(cfg *config.Config, at time.Time) (*doctor, error) {
	q, err := daemon.NewHTTPQuerier(cfg.Prometheus, nil, quietLogger())
	if err != nil {
		return nil, asUsage(fmt.Errorf("prometheus: %w", err))
	}
	d := &doctor{cfg: cfg, at: at, q: q}
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

func (d *doctor) close() { d.q.Close() }

// run checks Prometheus and the daemon's permissions, then every target.
func (d *doctor) run(ctx context.Context, targets []config.Target, leaderElection bool) *doctorReport {
	rep := &doctorReport{At: d.at, Prometheus: d.cfg.Prometheus.URL, Checks: d.promChecks(ctx), Targets: []doctorTarget{}}
	rep.Checks = append(rep.Checks, d.rbacCheck(ctx, leaderElection))
	for _, ct := range targets {
		rep.Targets = append(rep.Targets, d.target(ctx, ct))
	}
	rep.Result = statusPass
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

// promChecks: Prometheus answers a query, and which backend serves it.
func (d *doctor) promChecks(ctx context.Context) []doctorCheck {
	url := d.cfg.Prometheus.URL
	start := time.Now()
	if _, _, err := d.q.Query(ctx, "vector(1)", d.at); err != nil {
		d.promErr = err
		return []doctorCheck{
			{Name: checkPrometheus, Status: statusFail, Reason: "prometheus-" + exporter.QueryErrorKind(prom.KindOf(err).String()),
				Detail: fmt.Sprintf("%s cannot be queried: %v", url, err),
				Fix:    "check prometheus.url (or --prometheus), that this host can reach it, and its credentials (bearerTokenFile, caFile, headers)"},
			{Name: checkBackend, Status: statusSkip, Detail: "Prometheus cannot be queried"},
		}
	}
	out := []doctorCheck{{Name: checkPrometheus, Status: statusPass,
		Detail: fmt.Sprintf("%s answered vector(1) in %s", url, time.Since(start).Round(time.Millisecond))}}
	bi, err := d.q.DetectBackend(ctx)
	switch {
	case err != nil:
		out = append(out, doctorCheck{Name: checkBackend, Status: statusWarn, Detail: "the backend could not be detected: " + err.Error(),
			Fix: "the estimator is tested on Prometheus, VictoriaMetrics and Thanos (docs/estimator.md, Backends); results elsewhere are unverified"})
	case bi.Backend == prom.BackendUnknown:
		out = append(out, doctorCheck{Name: checkBackend, Status: statusWarn, Reason: string(bi.Backend), Detail: bi.Caveat() + " (" + bi.Evidence + ")",
			Fix: "query a Prometheus, VictoriaMetrics or Thanos Querier endpoint (docs/estimator.md, Backends)"})
	default:
		detail := strings.TrimSpace(string(bi.Backend) + " " + bi.Version + " (" + bi.Evidence + ")")
		if c := bi.Caveat(); c != "" {
			detail += "; caveat: " + c
		}
		out = append(out, doctorCheck{Name: checkBackend, Status: statusPass, Detail: detail})
	}
	return out
}

// target runs one target's checks.
func (d *doctor) target(ctx context.Context, ct config.Target) doctorTarget {
	out := doctorTarget{Target: ct.Name, Checks: []doctorCheck{}}
	add := func(cs ...doctorCheck) { out.Checks = append(out.Checks, cs...) }
	one := *d.cfg
	one.Targets = []config.Target{ct}
	dm, err := daemon.New(ctx, &one, daemon.Deps{Logger: quietLogger(), Querier: d.q, Kube: d.kube, ReadOnly: true,
		Clock: func() time.Time { return d.at }})
	if err != nil {
		add(doctorCheck{Name: checkConfig, Status: statusFail, Detail: err.Error(), Fix: "fix the target in the config (docs/config.md)"})
		return out
	}
	defer dm.Close()
	tg := dm.Targets()[0]
	params, pc, eppCheck := d.eppConfigCheck(ctx, tg)
	add(eppCheck, d.profileCheck(ctx, ct, tg.Profile))
	var est *estimator.Estimates
	if d.promErr != nil {
		add(doctorCheck{Name: checkSeries, Status: statusSkip, Detail: "Prometheus cannot be queried: no series checked"})
	} else {
		et := tg.Est
		if et.InFlightProducer == "" && params != nil {
			et.InFlightProducer = params.InFlightLoadProducerName
		}
		var err error
		est, err = tg.Estimator.Estimate(ctx, et, d.at)
		if err != nil {
			add(doctorCheck{Name: checkSeries, Status: statusFail, Detail: "estimate: " + err.Error()})
		} else {
			add(d.seriesChecks(ctx, ct, est)...)
			out.Shape = est.Shape
		}
	}
	add(d.monitorChecks(ctx, ct)...)
	add(d.pdRolesCheck(ctx, ct, pc, est))
	if c, ok := d.recordsCheck(ctx, ct); ok {
		add(c)
	}
	return out
}

// eppConfigCheck reads the target's EPP config as the daemon does: it
// parses, holds the plugin and its parameters decode under the profile.
func (d *doctor) eppConfigCheck(ctx context.Context, tg *tuner.Target) (*gate.Params, *pdConfig, doctorCheck) {
	snap, err := tg.Sink.Read(ctx)
	if err != nil {
		return nil, nil, doctorCheck{Name: checkEPPConfig, Status: statusFail, Detail: err.Error(),
			Fix: "point the target at the EPP config (configMap/key or file) holding one prefix-cache-affinity-filter, name it with plugin:, and keep its parameters to the keys the profile accepts (docs/gate.md)"}
	}
	in := snap.Instances[0]
	p := in.Params
	pc := pdOfConfig(in.Instance)
	return &p, &pc, doctorCheck{Name: checkEPPConfig, Status: statusPass,
		Detail: fmt.Sprintf("%s: plugin %s parses under profile %s (maxTTFTPenaltyMs %g, peakPrefillThroughput %g, inFlightLoadProducerName %q)",
			snap.Source, in.Name(), tg.Profile.Name, p.MaxTTFTPenaltyMs, p.PeakPrefillThroughput, p.InFlightLoadProducerName)}
}

// recordsCheck checks the target's records source when it has one: the
// file exists, or the stream answers 200.
func (d *doctor) recordsCheck(ctx context.Context, ct config.Target) (doctorCheck, bool) {
	switch {
	case ct.Records.File != "":
		if err := fileReadable(ct.Records.File); err != nil {
			return doctorCheck{Name: checkRecords, Status: statusFail, Detail: err.Error(),
				Fix: "records.file must name the gate-records file (JSON lines) the EPP writes (docs/records.md)"}, true
		}
		return doctorCheck{Name: checkRecords, Status: statusPass, Detail: ct.Records.File + " is readable"}, true
	case ct.Records.URL != "":
		if err := streamAnswers(ctx, ct.Records.URL); err != nil {
			return doctorCheck{Name: checkRecords, Status: statusFail, Detail: err.Error(),
				Fix: "records.url must be reachable from gatetuner and answer 200 with gate records (docs/records.md)"}, true
		}
		return doctorCheck{Name: checkRecords, Status: statusPass, Detail: ct.Records.URL + " answers 200"}, true
	}
	return doctorCheck{}, false
}
