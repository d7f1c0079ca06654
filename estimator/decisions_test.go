package estimator_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/estimator/prom"
	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/promharness"
)

// counterSeries is one EPP replica's decision counter for one plugin and
// outcome, scraped every 15 s: a sample from step born (the series appears
// at its first increment, which happened in the scrape interval before)
// to step stop (exclusive; 0: the history's end), perStep increments per
// interval, and a process restart at step resetAt (0: none) after which
// the counter starts again from its first increments.
type counterSeries struct {
	plugin, outcome, pod string
	born, stop           int
	perStep              float64
	resetAt              int
}

// decisionHistory is a hand-written history of the counter.
type decisionHistory struct {
	start  time.Time
	steps  int
	series []counterSeries
}

const decisionScrape = 15 * time.Second

func (h decisionHistory) time(step int) time.Time {
	return h.start.Add(time.Duration(step) * decisionScrape)
}

// end is the evaluation time: 7 s after the last scrape (off the grid, so
// Prometheus 2.x and 3.x see the same samples in a range).
func (h decisionHistory) end() time.Time { return h.time(h.steps - 1).Add(offGrid) }

func (s counterSeries) last(h decisionHistory) int {
	if s.stop > 0 {
		return s.stop
	}
	return h.steps
}

func (s counterSeries) value(step int) float64 {
	from := s.born
	if s.resetAt > 0 && step >= s.resetAt {
		from = s.resetAt
	}
	return s.perStep * float64(step-from+1)
}

// truth is the increments of plugin/outcome, over every replica, that
// happened in (from, to]: each scraped step carries the increments of the
// interval before it.
func (h decisionHistory) truth(plugin, outcome string, from, to time.Time) float64 {
	n := 0.0
	for _, s := range h.series {
		if s.plugin != plugin || s.outcome != outcome {
			continue
		}
		for i := s.born; i < s.last(h); i++ {
			if ts := h.time(i); ts.After(from) && !ts.After(to) {
				n += s.perStep
			}
		}
	}
	return n
}

// openMetrics renders the history as the EPP's /metrics would have been
// scraped (HELP and TYPE as in metrics.go@920d38f3e).
func (h decisionHistory) openMetrics() string {
	var b strings.Builder
	b.WriteString("# HELP llm_d_epp_prefix_cache_affinity_filter_decisions [ALPHA] Prefix cache affinity filter decisions, by outcome.\n")
	b.WriteString("# TYPE llm_d_epp_prefix_cache_affinity_filter_decisions counter\n")
	for _, s := range h.series {
		for i := s.born; i < s.last(h); i++ {
			fmt.Fprintf(&b, "%s{plugin_name=%q,outcome=%q,namespace=\"llm-d\",pod=%q,instance=\"%s:9090\",job=\"qwen-epp\"} %s %d\n",
				gate.DecisionCounterName, s.plugin, s.outcome, s.pod, s.pod, strconv.FormatFloat(s.value(i), 'g', -1, 64), h.time(i).Unix())
		}
	}
	b.WriteString("# EOF\n")
	return b.String()
}

// embedded loads the history into an in-process TSDB.
func (h decisionHistory) embedded(t *testing.T) *prom.Embedded {
	t.Helper()
	e := newEmbedded(t)
	if _, err := e.IngestText(context.Background(), strings.NewReader(h.openMetrics()), prom.IngestOptions{Format: prom.FormatOpenMetrics}); err != nil {
		t.Fatal(err)
	}
	return e
}

// fleetDecisions: two EPP replicas over two hours, one filter instance
// "gate" and another "strict-gate". In the last hour: replica b restarts
// under the same labels (a counter reset), load_override appears at its
// first increment, exploration and missing_signal never happen.
func fleetDecisions() decisionHistory {
	return decisionHistory{
		start: time.Now().Add(-4 * time.Hour).Truncate(time.Hour), steps: 480,
		series: []counterSeries{
			{plugin: "gate", outcome: "sticky", pod: "epp-a", perStep: 20},
			{plugin: "gate", outcome: "sticky", pod: "epp-b", perStep: 10, resetAt: 360},
			{plugin: "gate", outcome: "no_match", pod: "epp-a", perStep: 5},
			{plugin: "gate", outcome: "no_match", pod: "epp-b", perStep: 1},
			{plugin: "gate", outcome: "load_override", pod: "epp-b", born: 300, perStep: 2},
			{plugin: "gate", outcome: "not_applicable", pod: "epp-a", perStep: 1},
			{plugin: "strict-gate", outcome: "sticky", pod: "epp-a", perStep: 3},
		},
	}
}

