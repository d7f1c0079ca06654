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
	if t.EPPSelector != "" && f.Routing != "" {
		r.spawn(func() {
			// The EPP's endpoints only add to the expected pods: when the
			// EPP cannot be read, coverage rests on the vLLM pods (the
			// in-flight and routing parts carry the failure).
			v, err := r.instant("sum by (endpoint_name) (increase("+vec(mEPPAttempts, t.EPPSelector)+"["+w+"]))", at)
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
	window(&d.wait, "min by ("+byEngine+") (min_over_time("+vec(mWaiting, sel)+"["+w+"]))")
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
			if f.StepCount == "" {
				window(&d.itlSum, "sum by ("+byEngine+") (rate("+vec(f.InterTokenLatency+"_sum", sel)+"["+w+"]))")
			}
		}
	}
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
	d.coverageFrac, d.covered = c.Fraction, len(covered)
	return c
}

// winVal is one pod's saturated window.
type winVal struct {
	end                  time.Time
	b, c, nom            float64
	hasB, hasC, hasNomin bool
}

// windowsResult is the outcome of judging every window.
type windowsResult struct {
	perPod       map[podKey][]winVal
	rows         []stepRow
	droppedReset int
	droppedNaN   int
	nonFinite    int
}

// judge applies the saturation rule to every engine and window, sums the
// engines of each pod, and collects every engine's busy windows for the
// step-cost fit.
func (d *drainInputs) judge() windowsResult {
	g, cfg, t := d.g, d.cfg, d.t
	wait, samples := columns(d.wait, g), columns(d.samples, g)
	kv, run, pre := columns(d.kv, g), columns(d.run, g), columns(d.preempt, g)
	rate, resets := columns(d.rate, g), columns(d.resets, g)
	steps, decodes, itlSum := columns(d.steps, g), columns(d.decodes, g), columns(d.itlSum, g)
	runMin := columns(d.runMin, g)
	fitRate := rate
	if d.fit != nil && d.fit != d.cs {
		fitRate = columns(d.fitRate, g)
	}
	kvKnown, runKnown, preKnown := d.f.KVUsage != "", t.MaxNumSeqs > 0 && d.f.Running != "", d.f.Preemptions != ""
	B := float64(t.MaxNumBatchedTokens)

	res := windowsResult{perPod: map[podKey][]winVal{}}
	enginesOf := map[podKey][]engineKey{}
	for k := range wait {
		enginesOf[k.podKey()] = append(enginesOf[k.podKey()], k)
	}
	// stepsAt is the engine's steps per second in window i: the iteration
	// histogram's count rate, else decodes over the decode-weighted ITL sum.
	stepsAt := func(ek engineKey, i int) (float64, bool) {
		if st, ok := steps[ek].at(i); ok {
			return st, finite(st) && st > 0
		}
		dc, okD := decodes[ek].at(i)
		is, okI := itlSum[ek].at(i)
		if okD && okI && finite(dc) && finite(is) && is > 0 && dc > 0 {
			return dc / is, true
		}
		return 0, false
	}
	// The rule's conditions, in the order of each engine's columns below.
	conds := [...]cond{
		{false, func(x float64) bool { return x > 0 }},
		{false, func(x float64) bool { return x >= float64(cfg.MinSamplesPerWindow) }},
		{!kvKnown, func(x float64) bool { return x < cfg.MaxKVUsage }},
		{!runKnown, func(x float64) bool { return x < float64(t.MaxNumSeqs) }},
		{!preKnown, func(x float64) bool { return x < 0.5 }},
	}
	engCols := make(map[engineKey][len(conds)]column, len(wait))
	for ek := range wait {
		engCols[ek] = [len(conds)]column{wait[ek], samples[ek], kv[ek], run[ek], pre[ek]}
	}
	for pk, engines := range enginesOf {
		sort.Slice(engines, func(i, j int) bool { return engines[i].engine < engines[j].engine })
		for i := 0; i < g.n; i++ {
			var sumB, sumC, sumN float64
			okB, okC, okN := true, B > 0, B > 0
			present, saturated, dropReset, dropNaN := 0, true, false, false
			for _, ek := range engines {
				if _, ok := wait[ek].at(i); !ok {
					continue // the engine has no data in this window
				}
				present++
				rv, okR := rate[ek].at(i)
				rs, okRs := resets[ek].at(i)
				reset := okRs && rs > 0
				pv, okP := pre[ek].at(i)
				clean := !reset && (!preKnown || okP && pv < 0.5)
				if B > 0 && clean {
					// A busy window (a running request at every scrape) feeds the step-cost fit.
					rm, okM := runMin[ek].at(i)
					sm, okS := samples[ek].at(i)
					st, okSt := stepsAt(ek, i)
					dc, okD := decodes[ek].at(i)
					fv, okF := fitRate[ek].at(i)
					if okM && rm >= 1 && okS && sm >= float64(cfg.MinSamplesPerWindow) && okSt && okD && finite(dc) && dc >= 0 && okF && finite(fv) && fv >= 0 {
						res.rows = append(res.rows, stepRow{s: st, d: fv, g: dc, end: g.time(i), pod: pk})
					}
				}
				if !saturated {
					continue
				}
				for ci, c := range conds {
					if c.skip {
						continue
					}
					v, ok := engCols[ek][ci].at(i)
					switch {
					case !ok:
						saturated = false
					case !finite(v):
						res.nonFinite++
						saturated = false
					case !c.pred(v):
						saturated = false
					}
					if !saturated {
						break
					}
				}
				if !saturated {
					continue
				}
				dropReset = dropReset || reset
				if okR && finite(rv) && rv >= 0 {
					sumB += rv
				} else {
					okB = false
					if okR && !finite(rv) {
						dropNaN = true
					}
				}
				if B > 0 {
					st, okS := stepsAt(ek, i)
					dc, okD := decodes[ek].at(i)
					if okS {
						sumN += B * st
						if okD && finite(dc) {
							sumC += B*st - dc
						} else {
							okC = false
						}
					} else {
						okC, okN = false, false
					}
				}
			}
			if present == 0 || !saturated {
				continue
			}
			if dropReset {
				res.droppedReset++
				continue
			}
			if dropNaN {
				res.droppedNaN++
				continue
			}
			wv := winVal{end: g.time(i), b: sumB, c: sumC, nom: sumN, hasB: okB && d.cs != nil, hasC: okC, hasNomin: okN}
			res.perPod[pk] = append(res.perPod[pk], wv)
		}
	}
	return res
}

