package estimator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/model"

	"github.com/gatetuner/gatetuner/estimator/prom"
)

// Estimator turns a deployment's Prometheus series into the numbers the
// EPP's load gate needs. It is safe for concurrent use.
type Estimator struct {
	q     prom.Querier
	clock func() time.Time
	cfg   Config
	rates rateEstimators

	mu       sync.Mutex
	trackers map[string]*Tracker
}

// New returns an estimator reading through q; clock stamps estimates and
// ages the last good one.
func New(q prom.Querier, clock func() time.Time, cfg Config) (*Estimator, error) {
	if q == nil {
		return nil, errors.New("estimator: a querier is required")
	}
	if clock == nil {
		return nil, errors.New("estimator: a clock is required")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("estimator config: %w", err)
	}
	return &Estimator{q: q, clock: clock, cfg: cfg, rates: newRateEstimators(cfg), trackers: map[string]*Tracker{}}, nil
}

// Config returns the configuration in force, defaults applied.
func (e *Estimator) Config() Config { return e.cfg }

// Tracker returns the target's tracker (created on first use).
func (e *Estimator) Tracker(target string) *Tracker {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.trackers[target]
	if !ok {
		t = NewTracker(e.clock, e.cfg.FreshnessHalfLife)
		e.trackers[target] = t
	}
	return t
}

// Estimate reads the target's series over the lookback ending at at (zero:
// the clock's now). Data problems — no series, stale or non-finite data,
// counter resets, partial coverage, too little saturation, Prometheus
// failures — come back as Inconclusive reasons inside Estimates; the error
// is only for a target or configuration that cannot be queried at all.
func (e *Estimator) Estimate(ctx context.Context, t Target, at time.Time) (*Estimates, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if at.IsZero() {
		at = e.clock()
	}
	start := time.Now()
	r := newRunner(ctx, e.q, e.cfg)
	est := e.estimate(r, t, at)
	est.Queries = r.stats
	est.Queries.Seconds = time.Since(start).Seconds()
	est.collect()
	est.Status = overallStatus(est)
	e.Tracker(t.Name).Observe(est)
	return est, nil
}

// EstimateSpan estimates over the span [from, to) — the lookback is the
// span — for a window of the day (the tuner's per-window model). It does
// not feed the target's tracker (which ages the lookback's estimate). A span
// shorter than the saturation window is an error.
func (e *Estimator) EstimateSpan(ctx context.Context, t Target, from, to time.Time) (*Estimates, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	cfg := e.cfg
	cfg.Lookback = to.Sub(from)
	if cfg.Lookback < cfg.Window {
		return nil, fmt.Errorf("estimator: span %v is shorter than the window %v", cfg.Lookback, cfg.Window)
	}
	se := &Estimator{q: e.q, clock: e.clock, cfg: cfg, rates: newRateEstimators(cfg)}
	start := time.Now()
	r := newRunner(ctx, se.q, cfg)
	est := se.estimate(r, t, to)
	est.Queries = r.stats
	est.Queries.Seconds = time.Since(start).Seconds()
	est.collect()
	est.Status = overallStatus(est)
	return est, nil
}

// joinCodes are the reasons a target's series cannot be joined or found:
// the whole estimate is Inconclusive with them (docs/estimator.md, "Joins").
var joinCodes = map[ReasonCode]bool{
	ReasonEndpointNamesUnmatched: true, ReasonInFlightProducerAmbiguous: true, ReasonInFlightProducerNotFound: true,
	ReasonSelectorMatchesNothing: true, ReasonPodLabelMissing: true, ReasonSeriesEmpty: true,
	ReasonPDGateProfileUnknown: true, ReasonPDGateProfileMismatch: true, ReasonPDPrefillPodsUnselected: true,
}

func overallStatus(est *Estimates) Status {
	for _, r := range est.Reasons {
		if joinCodes[r.Code] {
			return StatusInconclusive
		}
	}
	switch {
	case est.Prompt.Status != StatusOK:
		return StatusInconclusive
	case est.DrainRate.Status == StatusOK:
		return StatusOK
	case est.DrainRate.Status == StatusPrior:
		return StatusPrior
	}
	return StatusInconclusive
}

// parts names the estimate parts in Reasons.
const (
	partDrain      = "drainRate"
	partPerRequest = "perRequestRate"
	partStep       = "stepRate"
	partNominal    = "nominal"
	partPrompt     = "promptTokens"
	partCached     = "cachedTokens"
	partReqRate    = "requestRate"
	partInFlight   = "inFlight"
	partRouting    = "routing"
	partCoverage   = "coverage"
	partFeatures   = "features"
)