var reportsV1 = &gate.Reports{DecisionCounter: true, GateSpan: true, Outcomes: gate.DefaultOutcomes(gate.SemanticsV1), Evidence: "test build"}

func decisionTarget(plugin string, rep *gate.Reports) estimator.Target {
	return estimator.Target{Name: "qwen", VLLMSelector: `namespace="llm-d",pod=~"qwen-.*"`, EPPSelector: `job="qwen-epp"`,
		GatePlugin: plugin, Reports: rep}
}

// checkCounts compares the counts of every plugin and outcome with the
// history's truth over [from, to]. increase() extrapolates to the span's
// ends, so a series may be off by up to one scrape interval's increments.
func checkCounts(t *testing.T, h decisionHistory, d *estimator.DecisionCounts, from, to time.Time) {
	t.Helper()
	for _, plugin := range []string{"gate", "strict-gate"} {
		c, ok := d.ByPlugin[plugin]
		if !ok {
			t.Fatalf("no counts for %s: %+v", plugin, d)
		}
		for o := gate.Outcome(0); o < gate.NumOutcomes; o++ {
			want, slack := h.truth(plugin, o.String(), from, to), 0.0
			for _, s := range h.series {
				if s.plugin == plugin && s.outcome == o.String() {
					slack += s.perStep
				}
			}
			if math.Abs(c[o]-want) > slack+1e-9 {
				t.Errorf("%s %s: %v decisions, want %v (± %v)", plugin, o, c[o], want, slack)
			}
		}
	}
}

// TestDecisionCountsFromTheCounter reads the counter through the embedded
// PromQL engine: per plugin and outcome, summed over the replicas, across
// a restart, a series born in the span, and zero for outcomes without a
// series; per window of the day through Decisions and EstimateSpan, and
// the same as Estimate's for the lookback.
func TestDecisionCountsFromTheCounter(t *testing.T) {
	h := fleetDecisions()
	checkDecisionCounts(t, h, h.embedded(t))
}

