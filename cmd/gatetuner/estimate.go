package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/estimator/prom"
	"github.com/gatetuner/gatetuner/test/fleetsim"
	"github.com/gatetuner/gatetuner/test/fleetsim/export"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenarios"
	"github.com/gatetuner/gatetuner/test/simenv"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/daemon"
	"github.com/gatetuner/gatetuner/tuner/jsonenc"
)

func init() { commands = append(commands, newEstimateCmd) }

type estimateOpts struct {
	prometheus                                             string
	target, namespace, podRegex, vllmSelector, eppSelector string
	lookback, window, snapshotStep                         time.Duration
	maxBatched, maxSeqs                                    int
	minPodCoverage                                         float64
	priorPPT                                               float64
	calibrationFile, calibrationFingerprint                string
	bearerTokenFile, caFile, certFile, keyFile, serverName string
	insecure                                               bool
	headers                                                []string
	queryTimeout, timeout                                  time.Duration
	output, at                                             string
	scenario                                               string
	trace                                                  traceFlags
	seed                                                   uint64
	legacyVLLM                                             bool
	exporters                                              string
	pdGateProfile                                          string
	scrape, scrapeEPP                                      []string
	scrapeDuration, scrapeInterval                         time.Duration
}

func newEstimateCmd(a *app) *cobra.Command {
	var o estimateOpts
	cmd := &cobra.Command{
		Use:   "estimate --prometheus URL|embedded [flags]",
		Short: "Estimate a deployment's drain rate, nominal throughput and token distributions from Prometheus",
		Long: `estimate reads a deployment's vLLM and EPP series from Prometheus and prints what
the estimator makes of them: the saturated drain rate (what peakPrefillThroughput should
be) with its interval and confidence, the per-request lower bound, the step-rate
cross-check, the nominal full-chunk rate, prompt and cached-token quantiles, request
rate, in-flight snapshots and routing shares — each with its source, and with
machine-readable reasons when it is Inconclusive (docs/estimator.md).

--prometheus embedded runs an in-process Prometheus filled either by the fleet
simulator (--scenario NAME|FILE [--seed N]) or by scraping --scrape host:port,...
(vLLM pods) and --scrape-epp host:port,... for --scrape-duration.

Exit codes (docs/cli.md): 0 the drain rate was estimated (or a prior stands in),
1 Prometheus could not be queried or the embedded one could not be filled, 2 a
usage or configuration error, 3 the drain rate is inconclusive (reasons printed).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runEstimate(cmd.Context(), a, &o) },
	}
	pol, pc := config.DefaultPolicy(), config.DefaultPrometheus()
	f := cmd.Flags()
	f.StringVar(&o.prometheus, "prometheus", "", "Prometheus-compatible API base URL, or \"embedded\"")
	f.StringVar(&o.target, "target", "", "target (deployment) name (default: the scenario's, else \"default\")")
	f.StringVar(&o.namespace, "namespace", "", "namespace label of the vLLM and EPP series")
	f.StringVar(&o.podRegex, "pod-regex", "", "regex the vLLM pods' pod label must match")
	f.StringVar(&o.vllmSelector, "vllm-selector", "", "PromQL label matchers (no braces) selecting the vLLM series; exclusive with --pod-regex")
	f.StringVar(&o.eppSelector, "epp-selector", "", "PromQL label matchers (no braces) selecting the EPP series")
	f.DurationVar(&o.lookback, "lookback", pol.Lookback, "how far back to read evidence")
	f.DurationVar(&o.window, "window", pol.SaturationWindow, "saturation window (>= 4 scrape intervals, >= 10x the p99 prefill time)")
	f.DurationVar(&o.snapshotStep, "snapshot-step", pol.SnapshotStep, "spacing of in-flight snapshots")
	f.IntVar(&o.maxBatched, "max-num-batched-tokens", 0, "vLLM --max-num-batched-tokens (enables the step rate and the nominal estimate)")
	f.IntVar(&o.maxSeqs, "max-num-seqs", 0, "vLLM --max-num-seqs (enables the running-set condition of the saturation rule)")
	f.Float64Var(&o.minPodCoverage, "min-pod-coverage", estimator.DefaultMinPodCoverage, "share of expected pods that must have every required series")
	f.Float64Var(&o.priorPPT, "prior-ppt", 0, "prior drain rate (tok/s) reported, labelled, until live evidence suffices")
	f.StringVar(&o.pdGateProfile, "pd-gate-profile", "", "a P/D pool: the scheduling profile (prefill or decode) whose plugins include the gate (default: told from the metrics when they can; with --scenario, the shape's)")
	f.StringVar(&o.calibrationFile, "calibration-file", "", "llm-d calibration record used as the prior; exclusive with --prior-ppt")
	f.StringVar(&o.calibrationFingerprint, "calibration-fingerprint", "", "deployment fingerprint the calibration record must carry")
	f.StringVar(&o.bearerTokenFile, "bearer-token-file", "", "file holding a bearer token (re-read when it changes)")
	f.StringVar(&o.caFile, "ca-file", "", "PEM CA bundle for an https Prometheus")
	f.StringVar(&o.certFile, "cert-file", "", "PEM client certificate")
	f.StringVar(&o.keyFile, "key-file", "", "PEM client key")
	f.StringVar(&o.serverName, "server-name", "", "server name checked against the certificate")
	f.BoolVar(&o.insecure, "insecure-skip-verify", false, "do not verify the server certificate")
	f.StringArrayVar(&o.headers, "header", nil, "HTTP header K=V sent with every query (repeatable), e.g. X-Scope-OrgID=tenant")
	f.DurationVar(&o.queryTimeout, "query-timeout", pc.Timeout, "timeout of one query, retries included")
	f.DurationVar(&o.timeout, "timeout", 2*time.Minute, "timeout of the whole estimation")
	f.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	f.StringVar(&o.at, "at", "", "evaluation time, RFC 3339 (default: now; with --scenario, 7 s after its end)")
	f.StringVar(&o.scenario, "scenario", "", "embedded: fill from this fleet-simulator scenario (built-in name or YAML file)")
	o.trace.register(f)
	f.Uint64Var(&o.seed, "seed", 1, "embedded: simulator seed")
	f.StringVar(&o.exporters, "exporters", "", "embedded: the scenario's export shape NAME[,key=value...] (see simulate --exporters)")
	f.BoolVar(&o.legacyVLLM, "legacy-vllm", false, "embedded: emulate vLLM before 2026 (no by-source or cached prompt-token counters)")
	f.StringSliceVar(&o.scrape, "scrape", nil, "embedded: vLLM host:port addresses to scrape")
	f.StringSliceVar(&o.scrapeEPP, "scrape-epp", nil, "embedded: EPP host:port addresses to scrape")
	f.DurationVar(&o.scrapeDuration, "scrape-duration", 5*time.Minute, "embedded: how long to scrape before estimating")
	f.DurationVar(&o.scrapeInterval, "scrape-interval", pc.ScrapeInterval, "embedded: scrape interval")
	return cmd
}

// estimateSetup is what the flags resolve to before any query.
type estimateSetup struct {
	target estimator.Target
	cfg    estimator.Config
	at     time.Time
	sc     *scenario.Scenario
}

func (o *estimateOpts) setup() (*estimateSetup, error) {
	if err := o.checkFlags(); err != nil {
		return nil, err
	}
	s := &estimateSetup{cfg: estimator.Config{Lookback: o.lookback, Window: o.window, SnapshotStep: o.snapshotStep, MinPodCoverage: o.minPodCoverage}}
	t := estimator.Target{Name: o.target, MaxNumBatchedTokens: o.maxBatched, MaxNumSeqs: o.maxSeqs, PDGateProfile: o.pdGateProfile}
	sel := seriesSelection{ns: o.namespace, podRe: o.podRegex, vsel: o.vllmSelector, esel: o.eppSelector}
	if o.scenario != "" {
		sc, err := o.loadScenario()
		if err != nil {
			return nil, err
		}
		s.sc = sc
		scenarioDefaults(&t, &sel, sc)
	}
	if len(o.scrape)+len(o.scrapeEPP) > 0 {
		if sel.vsel == "" && sel.podRe == "" {
			sel.vsel = `job="vllm"`
		}
		if sel.esel == "" && len(o.scrapeEPP) > 0 {
			sel.esel = `job="epp"`
		}
	}
	if t.Name == "" {
		t.Name = "default"
	}
	t.VLLMSelector, t.EPPSelector = sel.selectors()
	if t.VLLMSelector == "" {
		return nil, usageErr("select the vLLM pods with --namespace, --pod-regex or --vllm-selector")
	}
	prior, err := o.prior()
	if err != nil {
		return nil, err
	}
	t.Prior = prior
	if err := t.Validate(); err != nil {
		return nil, asUsage(err)
	}
	s.target = t
	if o.at != "" {
		at, err := time.Parse(time.RFC3339Nano, o.at)
		if err != nil {
			return nil, usageErr("--at: %v", err)
		}
		s.at = at
	}
	return s, nil
}

// checkFlags checks the flags that need nothing read, and that an
// embedded Prometheus has exactly one source (a scenario or scrapes).
func (o *estimateOpts) checkFlags() error {
	switch {
	case o.prometheus == "":
		return usageErr("--prometheus is required (a URL, or embedded)")
	case o.output != "text" && o.output != "json":
		return usageErr("--output must be text or json, got %q", o.output)
	case o.podRegex != "" && o.vllmSelector != "":
		return usageErr("--pod-regex and --vllm-selector are exclusive")
	case o.priorPPT != 0 && o.calibrationFile != "":
		return usageErr("--prior-ppt and --calibration-file are exclusive")
	case o.priorPPT < 0:
		return usageErr("--prior-ppt must be > 0, got %v", o.priorPPT)
	case o.maxBatched < 0 || o.maxSeqs < 0:
		return usageErr("--max-num-batched-tokens and --max-num-seqs must be >= 0")
	case o.timeout <= 0 || o.queryTimeout <= 0:
		return usageErr("--timeout and --query-timeout must be > 0")
	}
	embedded := o.prometheus == "embedded"
	o.scenario = o.trace.scenario(o.scenario)
	sources := 0
	if o.scenario != "" {
		sources++
	}
	if len(o.scrape)+len(o.scrapeEPP) > 0 {
		sources++
	}
	switch {
	case embedded && sources != 1:
		return usageErr("--prometheus embedded needs exactly one of --scenario or --scrape/--scrape-epp")
	case !embedded && sources != 0:
		return usageErr("--scenario and --scrape need --prometheus embedded")
	case o.minPodCoverage <= 0 || o.minPodCoverage > 1:
		return usageErr("--min-pod-coverage must be in (0,1], got %v", o.minPodCoverage)
	}
	return nil
}

// loadScenario loads --scenario (shaped by the trace flags) with the
// --exporters shape.
func (o *estimateOpts) loadScenario() (*scenario.Scenario, error) {
	sc, err := o.trace.load(o.scenario)
	if err != nil {
		return nil, asUsage(err)
	}
	if o.exporters != "" {
		x, err := scenario.ParseExportShape(o.exporters)
		if err != nil {
			return nil, usageErr("--exporters: %v", err)
		}
		sc.Exporters = &x
	}
	return sc, nil
}

// seriesSelection is what selects the series: the namespace, the vLLM
// pods' name regex or selector, and the EPP's selector.
type seriesSelection struct {
	ns, podRe, vsel, esel string
}

// scenarioDefaults fills what the flags leave unset from the scenario's
// own selection of its series (simenv.EstimatorTarget): its name,
// namespace, pods (a P/D pool's decode and prefill pods, and its gate
// profile, unless the vLLM pods are selected by flag), EPP pod and engine
// limits.
func scenarioDefaults(t *estimator.Target, sel *seriesSelection, sc *scenario.Scenario) {
	def := simenv.EstimatorTarget(sc)
	if t.Name == "" {
		t.Name = def.Name
	}
	if sel.ns == "" {
		sel.ns = sc.Namespace
	}
	if sel.podRe == "" && sel.vsel == "" {
		sel.podRe = simenv.VLLMPods(sc)
		if t.PDGateProfile == "" {
			t.PDGateProfile = def.PDGateProfile
		}
	}
	if sel.esel == "" {
		sel.esel = fmt.Sprintf("pod=%q", sc.EPP.Pod)
	}
	if t.MaxNumBatchedTokens == 0 {
		t.MaxNumBatchedTokens = def.MaxNumBatchedTokens
	}
	if t.MaxNumSeqs == 0 {
		t.MaxNumSeqs = def.MaxNumSeqs
	}
}

// selectors are the vLLM and EPP label matchers: the namespace (on the
// EPP's only with an EPP selector), the pod regex and the selectors given.
func (sel seriesSelection) selectors() (vllm, epp string) {
	var vparts, eparts []string
	if sel.ns != "" {
		vparts = append(vparts, fmt.Sprintf("namespace=%q", sel.ns))
		if sel.esel != "" {
			eparts = append(eparts, fmt.Sprintf("namespace=%q", sel.ns))
		}
	}
	if sel.podRe != "" {
		vparts = append(vparts, fmt.Sprintf("pod=~%q", sel.podRe))
	}
	if sel.vsel != "" {
		vparts = append(vparts, sel.vsel)
	}
	if sel.esel != "" {
		eparts = append(eparts, sel.esel)
	}
	return strings.Join(vparts, ","), strings.Join(eparts, ",")
}

// prior is --prior-ppt, or the record of --calibration-file, or nil.
func (o *estimateOpts) prior() (*estimator.Prior, error) {
	switch {
	case o.priorPPT > 0:
		return &estimator.Prior{Value: o.priorPPT, Origin: estimator.PriorConfigured, Detail: "--prior-ppt"}, nil
	case o.calibrationFile != "":
		p, err := estimator.LoadCalibrationPrior(o.calibrationFile, o.calibrationFingerprint)
		if err != nil {
			return nil, usageErr("--calibration-file: %v", err)
		}
		return p, nil
	}
	return nil, nil
}

func loadScenario(name string) (*scenario.Scenario, error) {
	if strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml") || strings.ContainsRune(name, os.PathSeparator) {
		return scenario.LoadFile(name)
	}
	return scenarios.Load(name)
}

func (o *estimateOpts) httpQuerier() (*prom.HTTP, error) {
	headers := map[string]string{}
	for _, h := range o.headers {
		k, v, ok := strings.Cut(h, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, usageErr("--header %q: want K=V", h)
		}
		headers[strings.TrimSpace(k)] = v
	}
	q, err := daemon.NewHTTPQuerier(config.Prometheus{URL: o.prometheus, BearerTokenFile: o.bearerTokenFile, Headers: headers, Timeout: o.queryTimeout,
		CAFile: o.caFile, CertFile: o.certFile, KeyFile: o.keyFile, ServerName: o.serverName, InsecureSkipVerify: o.insecure}, nil, nil)
	if err != nil {
		return nil, asUsage(err)
	}
	return q, nil
}

func runEstimate(ctx context.Context, a *app, o *estimateOpts) error { //nolint:contextcheck // cobra gives a nil Context() unless run through ExecuteContext: then Background
	s, err := o.setup()
	if err != nil {
		return err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	var q prom.Querier
	if o.prometheus == "embedded" {
		emb, err := daemon.NewEmbeddedPrometheus(config.Prometheus{URL: "embedded", Timeout: o.queryTimeout}, nil, slog.New(slog.DiscardHandler))
		if err != nil {
			return fmt.Errorf("embedded prometheus: %w", err)
		}
		defer emb.Close()
		if s.sc != nil {
			end, err := fillFromScenario(ctx, emb, s.sc, o.seed, o.legacyVLLM)
			if err != nil {
				return err
			}
			if s.at.IsZero() {
				s.at = end.Add(7 * time.Second) // off the scrape grid
			}
		} else if err := fillByScraping(ctx, a, emb, o); err != nil {
			return err
		}
		q = emb
	} else {
		hq, err := o.httpQuerier()
		if err != nil {
			return err
		}
		defer hq.Close()
		q = hq
	}
	est, err := estimator.New(q, time.Now, s.cfg)
	if err != nil {
		return asUsage(err)
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	e, err := est.Estimate(ctx, s.target, s.at)
	if err != nil {
		return asUsage(err)
	}
	if o.output == "json" {
		err = jsonenc.Encode(a.stdout, e, "  ")
	} else {
		err = writeEstimatesText(a.stdout, e)
	}
	if err != nil {
		return err
	}
	return estimateExit(o.prometheus, e)
}

// estimateExit: exit 1 when Prometheus could not be asked (an unreachable
// server must not read as a quiet pool), 3 when the drain rate is
// inconclusive, else nil.
func estimateExit(url string, e *estimator.Estimates) error {
	if pf := e.QueryFailure(); pf != nil {
		return asFailure(fmt.Errorf("prometheus %s could not be queried (%s): %s", url, pf.Code, pf.Detail))
	}
	if e.DrainRate.Status == estimator.StatusInconclusive {
		return nothingErr("%s: the drain rate is inconclusive (see the reasons above)", e.Target)
	}
	return nil
}

// fillFromScenario runs the simulator into the embedded TSDB through its
// OpenMetrics output; the run ends a minute before now.
func fillFromScenario(ctx context.Context, emb *prom.Embedded, sc *scenario.Scenario, seed uint64, legacy bool) (time.Time, error) {
	base := time.Now().Add(-sc.Duration() - time.Minute).Truncate(time.Minute)
	_, end, err := simenv.Fill(ctx, emb, sc, fleetsim.Options{Seed: seed, BaseTime: base,
		MetricsOptions: export.MetricsOptions{LegacyVLLM: legacy}})
	return end, err
}

// fillByScraping scrapes the given addresses into the embedded TSDB for
// the scrape duration. vLLM does not label its series with a pod, so each
// address becomes the pod label of what it exposes.
func fillByScraping(ctx context.Context, a *app, emb *prom.Embedded, o *estimateOpts) error {
	var targets []prom.ScrapeTarget
	for _, addr := range o.scrape {
		targets = append(targets, prom.ScrapeTarget{Job: "vllm", Addrs: []string{addr}, Labels: map[string]string{"pod": addr}})
	}
	if len(o.scrapeEPP) > 0 {
		targets = append(targets, prom.ScrapeTarget{Job: "epp", Addrs: o.scrapeEPP})
	}
	sc, err := emb.StartScraper(ctx, prom.ScrapeConfig{Targets: targets, Interval: o.scrapeInterval})
	if err != nil {
		return asUsage(err)
	}
	fmt.Fprintf(a.stderr, "scraping %d targets every %v for %v...\n", len(o.scrape)+len(o.scrapeEPP), o.scrapeInterval, o.scrapeDuration)
	select {
	case <-time.After(o.scrapeDuration):
	case <-ctx.Done():
		sc.Stop()
		return ctx.Err()
	}
	sc.Stop()
	return nil
}

func fmtRate(r estimator.RateEstimate) string {
	if r.Value == nil {
		s := string(r.Status)
		if r.LowerBound != nil {
			s += fmt.Sprintf(" (lower bound %.0f tok/s)", *r.LowerBound)
		}
		return s
	}
	s := fmt.Sprintf("%.0f tok/s", *r.Value)
	if r.Interval != nil {
		s += fmt.Sprintf("  [%.0f, %.0f]", r.Interval.Low, r.Interval.High)
	}
	if r.Status == estimator.StatusPrior {
		s += "  PRIOR"
	}
	s += fmt.Sprintf("  confidence %.3f", r.Confidence)
	if r.Windows > 0 {
		s += fmt.Sprintf("  %d windows, %d pods", r.Windows, r.Pods)
	} else if r.Pods > 0 {
		s += fmt.Sprintf("  %d pods", r.Pods)
	}
	return s
}

func fmtDist(d estimator.Distribution) string {
	if d.Status != estimator.StatusOK {
		return string(d.Status)
	}
	f := func(p *float64) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprintf("%.0f", *p)
	}
	if d.HitRate != nil {
		return fmt.Sprintf("hit rate %.3f, mean %s (no per-request distribution)", *d.HitRate, f(d.Mean))
	}
	return fmt.Sprintf("p50 %s  p90 %s  p99 %s  mean %s  (%.0f requests)", f(d.P50), f(d.P90), f(d.P99), f(d.Mean), d.Count)
}

func writeEstimatesText(w io.Writer, e *estimator.Estimates) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	p := func(format string, a ...any) { fmt.Fprintf(tw, format+"\n", a...) }
	p("target %s at %s: %s", e.Target, e.At.UTC().Format(time.RFC3339), strings.ToUpper(string(e.Status)))
	p("lookback %v, window %v", time.Duration(e.LookbackSeconds*float64(time.Second)), time.Duration(e.WindowSeconds*float64(time.Second)))
	f := e.Features
	src := f.ComputedTokens
	if src == "" {
		src = "none"
	}
	p("computed tokens:\t%s (rank %d of 4)", src, f.ComputedTokensRank)
	if len(f.Legacy) > 0 {
		p("older names in use:\t%s", strings.Join(f.Legacy, ", "))
	}
	p("pods:\t%d of %d covered", len(e.Coverage.Covered), len(e.Coverage.Expected))
	writeShapeText(p, e.Shape)
	p("drain rate (B):\t%s\t%s", fmtRate(e.DrainRate), e.DrainRate.Source)
	a := e.PerRequestRate
	if a.Value != nil {
		p("per-request (A):\t%.0f tok/s, %d pods\ta lower bound: reads low by the prefill concurrency", *a.Value, a.Pods)
	} else {
		p("per-request (A):\t%s", a.Status)
	}
	p("step rate (C):\t%s\t%s", fmtRate(e.StepRate), e.StepRate.Source)
	p("nominal:\t%s\t%s", fmtRate(e.Nominal), e.Nominal.Method)
	p("prompt tokens:\t%s\t%s", fmtDist(e.Prompt), e.Prompt.Source)
	p("cached tokens:\t%s\t%s", fmtDist(e.Cached), e.Cached.Source)
	if e.RequestRate.Value != nil {
		p("request rate:\t%.2f req/s\t%s", *e.RequestRate.Value, e.RequestRate.Source)
	} else {
		p("request rate:\t%s", e.RequestRate.Status)
	}
	p("in-flight:\t%s, %d snapshots every %vs from replicas %v", e.InFlight.Status, len(e.InFlight.Snapshots), e.InFlight.StepSeconds, e.InFlight.Replicas)
	if e.Routing.Status == estimator.StatusOK {
		var parts []string
		for _, s := range e.Routing.Endpoints {
			parts = append(parts, fmt.Sprintf("%s %.1f%%", s.Endpoint, 100*s.Share))
		}
		p("routing:\t%s", strings.Join(parts, ", "))
	} else {
		p("routing:\t%s", e.Routing.Status)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, group := range []struct {
		name string
		rs   []estimator.Reason
	}{{"reasons", e.Reasons}, {"warnings", e.Warnings}} {
		if len(group.rs) == 0 {
			continue
		}
		fmt.Fprintf(w, "%s:\n", group.name)
		// Parts failing for the same cause share one line.
		type cause struct {
			code   estimator.ReasonCode
			detail string
		}
		var order []cause
		parts := map[cause][]string{}
		for _, r := range group.rs {
			c := cause{r.Code, r.Detail}
			if _, ok := parts[c]; !ok {
				order = append(order, c)
			}
			parts[c] = append(parts[c], r.Part)
		}
		for _, c := range order {
			fmt.Fprintf(w, "  %s: %s", strings.Join(parts[c], ", "), c.code)
			if c.detail != "" {
				fmt.Fprintf(w, " — %s", c.detail)
			}
			fmt.Fprintln(w)
		}
	}
	if lg := e.LastGood; lg != nil && lg.DrainRate.Value != nil {
		fmt.Fprintf(w, "last good: %.0f tok/s at %s (%.0fs ago), aged confidence %.3f\n",
			*lg.DrainRate.Value, lg.At.UTC().Format(time.RFC3339), lg.AgeSeconds, lg.AgedConfidence)
	}
	_, err := fmt.Fprintf(w, "queries: %d (%d failed), at most %d points per series, %.2fs\n",
		e.Queries.Queries, e.Queries.Failed, e.Queries.MaxPoints, e.Queries.Seconds)
	return err
}

// writeShapeText prints the inferred exporter shape and each join.
func writeShapeText(p func(string, ...any), sh estimator.Shape) {
	or := func(s, dflt string) string {
		if s == "" {
			return dflt
		}
		return s
	}
	p("exporters:\tvLLM %s, EPP %s, endpoints named %s, %d ranks/pod, %d engines/pod",
		or(sh.VLLM, "unknown"), or(sh.EPP, "none"), or(sh.EndpointNaming, "-"), sh.RanksPerPod, sh.EnginesPerPod)
	if len(sh.Producers) > 0 || sh.EndpointNamespaceLabel != "" {
		p("EPP series:\tproducers %v (reading %s), replicas %v (synced %t), namespace label %s",
			sh.Producers, or(sh.Producer, "-"), sh.Replicas, sh.Synced, or(sh.EndpointNamespaceLabel, "-"))
	}
	for _, j := range sh.Joins {
		line := fmt.Sprintf("%d of %d %s matched by %s (%d names)", j.Matched, j.RightNames, j.Right, j.Left, j.LeftNames)
		if len(j.LeftUnmatched) > 0 {
			line += fmt.Sprintf("; unmatched %q", j.LeftUnmatched)
		}
		if len(j.RightUnmatched) > 0 {
			line += fmt.Sprintf("; without in-flight %q", j.RightUnmatched)
		}
		p("join:\t%s", line)
	}
	if pd := sh.PD; pd != nil {
		p("P/D:\t%s; decode pods %v, prefill pods %v; gate in the %s profile (from %s)",
			strings.Join(pd.Evidence, "; "), pd.DecodePods, pd.PrefillPods, or(pd.GateProfile, "unknown"), or(pd.GateProfileSource, "nothing"))
	}
	for _, d := range sh.Departed {
		p("departed:\t%s (pod %s, last vLLM sample %s): left out of later snapshots", d.Endpoint, d.Pod, d.LastSeen.UTC().Format(time.RFC3339))
	}
}
