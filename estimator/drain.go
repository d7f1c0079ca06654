package estimator

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/model"
)

// errSlot keeps the first error of a group of queries.
type errSlot struct {
	mu  sync.Mutex
	err error
}

func (s *errSlot) set(err error) {
	if err == nil {
		return
	}
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
}

func (s *errSlot) get() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// drainInputs are the raw results for the rate estimators and the coverage.
type drainInputs struct {
	cfg Config
	t   Target
	f   Features
	cs  *computedSource
	// fit is the computed-token source of the step-cost fit (see fitSource).
	fit *computedSource
	// hasKVComputed: vllm:request_prefill_kv_computed_tokens exists.
	hasKVComputed bool
	at            time.Time
	g             grid

	presence, fresh, routed model.Vector
	covErr                  errSlot

	wait, samples, kv, run, runMin, preempt, rate, resets, steps, decodes, itlSum, fitRate model.Matrix
	winErr                                                                                 errSlot

	aTokens, aSeconds model.Vector
	aErr              errSlot

	prefillBuckets model.Vector

	// derived by coverage()
	expectedVLLM []podKey
	stale        map[podKey]bool
	missing      map[podKey][]string
	coverageFrac float64
	covered      int
	expectedPods int
	// units names the engines' endpoint units (from the waiting gauge).
	units endpointKeys
	// podless counts required series without a pod label.
	podless int

	// stepShare is the iteration histogram's step count over the steps the
	// inter-token latency implies, on busy windows (NaN: not known).
	stepShare float64
	// pd, when set, is the P/D pool's gate pool the selector reads.
	pd *pdView
}

// vllmPodNames are the pod label values of the vLLM series.
func (d *drainInputs) vllmPodNames() []string {
	out := make([]string, 0, len(d.expectedVLLM))
	for _, k := range d.expectedVLLM {
		if k.pod != "" {
			out = append(out, k.pod)
		}
	}
	return out
}

func promDur(d time.Duration) string { return model.Duration(d).String() }

// requiredNames are the vLLM series every pod needs for the drain rate.
func (d *drainInputs) requiredNames() []string {
	names := []string{mWaiting}
	if d.cs != nil {
		names = append(names, d.cs.plus...)
		names = append(names, d.cs.minus...)
	}
	if d.f.KVUsage != "" {
		names = append(names, d.f.KVUsage)
	}
	if d.f.Preemptions != "" {
		names = append(names, d.f.Preemptions)
	}
	if d.t.MaxNumSeqs > 0 && d.f.Running != "" {
		names = append(names, d.f.Running)
	}
	return names
}