// TestDecisionCountsFromARealPrometheus is the same against a real
// Prometheus server (promtool backfill); it fails when the binaries are
// missing (it skips only under -short).
func TestDecisionCountsFromARealPrometheus(t *testing.T) {
	h := fleetDecisions()
	srv := promharness.Start(t, promharness.Options{DataDir: promharness.BackfillString(t, h.openMetrics())})
	q, err := prom.NewHTTP(prom.HTTPConfig{Address: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	checkDecisionCounts(t, h, q)
}

func checkDecisionCounts(t *testing.T, h decisionHistory, q prom.Querier) {
	t.Helper()
	ctx := context.Background()
	at := h.end()
	est, err := estimator.New(q, fixedClock(at), estimator.Config{Lookback: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	target := decisionTarget("gate", reportsV1)
	d, err := est.Decisions(ctx, target, at.Add(-time.Hour), at)
	if err != nil {
		t.Fatal(err)
	}
	if d.Status != estimator.StatusOK || len(d.Reasons) != 0 {
		t.Fatalf("status %s, reasons %+v", d.Status, d.Reasons)
	}
	checkCounts(t, h, d, at.Add(-time.Hour), at)
	c, _ := d.Gate()
	if c[gate.OutcomeExploration] != 0 || c[gate.OutcomeMissingSignal] != 0 || c[gate.OutcomeSticky] < 7000 {
		t.Errorf("gate counts %v: want exploration and missing_signal 0 (no series while the others exist), sticky ≈ 7200", c)
	}
	if d.Replicas["gate"] != 2 || d.Replicas["strict-gate"] != 1 || d.Resets != 1 {
		t.Errorf("replicas %v, resets %v; want gate 2, strict-gate 1, one reset", d.Replicas, d.Resets)
	}
	if d.Source != `llm_d_epp_prefix_cache_affinity_filter_decisions_total{job="qwen-epp"}` {
		t.Errorf("source %q", d.Source)
	}

	// A window of the day, before load_override's series existed: 0, not unknown.
	from, to := h.time(120).Add(offGrid), h.time(240).Add(offGrid)
	w, err := est.Decisions(ctx, target, from, to)
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, h, w, from, to)
	if g, ok := w.Gate(); !ok || g[gate.OutcomeLoadOverride] != 0 || w.Status != estimator.StatusOK {
		t.Errorf("window before load_override: %s %v", w.Status, g)
	}
	span, err := est.EstimateSpan(ctx, target, from, to)
	if err != nil {
		t.Fatal(err)
	}
	if span.Decisions == nil || span.Decisions.ByPlugin["gate"] != w.ByPlugin["gate"] || !span.Decisions.From.Equal(from) {
		t.Errorf("EstimateSpan's decisions %+v differ from Decisions' %+v", span.Decisions, w)
	}
	// Estimate over the lookback: the same counts, even with no vLLM series.
	full, err := est.Estimate(ctx, target, at)
	if err != nil {
		t.Fatal(err)
	}
	if full.Decisions == nil || full.Decisions.ByPlugin["gate"] != d.ByPlugin["gate"] {
		t.Errorf("Estimate's decisions %+v differ from Decisions' %+v", full.Decisions, d)
	}
}

// TestDecisionCountsNameWhatIsMissing: every way the counter can be
// absent, stale, unjoinable or at odds with the build's profile has its
// own status or reason.
func TestDecisionCountsNameWhatIsMissing(t *testing.T) {
	base := fleetDecisions()
	none := &gate.Reports{Evidence: "no metrics.go at ebab687"}
	reportsV2 := &gate.Reports{DecisionCounter: true, Outcomes: gate.DefaultOutcomes(gate.SemanticsV2), Evidence: "v2 build"}
	with := func(extra ...counterSeries) decisionHistory {
		h := base
		h.series = append(append([]counterSeries(nil), base.series...), extra...)
		return h
	}
	cases := []struct {
		name     string
		h        decisionHistory
		target   estimator.Target
		status   estimator.Status
		code     estimator.ReasonCode // "" none
		contains []string             // in the reason's detail (or Detail)
	}{
		{name: "a build without the counter: not reported, no reason", h: base,
			target: func() estimator.Target {
				t := decisionTarget("gate", none)
				t.EPPSelector = `job="other-epp"`
				return t
			}(),
			status: estimator.StatusNotReported, contains: []string{"not reported by this build", "no metrics.go at ebab687"}},
		{name: "a build with the counter but no series names the selector and the metric", h: base,
			target: func() estimator.Target {
				t := decisionTarget("gate", reportsV1)
				t.EPPSelector = `job="other-epp"`
				return t
			}(),
			status: estimator.StatusInconclusive, code: estimator.ReasonDecisionCounterAbsent,
			contains: []string{gate.DecisionCounterName, `job="other-epp"`, "test build"}},
		{name: "an unknown build without series", h: base,
			target: func() estimator.Target { t := decisionTarget("gate", nil); t.EPPSelector = `job="other-epp"`; return t }(),
			status: estimator.StatusInconclusive, code: estimator.ReasonDecisionCounterAbsent, contains: []string{"releases through v0.10.0"}},
		{name: "the target's plugin is not a plugin_name of the counter", h: base, target: decisionTarget("prefix-cache-affinity-filter", reportsV1),
			status: estimator.StatusInconclusive, code: estimator.ReasonDecisionPluginNotFound,
			contains: []string{`"prefix-cache-affinity-filter"`, `"gate", "strict-gate"`, "configured name"}},
		{name: "no sample near the span's end: stale", h: func() decisionHistory {
			h := base
			h.series = nil
			for _, s := range base.series {
				s.stop = h.steps - 10 // 150 s before the end, StaleAfter is 2 min
				h.series = append(h.series, s)
			}
			return h
		}(), target: decisionTarget("gate", reportsV1), status: estimator.StatusInconclusive, code: estimator.ReasonDecisionCounterStale,
			contains: []string{`of plugin "gate"`, "2m0s"}},
		{name: "missing_signal under a v1 build: the EPP runs v2", h: with(counterSeries{plugin: "gate", outcome: "missing_signal", pod: "epp-a", perStep: 1}),
			target: decisionTarget("gate", reportsV1), status: estimator.StatusInconclusive, code: estimator.ReasonDecisionOutcomeUnexpected,
			contains: []string{"missing_signal", "PR #2652", "router-2026-09-v2"}},
		{name: "missing_signal under a v2 build is counted", h: with(counterSeries{plugin: "gate", outcome: "missing_signal", pod: "epp-a", perStep: 1}),
			target: decisionTarget("gate", reportsV2), status: estimator.StatusOK},
		{name: "the request gate's outcome is kept apart and named", h: with(counterSeries{plugin: "gate", outcome: "request_load_override", pod: "epp-b", perStep: 4}),
			target: decisionTarget("gate", reportsV2), status: estimator.StatusInconclusive, code: estimator.ReasonDecisionOutcomeUnexpected,
			contains: []string{`"request_load_override"`, "request gate"}},
		{name: "a counter the profile says its build lacks: a warning, the counts stand", h: base, target: decisionTarget("gate", none),
			status: estimator.StatusOK, code: estimator.ReasonDecisionCounterUnexpected, contains: []string{"newer build"}},
		{name: "no EPP selector", h: base, target: func() estimator.Target { t := decisionTarget("gate", reportsV1); t.EPPSelector = ""; return t }(),
			status: estimator.StatusInconclusive, code: estimator.ReasonNoSeries, contains: []string{"no EPP selector"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			at := tc.h.end()
			est, err := estimator.New(tc.h.embedded(t), fixedClock(at), estimator.Config{Lookback: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			d, err := est.Decisions(context.Background(), tc.target, at.Add(-time.Hour), at)
			if err != nil {
				t.Fatal(err)
			}
			if d.Status != tc.status {
				t.Fatalf("status %s, want %s; reasons %+v", d.Status, tc.status, d.Reasons)
			}
			text := d.Detail
			if tc.code == "" && len(d.Reasons) != 0 {
				t.Fatalf("reasons %+v, want none", d.Reasons)
			}
			if tc.code != "" {
				if len(d.Reasons) != 1 || d.Reasons[0].Code != tc.code || d.Reasons[0].Part != "decisions" {
					t.Fatalf("reasons %+v, want one decisions:%s", d.Reasons, tc.code)
				}
				text = d.Reasons[0].Detail
			}
			for _, s := range tc.contains {
				if !strings.Contains(text, s) {
					t.Errorf("%q does not say %q", text, s)
				}
			}
		})
	}
	t.Run("the request gate's count is in Other", func(t *testing.T) {
		h := with(counterSeries{plugin: "gate", outcome: "request_load_override", pod: "epp-b", perStep: 4})
		at := h.end()
		est, _ := estimator.New(h.embedded(t), fixedClock(at), estimator.Config{Lookback: time.Hour})
		d, err := est.Decisions(context.Background(), decisionTarget("gate", nil), at.Add(-time.Hour), at)
		if err != nil {
			t.Fatal(err)
		}
		if got := d.Other["gate"]["request_load_override"]; math.Abs(got-960) > 4 {
			t.Errorf("request_load_override %v, want 960 (± 4)", got)
		}
	})
}

// failing answers every query with an error.
type failing struct{}

func (failing) Query(context.Context, string, time.Time) (model.Vector, v1.Warnings, error) {
	return nil, nil, &prom.Error{Kind: prom.KindUnavailable, Err: errors.New("connection refused")}
}

func (failing) QueryRange(context.Context, string, v1.Range) (model.Matrix, v1.Warnings, error) {
	return nil, nil, &prom.Error{Kind: prom.KindUnavailable, Err: errors.New("connection refused")}
}

// TestDecisionCountsThroughAFailingPrometheus: a failed query is a named
// reason in the decisions, never counts; the estimate's own reasons do not
// carry the decisions' (they are the decisions' own).
func TestDecisionCountsThroughAFailingPrometheus(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	est, err := estimator.New(failing{}, fixedClock(at), estimator.Config{Lookback: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	e, err := est.Estimate(context.Background(), decisionTarget("gate", reportsV1), at)
	if err != nil {
		t.Fatal(err)
	}
	d := e.Decisions
	if d == nil || d.Status != estimator.StatusInconclusive || d.ByPlugin != nil || len(d.Reasons) != 1 ||
		d.Reasons[0].Code != estimator.ReasonPrometheusUnavailable || hasPartReason(e, "decisions", estimator.ReasonPrometheusUnavailable) {
		t.Fatalf("decisions %+v; estimate reasons %v", d, codes(e.Reasons))
	}
}

// TestOutcomeCountsJSON: counts are written keyed by the EPP's outcome
// label values and read back.
func TestOutcomeCountsJSON(t *testing.T) {
	var c estimator.OutcomeCounts
	c[gate.OutcomeSticky], c[gate.OutcomeMissingSignal] = 3, 1
	b, err := c.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"sticky":3`) || !strings.Contains(string(b), `"missing_signal":1`) {
		t.Fatalf("JSON %s", b)
	}
	var back estimator.OutcomeCounts
	if err := back.UnmarshalJSON(b); err != nil || back != c {
		t.Fatalf("read back %v, %v", back, err)
	}
	if s, ok := c.Shares(); !ok || s[gate.OutcomeSticky] != 0.75 {
		t.Errorf("shares %v", s)
	}
	if err := back.UnmarshalJSON([]byte(`{"request_load_override":1}`)); err == nil {
		t.Error("an outcome outside the model read back")
	}
}
