package deploy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/model"

	"github.com/gatetuner/gatetuner/exporter"
	"github.com/gatetuner/gatetuner/test/promharness"
)

// daemonNamespace is the namespace label the tests' scrape config gives the
// daemon's series, as the ServiceMonitor would.
const daemonNamespace = "gatetuner"

// scrapeJob is the job label the tests' scrape config gives the daemon's
// series, as the ServiceMonitor's jobLabel does.
const scrapeJob = "gatetuner"

// TestAlertRulesFire runs promtool's rule unit tests (testdata/alerts-test.yaml)
// over the base's rules: each alert fires in its condition with the labels
// routing needs and stays quiet otherwise. promtool also checks the full rules,
// annotation templates included.
func TestAlertRulesFire(t *testing.T) {
	if testing.Short() {
		t.Skip("needs promtool (a real Prometheus); skipped under -short")
	}
	bin := promharness.Require(t)
	dir := t.TempDir()
	groups := baseRuleGroups(t)
	full, err := json.Marshal(map[string]any{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "full-rules.yaml"), full, 0o644); err != nil {
		t.Fatal(err)
	}
	for gi := range groups {
		for ri := range groups[gi].Rules {
			groups[gi].Rules[ri].Annotations = nil
		}
	}
	bare, err := json.Marshal(map[string]any{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), bare, 0o644); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join("testdata", "alerts-test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts-test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tested := range requiredAlerts {
		if !strings.Contains(string(tests), "alertname: "+tested) {
			t.Errorf("testdata/alerts-test.yaml has no test of %s", tested)
		}
	}
	for _, args := range [][]string{{"check", "rules", "full-rules.yaml"}, {"test", "rules", "alerts-test.yaml"}} {
		cmd := exec.Command(bin.Promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

// result is what one query returned.
type result struct {
	series int
	err    error
}

// runQueries runs every query through the Prometheus HTTP API: a range query
// from start to now for timeseries targets, an instant query for instant ones
// and for alerts.
func runQueries(ctx context.Context, t *testing.T, prom *promharness.Server, qs []query, instant map[query]bool, vars map[string]string, start time.Time) map[query]result {
	t.Helper()
	now := time.Now()
	out := map[query]result{}
	for _, q := range qs {
		expr, err := substitute(q.expr, vars)
		if err != nil {
			out[q] = result{err: err}
			continue
		}
		var v model.Value
		var warn v1.Warnings
		if instant[q] {
			v, warn, err = prom.Query(ctx, expr, now)
		} else {
			v, warn, err = prom.QueryRange(ctx, expr, v1.Range{Start: start, End: now, Step: 2 * time.Second})
		}
		if err != nil {
			out[q] = result{err: fmt.Errorf("%s: %w", expr, err)}
			continue
		}
		if len(warn) > 0 {
			t.Logf("%s %s: warnings %v", q.panel, q.refID, warn)
		}
		n := 0
		switch r := v.(type) {
		case model.Vector:
			n = len(r)
		case model.Matrix:
			n = len(r)
		case *model.Scalar:
			n = 1
		}
		out[q] = result{series: n}
	}
	return out
}

// instantQueries marks the dashboard targets Grafana runs as instant queries.
func instantQueries(d dashboard) map[query]bool {
	out := map[query]bool{}
	for _, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			if tg.Instant {
				out[query{panel: p.Title, refID: tg.RefID, expr: tg.Expr}] = true
			}
		}
	}
	return out
}

// checkVariables runs the dashboard's variable queries (Grafana's
// label_values(METRIC, LABEL) as `group by (LABEL) (METRIC)`) and checks they
// offer the given values.
func checkVariables(ctx context.Context, t *testing.T, prom *promharness.Server, d dashboard, want map[string]string) {
	t.Helper()
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)
		text, _ := q["query"].(string)
		inner, ok := strings.CutPrefix(text, "label_values(")
		if !ok {
			t.Errorf("variable %s: query %q is not label_values(...)", v.Name, text)
			continue
		}
		inner = strings.TrimSuffix(inner, ")")
		i := strings.LastIndex(inner, ",")
		metric, label := strings.TrimSpace(inner[:i]), strings.TrimSpace(inner[i+1:])
		metric, err := substitute(metric, map[string]string{"namespace": ".*", "job": ".*"})
		if err != nil {
			t.Error(err)
			continue
		}
		res, _, err := prom.Query(ctx, fmt.Sprintf("group by (%s) (%s)", label, metric), time.Now())
		if err != nil {
			t.Errorf("variable %s: %v", v.Name, err)
			continue
		}
		var values []string
		for _, s := range res.(model.Vector) {
			values = append(values, string(s.Metric[model.LabelName(label)]))
		}
		if w, ok := want[v.Name]; ok && !containsString(values, w) {
			t.Errorf("variable %s offers %v, want %q among them", v.Name, values, w)
		}
	}
}