// cond is one condition of the saturation rule.
type cond struct {
	skip bool
	pred func(float64) bool
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
	cfg, t := d.cfg, d.t
	est.DrainRate = RateEstimate{Status: StatusInconclusive, Method: "saturated-windows"}
	est.PerRequestRate = RateEstimate{Status: StatusInconclusive, Method: "per-request"}
	est.StepRate = RateEstimate{Status: StatusInconclusive, Method: "step-rate"}
	est.Nominal = RateEstimate{Status: StatusInconclusive, Method: "step-time"}
	if d.cs != nil {
		est.DrainRate.Source = d.cs.id
		est.PerRequestRate.Source = d.perRequestTokens().id + " / " + mPrefillTime + "_sum"
	}
	fail := func(rs ...Reason) {
		for _, r := range rs {
			for _, part := range []struct {
				p string
				e *RateEstimate
			}{{partDrain, &est.DrainRate}, {partPerRequest, &est.PerRequestRate}, {partStep, &est.StepRate}, {partNominal, &est.Nominal}} {
				x := r
				x.Part = part.p
				part.e.Reasons = addReason(part.e.Reasons, x)
			}
		}
	}
	if err := d.covErr.get(); err != nil {
		fail(failReason("", err))
		e.tryPrior(d, est)
		return
	}
	if stale != nil {
		fail(*stale)
		e.tryPrior(d, est)
		return
	}

	// Per-request rate A over the lookback.
	e.perRequest(d, est)

	// Coverage gate.
	if d.coverageFrac < cfg.MinPodCoverage {
		var details []string
		for _, k := range sortedPods(keysOf(d.missing)) {
			details = append(details, fmt.Sprintf("%s lacks %s", k, strings.Join(d.missing[k], ", ")))
		}
		for _, k := range sortedPods(d.stale) {
			details = append(details, fmt.Sprintf("%s is stale", k))
		}
		r := Reason{Code: ReasonPartialPodCoverage, Detail: fmt.Sprintf("%d of %d expected pods covered (minimum %.0f%%): %s",
			d.covered, len(est.Coverage.Expected), cfg.MinPodCoverage*100, strings.Join(details, "; "))}
		if len(d.missing) == 0 && len(d.stale) > 0 {
			est.DrainRate.Reasons = append(est.DrainRate.Reasons, Reason{Code: ReasonStaleSeries, Part: partDrain,
				Detail: fmt.Sprintf("%d pods stale", len(d.stale))})
		}
		for _, p := range []struct {
			p string
			e *RateEstimate
		}{{partDrain, &est.DrainRate}, {partStep, &est.StepRate}, {partNominal, &est.Nominal}} {
			x := r
			x.Part = p.p
			p.e.Reasons = addReason(p.e.Reasons, x)
		}
		e.setLowerBound(est)
		e.tryPrior(d, est)
		return
	}
	if d.coverageFrac < 1 {
		est.DrainRate.Reasons = append(est.DrainRate.Reasons, Reason{Code: ReasonPodsExcluded, Part: partDrain,
			Detail: fmt.Sprintf("%d of %d expected pods covered", d.covered, len(est.Coverage.Expected))})
	}
	if err := d.winErr.get(); err != nil {
		for _, p := range []struct {
			p string
			e *RateEstimate
		}{{partDrain, &est.DrainRate}, {partStep, &est.StepRate}, {partNominal, &est.Nominal}} {
			x := failReason(p.p, err)
			p.e.Reasons = addReason(p.e.Reasons, x)
		}
		e.setLowerBound(est)
		e.tryPrior(d, est)
		return
	}
	if len(d.wait) == 0 {
		for _, p := range []struct {
			p string
			e *RateEstimate
		}{{partDrain, &est.DrainRate}, {partStep, &est.StepRate}, {partNominal, &est.Nominal}} {
			p.e.Reasons = addReason(p.e.Reasons, Reason{Code: ReasonNoSeries, Part: p.p, Detail: mWaiting + " has no series"})
		}
		e.setLowerBound(est)
		e.tryPrior(d, est)
		return
	}

	// Warnings about the rule's conditions.
	warn := func(code ReasonCode, detail string) {
		est.DrainRate.Reasons = append(est.DrainRate.Reasons, Reason{Code: code, Part: partDrain, Detail: detail})
	}
	if d.f.KVUsage == "" {
		warn(ReasonKVUsageUnknown, "neither "+mKVUsage+" nor "+mGPUCacheUsage+" exists; the KV condition is skipped")
	}
	if d.f.Preemptions == "" {
		warn(ReasonPreemptionsUnknown, mPreemptions+" does not exist; the preemption condition is skipped")
	}
	if t.MaxNumSeqs <= 0 {
		warn(ReasonMaxNumSeqsUnknown, "maxNumSeqs not configured; the running-set condition is skipped")
	} else if d.f.Running == "" {
		warn(ReasonMaxNumSeqsUnknown, mRunning+" does not exist; the running-set condition is skipped")
	}
	if p99, ok := d.prefillP99(); ok && 10*p99 > cfg.Window.Seconds() {
		warn(ReasonWindowShort, fmt.Sprintf("p99 prefill time %.1fs: windows of %v are shorter than 10x", p99, cfg.Window))
	}

	res := d.judge()
	engines := map[podKey]int{}
	for k := range columns(d.wait, d.g) {
		engines[k.podKey()]++
	}
	age := func(p pooled) time.Duration { return d.at.Sub(p.newest) }

	// B, the drain rate.
	if d.cs == nil {
		est.DrainRate.Reasons = append(est.DrainRate.Reasons, Reason{Code: ReasonNoComputedTokenSource, Part: partDrain,
			Detail: "none of the computed-token sources exists (see docs/estimator.md)"})
	} else {
		b := pool(res.perPod, func(w winVal) (float64, bool) { return w.b, w.hasB }, engines)
		if res.droppedReset+res.droppedNaN > 0 {
			warn(ReasonWindowsDropped, fmt.Sprintf("%d windows dropped for a counter reset, %d for a non-finite rate", res.droppedReset, res.droppedNaN))
		}
		switch {
		case b.windows >= cfg.MinSaturatedWindows:
			fillRate(&est.DrainRate, b, confidence(b.windows, b.hw, b.pods, d.covered, age(b), cfg.FreshnessHalfLife))
		default:
			code := ReasonNoSaturatedWindows
			detail := fmt.Sprintf("no %v window in the lookback had a backlog throughout (and met the KV, running-set and preemption conditions)", cfg.Window)
			if b.windows > 0 {
				code = ReasonTooFewSaturatedWindows
				detail = fmt.Sprintf("%d saturated windows, minimum %d", b.windows, cfg.MinSaturatedWindows)
			}
			est.DrainRate.Reasons = append(est.DrainRate.Reasons, Reason{Code: code, Part: partDrain, Detail: detail})
			est.DrainRate.Windows, est.DrainRate.Pods = b.windows, b.pods
			if res.droppedReset > 0 {
				est.DrainRate.Reasons = append(est.DrainRate.Reasons, Reason{Code: ReasonCounterReset, Part: partDrain,
					Detail: fmt.Sprintf("%d saturated windows dropped for a counter reset", res.droppedReset)})
			}
			if res.droppedNaN > 0 || res.nonFinite > 0 {
				est.DrainRate.Reasons = append(est.DrainRate.Reasons, Reason{Code: ReasonNonFinite, Part: partDrain,
					Detail: fmt.Sprintf("%d windows had a NaN or Inf value", res.droppedNaN+res.nonFinite)})
			}
		}
	}

	// C and the nominal estimate.
	switch {
	case t.MaxNumBatchedTokens <= 0:
		for _, p := range []struct {
			p string
			e *RateEstimate
		}{{partStep, &est.StepRate}, {partNominal, &est.Nominal}} {
			p.e.Reasons = append(p.e.Reasons, Reason{Code: ReasonMaxNumBatchedTokensUnknown, Part: p.p,
				Detail: "set the target's maxNumBatchedTokens (vLLM --max-num-batched-tokens)"})
		}
	case d.f.StepCount == "" && d.f.InterTokenLatency == "":
		for _, p := range []struct {
			p string
			e *RateEstimate
		}{{partStep, &est.StepRate}, {partNominal, &est.Nominal}} {
			p.e.Reasons = append(p.e.Reasons, Reason{Code: ReasonNoStepMetrics, Part: p.p,
				Detail: "neither " + mIterationTokens + " nor an inter-token-latency histogram exists"})
		}
	default:
		stepSrc := d.f.StepCount
		if stepSrc == "" {
			stepSrc = d.f.InterTokenLatency + "_sum / _count"
		}
		est.StepRate.Source = fmt.Sprintf("%d x rate(%s) - rate(%s_count)", t.MaxNumBatchedTokens, stepSrc, d.f.InterTokenLatency)
		c := pool(res.perPod, func(w winVal) (float64, bool) { return w.c, w.hasC }, engines)
		if c.windows >= cfg.MinSaturatedWindows {
			fillRate(&est.StepRate, c, confidence(c.windows, c.hw, c.pods, d.covered, age(c), cfg.FreshnessHalfLife))
		} else {
			code := ReasonNoSaturatedWindows
			if c.windows > 0 {
				code = ReasonTooFewSaturatedWindows
			}
			est.StepRate.Reasons = append(est.StepRate.Reasons, Reason{Code: code, Part: partStep,
				Detail: fmt.Sprintf("%d saturated windows with step metrics, minimum %d", c.windows, cfg.MinSaturatedWindows)})
		}
		e.nominal(d, res, engines, est, stepSrc)
		if est.StepRate.Status == StatusOK && est.DrainRate.Status == StatusOK {
			bv, cv := *est.DrainRate.Value, *est.StepRate.Value
			if bv > 0 && math.Abs(cv-bv)/bv > 0.15 {
				est.StepRate.Reasons = append(est.StepRate.Reasons, Reason{Code: ReasonStepRateDisagrees, Part: partStep,
					Detail: fmt.Sprintf("step rate %.0f vs drain rate %.0f tok/s", cv, bv)})
			}
		}
	}
	if est.DrainRate.Status != StatusOK {
		e.setLowerBound(est)
		e.tryPrior(d, est)
	}
}

