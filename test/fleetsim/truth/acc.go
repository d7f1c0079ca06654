package truth

import (
	"math"
	"slices"
	"time"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim/engine"
	"github.com/gatetuner/gatetuner/test/fleetsim/epp"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/workload"
)

// Defaults of the saturation rule.
const (
	// DefaultSaturationWindow is the length of the windows saturation is judged on.
	DefaultSaturationWindow = 2 * time.Minute
	// DefaultMaxKVUsage is the KV usage a saturated window must stay below.
	DefaultMaxKVUsage = 0.95
)

// Run is what the truth knows of a run: its scenario and export shape, the
// phases' spans and the settings in force, the measured range, the scrape
// grid, the saturation rule and the engines.
type Run struct {
	Scenario *scenario.Scenario
	Shape    *scenario.ExportShape
	Seed     uint64
	// Base is the wall time of scenario time 0.
	Base time.Time
	// PhaseStart and PhaseEnd are every phase's span (ns of scenario time);
	// Settings the gate settings in force in each (shared with the run,
	// which may change them).
	PhaseStart, PhaseEnd []int64
	Settings             []gate.Settings
	// MeasStart and RunEnd bound the measured range (ns).
	MeasStart, RunEnd int64
	// ScrapeNs is the sampling grid's spacing.
	ScrapeNs int64
	// SaturationWindow, MaxKVUsage and IgnoreMaxNumSeqs are the saturation
	// rule's parameters (0: the defaults).
	SaturationWindow time.Duration
	MaxKVUsage       float64
	IgnoreMaxNumSeqs bool
	Pods             []*engine.Pod
	// PD: the pool disaggregates prefill and decode.
	PD bool
}

type podSample struct {
	waiting, running int32
	kvUsage          float64
	preempt          int64
	work, busy, dec  float64
	localCompute     int64
}

type podPhaseAcc struct {
	routed      int
	ttft        []float64
	computedTok float64 // per-request A numerator
	prefillSec  float64 // per-request A denominator
}

type phaseAcc struct {
	requests   int
	ttft       []float64
	prompt     []float64
	cached     []float64
	promptSum  float64
	cachedSum  float64
	outcomes   [gate.NumOutcomes]int64
	verdicts   [gate.NumVerdicts]int64
	excessHeld int64
	excessRel  int64
	disagg     [2]int64
	failed     int
	pods       []podPhaseAcc
	// engine work at the phase's start and end (for ComputedTokens, BusyFraction)
	workStart, busyStart []float64
	workEnd, busyEnd     []float64
	startSet, endSet     bool
}

// Acc accumulates a run's truth as it goes.
type Acc struct {
	run     Run
	phases  []phaseAcc
	sampleT []int64
	samples [][]podSample // per pod
}

// NewAcc returns an empty accumulator for run.
func NewAcc(run Run) *Acc {
	a := &Acc{run: run}
	a.phases = make([]phaseAcc, len(run.Scenario.Phases))
	for i := range a.phases {
		n := len(run.Pods)
		a.phases[i].pods = make([]podPhaseAcc, n)
		a.phases[i].workStart, a.phases[i].busyStart = make([]float64, n), make([]float64, n)
		a.phases[i].workEnd, a.phases[i].busyEnd = make([]float64, n), make([]float64, n)
	}
	a.samples = make([][]podSample, len(run.Pods))
	return a
}

// Decided counts a routing decision for r (measured: r arrived in the
// measured range).
func (a *Acc) Decided(r *engine.Request, dec *epp.Decision, measured bool) {
	if !measured {
		return
	}
	ph := &a.phases[r.Phase]
	ph.requests++
	ph.pods[r.Pod].routed++
	if a.run.PD {
		ph.disagg[boolInt(dec.Prefill >= 0)]++
		if !dec.Gated {
			return
		}
	}
	ph.outcomes[dec.Outcome]++
	d := dec.D
	d.Outcome = dec.Outcome
	v, excess := gate.Judge(&d)
	ph.verdicts[v]++
	switch v {
	case gate.HeldWrong:
		ph.excessHeld += excess
	case gate.ReleasedWrong, gate.ReleasedCeiling:
		ph.excessRel += excess
	}
}

