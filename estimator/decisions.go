package estimator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/common/model"

	"github.com/gatetuner/gatetuner/gate"
)

// mEPPGateDecision is the filter's decision counter (PR #2494; the builds
// that export it: docs/gate.md, "What each build reports").
const mEPPGateDecision = gate.DecisionCounterName

// partDecisions names the decision counts in Reasons.
const partDecisions = "decisions"

// OutcomeCounts are decisions per outcome, indexed by gate.Outcome.
type OutcomeCounts [gate.NumOutcomes]float64

// Total is the sum over outcomes.
func (c OutcomeCounts) Total() float64 {
	s := 0.0
	for _, v := range c {
		s += v
	}
	return s
}

// Shares divides each count by the total; ok is false when there is none.
func (c OutcomeCounts) Shares() (out OutcomeCounts, ok bool) {
	t := c.Total()
	if !(t > 0) {
		return out, false
	}
	for i, v := range c {
		out[i] = v / t
	}
	return out, true
}

// MarshalJSON writes the counts keyed by outcome label value.
func (c OutcomeCounts) MarshalJSON() ([]byte, error) {
	m := make(map[string]float64, len(c))
	for i, v := range c {
		m[gate.Outcome(i).String()] = v
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads counts keyed by outcome label value.
func (c *OutcomeCounts) UnmarshalJSON(b []byte) error {
	var m map[string]float64
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*c = OutcomeCounts{}
	for k, v := range m {
		o, ok := gate.ParseOutcome(k)
		if !ok {
			return fmt.Errorf("unknown outcome %q", k)
		}
		c[o] = v
	}
	return nil
}

// DecisionCounts are the EPP's own count of the prefix-cache-affinity
// filter's decisions over a span, per plugin instance and outcome: the
// increase of llm_d_epp_prefix_cache_affinity_filter_decisions_total summed
// over the EPP replicas (each exports its own process counter).
type DecisionCounts struct {
	// Status is ok (counted), not-reported (the target's build does not
	// export the counter and no series exist) or inconclusive (Reasons).
	Status Status `json:"status"`
	// Source is the counter with the target's EPP selector.
	Source string `json:"source,omitempty"`
	// Detail says why nothing is reported.
	Detail string `json:"detail,omitempty"`
	// From and To bound the span counted.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Plugin is the target's plugin_name (Target.GatePlugin); "" reads
	// every plugin.
	Plugin string `json:"plugin,omitempty"`
	// ByPlugin holds, per plugin_name with any series in the span, the
	// decisions per outcome. An outcome without a series is 0: a series
	// appears at its first increment, so while the plugin's other
	// outcomes have series in the span that outcome was never counted. A
	// plugin without any series in the span is absent (unknown, not 0).
	ByPlugin map[string]OutcomeCounts `json:"byPlugin,omitempty"`
	// Other holds outcome label values gatetuner does not model (e.g. the
	// request gate's request_load_override), per plugin_name.
	Other map[string]map[string]float64 `json:"other,omitempty"`
	// Replicas counts, per plugin_name, the EPP replicas (ReplicaLabels)
	// whose series exist in the span.
	Replicas map[string]int `json:"replicas,omitempty"`
	// Resets counts counter resets in the span (a replica's process
	// restarting under the same labels); the increase spans them.
	Resets float64 `json:"resets"`
	// Reasons are the decision counts' own (part "decisions"); they are
	// not collected into the estimate's reasons and warnings, whose
	// status they never change.
	Reasons []Reason `json:"reasons,omitempty"`
}

// Gate returns the target plugin's counts (the only plugin's when the
// target names none); ok is false when there are none.
func (d *DecisionCounts) Gate() (OutcomeCounts, bool) {
	if d == nil {
		return OutcomeCounts{}, false
	}
	if d.Plugin != "" {
		c, ok := d.ByPlugin[d.Plugin]
		return c, ok
	}
	if len(d.ByPlugin) == 1 {
		for _, c := range d.ByPlugin {
			return c, true
		}
	}
	return OutcomeCounts{}, false
}

// decisionInputs are the decision queries' results: the increase per
// plugin and outcome, the series seen (per replica), the plugins with a
// fresh sample, and the resets.
type decisionInputs struct {
	inc, seen, fresh, resets model.Vector
	errs                     [4]error
}

// decisionQueries renders the four instant queries over lookback lb.
func decisionQueries(sel string, cfg Config, lb time.Duration) [4]string {
	m := vec(mEPPGateDecision, sel)
	l := promDur(lb)
	return [4]string{
		"sum by (plugin_name, outcome) (increase(" + m + "[" + l + "]))",
		"group by (plugin_name, outcome, " + strings.Join(cfg.ReplicaLabels, ", ") + ") (last_over_time(" + m + "[" + l + "]))",
		"count by (plugin_name) (last_over_time(" + m + "[" + promDur(cfg.StaleAfter) + "]))",
		"sum by (plugin_name) (resets(" + m + "[" + l + "]))",
	}
}

// queueDecisions queues the decision queries over the lookback ending at at.
func (e *Estimator) queueDecisions(r *runner, t Target, at time.Time, in *decisionInputs) {
	if t.EPPSelector == "" {
		return
	}
	qs := decisionQueries(t.EPPSelector, e.cfg, e.cfg.Lookback)
	dst := [4]*model.Vector{&in.inc, &in.seen, &in.fresh, &in.resets}
	for i := range qs {
		r.spawn(func() { *dst[i], in.errs[i] = r.instant(qs[i], at) })
	}
}

// Decisions reads the decision counter alone over [from, to): the same
// counts Estimate and EstimateSpan put in Estimates.Decisions, without the
// rest of the estimate. A span not after its start is an error.
func (e *Estimator) Decisions(ctx context.Context, t Target, from, to time.Time) (*DecisionCounts, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if !to.After(from) {
		return nil, fmt.Errorf("estimator: decision span [%v, %v) is empty", from, to)
	}
	cfg := e.cfg
	cfg.Lookback = to.Sub(from)
	se := &Estimator{q: e.q, clock: e.clock, cfg: cfg}
	r := newRunner(ctx, se.q, cfg)
	in := &decisionInputs{}
	se.queueDecisions(r, t, to, in)
	r.wait()
	return in.result(t, cfg, to), nil
}

// result turns the query results into counts, checked against what the
// target's build reports.
func (in *decisionInputs) result(t Target, cfg Config, to time.Time) *DecisionCounts {
	d := &DecisionCounts{Status: StatusInconclusive, From: to.Add(-cfg.Lookback), To: to, Plugin: t.GatePlugin}
	if t.EPPSelector == "" {
		d.Reasons = []Reason{{Code: ReasonNoSeries, Part: partDecisions, Detail: "no EPP selector configured"}}
		return d
	}
	d.Source = vec(mEPPGateDecision, t.EPPSelector)
	if err := errors.Join(in.errs[:]...); err != nil {
		d.Reasons = []Reason{failReason(partDecisions, err)}
		return d
	}
	in.count(d, cfg)
	rep := t.Reports
	switch {
	case len(d.ByPlugin) == 0 && len(d.Other) == 0:
		in.absent(d, t)
		return d
	case rep != nil && !rep.DecisionCounter:
		d.Reasons = append(d.Reasons, Reason{Code: ReasonDecisionCounterUnexpected, Part: partDecisions, Detail: fmt.Sprintf(
			"%s has series although the target's build profile says its build does not export it (%s): the EPP runs a newer build than the profile names",
			d.Source, rep.Evidence)})
	}
	in.check(d, t, cfg)
	if !hasFatal(d.Reasons) {
		d.Status = StatusOK
	}
	return d
}

// count fills ByPlugin, Other, Replicas and Resets.
func (in *decisionInputs) count(d *DecisionCounts, cfg Config) {
	d.ByPlugin, d.Other, d.Replicas = map[string]OutcomeCounts{}, map[string]map[string]float64{}, map[string]int{}
	replicas := map[string]map[string]bool{}
	for _, s := range in.seen {
		plugin := string(s.Metric["plugin_name"])
		d.add(plugin, string(s.Metric["outcome"]), 0)
		var key []string
		for _, l := range cfg.ReplicaLabels {
			key = append(key, string(s.Metric[model.LabelName(l)]))
		}
		if replicas[plugin] == nil {
			replicas[plugin] = map[string]bool{}
		}
		replicas[plugin][strings.Join(key, "\x00")] = true
	}
	for p, r := range replicas {
		d.Replicas[p] = len(r)
	}
	for _, s := range in.inc {
		plugin, outcome, v := string(s.Metric["plugin_name"]), string(s.Metric["outcome"]), float64(s.Value)
		if !finite(v) {
			d.Reasons = addReason(d.Reasons, Reason{Code: ReasonNonFinite, Part: partDecisions,
				Detail: fmt.Sprintf("the increase of %s{plugin_name=%q,outcome=%q} is %v", mEPPGateDecision, plugin, outcome, v)})
			continue
		}
		d.add(plugin, outcome, v)
	}
	for _, s := range in.resets {
		if v := float64(s.Value); finite(v) {
			d.Resets += v
		}
	}
	if len(d.Other) == 0 {
		d.Other = nil
	}
}

// add counts n decisions of plugin with outcome (a label value).
func (d *DecisionCounts) add(plugin, outcome string, n float64) {
	if o, ok := gate.ParseOutcome(outcome); ok {
		c := d.ByPlugin[plugin]
		c[o] += n
		d.ByPlugin[plugin] = c
		return
	}
	if d.Other[plugin] == nil {
		d.Other[plugin] = map[string]float64{}
	}
	d.Other[plugin][outcome] += n
}

// absent explains a counter without series in the span.
func (in *decisionInputs) absent(d *DecisionCounts, t Target) {
	rep := t.Reports
	d.ByPlugin, d.Replicas = nil, nil
	span := fmt.Sprintf("in [%s, %s]", d.From.UTC().Format(time.RFC3339), d.To.UTC().Format(time.RFC3339))
	switch {
	case rep != nil && !rep.DecisionCounter:
		d.Status, d.Detail = StatusNotReported, "not reported by this build: "+rep.Evidence
	case rep != nil:
		d.Reasons = []Reason{{Code: ReasonDecisionCounterAbsent, Part: partDecisions, Detail: fmt.Sprintf(
			"no series of %s match {%s} %s, although the target's build exports it (%s): the filter made no decision in the span, "+
				"or the EPP selector misses the EPP's /metrics (port http-metrics), or the image is older than the profile says",
			mEPPGateDecision, t.EPPSelector, span, rep.Evidence)}}
	default:
		d.Reasons = []Reason{{Code: ReasonDecisionCounterAbsent, Part: partDecisions, Detail: fmt.Sprintf(
			"no series of %s match the EPP selector %s (the build is not known here: releases through v0.10.0 do not export it)",
			d.Source, span)}}
	}
}

// check joins the target's plugin, the freshness and the outcomes against
// the build's.
func (in *decisionInputs) check(d *DecisionCounts, t Target, cfg Config) {
	plugins := make([]string, 0, len(d.ByPlugin)+len(d.Other))
	for p := range d.ByPlugin {
		plugins = append(plugins, p)
	}
	for p := range d.Other {
		if _, ok := d.ByPlugin[p]; !ok {
			plugins = append(plugins, p)
		}
	}
	sort.Strings(plugins)
	if t.GatePlugin != "" && !contains(plugins, t.GatePlugin) {
		d.Reasons = append(d.Reasons, Reason{Code: ReasonDecisionPluginNotFound, Part: partDecisions, Detail: fmt.Sprintf(
			"the target's plugin %q is not among the plugin_name values of %s in the span (%s): the counter is labelled with the filter's configured name",
			t.GatePlugin, d.Source, strings.Join(quoteAll(plugins), ", "))})
		return
	}
	fresh := map[string]bool{}
	for _, s := range in.fresh {
		fresh[string(s.Metric["plugin_name"])] = true
	}
	if (t.GatePlugin != "" && !fresh[t.GatePlugin]) || len(fresh) == 0 {
		d.Reasons = append(d.Reasons, Reason{Code: ReasonDecisionCounterStale, Part: partDecisions, Detail: fmt.Sprintf(
			"%s has series in the span but none%s with a sample within %s of %s: the span's end is not counted",
			d.Source, pluginClause(t.GatePlugin), cfg.StaleAfter, d.To.UTC().Format(time.RFC3339))})
	}
	in.checkOutcomes(d, t)
}

// checkOutcomes names outcomes the build does not record or gatetuner does
// not model.
func (in *decisionInputs) checkOutcomes(d *DecisionCounts, t Target) {
	for _, p := range sortedKeys(d.Other) {
		if t.GatePlugin != "" && p != t.GatePlugin {
			continue
		}
		d.Reasons = append(d.Reasons, Reason{Code: ReasonDecisionOutcomeUnexpected, Part: partDecisions, Detail: fmt.Sprintf(
			"plugin %q counts outcomes gatetuner does not model (%s): a pull-request head's gate (request_load_override: the request gate) the shadow cannot replay",
			p, strings.Join(quoteAll(sortedKeys(d.Other[p])), ", "))})
	}
	rep := t.Reports
	if rep == nil || !rep.DecisionCounter {
		return
	}
	for _, p := range sortedKeys(d.ByPlugin) {
		if t.GatePlugin != "" && p != t.GatePlugin {
			continue
		}
		for _, s := range in.seen {
			o, ok := gate.ParseOutcome(string(s.Metric["outcome"]))
			if !ok || string(s.Metric["plugin_name"]) != p || rep.Records(o) {
				continue
			}
			why := ""
			if o == gate.OutcomeMissingSignal {
				why = ": the EPP runs a build with PR #2652's missing-signal rule (v2); name a v2 profile (router-2026-09-v2, router-2026-09-calibration-v2)"
			}
			d.Reasons = addReason(d.Reasons, Reason{Code: ReasonDecisionOutcomeUnexpected, Part: partDecisions, Detail: fmt.Sprintf(
				"plugin %q counts outcome %s, which the target's build does not record (%s)%s", p, o, rep.String(), why)})
			break
		}
	}
}

func pluginClause(p string) string {
	if p == "" {
		return ""
	}
	return fmt.Sprintf(" of plugin %q", p)
}

func hasFatal(rs []Reason) bool {
	for _, r := range rs {
		if r.Code.fatal() {
			return true
		}
	}
	return false
}

func quoteAll(l []string) []string {
	out := make([]string, len(l))
	for i, s := range l {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
