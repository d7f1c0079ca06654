package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Annotations struct {
		List []struct {
			Name   string `json:"name"`
			Expr   string `json:"expr"` // the legacy form: must be empty
			Step   string `json:"step"` // the legacy form: must be empty
			Target *struct {
				Expr  string `json:"expr"`
				RefID string `json:"refId"`
			} `json:"target"`
		} `json:"list"`
	} `json:"annotations"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr    string `json:"expr"`
		RefID   string `json:"refId"`
		Instant bool   `json:"instant"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

// query is one PromQL expression the dashboard or the alerts run.
type query struct {
	panel string // panel title, "annotation NAME" or "alert NAME"
	refID string
	expr  string
}

// requiredPanels are the panels the issue lists, by title.
var requiredPanels = []string{
	"Shadow decisions by verdict: current vs recommended",
	"Wrongly-held rate",
	"Excess cost",
	"Gate input vs the bar",
	"Drain-rate estimate",
	"Prompt-length quantiles",
	"Parameters: current vs recommended",
	"Applies and holds by reason",
	"Data freshness",
}

// requiredAlerts are the alerts the issue lists: daemon down, data stale,
// recommendations held for long, wrongly-held rate high, apply failures,
// automatic rollbacks.
var requiredAlerts = []string{"GatetunerDown", "GatetunerDataStale", "GatetunerRecommendationHeld",
	"GatetunerWronglyHeldHigh", "GatetunerApplyFailed", "GatetunerAutomaticRollback"}

func loadDashboard(t testing.TB) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	// Every test reading the dashboard reads one the Grafana Foundation SDK accepts.
	if err := checkGrafanaDashboard(b); err != nil {
		t.Fatalf("%s: Grafana Foundation SDK: %v", dashboardPath, err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	return d
}

func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// dashboardQueries lists every panel target and annotation query.
func dashboardQueries(d dashboard) []query {
	var out []query
	for _, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			out = append(out, query{panel: p.Title, refID: tg.RefID, expr: tg.Expr})
		}
	}
	for _, a := range d.Annotations.List {
		if a.Target != nil && a.Target.Expr != "" {
			out = append(out, query{panel: "annotation " + a.Name, refID: a.Target.RefID, expr: a.Target.Expr})
		}
	}
	return out
}

// alertRule is one rule of the PrometheusRule.
type alertRule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type ruleGroup struct {
	Name  string      `json:"name"`
	Rules []alertRule `json:"rules"`
}

// baseRuleGroups reads the kustomize base's PrometheusRule.
func baseRuleGroups(t testing.TB) []ruleGroup {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(kustomizeBase, "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	u := one(t, decode(t, b), "PrometheusRule")
	var spec struct {
		Groups []ruleGroup `json:"groups"`
	}
	raw, _, _ := unstructured.NestedMap(u.Object, "spec")
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &spec); err != nil {
		t.Fatal(err)
	}
	return spec.Groups
}

func alertQueries(t testing.TB) []query {
	var out []query
	for _, g := range baseRuleGroups(t) {
		for _, r := range g.Rules {
			out = append(out, query{panel: "alert " + r.Alert, expr: r.Expr})
		}
	}
	return out
}

// grafanaVars are the values the tests give Grafana's variables: a dashboard
// variable with a matching value, the built-ins a fixed duration.
func grafanaVars(namespace, target, rangeDur string) map[string]string {
	return map[string]string{
		"namespace":       regexp.QuoteMeta(namespace),
		"job":             regexp.QuoteMeta(scrapeJob),
		"target":          regexp.QuoteMeta(target),
		"__rate_interval": "1m",
		"__interval":      "1m",
		"__range":         rangeDur,
	}
}