func containsString(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// checkDashboardAndAlerts runs every panel, annotation and alert query and
// fails on any error and on a required panel returning nothing. strict also
// demands data from every panel query (the metrics were all set).
func checkDashboardAndAlerts(ctx context.Context, t *testing.T, prom *promharness.Server, target string, start time.Time, strict bool) {
	t.Helper()
	d := loadDashboard(t)
	rangeDur := fmt.Sprintf("%ds", int(math.Ceil(time.Since(start).Seconds())))
	vars := grafanaVars(daemonNamespace, target, rangeDur)
	instant := instantQueries(d)
	alerts := alertQueries(t)
	for _, a := range alerts {
		instant[a] = true
	}
	qs := append(dashboardQueries(d), alerts...)
	res := runQueries(ctx, t, prom, qs, instant, vars, start)

	perPanel := map[string]int{}
	var empty []string
	for _, q := range qs {
		r := res[q]
		if r.err != nil {
			t.Errorf("%s %s: %v", q.panel, q.refID, r.err)
			continue
		}
		perPanel[q.panel] += r.series
		if r.series == 0 && !strings.HasPrefix(q.panel, "alert ") {
			empty = append(empty, q.panel+" "+q.refID)
		}
	}
	sort.Strings(empty)
	t.Logf("dashboard queries without data: %v", empty)
	for _, p := range requiredPanels {
		if perPanel[p] == 0 {
			t.Errorf("required panel %q returned no series", p)
		}
	}
	if strict && len(empty) > 0 {
		t.Errorf("with every metric set, these dashboard queries returned nothing: %v", empty)
	}
	// The daemon is up and scraped as the ServiceMonitor would: the down alert selects it.
	if n := perPanel["alert GatetunerDown"]; n != 0 {
		t.Errorf("GatetunerDown's expression returns %d series while the daemon is scraped: its up{} selector misses the scrape labels", n)
	}
	checkVariables(ctx, t, prom, d, map[string]string{"namespace": daemonNamespace, "job": scrapeJob, "target": target})
}

// waitScrapes waits until Prometheus holds at least n samples of series.
func waitScrapes(ctx context.Context, t *testing.T, prom *promharness.Server, series string, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	q := fmt.Sprintf("count_over_time(%s[10m])", series)
	for {
		v, _, err := prom.Query(ctx, q, time.Now())
		if err == nil {
			if vec, ok := v.(model.Vector); ok && len(vec) > 0 && int(vec[0].Value) >= n {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus did not scrape %s %d times within %s (last error %v)", series, n, timeout, err)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// fillMetrics sets every gatetuner metric of one target to a plausible value,
// as a cycle would.
func fillMetrics(m *exporter.Metrics, tg string) {
	m.DrainRate.WithLabelValues(tg).Set(9400)
	m.DrainRateLow.WithLabelValues(tg).Set(8700)
	m.DrainRateHigh.WithLabelValues(tg).Set(10100)
	m.NominalRate.WithLabelValues(tg).Set(15200)
	m.PerRequestRate.WithLabelValues(tg).Set(6100)
	m.EstimateConfidence.WithLabelValues(tg).Set(0.82)
	m.EstimateConclusive.WithLabelValues(tg).Set(0)
	m.EstimateReason.WithLabelValues(tg, "few-saturated-windows").Set(1)
	m.RequestRate.WithLabelValues(tg).Set(42)
	for q, v := range map[string]float64{"p50": 5200, "p90": 31000, "p99": 78000, "mean": 11000} {
		m.PromptTokens.WithLabelValues(tg, q).Set(v)
		m.CachedTokens.WithLabelValues(tg, q).Set(v / 2)
	}
	m.DataAge.WithLabelValues(tg, "drain-rate").Set(95)
	m.DataAge.WithLabelValues(tg, "in-flight").Set(12)
	for _, q := range []string{"p50", "p90", "p99"} {
		m.GateInputPenalty.WithLabelValues(tg, q).Set(map[string]float64{"p50": 0.12, "p90": 0.9, "p99": 4.1}[q])
		m.GateInputGap.WithLabelValues(tg, q).Set(map[string]float64{"p50": -3000, "p90": 2500, "p99": 40000}[q])
	}
	m.DecisionSource.WithLabelValues(tg, "prometheus-model").Set(1)
	m.ShadowWindowStart.WithLabelValues(tg).Set(float64(time.Now().Add(-2 * time.Hour).Unix()))
	m.RestartCost.WithLabelValues(tg).Set(52000)
	m.RestartSaving.WithLabelValues(tg).Set(81000)
	for _, s := range []string{exporter.SettingsCurrent, exporter.SettingsRecommended} {
		m.WronglyHeldRatio.WithLabelValues(tg, s).Set(map[string]float64{"current": 0.172, "recommended": 0.031}[s])
		m.ForfeitedRatio.WithLabelValues(tg, s).Set(map[string]float64{"current": 0.004, "recommended": 0.02}[s])
		m.Parameter.WithLabelValues(tg, s, "maxTTFTPenaltyMs").Set(map[string]float64{"current": 5000, "recommended": 1400}[s])
		m.Parameter.WithLabelValues(tg, s, "peakPrefillThroughput").Set(map[string]float64{"current": 15928, "recommended": 9400}[s])
		m.Parameter.WithLabelValues(tg, s, "barTokens").Set(map[string]float64{"current": 79640, "recommended": 13160}[s])
		m.PenaltyMode.WithLabelValues(tg, s, "static").Set(1)
	}
	m.HoldActive.WithLabelValues(tg, "cooldown").Set(1)
	m.RecommendationPending.WithLabelValues(tg, "0123456789abcdef").Set(1)
	m.LastApply.WithLabelValues(tg).Set(float64(time.Now().Add(-7 * time.Hour).Unix()))
	m.Leader.Set(1)
	m.TargetUp.WithLabelValues(tg).Set(1)
}

// tick advances the counters and timestamps as one more cycle would.
func tick(m *exporter.Metrics, tg string, i int) {
	for _, s := range []string{exporter.SettingsCurrent, exporter.SettingsRecommended} {
		for v, n := range map[string]float64{"not_gated": 40, "unknown": 2, "held_ok": 300, "held_wrong": 70, "released_ok": 20, "released_wrong": 3, "released_ceiling": 1} {
			m.ShadowDecisions.WithLabelValues(tg, s, v).Add(n)
		}
		for o, n := range map[string]float64{"sticky": 370, "load_override": 24, "no_match": 40} {
			m.ShadowOutcomes.WithLabelValues(tg, s, o).Add(n)
		}
		m.ShadowExcessTok.WithLabelValues(tg, s).Add(250000)
		m.ShadowExcessSec.WithLabelValues(tg, s).Add(26)
	}
	m.Cycles.WithLabelValues(tg, "held").Inc()
	m.Holds.WithLabelValues(tg, "cooldown").Inc()
	if i%2 == 1 {
		m.Applies.WithLabelValues(tg, "ok").Inc()
		m.LastApply.WithLabelValues(tg).Set(float64(time.Now().Unix()))
	}
	m.Rollbacks.WithLabelValues(tg, "verification-failed").Add(0)
	m.LastCycle.WithLabelValues(tg).Set(float64(time.Now().Unix()))
	m.CycleDuration.WithLabelValues(tg).Observe(0.3 + float64(i%5)/10)
	m.ObserveQuery("http", 40*time.Millisecond, "")
	m.ObserveQuery("http", 2*time.Second, "timeout")
}

// TestDashboardQueriesAgainstExporter is a check of the queries' names and
// labels: a process serving exporter.New's metrics with plausible values of
// every series is scraped by a real Prometheus, and every panel query and
// alert expression must run and every panel query return data.
// TestDashboardAndAlertsAgainstDemoDaemon is the proof with the real daemon.
func TestDashboardQueriesAgainstExporter(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real Prometheus; skipped under -short")
	}
	const tg = "qwen3-32b"
	m := exporter.New("test", "0123456789ab")
	fillMetrics(m, tg)
	var mu sync.Mutex
	handler := promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		handler.ServeHTTP(w, r)
	}))
	defer srv.Close()

	start := time.Now()
	prom := promharness.Start(t, promharness.Options{ScrapeInterval: time.Second, Targets: []promharness.Target{{
		Job: scrapeJob, Addrs: []string{strings.TrimPrefix(srv.URL, "http://")}, Labels: map[string]string{"namespace": daemonNamespace},
	}}})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			mu.Lock()
			tick(m, tg, i)
			mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-time.After(700 * time.Millisecond):
			}
		}
	}()
	waitScrapes(ctx, t, prom, `gatetuner_cycles_total{namespace="gatetuner"}`, 8, time.Minute)
	checkDashboardAndAlerts(ctx, t, prom, tg, start, true)
	cancel()
	<-done
}

