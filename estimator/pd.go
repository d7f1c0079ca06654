package estimator

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// P/D-disaggregated pools (docs/estimator.md, "P/D pools"). In llm-d's P/D
// the EPP's decode profile picks a decode pod, a decider disaggregates the
// requests whose prompt that pod lacks, and the prefill profile picks a
// prefill pod for them. The prefix-cache-affinity filter sits in one of
// the two profiles; its load gate compares that profile's endpoints' in-flight
// tokens, so peakPrefillThroughput is the drain rate of that profile's pods.
// Decode pods receive the KV by transfer and compute one token per request:
// their drain rate says nothing about prefill.

// P/D scheduling profiles the gate can sit in (Target.PDGateProfile).
const (
	PDGatePrefill = "prefill"
	PDGateDecode  = "decode"
)

// Metric names read for P/D.
const (
	mGeneration     = "vllm:generation_tokens_total"
	mRequestSuccess = "vllm:request_success_total"
	mEPPDisagg      = "llm_d_epp_disagg_decision_total"
)

// PD is what the estimator found about a P/D-disaggregated pool.
type PD struct {
	// Evidence lists how the disaggregation showed: vLLM pods receiving
	// KV by transfer, the EPP's disaggregation decisions.
	Evidence []string `json:"evidence"`
	// DecodePods receive KV by transfer; PrefillPods generate one token
	// per request (both among the vLLM selector's pods).
	DecodePods  []string `json:"decodePods"`
	PrefillPods []string `json:"prefillPods"`
	// GateProfile is the scheduling profile carrying the gate ("" unknown),
	// GateProfileSource "target" (the target's pdGateProfile) or "metrics"
	// (the gate's decision count matched the disaggregated requests, or
	// every scheduling attempt).
	GateProfile       string `json:"gateProfile,omitempty"`
	GateProfileSource string `json:"gateProfileSource,omitempty"`
	// DisaggregatedShare is the EPP's prefill-decode decisions over all its
	// P/D decisions in the lookback (null: not exported).
	DisaggregatedShare *float64 `json:"disaggregatedShare,omitempty"`
}

// pdInputs are the P/D queries' results.
type pdInputs struct {
	ext, disagg                  model.Vector
	gen, reqs                    model.Vector
	gateDecisions, attemptsTotal model.Vector
	// inflightEPs and attemptsEP name the EPP's endpoints (for naming the
	// prefill pods a selector leaves out).
	inflightEPs, attemptsEP model.Vector
	// The gate pool's prefix hits and prompt tokens, and the EPP's cached
	// and input token sums, over the lookback (NaN: unknown).
	poolHit, poolPrompt, eppCached, eppInput float64
}

// pdView is how the estimate reads a P/D pool: the gate pool's pods.
type pdView struct {
	info *PD
	// gateOnPrefill: the gate compares prefill pods; pool are its pods.
	gateOnPrefill bool
	pool, other   map[string]bool
	// fatal holds the whole estimate (the pool cannot be told).
	fatal *Reason
}

// queuePD queues the P/D probe (phase 1): vLLM pods receiving KV by
// transfer and the EPP's disaggregation decisions.
func (e *Estimator) queuePD(r *runner, t Target, at time.Time, p *pdInputs) {
	lb := promDur(e.cfg.Lookback)
	r.spawn(func() {
		p.ext, _ = r.instant("sum by (namespace, pod) (increase("+vec(mBySource, t.VLLMSelector, `source="external_kv_transfer"`)+"["+lb+"]))", at)
	})
	if t.EPPSelector != "" {
		r.spawn(func() {
			p.disagg, _ = r.instant("sum by (decision_type) (increase("+vec(mEPPDisagg, t.EPPSelector)+"["+lb+"]))", at)
		})
	}
}

// indicated reports whether the probe shows a P/D pool.
func (p *pdInputs) indicated() bool {
	return sumWhere(p.ext, nil) > 0 || sumWhere(p.disagg, map[string]string{"decision_type": "prefill-decode"}) > 0
}

// sumWhere sums the vector's finite values whose labels match.
func sumWhere(v model.Vector, match map[string]string) float64 {
	s := 0.0
	for _, x := range v {
		ok := finite(float64(x.Value))
		for k, want := range match {
			ok = ok && string(x.Metric[model.LabelName(k)]) == want
		}
		if ok {
			s += float64(x.Value)
		}
	}
	return s
}