var varRef = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?`)

// substitute replaces $var and ${var} as Grafana would.
func substitute(expr string, vars map[string]string) (string, error) {
	var missing []string
	out := varRef.ReplaceAllStringFunc(expr, func(m string) string {
		name := varRef.FindStringSubmatch(m)[1]
		v, ok := vars[name]
		if !ok {
			missing = append(missing, name)
			return m
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("undefined variables %v in %s", missing, expr)
	}
	return out, nil
}

// TestDashboardDefinition checks the dashboard's structure: the panels the
// issue lists exist, variables are defined, and every query parses and uses
// only gatetuner's own metric names and labels.
func TestDashboardDefinition(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard needs a uid and a title")
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	for _, want := range []string{"datasource", "namespace", "job", "target"} {
		if !vars[want] {
			t.Errorf("template variable %q missing", want)
		}
	}
	ids := map[int]string{}
	titles := map[string]bool{}
	for _, p := range allPanels(d.Panels) {
		if prev, ok := ids[p.ID]; ok {
			t.Errorf("panel id %d used by %q and %q", p.ID, prev, p.Title)
		}
		ids[p.ID] = p.Title
		titles[p.Title] = true
		if p.Type != "row" && (p.Datasource == nil || p.Datasource.UID != "${datasource}") {
			t.Errorf("panel %q: datasource must be the ${datasource} variable", p.Title)
		}
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
	}
	for _, want := range requiredPanels {
		if !titles[want] {
			t.Errorf("required panel %q missing", want)
		}
	}
	metrics := exporterMetrics(t)
	sub := grafanaVars("gatetuner", "qwen3-32b", "1h")
	for _, q := range dashboardQueries(d) {
		expr, err := substitute(q.expr, sub)
		if err != nil {
			t.Errorf("%s %s: %v", q.panel, q.refID, err)
			continue
		}
		checkQuery(t, q, expr, metrics)
		if !strings.Contains(q.expr, `namespace=~"$namespace"`) {
			t.Errorf("%s %s: does not follow the namespace variable: %s", q.panel, q.refID, q.expr)
		}
		// Two releases in one namespace are two jobs: every selector follows $job too.
		if n, j := strings.Count(q.expr, `namespace=~"$namespace"`), strings.Count(q.expr, `job=~"$job"`); n != j {
			t.Errorf("%s %s: %d selectors follow $namespace, %d $job: %s", q.panel, q.refID, n, j, q.expr)
		}
	}
	// Annotations in the current Prometheus form: the query in target (Grafana's
	// packages/grafana-prometheus/src/annotations.ts moves a legacy expr and step there).
	annotations := 0
	for _, a := range d.Annotations.List {
		if a.Expr != "" || a.Step != "" {
			t.Errorf("annotation %s: legacy top-level expr/step; put the query in target", a.Name)
		}
		if a.Target != nil {
			annotations++
			if a.Target.RefID == "" {
				t.Errorf("annotation %s: target without a refId", a.Name)
			}
		}
	}
	if annotations == 0 {
		t.Errorf("no Prometheus annotation with a target query")
	}
}

// TestAlertRulesDefinition checks every alert: its expression parses and uses
// gatetuner's own metrics (or up), it says how severe it is and what to do.
func TestAlertRulesDefinition(t *testing.T) {
	metrics := exporterMetrics(t)
	metrics["up"] = metricInfo{labels: map[string]bool{}}
	names := map[string]bool{}
	for _, g := range baseRuleGroups(t) {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: rule without an alert name (%s)", g.Name, r.Expr)
				continue
			}
			if names[r.Alert] {
				t.Errorf("alert %s defined twice", r.Alert)
			}
			names[r.Alert] = true
			checkQuery(t, query{panel: "alert " + r.Alert, expr: r.Expr}, r.Expr, metrics)
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("alert %s: severity %q, want critical or warning", r.Alert, s)
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[a] == "" {
					t.Errorf("alert %s: annotation %s missing", r.Alert, a)
				}
			}
			if !strings.Contains(r.Expr, `job="gatetuner",namespace="gatetuner"`) {
				t.Errorf("alert %s: selectors must name job=\"gatetuner\",namespace=\"gatetuner\" (the chart rewrites that pair): %s", r.Alert, r.Expr)
			}
		}
	}
	for _, want := range requiredAlerts {
		if !names[want] {
			t.Errorf("required alert %s missing", want)
		}
	}
}

// checkQuery parses expr and checks each selector names a known metric with
// known labels.
func checkQuery(t *testing.T, q query, expr string, metrics map[string]metricInfo) {
	t.Helper()
	node, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		t.Errorf("%s %s: %v\n%s", q.panel, q.refID, err, expr)
		return
	}
	var problems []string
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		if agg, ok := n.(*parser.AggregateExpr); ok {
			problems = append(problems, unknownGrouping(agg, metrics)...)
			return nil
		}
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		info, known := metrics[vs.Name]
		if !known {
			problems = append(problems, fmt.Sprintf("metric %q is not one exporter.New registers", vs.Name))
			return nil
		}
		for _, m := range vs.LabelMatchers {
			if m.Name == "__name__" || info.labels[m.Name] || scrapeLabels[m.Name] {
				continue
			}
			problems = append(problems, fmt.Sprintf("%s has no label %q", vs.Name, m.Name))
		}
		return nil
	})
	sort.Strings(problems)
	for _, p := range problems {
		t.Errorf("%s %s: %s", q.panel, q.refID, p)
	}
}

// unknownGrouping lists the by-labels of agg that none of the metrics it
// aggregates carries (a renamed label left behind in a query).
func unknownGrouping(agg *parser.AggregateExpr, metrics map[string]metricInfo) []string {
	if agg.Without {
		return nil
	}
	have := map[string]bool{}
	plain := true // only selectors under agg: no label_replace or vector() that could add labels
	parser.Inspect(agg.Expr, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			for l := range metrics[n.Name].labels {
				have[l] = true
			}
		case *parser.Call:
			if n.Func.Name == "label_replace" || n.Func.Name == "label_join" || n.Func.Name == "vector" {
				plain = false
			}
		}
		return nil
	})
	var out []string
	for _, l := range agg.Grouping {
		if plain && !have[l] && !scrapeLabels[l] {
			out = append(out, fmt.Sprintf("%s groups by %q, a label none of its metrics has", agg.Op, l))
		}
	}
	return out
}