// Demo daemon: `gatetuner demo` serves the daemon's /metrics while a
// simulator drives the closed loop; --keep-serving keeps serving after it.
const (
	demoKeepServing = 10 * time.Minute
	demoTimeout     = 8 * time.Minute
	demoSettle      = 2 * time.Minute
)

// TestDashboardAndAlertsAgainstDemoDaemon builds the gatetuner binary, runs
// `gatetuner demo` — the daemon's metrics over a simulator-driven closed loop
// — has a real Prometheus scrape it every second, then runs every dashboard
// panel query (variables set to the demo's namespace and target) and every
// alert expression through the Prometheus HTTP API: none may fail, and each
// panel the issue lists must return data.
func TestDashboardAndAlertsAgainstDemoDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real Prometheus and builds the daemon; skipped under -short")
	}
	bin := buildGatetuner(t)
	help, err := exec.Command(bin, "demo", "--help").CombinedOutput()
	if err != nil || strings.Contains(string(help), "unknown command") {
		t.Fatalf("`gatetuner demo` is missing or broken (%v): this test needs cmd/gatetuner's demo command, which serves the daemon's /metrics during a simulator run:\n%s", err, help)
	}
	for _, flag := range []string{"--metrics-address", "--keep-serving"} {
		if !strings.Contains(string(help), flag) {
			t.Fatalf("`gatetuner demo` has no %s flag; this test needs it:\n%s", flag, help)
		}
	}
	addr := freeLoopbackAddr(t)

	start := time.Now()
	prom := promharness.Start(t, promharness.Options{ScrapeInterval: time.Second, Targets: []promharness.Target{{
		Job: scrapeJob, Addrs: []string{addr}, Labels: map[string]string{"namespace": daemonNamespace},
	}}})
	demo := startDemo(t, bin, addr)
	ctx := t.Context()

	// Wait for the simulated run to finish (the demo then only serves its metrics) with every
	// required panel holding data; past demoSettle after the panels have data, go on anyway.
	d := loadDashboard(t)
	var required []query
	for _, q := range dashboardQueries(d) {
		if containsString(requiredPanels, q.panel) {
			required = append(required, q)
		}
	}
	deadline := time.Now().Add(demoTimeout)
	var tg string
	var allSince time.Time
	for {
		if demo.exited() {
			t.Fatalf("gatetuner demo exited before the queries ran (%v); its output:\n%s", demo.err(), demo.output())
		}
		tg = firstTarget(ctx, prom)
		if tg != "" {
			rangeDur := fmt.Sprintf("%ds", int(math.Ceil(time.Since(start).Seconds())))
			res := runQueries(ctx, t, prom, required, instantQueries(d), grafanaVars(daemonNamespace, tg, rangeDur), start)
			have := map[string]bool{}
			for q, r := range res {
				if r.err == nil && r.series > 0 {
					have[q.panel] = true
				}
			}
			if len(have) == len(requiredPanels) {
				if allSince.IsZero() {
					allSince = time.Now()
				}
				if demo.runOver() || time.Since(allSince) > demoSettle {
					break
				}
			}
		}
		if time.Now().After(deadline) {
			t.Logf("gatetuner demo output so far:\n%s", demo.output())
			break // the checks below say what is missing
		}
		time.Sleep(2 * time.Second)
	}
	if tg == "" {
		t.Fatalf("Prometheus scraped no gatetuner_* series with a target label from gatetuner demo at %s within %s", addr, demoTimeout)
	}
	// A few more scrapes so the newest counter values have a rate.
	time.Sleep(3 * time.Second)
	if demo.exited() {
		t.Fatalf("gatetuner demo stopped serving before the queries ran (%v); --keep-serving %s should keep it up:\n%s", demo.err(), demoKeepServing, demo.output())
	}
	t.Logf("demo target %q; checking every panel and alert query", tg)
	checkDashboardAndAlerts(ctx, t, prom, tg, start, false)
	checkExposition(ctx, t, "http://"+addr+"/metrics")
}