// inconclusiveAll marks every part Inconclusive for the same reasons.
func inconclusiveAll(est *Estimates, rs ...Reason) {
	with := func(part string) []Reason {
		out := make([]Reason, len(rs))
		for i, r := range rs {
			r.Part = part
			out[i] = r
		}
		return out
	}
	est.DrainRate = RateEstimate{Status: StatusInconclusive, Method: "saturated-windows", Reasons: with(partDrain)}
	est.PerRequestRate = RateEstimate{Status: StatusInconclusive, Method: "per-request", Reasons: with(partPerRequest)}
	est.StepRate = RateEstimate{Status: StatusInconclusive, Method: "step-rate", Reasons: with(partStep)}
	est.Nominal = RateEstimate{Status: StatusInconclusive, Method: "step-time", Reasons: with(partNominal)}
	est.Prompt = Distribution{Status: StatusInconclusive, Reasons: with(partPrompt)}
	est.Cached = Distribution{Status: StatusInconclusive, Reasons: with(partCached)}
	est.RequestRate = Scalar{Status: StatusInconclusive, Reasons: with(partReqRate)}
	est.InFlight = InFlight{Status: StatusInconclusive, ReplicaRule: replicaRule, Snapshots: []Snapshot{}, Reasons: with(partInFlight)}
	est.Routing = Routing{Status: StatusInconclusive, Endpoints: []EndpointShare{}, Reasons: with(partRouting)}
}

// detection is what feature detection found: each probed name's newest
// evaluation time in the lookback.
type detection struct {
	seen map[string]time.Time
}

func (d detection) has(name string) bool { _, ok := d.seen[name]; return ok }

// detect runs one range query over the lookback that reports, per metric
// name, the evaluation times it had series at.
func (e *Estimator) detect(r *runner, sel string, names []string, at time.Time) (detection, error) {
	d := detection{seen: map[string]time.Time{}}
	step := e.cfg.Window
	if least := e.cfg.Lookback / time.Duration(e.cfg.MaxPointsPerSeries-1); step < least {
		step = least
	}
	// A series shows at a step when it has a sample within the server's
	// lookback delta (5m by default) before it; steps no longer than the
	// window keep every series of the lookback visible.
	start := at.Add(-e.cfg.Lookback)
	q := "group by (__name__) ({" + joinMatchers(nameRegex(names), sel) + "})"
	m, err := r.rangeQuery(q, start, at, step)
	if err != nil {
		return d, err
	}
	for _, ss := range m {
		name := string(ss.Metric[model.MetricNameLabel])
		if len(ss.Values) == 0 {
			continue
		}
		last := ss.Values[len(ss.Values)-1].Timestamp.Time()
		if prev, ok := d.seen[name]; !ok || last.After(prev) {
			d.seen[name] = last
		}
	}
	return d, nil
}

func joinMatchers(ms ...string) string {
	var parts []string
	for _, m := range ms {
		if m != "" {
			parts = append(parts, m)
		}
	}
	out := ""
	for i, p := range parts {
		if i > 0 {
			out += ","
		}
		out += p
	}
	return out
}

// features fills Features from the detections.
func features(v, p detection, _ Target) (Features, *computedSource) {
	f := Features{Present: []string{}}
	for n := range v.seen {
		f.Present = append(f.Present, n)
	}
	for n := range p.seen {
		f.Present = append(f.Present, n)
	}
	sort.Strings(f.Present)
	cs := chooseComputed(v.has)
	if cs != nil {
		f.ComputedTokens, f.ComputedTokensRank = cs.id, cs.rank
		for _, n := range append(append([]string(nil), cs.plus...), cs.minus...) {
			if n == mGPUPrefixHits {
				f.Legacy = append(f.Legacy, n)
			}
		}
	}
	f.vllmFeatures(v.has)
	f.eppFeatures(v.has, p.has)
	sort.Strings(f.Legacy)
	f.Legacy = compactStrings(f.Legacy)
	return f, cs
}

// choice is one candidate name: the probe that must exist, the name used,
// and whether it is a deprecated one.
type choice struct {
	probe, use string
	legacy     bool
}

// pick sets *dst to the first choice whose probe exists.
func (f *Features) pick(dst *string, has func(string) bool, cs ...choice) {
	for _, c := range cs {
		if has(c.probe) {
			*dst = c.use
			if c.legacy {
				f.Legacy = append(f.Legacy, c.use)
			}
			return
		}
	}
}