// Failed counts a request whose scheduling failed (no endpoint).
func (a *Acc) Failed(r *engine.Request, measured bool) {
	if measured {
		a.phases[r.Phase].requests++
		a.phases[r.Phase].failed++
	}
}

// FirstToken accounts r's first token on engine p at now.
func (a *Acc) FirstToken(p *engine.Pod, r *engine.Request, now int64) {
	if r.Arrival >= a.run.MeasStart {
		// A disaggregated request's prefix reuse is its prefill leg's hit
		// (its decode leg "caches" the transferred prompt).
		cached := r.FirstCached
		if r.Peer != nil {
			cached = r.Peer.FirstCached
		}
		ph := &a.phases[r.Phase]
		ph.ttft = append(ph.ttft, float64(now-r.Arrival)/1e9)
		ph.pods[p.Index()].ttft = append(ph.pods[p.Index()].ttft, float64(now-r.Arrival)/1e9)
		ph.prompt = append(ph.prompt, float64(r.Prompt))
		ph.cached = append(ph.cached, float64(cached))
		ph.promptSum += float64(r.Prompt)
		ph.cachedSum += float64(cached)
	}
	a.PodFirstToken(p, r, now)
}

// PodFirstToken accounts a first token to its engine's per-request rate
// (prefill legs included).
func (a *Acc) PodFirstToken(p *engine.Pod, r *engine.Request, now int64) {
	if now >= a.run.MeasStart && now <= a.run.RunEnd {
		pa := &a.phases[a.phaseAt(now)].pods[p.Index()]
		pa.computedTok += float64(r.Prompt - r.FirstCached)
		pa.prefillSec += float64(now-r.FirstSched) / 1e9
	}
}

// phaseAt returns the phase index holding scenario time t (ns).
func (a *Acc) phaseAt(t int64) int {
	for i, e := range a.run.PhaseEnd {
		if t < e {
			return i
		}
	}
	return len(a.run.PhaseEnd) - 1
}

// Sample takes the engines' state at scrape time t.
func (a *Acc) Sample(t int64) {
	r := &a.run
	a.sampleT = append(a.sampleT, t)
	for i, p := range r.Pods {
		w, b, d := p.Progress(t)
		a.samples[i] = append(a.samples[i], podSample{
			waiting: int32(p.Waiting()), running: p.Running(),
			kvUsage: float64(p.UsedBlocks()) / float64(p.TotalBlocks()),
			preempt: p.Metrics.Preemptions, work: w, busy: b, dec: d, localCompute: p.Metrics.LocalCompute,
		})
	}
	// Phase start/end snapshots of engine work.
	for pi := range a.phases {
		ph := &a.phases[pi]
		if !ph.startSet && t >= r.PhaseStart[pi] && t >= r.MeasStart {
			ph.startSet = true
			for i, p := range r.Pods {
				ph.workStart[i], ph.busyStart[i], _ = p.Progress(t)
			}
		}
		if ph.startSet && t <= r.PhaseEnd[pi] {
			ph.endSet = true
			for i, p := range r.Pods {
				ph.workEnd[i], ph.busyEnd[i], _ = p.Progress(t)
			}
		}
	}
}

// QuantilesOf summarises vs (sorting it in place).
func QuantilesOf(vs []float64) Quantiles {
	if len(vs) == 0 {
		return Quantiles{}
	}
	slices.Sort(vs)
	var sum float64
	for _, v := range vs {
		sum += v
	}
	q := func(p float64) float64 {
		x := p * float64(len(vs)-1)
		i := int(x)
		if i >= len(vs)-1 {
			return vs[len(vs)-1]
		}
		f := x - float64(i)
		return vs[i] + f*(vs[i+1]-vs[i])
	}
	return Quantiles{N: len(vs), Mean: sum / float64(len(vs)), P50: q(0.5), P90: q(0.9), P99: q(0.99)}
}

func ptr(v float64) *float64 { return &v }

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (a *Acc) rfc(t int64) string {
	return a.run.Base.Add(time.Duration(t)).UTC().Format(time.RFC3339Nano)
}