// queuePDRoles queues what tells the pods' roles and the gate's profile
// apart (phase 1b, only for P/D pools).
func (e *Estimator) queuePDRoles(r *runner, t Target, at time.Time, p *pdInputs) {
	lb := promDur(e.cfg.Lookback)
	r.spawn(func() {
		p.gen, _ = r.instant("sum by (namespace, pod) (increase("+vec(mGeneration, t.VLLMSelector)+"["+lb+"]))", at)
	})
	r.spawn(func() {
		p.reqs, _ = r.instant("sum by (namespace, pod) (increase("+vec(mRequestSuccess, t.VLLMSelector)+"["+lb+"]))", at)
	})
	if t.EPPSelector == "" {
		return
	}
	r.spawn(func() {
		p.gateDecisions, _ = r.instant("sum(increase("+vec(mEPPGateDecision, t.EPPSelector)+"["+lb+"]))", at)
	})
	r.spawn(func() {
		p.attemptsTotal, _ = r.instant("sum(increase("+vec(mEPPAttempts, t.EPPSelector, `status="success"`)+"["+lb+"]))", at)
	})
	r.spawn(func() {
		p.inflightEPs, _ = r.instant("count by (endpoint_name) (last_over_time("+vec(mEPPInflightTokens, t.EPPSelector)+"["+lb+"]))", at)
	})
	r.spawn(func() {
		p.attemptsEP, _ = r.instant("sum by (endpoint_name) (increase("+vec(mEPPAttempts, t.EPPSelector)+"["+lb+"]))", at)
	})
}

// maxPrefillTokensPerRequest: a prefill pod generates one token per request
// (the routing sidecar caps it); a little slack for requests in flight at
// the lookback's edges.
const maxPrefillTokensPerRequest = 1.05

// resolvePD tells the pods' roles and the gate's profile.
func (p *pdInputs) resolvePD(t Target) *pdView {
	info := &PD{Evidence: []string{}, DecodePods: []string{}, PrefillPods: []string{}}
	v := &pdView{info: info, pool: map[string]bool{}, other: map[string]bool{}}
	if n := sumWhere(p.ext, nil); n > 0 {
		info.Evidence = append(info.Evidence, fmt.Sprintf("%.0f prompt tokens reached vLLM pods by KV transfer (%s{source=\"external_kv_transfer\"})", n, mBySource))
	}
	pd, do := sumWhere(p.disagg, map[string]string{"decision_type": "prefill-decode"}), sumWhere(p.disagg, map[string]string{"decision_type": "decode-only"})
	if pd+do > 0 {
		info.Evidence = append(info.Evidence, fmt.Sprintf("the EPP disaggregated %.0f of %.0f requests (%s)", pd, pd+do, mEPPDisagg))
		info.DisaggregatedShare = ptr(pd / (pd + do))
	}
	ext := byPod(p.ext)
	gen := byPod(p.gen)
	for pod, n := range byPod(p.reqs) {
		switch {
		case ext[pod] > 0:
			info.DecodePods = append(info.DecodePods, pod)
		case n > 0 && gen[pod] <= maxPrefillTokensPerRequest*n:
			info.PrefillPods = append(info.PrefillPods, pod)
		default:
			info.DecodePods = append(info.DecodePods, pod)
		}
	}
	for pod, n := range ext {
		if n > 0 && !contains(info.DecodePods, pod) {
			info.DecodePods = append(info.DecodePods, pod)
		}
	}
	sort.Strings(info.DecodePods)
	sort.Strings(info.PrefillPods)
	info.GateProfile, info.GateProfileSource = t.PDGateProfile, "target"
	inferred, why := p.inferGateProfile(pd)
	switch {
	case t.PDGateProfile == "" && inferred == "":
		info.GateProfileSource = ""
		v.fatal = &Reason{Code: ReasonPDGateProfileUnknown, Detail: "a P/D pool (" + strings.Join(info.Evidence, "; ") +
			"), and the metrics cannot tell which scheduling profile carries the prefix-cache-affinity filter (" + why +
			"): set the target's pdGateProfile to prefill or decode, the profile that references the plugin in the EPP config"}
	case t.PDGateProfile == "":
		info.GateProfile, info.GateProfileSource = inferred, "metrics"
	case inferred != "" && inferred != t.PDGateProfile:
		v.fatal = &Reason{Code: ReasonPDGateProfileMismatch, Detail: fmt.Sprintf(
			"the target's pdGateProfile is %s but %s: the gate runs in the %s profile", t.PDGateProfile, why, inferred)}
	}
	v.gateOnPrefill = info.GateProfile == PDGatePrefill
	pool, other := info.DecodePods, info.PrefillPods
	if v.gateOnPrefill {
		pool, other = info.PrefillPods, info.DecodePods
	}
	for _, n := range pool {
		v.pool[n] = true
	}
	for _, n := range other {
		v.other[n] = true
	}
	if v.fatal == nil && v.gateOnPrefill && len(info.PrefillPods) == 0 {
		v.fatal = &Reason{Code: ReasonPDPrefillPodsUnselected, Detail: fmt.Sprintf(
			"a P/D pool (%s) with the gate in the prefill profile, but no vLLM pod of {%s} serves prefill legs (one generated token per request)%s: widen the vLLM selector to the prefill pods (llm-d.ai/role: prefill)",
			strings.Join(info.Evidence, "; "), t.VLLMSelector, p.unscrapedEndpoints(info))}
	}
	return v
}