// checkExposition runs `promtool check metrics` on what the daemon serves at
// url, and checks the distribution gauges' statistic values are the documented ones.
func checkExposition(ctx context.Context, t *testing.T, url string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	bins, err := promharness.Find()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bins.Promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics on the daemon's /metrics: %v\n%s", err, out)
	}
	stats := map[string]bool{"p50": true, "p90": true, "p99": true, "mean": true}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	seen := 0
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "gatetuner_") {
			continue
		}
		_, rest, ok := strings.Cut(line, exporter.StatisticLabel+`="`)
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, `"`)
		if !stats[v] {
			t.Errorf("daemon /metrics: %s value %q is not one docs/metrics.md lists: %s", exporter.StatisticLabel, v, line)
		}
		seen++
	}
	if seen == 0 {
		t.Errorf("daemon /metrics has no series with a %s label (prompt and cached tokens, gate input):\n%s", exporter.StatisticLabel, body)
	}
}

// firstTarget returns the alphabetically first target label the daemon exports.
func firstTarget(ctx context.Context, prom *promharness.Server) string {
	v, _, err := prom.Query(ctx, `group by (target) ({__name__=~"gatetuner_.+",namespace="gatetuner",target!=""})`, time.Now())
	if err != nil {
		return ""
	}
	var ts []string
	for _, s := range v.(model.Vector) {
		ts = append(ts, string(s.Metric["target"]))
	}
	sort.Strings(ts)
	if len(ts) == 0 {
		return ""
	}
	return ts[0]
}