// nominal fills the nominal estimate: B / (overhead + B·perPrefill) from the
// step-cost fit over busy windows, or, when the fit cannot separate the
// costs, B × steps/s over saturated windows (low when a decode token costs
// more than a prefill token).
func (e *Estimator) nominal(d *drainInputs, res windowsResult, engines map[podKey]int, est *Estimates, stepSrc string) {
	cfg, t := d.cfg, d.t
	B := float64(t.MaxNumBatchedTokens)
	n := &est.Nominal
	if d.f.Running != "" && d.cs != nil {
		if sc, ok := fitStepCost(res.rows); ok && len(res.rows) >= cfg.MinSaturatedWindows {
			perEngine, sd := sc.nominal(B)
			hw := 1.645 * sd / perEngine
			if finite(perEngine) && perEngine > 0 && hw < 0.10 {
				pods := map[podKey]bool{}
				var newest time.Time
				for _, r := range res.rows {
					pods[r.pod] = true
					if r.end.After(newest) {
						newest = r.end
					}
				}
				keys := sortedPods(pods)
				names := podNames(keys)
				var vals []float64
				for i, k := range keys {
					ne := max(engines[k], 1)
					v := perEngine * float64(ne)
					vals = append(vals, v)
					n.PerPod = append(n.PerPod, PodRate{Pod: names[i], Value: v, Engines: ne})
				}
				v := median(vals)
				hwf := math.Max(hw, minRelHalfWidth)
				n.Status, n.Value = StatusOK, ptr(v)
				n.Interval = &Interval{Low: v * (1 - hwf), High: v * (1 + hwf)}
				n.Method = "step-cost-fit"
				n.Source = fmt.Sprintf("B=%d / (overhead + B x per-prefill-token), fitted on busy windows: 1 = overhead x rate(%s) + per-prefill-token x rate(%s) + per-decode-token x rate(%s_count)",
					t.MaxNumBatchedTokens, stepSrc, d.fit.id, d.f.InterTokenLatency)
				n.Windows, n.Pods = len(res.rows), len(keys)
				n.NewestWindowEnd = &newest
				n.Confidence = confidence(len(res.rows), hwf, len(keys), d.covered, d.at.Sub(newest), cfg.FreshnessHalfLife)
				return
			}
		}
	}
	// Fallback: B × steps per second on saturated windows.
	nom := pool(res.perPod, func(w winVal) (float64, bool) { return w.nom, w.hasNomin }, engines)
	n.Method = "step-time"
	n.Source = fmt.Sprintf("%d x rate(%s)", t.MaxNumBatchedTokens, stepSrc)
	if nom.windows >= cfg.MinSaturatedWindows {
		fillRate(n, nom, confidence(nom.windows, nom.hw, nom.pods, d.covered, d.at.Sub(nom.newest), cfg.FreshnessHalfLife))
		n.Reasons = append(n.Reasons, Reason{Code: ReasonNominalFromStepTime, Part: partNominal,
			Detail: "busy windows did not separate step overhead, prefill and decode costs; B x steps/s reads low when decode tokens cost more than prefill tokens"})
		return
	}
	code := ReasonNoSaturatedWindows
	if nom.windows > 0 {
		code = ReasonTooFewSaturatedWindows
	}
	n.Reasons = append(n.Reasons, Reason{Code: code, Part: partNominal,
		Detail: fmt.Sprintf("the step-cost fit failed and %d saturated windows have step metrics, minimum %d", nom.windows, cfg.MinSaturatedWindows)})
}