// windowSamples is the number of scrapes per saturation window.
func (a *Acc) windowSamples() int {
	w := a.run.SaturationWindow
	if w <= 0 {
		w = DefaultSaturationWindow
	}
	n := int(math.Round(float64(w) / float64(a.run.ScrapeNs)))
	return max(n, 1)
}

func (a *Acc) maxKVUsage() float64 {
	if a.run.MaxKVUsage <= 0 {
		return DefaultMaxKVUsage
	}
	return a.run.MaxKVUsage
}

// windows computes every pod's saturated windows from the truth samples.
func (a *Acc) windows() []Window {
	r := &a.run
	sc, x := r.Scenario, r.Shape
	n := a.windowSamples()
	kvMax := a.maxKVUsage()
	maxSeqs := int32(sc.Pods.Engine.MaxNumSeqs)
	var out []Window
	for j := 0; (j+1)*n < len(a.sampleT); j++ {
		i0, i1 := j*n, (j+1)*n
		t0, t1 := a.sampleT[i0], a.sampleT[i1]
		phase := ""
		for pi := range sc.Phases {
			if t0 >= r.PhaseStart[pi] && t1 <= r.PhaseEnd[pi] {
				phase = sc.Phases[pi].Name
			}
		}
		for pi := range r.Pods {
			smp := a.samples[pi]
			ok := smp[i1].preempt == smp[i0].preempt
			for k := i0 + 1; ok && k <= i1; k++ {
				x := &smp[k]
				ok = x.waiting > 0 && x.kvUsage < kvMax && (r.IgnoreMaxNumSeqs || x.running < maxSeqs)
			}
			if !ok {
				continue
			}
			sec := float64(t1-t0) / 1e9
			ep := x.EndpointOf(pi)
			w := Window{Pod: x.PodName(sc, x.PodOf(ep)), Rank: x.RankOf(ep), Engine: pi % x.DPEngines, Phase: phase, Start: float64(t0) / 1e9, End: float64(t1) / 1e9,
				StartTime: a.rfc(t0), EndTime: a.rfc(t1),
				DrainRate:        (smp[i1].work - smp[i0].work) / sec,
				CounterDrainRate: float64(smp[i1].localCompute-smp[i0].localCompute) / sec,
			}
			if db := smp[i1].busy - smp[i0].busy; db > 0 {
				w.DecodeShare = (smp[i1].dec - smp[i0].dec) / db
			}
			out = append(out, w)
		}
	}
	return out
}

// Truth is the run's truth at now: measured phases up to the run's end
// (live: up to now), the trace class's truth (nil without one).
func (a *Acc) Truth(now int64, live bool, trace *workload.TraceTruth) *Truth {
	r := &a.run
	sc := r.Scenario
	t := &Truth{
		Scenario: sc.Name, Seed: r.Seed, BaseTime: r.Base.UTC().Format(time.RFC3339),
		Start: float64(r.MeasStart) / 1e9, End: float64(min(r.RunEnd, now)) / 1e9,
		ScrapeIntervalSeconds: float64(r.ScrapeNs) / 1e9,
		Saturation: SaturationRule{WindowSeconds: float64(a.windowSamples()) * float64(r.ScrapeNs) / 1e9,
			MaxKVUsage: a.maxKVUsage(), BelowMaxNumSeqs: !r.IgnoreMaxNumSeqs},
		Windows: a.windows(),
		Trace:   trace,
	}
	if t.Windows == nil {
		t.Windows = []Window{}
	}
	t.Exporters = a.exporters()
	end := r.RunEnd
	if live {
		end = now
	}
	var allTTFT []float64
	var heldWrong, known int64
	days := newDayPool(sc)
	for pi := range sc.Phases {
		ps, pe := r.PhaseStart[pi], r.PhaseEnd[pi]
		if pe <= r.MeasStart || ps >= end {
			continue
		}
		ps, pe = max(ps, r.MeasStart), min(pe, end)
		acc := &a.phases[pi]
		pt := a.phase(pi, ps, pe, t.Windows)
		t.Phases = append(t.Phases, pt)
		allTTFT = append(allTTFT, acc.ttft...)
		t.Overall.Requests += acc.requests
		heldWrong, known = heldWrong+pt.Verdicts.HeldWrong, known+pt.Verdicts.Known()
		days.add(pi, acc.ttft, acc.requests, pt.Verdicts)
	}
	t.Overall.TTFT = QuantilesOf(allTTFT)
	if known > 0 {
		t.Overall.WronglyHeldRate = ptr(float64(heldWrong) / float64(known))
	}
	t.Days = days.truth()
	return t
}