// vllmFeatures picks the vLLM names each estimate reads.
func (f *Features) vllmFeatures(v func(string) bool) {
	f.pick(&f.KVUsage, v, choice{mKVUsage, mKVUsage, false}, choice{mGPUCacheUsage, mGPUCacheUsage, true})
	f.pick(&f.InterTokenLatency, v, choice{mITL + "_count", mITL, false}, choice{mTPOT + "_count", mTPOT, true})
	f.pick(&f.StepCount, v, choice{mIterationTokens + "_count", mIterationTokens + "_count", false})
	f.pick(&f.Preemptions, v, choice{mPreemptions, mPreemptions, false})
	f.pick(&f.Running, v, choice{mRunning, mRunning, false})
	f.pick(&f.PrefillTime, v, choice{mPrefillTime + "_count", mPrefillTime, false})
	f.pick(&f.WaitingCapacity, v, choice{mWaitingByReason, mWaitingByReason + `{reason="capacity"}`, false})
	switch {
	case v(mPrefixHits) && v(mPrefixQueries):
		f.PrefixCacheHits = mPrefixHits
	case v(mGPUPrefixHits) && v(mGPUPrefixQuery):
		f.PrefixCacheHits = mGPUPrefixHits
	}
}

// eppFeatures picks the EPP names, and the sources either side may give.
func (f *Features) eppFeatures(v, p func(string) bool) {
	either := func(n string) bool { return v(n) || p(n) }
	f.pick(&f.PromptHistogram, either, choice{mPromptHist + "_count", mPromptHist, false},
		choice{mEPPInputTokens + "_count", mEPPInputTokens, false}, choice{mGIEInputTokens + "_count", mGIEInputTokens, true})
	f.pick(&f.EPPInputTokens, p, choice{mEPPInputTokens + "_count", mEPPInputTokens, false},
		choice{mGIEInputTokens + "_count", mGIEInputTokens, false})
	f.pick(&f.CachedTokens, p, choice{mEPPCachedTokens + "_count", mEPPCachedTokens, false},
		choice{mGIECachedTokens + "_count", mGIECachedTokens, true})
	if f.CachedTokens == "" && f.PrefixCacheHits != "" {
		f.CachedTokens = f.PrefixCacheHits
		if f.PrefixCacheHits == mGPUPrefixHits {
			f.Legacy = append(f.Legacy, mGPUPrefixHits)
		}
	}
	f.pick(&f.InFlightTokens, p, choice{mEPPInflightTokens, mEPPInflightTokens, false})
	f.pick(&f.InFlightRequests, p, choice{mEPPInflightReqs, mEPPInflightReqs, false})
	f.pick(&f.Routing, p, choice{mEPPAttempts, mEPPAttempts, false}, choice{mGIEAttempts, mGIEAttempts, true})
}

