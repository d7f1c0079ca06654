package exporter

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"

	"github.com/gatetuner/gatetuner/estimator/prom"
	"github.com/gatetuner/gatetuner/test/promharness"
)

// filled returns metrics with one series in every family, labelled with the
// values the tuner sets, so the exposition is the daemon's in full.
func filled(t *testing.T) *Metrics {
	t.Helper()
	m := New("v1.2.3", "abc")
	tg := "qwen"
	for _, g := range []*prometheus.GaugeVec{m.DrainRate, m.DrainRateLow, m.DrainRateHigh, m.NominalRate, m.PerRequestRate,
		m.EstimateConfidence, m.EstimateConclusive, m.RequestRate, m.ShadowWindowStart, m.RestartCost, m.RestartSaving,
		m.LastCycle, m.LastApply, m.TargetUp, m.CycleQueries, m.CycleReplayed} {
		g.WithLabelValues(tg).Set(1)
	}
	m.EstimateReason.WithLabelValues(tg, "few-saturated-windows").Set(1)
	m.JoinProblems.WithLabelValues(tg, "endpoint-names-unmatched").Set(4)
	for _, s := range []string{"p50", "p90", "p99", "mean"} {
		m.PromptTokens.WithLabelValues(tg, s).Set(5200)
		m.CachedTokens.WithLabelValues(tg, s).Set(2600)
	}
	for _, s := range []string{"p50", "p90", "p99"} {
		m.GateInputPenalty.WithLabelValues(tg, s).Set(0.12)
		m.GateInputGap.WithLabelValues(tg, s).Set(-3000)
	}
	m.DataAge.WithLabelValues(tg, "drain-rate").Set(95)
	m.DecisionSource.WithLabelValues(tg, "records").Set(1)
	for _, s := range []string{SettingsCurrent, SettingsRecommended} {
		m.ShadowDecisions.WithLabelValues(tg, s, "held_wrong").Inc()
		m.ShadowOutcomes.WithLabelValues(tg, s, "sticky").Inc()
		m.ShadowExcessTok.WithLabelValues(tg, s).Add(250000)
		m.ShadowExcessSec.WithLabelValues(tg, s).Add(26)
		m.WronglyHeldRatio.WithLabelValues(tg, s).Set(0.1)
		m.ForfeitedRatio.WithLabelValues(tg, s).Set(0.01)
		m.Parameter.WithLabelValues(tg, s, "maxTTFTPenaltyMs").Set(1400)
		m.PenaltyMode.WithLabelValues(tg, s, "static").Set(1)
	}
	m.Cycles.WithLabelValues(tg, "held").Inc()
	m.Holds.WithLabelValues(tg, "cooldown").Inc()
	m.HoldActive.WithLabelValues(tg, "cooldown").Set(1)
	m.RecommendationPending.WithLabelValues(tg, "0123456789abcdef").Set(1)
	m.Applies.WithLabelValues(tg, "ok").Inc()
	m.Rollbacks.WithLabelValues(tg, "verification-failed").Inc()
	m.CycleDuration.WithLabelValues(tg).Observe(0.3)
	m.Leader.Set(1)
	m.StreamUp.Watch(tg, func() bool { return true })
	m.ObserveQuery("http", 20*time.Millisecond, prom.KindBadQuery.String())
	return m
}

// gathered returns the gatetuner_ families of m, checking that every
// collector field of Metrics exposes a series (a family left out of filled
// would escape the linters).
func gathered(t *testing.T, m *Metrics) []*dto.MetricFamily {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var own []*dto.MetricFamily
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "gatetuner_") {
			own = append(own, mf)
		}
	}
	fields := 0
	v := reflect.ValueOf(m).Elem()
	for i := 0; i < v.NumField(); i++ {
		if _, ok := v.Field(i).Interface().(prometheus.Collector); ok && v.Type().Field(i).Name != "Registry" {
			fields++
		}
	}
	if want := fields + 1; len(own) != want { // + gatetuner_build_info
		t.Fatalf("exposition has %d gatetuner_ families, Metrics has %d collectors + build_info: fill every one", len(own), fields)
	}
	return mfs
}

// exposition is what GET /metrics serves for m, in the text format.
func exposition(t *testing.T, m *Metrics) []byte {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", "text/plain")
	promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}).ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", rec.Code)
	}
	return rec.Body.Bytes()
}