// inferGateProfile tells the gate's profile from its decision count: the
// prefill profile runs for the disaggregated requests only, the decode
// profile for every scheduling attempt.
func (p *pdInputs) inferGateProfile(disaggregated float64) (string, string) {
	d, okD := scalarOf(p.gateDecisions)
	a, okA := scalarOf(p.attemptsTotal)
	if !okD || !(d > 0) {
		return "", mEPPGateDecision + " is not exported (it comes with the load gate's own build)"
	}
	if !okA || !(a > 0) || !(disaggregated > 0) {
		return "", "no scheduling attempts or disaggregation decisions to compare the gate's decisions with"
	}
	rel := func(x, y float64) float64 { return math.Abs(x-y) / math.Max(x, y) }
	why := fmt.Sprintf("the gate decided %.0f times, the EPP disaggregated %.0f and scheduled %.0f requests", d, disaggregated, a)
	switch {
	case rel(d, disaggregated) <= 0.01 && rel(d, a) > 0.02:
		return PDGatePrefill, why
	case rel(d, a) <= 0.01 && rel(d, disaggregated) > 0.02:
		return PDGateDecode, why
	}
	return "", why
}

// unscrapedEndpoints names in-flight endpoints the EPP never scheduled to
// (primary picks are decode pods) that no selected vLLM pod backs.
func (p *pdInputs) unscrapedEndpoints(info *PD) string {
	routed := map[string]bool{}
	for _, s := range p.attemptsEP {
		if float64(s.Value) > 0 {
			routed[string(s.Metric["endpoint_name"])] = true
		}
	}
	known := map[string]bool{}
	for _, n := range append(append([]string(nil), info.DecodePods...), info.PrefillPods...) {
		known[n] = true
	}
	var out []string
	for _, s := range p.inflightEPs {
		ep := string(s.Metric["endpoint_name"])
		pod := ep
		if m := rankSuffix.FindStringSubmatch(ep); m != nil {
			pod = m[1]
		}
		if ep != "" && !routed[pod] && !known[pod] && !known[ep] {
			out = append(out, ep)
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		return ""
	}
	if len(out) > 3 {
		out = append(out[:3], "…")
	}
	return "; in-flight endpoints without scheduling attempts or vLLM series: " + strings.Join(out, ", ")
}

func byPod(v model.Vector) map[string]float64 {
	out := map[string]float64{}
	for _, s := range v {
		if x := float64(s.Value); finite(x) {
			out[string(s.Metric["pod"])] += x
		}
	}
	return out
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// poolSelector restricts a vLLM selector to the gate pool's pods.
func (v *pdView) poolSelector(sel string) string {
	names := make([]string, 0, len(v.pool))
	for n := range v.pool {
		names = append(names, regexp.QuoteMeta(n))
	}
	sort.Strings(names)
	return joinMatchers(sel, `pod=~"`+strings.Join(names, "|")+`"`)
}

// keepEndpoint reports whether an in-flight endpoint belongs to the gate pool.
func (v *pdView) keepEndpoint(ep string) bool {
	if v == nil {
		return true
	}
	pod := ep
	if m := rankSuffix.FindStringSubmatch(ep); m != nil && (v.pool[m[1]] || v.other[m[1]]) {
		pod = m[1]
	}
	return !v.other[pod]
}

// poolRouting renders the gate pool's routing when it is not the EPP's
// primary profile: prefill picks get no scheduling attempts, so each
// prefill pod's requests (vLLM's request count) stand in, named as
// endpoints.
func (v *pdView) poolRouting(sel, rng string) string {
	return `sum by (endpoint_name) (label_replace(increase(` + vec(mRequestSuccess, sel) + "[" + rng + `]), "endpoint_name", "$1", "pod", "(.*)"))`
}

// nominalFromDrain: a pool that decodes nothing (prefill pods generate one
// token per request, so no inter-token latency) fills every saturated step
// with prefill, so its saturated drain rate is its full-chunk (nominal)
// rate; the step-cost fit has no decode column to fit.
func (v *pdView) nominalFromDrain(est *Estimates) {
	b := est.DrainRate
	if b.Status != StatusOK {
		return
	}
	n := b
	n.Method = "saturated-windows"
	n.Source = b.Source + " (prefill pods decode nothing: a saturated step is all prefill)"
	n.Reasons = []Reason{{Code: ReasonPDNominalFromDrain, Part: partNominal,
		Detail: "the gate's pool is prefill pods, which generate one token per request: their saturated drain rate is their full-chunk rate"}}
	est.Nominal = n
}

// filterEndpoints keeps the series of the gate pool's endpoints.
func (v *pdView) filterEndpoints(m model.Matrix) model.Matrix {
	out := m[:0:0]
	for _, ss := range m {
		if v.keepEndpoint(string(ss.Metric["endpoint_name"])) {
			out = append(out, ss)
		}
	}
	return out
}

// queuePDCached queues the sums that tell whose cached tokens the EPP's
// histogram holds: the gate pool's own prefix hits and the EPP's cached
// and input token sums.
func (e *Estimator) queuePDCached(r *runner, vt, t Target, at time.Time, p *pdInputs) {
	lb := promDur(e.cfg.Lookback)
	one := func(dst *float64, q string) {
		*dst = math.NaN()
		r.spawn(func() {
			if v, err := r.instant(q, at); err == nil {
				if x, ok := scalarOf(v); ok {
					*dst = x
				}
			}
		})
	}
	one(&p.poolHit, "sum(increase("+vec(mBySource, vt.VLLMSelector, `source="local_cache_hit"`)+"["+lb+"]))")
	one(&p.poolPrompt, "sum(increase("+vec(mPromptTokens, vt.VLLMSelector)+"["+lb+"]))")
	if t.EPPSelector != "" {
		one(&p.eppCached, "sum(increase("+vec(mEPPCachedTokens+"_sum", t.EPPSelector)+"["+lb+"]))")
		one(&p.eppInput, "sum(increase("+vec(mEPPInputTokens+"_sum", t.EPPSelector)+"["+lb+"]))")
	}
}

// results applies the P/D reading to the estimates: a pool that cannot be
// told holds everything; the gate in the decode profile holds the rates;
// the gate in the prefill profile reads the prefill pods' nominal from
// their drain rate and checks whose cached tokens the EPP reports.
func (v *pdView) results(est *Estimates, in *pdInputs) {
	hold := func(r Reason) {
		for _, p := range []struct {
			part string
			e    *RateEstimate
		}{{partDrain, &est.DrainRate}, {partStep, &est.StepRate}, {partNominal, &est.Nominal}} {
			r.Part = p.part
			*p.e = RateEstimate{Status: StatusInconclusive, Method: p.e.Method, Reasons: []Reason{r}}
		}
	}
	switch {
	case v.fatal != nil:
		hold(*v.fatal)
		r := *v.fatal
		r.Part = partInFlight
		est.InFlight.Status, est.InFlight.Snapshots, est.InFlight.Reasons = StatusInconclusive, []Snapshot{}, []Reason{r}
	case !v.gateOnPrefill:
		hold(Reason{Code: ReasonPDGateOnDecodeProfile, Detail: fmt.Sprintf(
			"the gate sits in the decode profile (%s): its in-flight tokens count the prompts of disaggregated requests, which decode pods %s receive by KV transfer and never compute, so no pod's drain rate is the bar's throughput; put the filter in the prefill profile to tune it",
			v.info.GateProfileSource, strings.Join(v.info.DecodePods, ", "))})
	default:
		v.nominalFromDrain(est)
		v.checkCached(est, in)
	}
}

// checkCached holds the cached-token distribution when the EPP's histogram
// reports the decode pods' cached tokens (nearly the whole prompt: KV
// received by transfer) — the routing sidecar before llm-d-router PR #916
// passes the decode pod's usage through — and warns when it mixes in the
// decode-only requests the prefill profile's gate never decides.
func (v *pdView) checkCached(est *Estimates, in *pdInputs) {
	c := &est.Cached
	if c.Status != StatusOK || (c.Source != mEPPCachedTokens && c.Source != mGIECachedTokens) {
		return
	}
	epp := in.eppCached / in.eppInput
	pool := in.poolHit / in.poolPrompt
	if finite(epp) && finite(pool) && epp > 0.9 && epp > pool+0.1 {
		*c = Distribution{Status: StatusInconclusive, Source: c.Source, Reasons: []Reason{{Code: ReasonPDCachedFromDecode, Part: partCached,
			Detail: fmt.Sprintf("%s reports %.0f%% of the prompt tokens as cached while the prefill pods hit %.0f%% in their prefix cache: the responses carry the decode pods' cached tokens (the prompt's KV received by transfer), as llm-d's routing sidecar did before llm-d-router PR #916 (2026-05); upgrade the sidecar",
				c.Source, 100*epp, 100*pool)}}}
		return
	}
	if s := v.info.DisaggregatedShare; s != nil && *s < 0.9 {
		c.Reasons = append(c.Reasons, Reason{Code: ReasonPDCachedMixed, Part: partCached,
			Detail: fmt.Sprintf("%.0f%% of the requests were decode-only: %s also holds their decode pods' cached tokens, which the prefill profile's gate never sees", 100*(1-*s), c.Source)})
	}
}