// queueDrain queues the coverage, saturation-window, per-request and step queries.
func (e *Estimator) queueDrain(r *runner, d *drainInputs) {
	cfg, t, f, cs := d.cfg, d.t, d.f, d.cs
	sel := t.VLLMSelector
	n := int(cfg.Lookback / cfg.Window)
	d.g = grid{start: d.at.Add(-time.Duration(n-1) * cfg.Window), step: cfg.Window, n: n}
	w := promDur(cfg.Window)
	lb := promDur(cfg.Lookback)
	at := d.at

	req := nameRegex(d.requiredNames())
	r.spawn(func() {
		v, err := r.instant("group by (__name__, namespace, pod) ({"+joinMatchers(req, sel)+"})", at)
		d.presence = v
		d.covErr.set(err)
	})
	r.spawn(func() {
		// Every series of a pod comes from the same scrape: the waiting
		// gauge's newest sample dates the pod.
		v, err := r.instant("max by (namespace, pod) (timestamp("+vec(mWaiting, sel)+"))", at)
		d.fresh = v
		d.covErr.set(err)
	})
	if t.EPPSelector != "" && f.Routing != "" && (d.pd == nil || !d.pd.gateOnPrefill) {
		// (A P/D pool's prefill picks get no scheduling attempts: the
		// attempts name decode pods, outside the gate pool.)
		r.spawn(func() {
			// The EPP's endpoints only add to the expected pods: when the
			// EPP cannot be read, coverage rests on the vLLM pods (the
			// in-flight and routing parts carry the failure).
			v, err := r.instant(attempts(f, t.EPPSelector, w), at)
			if err == nil {
				d.routed = v
			}
		})
	}

	window := func(dst *model.Matrix, q string) {
		r.spawn(func() {
			m, err := r.rangeQuery(q, d.g.start, at, cfg.Window)
			*dst = m
			d.winErr.set(err)
		})
	}
	// The backlog: requests waiting for capacity where vLLM splits the
	// gauge by reason (since PR #38435), else every waiting request.
	waiting := vec(mWaiting, sel)
	if f.WaitingCapacity != "" {
		waiting = vec(mWaitingByReason, sel, `reason="capacity"`)
	}
	window(&d.wait, "min by ("+byEngine+") (min_over_time("+waiting+"["+w+"]))")
	window(&d.samples, "min by ("+byEngine+") (count_over_time("+vec(mWaiting, sel)+"["+w+"]))")
	if f.KVUsage != "" {
		window(&d.kv, "max by ("+byEngine+") (max_over_time("+vec(f.KVUsage, sel)+"["+w+"]))")
	}
	if t.MaxNumSeqs > 0 && f.Running != "" {
		window(&d.run, "max by ("+byEngine+") (max_over_time("+vec(f.Running, sel)+"["+w+"]))")
	}
	if f.Preemptions != "" {
		window(&d.preempt, "sum by ("+byEngine+") (increase("+vec(f.Preemptions, sel)+"["+w+"]))")
	}
	if cs != nil {
		window(&d.rate, cs.expr(sel, "rate", w, byEngine))
		window(&d.resets, cs.resets(sel, w, byEngine))
		r.spawn(func() {
			v, err := r.instant(d.perRequestTokens().expr(sel, "increase", lb, byEngine), at)
			d.aTokens = v
			d.aErr.set(err)
		})
	}
	if f.PrefillTime != "" {
		r.spawn(func() {
			v, err := r.instant("sum by ("+byEngine+") (increase("+vec(f.PrefillTime+"_sum", sel)+"["+lb+"]))", at)
			d.aSeconds = v
			d.aErr.set(err)
		})
		r.spawn(func() {
			// Only a warning depends on it: a failure is ignored.
			v, err := r.instant("sum by (le) (increase("+vec(f.PrefillTime+"_bucket", sel)+"["+lb+"]))", at)
			if err == nil {
				d.prefillBuckets = v
			}
		})
	}
	if t.MaxNumBatchedTokens > 0 {
		if f.Running != "" && cs != nil {
			window(&d.runMin, "min by ("+byEngine+") (min_over_time("+vec(f.Running, sel)+"["+w+"]))")
			if d.fit != nil && d.fit != cs {
				window(&d.fitRate, d.fit.expr(sel, "rate", w, byEngine))
			}
		}
		if f.StepCount != "" {
			window(&d.steps, "sum by ("+byEngine+") (rate("+vec(f.StepCount, sel)+"["+w+"]))")
		}
		if f.InterTokenLatency != "" {
			window(&d.decodes, "sum by ("+byEngine+") (rate("+vec(f.InterTokenLatency+"_count", sel)+"["+w+"]))")
			// Steps from the ITL: without the iteration histogram, or when it misses steps.
			window(&d.itlSum, "sum by ("+byEngine+") (rate("+vec(f.InterTokenLatency+"_sum", sel)+"["+w+"]))")
		}
	}
}

// minStepCountShare is the share of the ITL's steps the iteration
// histogram must count: the decode-weighted ITL reads 1-13 % high on the
// simulator's busy windows, so only a larger shortfall means missing steps.
const minStepCountShare = 0.9

// stepsUnobserved reports whether the iteration histogram counts fewer
// than minStepCountShare of the steps the inter-token latency implies on
// busy windows: vLLM does not observe prefill-only steps.
func (d *drainInputs) stepsUnobserved() bool {
	return finite(d.stepShare) && d.stepShare < minStepCountShare
}

// perRequestTokens is A's numerator: vllm:request_prefill_kv_computed_tokens
// when it exists, since it is observed when the request finishes, like
// vllm:request_prefill_time_seconds (the other sources count at prefill
// completion, which skews A over a short lookback); else the drain source.
func (d *drainInputs) perRequestTokens() *computedSource {
	if d.hasKVComputed {
		return &computedSource{id: mKVComputed + "_sum", rank: 3, plus: []string{mKVComputed + "_sum"}}
	}
	return d.cs
}