// exporters names the run's engines across the exporters.
func (a *Acc) exporters() ExportersTruth {
	sc, x := a.run.Scenario, a.run.Shape
	et := ExportersTruth{Shape: x.Name, GateProducer: x.Producers[0], EPPReplicas: x.EPPReplicas,
		SyncedReplicas: x.SyncReplicas && x.EPPReplicas > 1}
	if x.PD() {
		et.PD = &PDTruth{GateProfile: x.PDGateProfile, NonCachedTokens: x.PDNonCachedTokens, UsageCached: x.PDUsageCached}
	}
	for i := range a.run.Pods {
		ep := x.EndpointOf(i)
		pod := x.PodOf(ep)
		et.Engines = append(et.Engines, EngineTruth{Pod: x.PodName(sc, pod), Rank: x.RankOf(ep),
			Engine: i % x.DPEngines, Port: x.Port(ep), Endpoint: x.EndpointName(sc, ep), Scraped: x.Scraped(i), Role: x.Role(sc, pod)})
		if pd := et.PD; pd != nil {
			if x.IsPrefill(sc, pod) {
				pd.PrefillPods = append(pd.PrefillPods, x.PodName(sc, pod))
			} else {
				pd.DecodePods = append(pd.DecodePods, x.PodName(sc, pod))
			}
		}
	}
	return et
}

// phase is measured phase pi's truth over [ps, pe).
func (a *Acc) phase(pi int, ps, pe int64, windows []Window) PhaseTruth {
	r := &a.run
	acc := &a.phases[pi]
	pt := PhaseTruth{Name: r.Scenario.Phases[pi].Name, Start: float64(ps) / 1e9, End: float64(pe) / 1e9,
		StartTime: a.rfc(ps), EndTime: a.rfc(pe), Settings: settingsTruth(r.Settings[pi]),
		Requests: acc.requests, RequestRate: float64(acc.requests) / (float64(pe-ps) / 1e9)}
	pt.Unfinished = acc.requests - len(acc.ttft)
	var pooled []float64
	for i := range r.Pods {
		pod, drain := a.pod(acc, i, pt.Name, pe-ps, windows)
		if drain != nil {
			pooled = append(pooled, *drain)
		}
		pt.Pods = append(pt.Pods, pod)
	}
	if len(pooled) > 0 {
		q := QuantilesOf(pooled)
		pt.PooledDrainRate = ptr(q.P50)
	}
	pt.PromptTokens = QuantilesOf(acc.prompt)
	pt.CachedTokens = QuantilesOf(acc.cached)
	if acc.promptSum > 0 {
		pt.CacheHitRate = acc.cachedSum / acc.promptSum
	}
	pt.TTFT = QuantilesOf(acc.ttft)
	o := &acc.outcomes
	pt.Outcomes = Outcomes{NotApplicable: o[gate.OutcomeNotApplicable], Exploration: o[gate.OutcomeExploration],
		NoMatch: o[gate.OutcomeNoMatch], Sticky: o[gate.OutcomeSticky], LoadOverride: o[gate.OutcomeLoadOverride],
		MissingSignal: o[gate.OutcomeMissingSignal]}
	v := &acc.verdicts
	pt.Verdicts = Verdicts{NotGated: v[gate.NotGated], Unknown: v[gate.Unknown], HeldOK: v[gate.HeldOK],
		HeldWrong: v[gate.HeldWrong], ReleasedOK: v[gate.ReleasedOK], ReleasedWrong: v[gate.ReleasedWrong],
		ReleasedCeiling: v[gate.ReleasedCeiling]}
	if k := pt.Verdicts.Known(); k > 0 {
		pt.WronglyHeldRate = ptr(float64(pt.Verdicts.HeldWrong) / float64(k))
		pt.ForfeitedRate = ptr(float64(pt.Verdicts.ReleasedWrong) / float64(k))
	}
	pt.ExcessTokens = ExcessTokens{HeldWrong: acc.excessHeld, Released: acc.excessRel}
	pt.DecodeOnly, pt.Disaggregated = acc.disagg[0], acc.disagg[1]
	pt.SchedulingFailures = acc.failed
	return pt
}