func keysOf(m map[podKey][]string) map[podKey]bool {
	out := map[podKey]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}

func fillRate(e *RateEstimate, p pooled, conf float64) {
	e.Status = StatusOK
	e.Value = ptr(p.value)
	e.Interval = &Interval{Low: p.lo, High: p.hi}
	e.Confidence = conf
	e.Windows, e.Pods = p.windows, p.pods
	newest := p.newest
	e.NewestWindowEnd = &newest
	e.PerPod = p.perPod
}

// setLowerBound reports A as the drain rate's lower bound.
func (e *Estimator) setLowerBound(est *Estimates) {
	if est.PerRequestRate.Status == StatusOK && est.PerRequestRate.Value != nil {
		est.DrainRate.LowerBound = ptr(*est.PerRequestRate.Value)
	}
}

// priorCodes are the reasons a prior may stand in for: evidence not there yet.
var priorCodes = map[ReasonCode]bool{
	ReasonNoSaturatedWindows: true, ReasonTooFewSaturatedWindows: true, ReasonCounterReset: true,
}

// tryPrior reports the target's prior when the drain rate lacks evidence
// (never when the data is broken or Prometheus failed).
func (e *Estimator) tryPrior(d *drainInputs, est *Estimates) {
	p := d.t.Prior
	if p == nil || est.DrainRate.Status == StatusOK {
		return
	}
	usable := false
	for _, r := range est.DrainRate.Reasons {
		if r.Code.fatal() && !priorCodes[r.Code] {
			return
		}
		usable = usable || priorCodes[r.Code]
	}
	if !usable {
		return
	}
	est.DrainRate.Status = StatusPrior
	est.DrainRate.Value = ptr(p.Value)
	est.DrainRate.Prior = true
	est.DrainRate.Method = "prior"
	est.DrainRate.Source = p.Origin
	if p.Detail != "" {
		est.DrainRate.Source += ": " + p.Detail
	}
	est.DrainRate.Confidence = p.confidence()
	est.DrainRate.Interval = nil
	est.DrainRate.Reasons = append(est.DrainRate.Reasons, Reason{Code: ReasonPriorInUse, Part: partDrain,
		Detail: fmt.Sprintf("%s prior %.0f tok/s until %d saturated windows are seen", p.Origin, p.Value, d.cfg.MinSaturatedWindows)})
}

// perRequest computes A per engine over the lookback, sums engines per pod
// and takes the median over pods.
func (e *Estimator) perRequest(d *drainInputs, est *Estimates) {
	a := &est.PerRequestRate
	if d.cs == nil {
		a.Reasons = append(a.Reasons, Reason{Code: ReasonNoComputedTokenSource, Part: partPerRequest})
		return
	}
	if d.f.PrefillTime == "" {
		a.Reasons = append(a.Reasons, Reason{Code: ReasonNoSeries, Part: partPerRequest, Detail: mPrefillTime + " does not exist"})
		return
	}
	if err := d.aErr.get(); err != nil {
		a.Reasons = append(a.Reasons, failReason(partPerRequest, err))
		return
	}
	tokens := map[engineKey]float64{}
	for _, s := range d.aTokens {
		tokens[engineOf(s.Metric)] = float64(s.Value)
	}
	perPod := map[podKey]float64{}
	engines := map[podKey]int{}
	nonFinite := 0
	for _, s := range d.aSeconds {
		k := engineOf(s.Metric)
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
		return
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