// coverage derives the expected, covered, missing and stale pods.
func (d *drainInputs) coverage() Coverage {
	c := Coverage{Expected: []string{}, Covered: []string{}}
	d.stale, d.missing = map[podKey]bool{}, map[podKey][]string{}
	if d.covErr.get() != nil {
		return c
	}
	has := map[podKey]map[string]bool{}
	for _, s := range d.presence {
		k := podKey{string(s.Metric["namespace"]), string(s.Metric["pod"])}
		if k.pod == "" {
			d.podless++
		}
		if has[k] == nil {
			has[k] = map[string]bool{}
		}
		has[k][string(s.Metric[model.MetricNameLabel])] = true
	}
	expected := map[podKey]bool{}
	for k := range has {
		expected[k] = true
	}
	d.expectedVLLM = sortedPods(expected)
	for _, k := range d.expectedVLLM {
		for _, n := range d.requiredNames() {
			if !has[k][n] {
				d.missing[k] = append(d.missing[k], n)
			}
		}
	}
	limit := d.at.Add(-d.cfg.StaleAfter)
	freshSeen := map[podKey]bool{}
	for _, s := range d.fresh {
		k := podKey{string(s.Metric["namespace"]), string(s.Metric["pod"])}
		freshSeen[k] = true
		ts := float64(s.Value)
		if !finite(ts) || time.Unix(0, int64(ts*1e9)).Before(limit) {
			d.stale[k] = true
		}
	}
	for k := range expected {
		if !freshSeen[k] {
			d.stale[k] = true
		}
	}
	// EPP endpoints routed to in the last window must have vLLM series too.
	byName := map[string][]podKey{}
	for k := range expected {
		byName[k.pod] = append(byName[k.pod], k)
	}
	for _, s := range d.routed {
		name := string(s.Metric["endpoint_name"])
		if name == "" || !(float64(s.Value) > 0) {
			continue
		}
		if _, ok := byName[name]; ok {
			continue
		}
		if i := strings.LastIndexByte(name, '/'); i >= 0 {
			k := podKey{name[:i], name[i+1:]}
			if expected[k] {
				continue
			}
		}
		k := podKey{"", name}
		expected[k] = true
		d.missing[k] = append(d.missing[k], "vLLM series for EPP endpoint "+name)
	}
	all := sortedPods(expected)
	c.Expected = podNames(all)
	var covered, missing, stale []podKey
	for _, k := range all {
		switch {
		case len(d.missing[k]) > 0:
			missing = append(missing, k)
		case d.stale[k]:
			stale = append(stale, k)
		default:
			covered = append(covered, k)
		}
	}
	c.Covered, c.Missing, c.Stale = podNames(covered), podNames(missing), podNames(stale)
	if c.Covered == nil {
		c.Covered = []string{}
	}
	if len(all) > 0 {
		c.Fraction = float64(len(covered)) / float64(len(all))
	}
	d.coverageFrac, d.covered, d.expectedPods = c.Fraction, len(covered), len(all)
	return c
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// pooled is the result of pooling per-window values.
type pooled struct {
	value    float64
	lo, hi   float64
	hw       float64 // relative half-width of the interval
	windows  int
	pods     int
	newest   time.Time
	perPod   []PodRate
	haveData bool
}

// pool takes each pod's median over its windows, then the median over pods;
// the interval is the median's 90 % normal-approximation interval from the
// robust spread of all windows (see docs/estimator.md).
func pool(perPod map[podKey][]winVal, get func(winVal) (float64, bool), engines map[podKey]int) pooled {
	var p pooled
	var podMeds, all []float64
	keys := make([]podKey, 0, len(perPod))
	for k := range perPod {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	names := podNames(keys)
	for i, k := range keys {
		var vs []float64
		for _, w := range perPod[k] {
			if v, ok := get(w); ok {
				vs = append(vs, v)
				if w.end.After(p.newest) {
					p.newest = w.end
				}
			}
		}
		if len(vs) == 0 {
			continue
		}
		m := median(vs)
		podMeds = append(podMeds, m)
		all = append(all, vs...)
		p.perPod = append(p.perPod, PodRate{Pod: names[i], Value: m, Windows: len(vs), Engines: engines[k]})
	}
	p.windows, p.pods = len(all), len(podMeds)
	if len(all) == 0 {
		return p
	}
	p.haveData = true
	p.value = median(podMeds)
	med := median(all)
	dev := make([]float64, len(all))
	for i, v := range all {
		dev[i] = math.Abs(v - med)
	}
	spread := 0.0
	if med > 0 {
		spread = 1.4826 * median(dev) / med
	}
	p.hw = math.Max(1.645*1.2533*spread/math.Sqrt(float64(len(all))), minRelHalfWidth)
	p.lo, p.hi = p.value*(1-p.hw), p.value*(1+p.hw)
	return p
}

// minRelHalfWidth floors the interval: counters move in whole requests.
const minRelHalfWidth = 0.005

// confidence is the documented formula:
//
//	c = (1 − e^(−n/8)) · clamp(1 − hw/0.10, 0, 1) · min(1, pods/⌈covered/2⌉) · 2^(−age/halfLife)
//
// with n saturated windows, hw the interval's relative half-width, pods the
// pods with windows out of covered pods, age the time since the newest window.
func confidence(n int, hw float64, pods, covered int, age, halfLife time.Duration) float64 {
	if n <= 0 {
		return 0
	}
	cn := 1 - math.Exp(-float64(n)/8)
	cp := math.Min(math.Max(1-hw/0.10, 0), 1)
	need := math.Ceil(float64(max(covered, pods)) / 2)
	cc := 1.0
	if need > 0 {
		cc = math.Min(1, float64(pods)/need)
	}
	if age < 0 {
		age = 0
	}
	cf := math.Exp2(-age.Hours() / halfLife.Hours())
	return round3(cn * cp * cc * cf)
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// drainResults fills the drain rate, per-request, step and nominal estimates.
func (e *Estimator) drainResults(d *drainInputs, est *Estimates, stale *Reason) {
	ev := d.evidence(stale)
	for _, n := range ev.engines {
		est.Shape.EnginesPerPod = max(est.Shape.EnginesPerPod, n)
	}
	if finite(d.stepShare) {
		est.Shape.StepCountShare = ptr(d.stepShare)
	}
	est.PerRequestRate = e.rates.perRequest.estimate(ev).RateEstimate
	ev.perRequest = est.PerRequestRate
	est.DrainRate = e.rates.drain.estimate(ev).RateEstimate
	est.StepRate = e.rates.step.estimate(ev).RateEstimate
	est.Nominal = e.rates.nominal.estimate(ev).RateEstimate
	if est.StepRate.Status == StatusOK && est.DrainRate.Status == StatusOK {
		bv, cv := *est.DrainRate.Value, *est.StepRate.Value
		if bv > 0 && math.Abs(cv-bv)/bv > 0.15 {
			est.StepRate.Reasons = append(est.StepRate.Reasons, Reason{Code: ReasonStepRateDisagrees, Part: partStep,
				Detail: fmt.Sprintf("step rate %.0f vs drain rate %.0f tok/s", cv, bv)})
		}
	}
}

// evidence aggregates the drain inputs: the holds, the rule's caveats and,
// when the windows can be judged, the per-pod saturated windows.
func (d *drainInputs) evidence(stale *Reason) *evidence {
	ev := &evidence{d: d, engines: map[podKey]int{}}
	d.units = newEndpointKeys(d.wait)
	switch {
	case d.covErr.get() != nil:
		ev.unreadable = []Reason{failReason("", d.covErr.get())}
		return ev
	case d.podless > 0:
		ev.unreadable = []Reason{{Code: ReasonPodLabelMissing, Detail: fmt.Sprintf(
			"%d required vLLM series of {%s} carry no pod label: engines are told apart by namespace, pod and engine, and joined to the EPP's endpoints by pod; scrape vLLM with a PodMonitor, or relabel __meta_kubernetes_pod_name to pod",
			d.podless, d.t.VLLMSelector)}}
		return ev
	case stale != nil:
		ev.unreadable = []Reason{*stale}
		return ev
	}
	switch {
	case d.winErr.get() != nil:
		ev.unjudgeable = []Reason{failReason("", d.winErr.get())}
		return ev
	case len(d.wait) == 0:
		ev.unjudgeable = []Reason{{Code: ReasonNoSeries, Detail: mWaiting + " has no series"}}
		return ev
	}
	ev.caveats = d.caveats()
	ev.windows = d.judge()
	for k := range columns(d.wait, d.g, d.units) {
		ev.engines[k.podKey()]++
	}
	return ev
}

// caveats are the warnings about the saturation rule's conditions.
func (d *drainInputs) caveats() []Reason {
	var out []Reason
	warn := func(code ReasonCode, detail string) {
		out = append(out, Reason{Code: code, Part: partDrain, Detail: detail})
	}
	if d.f.KVUsage == "" {
		warn(ReasonKVUsageUnknown, "neither "+mKVUsage+" nor "+mGPUCacheUsage+" exists; the KV condition is skipped")
	}
	if d.f.Preemptions == "" {
		warn(ReasonPreemptionsUnknown, mPreemptions+" does not exist; the preemption condition is skipped")
	}
	if d.t.MaxNumSeqs <= 0 {
		warn(ReasonMaxNumSeqsUnknown, "maxNumSeqs not configured; the running-set condition is skipped")
	} else if d.f.Running == "" {
		warn(ReasonMaxNumSeqsUnknown, mRunning+" does not exist; the running-set condition is skipped")
	}
	if p99, ok := d.prefillP99(); ok && 10*p99 > d.cfg.Window.Seconds() {
		warn(ReasonWindowShort, fmt.Sprintf("p99 prefill time %.1fs: windows of %v are shorter than 10x", p99, d.cfg.Window))
	}
	return out
}

func keysOf(m map[podKey][]string) map[podKey]bool {
	out := map[podKey]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}

// fillRate makes e the conclusive estimate of pool p (confidence apart).
func fillRate(e *RateEstimate, p pooled) {
	e.Status = StatusOK
	e.Value = ptr(p.value)
	e.Interval = &Interval{Low: p.lo, High: p.hi}
	e.Windows, e.Pods = p.windows, p.pods
	newest := p.newest
	e.NewestWindowEnd = &newest
	e.PerPod = p.perPod
}

// perRequestRate is A: computed tokens over prefill seconds per engine over
// the lookback, engines summed per pod, the median over pods.
func perRequestRate(ev *evidence) rateResult {
	d := ev.d
	out := ev.blank(partPerRequest)
	a := &out.RateEstimate
	if d.cs == nil {
		a.Reasons = append(a.Reasons, Reason{Code: ReasonNoComputedTokenSource, Part: partPerRequest})
		return out
	}
	if d.f.PrefillTime == "" {
		a.Reasons = append(a.Reasons, Reason{Code: ReasonNoSeries, Part: partPerRequest, Detail: mPrefillTime + " does not exist"})
		return out
	}
	if err := d.aErr.get(); err != nil {
		a.Reasons = append(a.Reasons, failReason(partPerRequest, err))
		return out
	}
	tokens := map[engineKey]float64{}
	for _, s := range d.aTokens {
		tokens[d.units.of(s.Metric)] = float64(s.Value)
	}
	perPod := map[podKey]float64{}
	engines := map[podKey]int{}
	nonFinite := 0
	for _, s := range d.aSeconds {
		k := d.units.of(s.Metric)
		sec := float64(s.Value)
		tok, ok := tokens[k]
		if !ok {
			continue
		}
		if !finite(sec) || !finite(tok) {
			nonFinite++
			continue
		}
		if sec > 0 && tok >= 0 {
			perPod[k.podKey()] += tok / sec
			engines[k.podKey()]++
		}
	}
	if len(perPod) == 0 {
		code := ReasonNoRequests
		if nonFinite > 0 {
			code = ReasonNonFinite
		}
		a.Reasons = append(a.Reasons, Reason{Code: code, Part: partPerRequest, Detail: "no pod finished a prefill in the lookback"})
		return out
	}
	keys := sortedPods(keysOfF(perPod))
	names := podNames(keys)
	var vals []float64
	for i, k := range keys {
		vals = append(vals, perPod[k])
		a.PerPod = append(a.PerPod, PodRate{Pod: names[i], Value: perPod[k], Engines: engines[k]})
	}
	a.Status = StatusOK
	a.Value = ptr(median(vals))
	a.Pods = len(vals)
	return out
}

func keysOfF(m map[podKey]float64) map[podKey]bool {
	out := map[podKey]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}

// prefillP99 is the p99 of vllm:request_prefill_time_seconds over the lookback.
func (d *drainInputs) prefillP99() (float64, bool) {
	if len(d.prefillBuckets) == 0 {
		return 0, false
	}
	cum, err := cumBuckets(d.prefillBuckets)
	if err != nil {
		return 0, false
	}
	bs, total, _ := bucketsOf(cum)
	if !(total > 0) {
		return 0, false
	}
	v, _ := quantileOf(bs, 0.99)
	return v, finite(v)
}