func compactStrings(s []string) []string {
	out := s[:0]
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// estimate runs the queries and assembles the estimates.
func (e *Estimator) estimate(r *runner, t Target, at time.Time) *Estimates {
	cfg := e.cfg
	est := &Estimates{Target: t.Name, At: at, LookbackSeconds: cfg.Lookback.Seconds(), WindowSeconds: cfg.Window.Seconds(),
		Reasons: []Reason{}, Warnings: []Reason{}, Features: Features{Present: []string{}},
		Coverage: Coverage{Expected: []string{}, Covered: []string{}}}

	// Phase 1: which names exist.
	var vdet, pdet detection
	var verr, perr error
	epp := &eppInputs{}
	pdIn := &pdInputs{}
	r.spawn(func() { vdet, verr = e.detect(r, t.VLLMSelector, vllmProbe, at) })
	if t.EPPSelector != "" {
		r.spawn(func() { pdet, perr = e.detect(r, t.EPPSelector, eppProbe, at) })
		e.queueProducers(r, t, at, epp)
	}
	e.queuePD(r, t, at, pdIn)
	dec := &decisionInputs{}
	e.queueDecisions(r, t, at, dec)
	r.wait()
	est.Decisions = dec.result(t, cfg, at)
	epp.chooseProducer(t)
	var pdv *pdView
	if verr == nil && pdIn.indicated() {
		e.queuePDRoles(r, t, at, pdIn)
		r.wait()
		pdv = pdIn.resolvePD(t)
	}
	if verr != nil {
		inconclusiveAll(est, failReason(partFeatures, verr))
		return est
	}
	if perr != nil {
		// The EPP parts fail; the vLLM parts go on.
		pdet = detection{seen: map[string]time.Time{}}
	}
	f, cs := features(vdet, pdet, t)
	est.Features = f
	est.Shape = Shape{VLLM: inferVLLM(vdet.has), EPP: inferEPP(pdet.has), Joins: []Join{}}
	if pdv != nil {
		est.Shape.PD = pdv.info
	}
	if len(vdet.seen) == 0 {
		inconclusiveAll(est, Reason{Code: ReasonNoSeries, Detail: "no vLLM series match {" + t.VLLMSelector + "} in the lookback"})
		if t.EPPSelector != "" && perr == nil && len(pdet.seen) > 0 {
			// The EPP's own parts may still stand.
			e.eppOnly(r, t, at, f, est, epp)
		}
		return est
	}

	// Phase 2: everything else, concurrently. In a P/D pool the vLLM
	// parts read the gate pool's pods only.
	vt := t
	if pdv != nil && pdv.fatal == nil && len(pdv.pool) > 0 {
		vt.VLLMSelector = pdv.poolSelector(t.VLLMSelector)
		epp.pd, epp.vllmSel = pdv, vt.VLLMSelector
	}
	epp.departSel = vt.VLLMSelector
	d := &drainInputs{cfg: cfg, t: vt, f: f, cs: cs, fit: fitSource(cs, vdet.has), at: at, hasKVComputed: vdet.has(mKVComputed + "_count"),
		stepShare: math.NaN(), pd: epp.pd}
	e.queueDrain(r, d)
	dist := &distInputs{pd: epp.pd}
	e.queueDistributions(r, vt, f, at, dist)
	if epp.pd != nil {
		e.queuePDCached(r, vt, t, at, pdIn)
	}
	if t.EPPSelector != "" && perr == nil {
		e.queueEPP(r, t, f, at, epp)
	}
	r.wait()
	if t.EPPSelector != "" && perr == nil {
		e.queueFreshness(r, t, at, epp)
		r.wait()
	}

	est.Coverage = d.coverage()
	targetStale := len(d.expectedVLLM) == 0 || allStale(d)
	var staleReason *Reason
	if d.covErr.get() == nil && targetStale {
		detail := "no vLLM pod has a sample within " + cfg.StaleAfter.String() + " of " + at.UTC().Format(time.RFC3339)
		staleReason = &Reason{Code: ReasonStaleSeries, Detail: detail}
	}
	e.drainResults(d, est, staleReason)
	e.distResults(vt, f, dist, est, staleReason)
	if t.EPPSelector != "" {
		if perr != nil {
			rs := failReason(partInFlight, perr)
			est.InFlight = InFlight{Status: StatusInconclusive, ReplicaRule: replicaRule, Snapshots: []Snapshot{}, Reasons: []Reason{rs}}
			rs.Part = partRouting
			est.Routing = Routing{Status: StatusInconclusive, Endpoints: []EndpointShare{}, Reasons: []Reason{rs}}
		} else {
			e.eppResults(t, f, epp, est, d.vllmPodNames())
			if len(pdet.seen) == 0 {
				e.selectorMatchesNothing(r, t, at, est)
			}
		}
	} else {
		est.InFlight = InFlight{Status: StatusInconclusive, ReplicaRule: replicaRule, Snapshots: []Snapshot{},
			Reasons: []Reason{{Code: ReasonNoSeries, Part: partInFlight, Detail: "no EPP selector configured"}}}
		est.Routing = Routing{Status: StatusInconclusive, Endpoints: []EndpointShare{},
			Reasons: []Reason{{Code: ReasonNoSeries, Part: partRouting, Detail: "no EPP selector configured"}}}
	}
	if pdv != nil {
		pdv.results(est, pdIn)
	}
	return est
}

// selectorMatchesNothing holds the EPP parts when the EPP selector matches
// no EPP series, naming where the EPP's series are.
func (e *Estimator) selectorMatchesNothing(r *runner, t Target, at time.Time, est *Estimates) {
	detail := "no EPP series match {" + t.EPPSelector + "} in the lookback"
	v, err := r.instant("group by (job, namespace, pod, instance) (last_over_time({"+nameRegex([]string{mEPPInflightTokens, mEPPAttempts, mGIEAttempts})+"}["+promDur(e.cfg.Lookback)+"]))", at)
	if err == nil && len(v) > 0 {
		var where []string
		for _, s := range v[:min(len(v), 3)] {
			where = append(where, s.Metric.String())
		}
		detail += "; EPP series exist as " + strings.Join(where, ", ")
	} else if err == nil {
		detail += "; no EPP series exist under any selector"
	}
	for _, p := range []struct {
		part string
		rs   *[]Reason
		st   *Status
	}{{partInFlight, &est.InFlight.Reasons, &est.InFlight.Status}, {partRouting, &est.Routing.Reasons, &est.Routing.Status}} {
		*p.rs = []Reason{{Code: ReasonSelectorMatchesNothing, Part: p.part, Detail: detail}}
		*p.st = StatusInconclusive
	}
}

// eppOnly fills the EPP parts when no vLLM series exist.
func (e *Estimator) eppOnly(r *runner, t Target, at time.Time, f Features, est *Estimates, epp *eppInputs) {
	e.queueEPP(r, t, f, at, epp)
	r.wait()
	e.queueFreshness(r, t, at, epp)
	r.wait()
	e.eppResults(t, f, epp, est, nil)
}

func allStale(d *drainInputs) bool {
	for _, p := range d.expectedVLLM {
		if !d.stale[p] {
			return false
		}
	}
	return true
}

// finite reports whether v is a usable number.
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