// pod is engine i's truth in the phase named phase of length span (ns), and
// its drain rate over its saturated windows (nil without any).
func (a *Acc) pod(acc *phaseAcc, i int, phase string, span int64, windows []Window) (PodTruth, *float64) {
	sc, x := a.run.Scenario, a.run.Shape
	ep := x.EndpointOf(i)
	pod := PodTruth{Pod: x.PodName(sc, x.PodOf(ep)), Rank: x.RankOf(ep), Engine: i % x.DPEngines, Endpoint: x.EndpointName(sc, ep),
		Scraped: x.Scraped(i), Role: x.Role(sc, x.PodOf(ep)), NominalRate: sc.Pods.Engine.NominalRate, Routed: acc.pods[i].routed,
		TTFT: QuantilesOf(acc.pods[i].ttft)}
	var work, cwork, dec, busy, sec float64
	for _, w := range windows {
		if w.Pod != pod.Pod || w.Rank != pod.Rank || w.Engine != pod.Engine || w.Phase != phase {
			continue
		}
		d := w.End - w.Start
		pod.SaturatedWindows++
		work += w.DrainRate * d
		cwork += w.CounterDrainRate * d
		dec += w.DecodeShare * d
		busy += d
		sec += d
	}
	var drain *float64
	if sec > 0 {
		pod.DrainRate, pod.CounterDrainRate, pod.DecodeShare = ptr(work/sec), ptr(cwork/sec), ptr(dec/busy)
		drain = ptr(work / sec)
	}
	if acc.pods[i].prefillSec > 0 {
		pod.PerRequestRate = ptr(acc.pods[i].computedTok / acc.pods[i].prefillSec)
	}
	if acc.startSet && acc.endSet {
		pod.ComputedTokens = acc.workEnd[i] - acc.workStart[i]
		pod.BusyFraction = (acc.busyEnd[i] - acc.busyStart[i]) / float64(span)
	}
	return pod, drain
}

// dayPool pools the measured phases of each simulated day.
type dayPool struct {
	perDay          int
	ttft            [][]float64
	requests        []int
	heldWrong, know []int64
	seen            []bool
}

func newDayPool(sc *scenario.Scenario) *dayPool {
	p := &dayPool{perDay: sc.DayPhases}
	if n := sc.DayCount(); sc.DayPhases > 0 {
		p.ttft, p.requests = make([][]float64, n), make([]int, n)
		p.heldWrong, p.know, p.seen = make([]int64, n), make([]int64, n), make([]bool, n)
	}
	return p
}

func (p *dayPool) add(phase int, ttft []float64, requests int, v Verdicts) {
	if p.perDay <= 0 {
		return
	}
	d := phase / p.perDay
	p.ttft[d] = append(p.ttft[d], ttft...)
	p.requests[d] += requests
	p.heldWrong[d] += v.HeldWrong
	p.know[d] += v.Known()
	p.seen[d] = true
}

func (p *dayPool) truth() []OverallTruth {
	if p.perDay <= 0 {
		return nil
	}
	out := make([]OverallTruth, len(p.ttft))
	for d := range out {
		if !p.seen[d] {
			continue
		}
		out[d] = OverallTruth{Requests: p.requests[d], TTFT: QuantilesOf(p.ttft[d])}
		if p.know[d] > 0 {
			out[d].WronglyHeldRate = ptr(float64(p.heldWrong[d]) / float64(p.know[d]))
		}
	}
	return out
}