func TestExpositionPassesPromlint(t *testing.T) {
	m := filled(t)
	problems, err := promlint.NewWithMetricFamilies(gathered(t, m)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// TestExpositionPassesPromtool runs the real `promtool check metrics` (see
// promharness.Find) on the text /metrics serves.
func TestExpositionPassesPromtool(t *testing.T) {
	bins := promharness.Require(t)
	m := filled(t)
	gathered(t, m)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.Promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(exposition(t, m))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

func TestQueryErrorKindsAreTheEstimatorsReasonSpelling(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"bad query", "bad-query"},
		{"bad response", "bad-response"},
		{"timeout", "timeout"},
	} {
		if got := QueryErrorKind(tc.name); got != tc.want {
			t.Errorf("QueryErrorKind(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// docRow is one metric of docs/metrics.md's table.
type docRow struct {
	typ    string
	labels map[string][]string // label → documented values (nil when not listed)
}

var docCode = regexp.MustCompile("`([^`]+)`")

// readMetricsDoc parses the metrics table of docs/metrics.md.
func readMetricsDoc(t *testing.T) map[string]docRow {
	t.Helper()
	f, err := os.Open("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]docRow{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cells := strings.Split(sc.Text(), "|")
		if len(cells) < 5 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`gatetuner_") {
			continue
		}
		row := docRow{typ: strings.TrimSpace(cells[2]), labels: map[string][]string{}}
		for _, l := range splitLabels(strings.TrimSpace(cells[3])) {
			name, vals, _ := strings.Cut(l, "(")
			name = strings.TrimSpace(name)
			var values []string
			if vals != "" {
				for _, v := range strings.Split(strings.TrimSuffix(vals, ")"), ",") {
					values = append(values, strings.TrimSpace(v))
				}
			}
			row.labels[name] = values
		}
		for _, m := range docCode.FindAllStringSubmatch(cells[1], -1) {
			out[m[1]] = row
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// splitLabels splits "a, b (x, y), c" at the commas outside parentheses.
func splitLabels(s string) []string {
	if s == "—" {
		return nil
	}
	var out []string
	depth, start := 0, 0
	for i, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// TestMetricsDocMatchesRegistry pins docs/metrics.md to exporter.New: the
// same gatetuner_ names, each with its type and label names, and the label
// values documented for settings and kind are the ones the code emits.
func TestMetricsDocMatchesRegistry(t *testing.T) {
	doc := readMetricsDoc(t)
	m := filled(t)
	got := map[string]bool{}
	for _, mf := range gathered(t, m) {
		name := mf.GetName()
		if !strings.HasPrefix(name, "gatetuner_") {
			continue
		}
		got[name] = true
		row, ok := doc[name]
		if !ok {
			t.Errorf("%s is registered but not in docs/metrics.md", name)
			continue
		}
		if want := strings.ToLower(mf.GetType().String()); row.typ != want {
			t.Errorf("%s: documented as %s, registered as %s", name, row.typ, want)
		}
		var labels []string
		for _, lp := range mf.GetMetric()[0].GetLabel() {
			labels = append(labels, lp.GetName())
		}
		var documented []string
		for l := range row.labels {
			documented = append(documented, l)
		}
		sort.Strings(labels)
		sort.Strings(documented)
		if !slices.Equal(labels, documented) {
			t.Errorf("%s: documented labels %v, registered %v", name, documented, labels)
		}
	}
	for name := range doc {
		if !got[name] {
			t.Errorf("docs/metrics.md lists %s, which exporter.New does not register", name)
		}
	}
	var kinds []string
	for k := prom.Kind(1); !strings.HasPrefix(k.String(), "kind("); k++ {
		kinds = append(kinds, QueryErrorKind(k.String()))
	}
	if want := doc["gatetuner_query_errors_total"].labels["kind"]; !slices.Equal(kinds, want) {
		t.Errorf("gatetuner_query_errors_total kind: documented %v, the querier's kinds are %v", want, kinds)
	}
	if want := doc["gatetuner_parameter"].labels["settings"]; want != nil {
		t.Errorf("settings values are documented once, above the table; got %v on gatetuner_parameter", want)
	}
	if !strings.Contains(docText(t), "`settings` is `"+SettingsCurrent+"` or `"+SettingsRecommended+"`") {
		t.Errorf("docs/metrics.md does not say settings is %q or %q", SettingsCurrent, SettingsRecommended)
	}
}

func docText(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