// buildGatetuner builds ./cmd/gatetuner into the test's temporary folder.
func buildGatetuner(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build cmd/gatetuner: %v", err)
	}
	out := filepath.Join(t.TempDir(), "gatetuner")
	cmd := exec.Command(goBin, "build", "-o", out, "./cmd/gatetuner")
	cmd.Dir = moduleRoot(t)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/gatetuner: %v\n%s", err, b)
	}
	return out
}

func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// demoProc is a running `gatetuner demo`.
type demoProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	werr error

	mu  sync.Mutex
	out bytes.Buffer
	// finished is set when the demo prints "serving …": its run is over and it only serves.
	finished bool
}

func startDemo(t *testing.T, bin, addr string) *demoProc {
	t.Helper()
	d := &demoProc{done: make(chan struct{})}
	d.cmd = exec.Command(bin, "demo", "--metrics-address", addr, "--keep-serving", demoKeepServing.String())
	pr, pw := io.Pipe()
	d.cmd.Stdout, d.cmd.Stderr = pw, pw
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start gatetuner demo: %v", err)
	}
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			d.mu.Lock()
			d.out.WriteString(sc.Text() + "\n")
			if strings.HasPrefix(sc.Text(), "serving ") {
				d.finished = true
			}
			d.mu.Unlock()
		}
	}()
	go func() {
		d.werr = d.cmd.Wait()
		pw.Close()
		close(d.done)
	}()
	t.Cleanup(func() {
		if d.exited() {
			return
		}
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(10 * time.Second):
			_ = d.cmd.Process.Kill()
			<-d.done
		}
	})
	return d
}

func (d *demoProc) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

func (d *demoProc) err() error {
	if !d.exited() {
		return errors.New("still running")
	}
	return d.werr
}

// runOver reports whether the demo has finished its simulated run and only serves.
func (d *demoProc) runOver() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.finished
}

func (d *demoProc) output() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.out.String()
	if len(s) > 8000 {
		s = "…" + s[len(s)-8000:]
	}
	return s
}
