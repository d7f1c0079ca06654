package fleetsim

import (
	"encoding/json"
	"io"
	"math"
	"slices"
	"time"

	"github.com/gatetuner/gatetuner/gate"
)

// Truth is the ground truth of one run: what really happened, per phase and
// per pod, for estimates and recommendations to be judged against.
type Truth struct {
	Scenario string `json:"scenario"`
	Seed     uint64 `json:"seed"`
	// BaseTime is the wall time of scenario time 0.
	BaseTime string `json:"baseTime"`
	// Start and End bound the measured range, in seconds of scenario time.
	Start                 float64        `json:"start"`
	End                   float64        `json:"end"`
	ScrapeIntervalSeconds float64        `json:"scrapeIntervalSeconds"`
	Saturation            SaturationRule `json:"saturation"`
	Phases                []PhaseTruth   `json:"phases"`
	// Overall pools the measured phases' requests and verdicts.
	Overall OverallTruth `json:"overall"`
	// Days pools each simulated day's measured phases (scenarios Days made
	// only; Days[0] is day 1).
	Days []OverallTruth `json:"days,omitempty"`
	// Windows lists every saturated window of every pod, in time then pod order.
	Windows []Window `json:"windows"`
	// Exporters is what the run exported and what Prometheus can see of it.
	Exporters ExportersTruth `json:"exporters"`
	// Trace is the trace class's truth (scenarios with a trace only).
	Trace *TraceTruth `json:"trace,omitempty"`
}

// ExportersTruth is the export shape of a run and the names it joins on.
type ExportersTruth struct {
	Shape string `json:"shape"`
	// GateProducer is the producer_name of the in-flight series the gate reads.
	GateProducer string `json:"gateProducer"`
	// SyncedReplicas: the gate sees the in-flight sum over EPP replicas.
	EPPReplicas    int  `json:"eppReplicas"`
	SyncedReplicas bool `json:"syncedReplicas"`
	// Engines lists every vLLM engine: its pod, rank, port, EPP endpoint name
	// and whether its vLLM series reach Prometheus.
	Engines []EngineTruth `json:"engines"`
	// PD describes a P/D-disaggregated pool (nil without one).
	PD *PDTruth `json:"pd,omitempty"`
}

// PDTruth is a P/D pool's routing setup.
type PDTruth struct {
	// GateProfile is the scheduling profile carrying the tuned filter: its
	// pods are the ones whose in-flight load the gate compares.
	GateProfile     string   `json:"gateProfile"`
	NonCachedTokens int      `json:"nonCachedTokens"`
	UsageCached     string   `json:"usageCached"`
	PrefillPods     []string `json:"prefillPods"`
	DecodePods      []string `json:"decodePods"`
}

// EngineTruth names one vLLM engine across the exporters: its pod, rank,
// internal engine index (the engine label), port and EPP endpoint.
type EngineTruth struct {
	Pod      string `json:"pod"`
	Rank     int    `json:"rank"`
	Engine   int    `json:"engine"`
	Port     int    `json:"port"`
	Endpoint string `json:"endpoint"`
	Scraped  bool   `json:"scraped"`
	// Role is the pod's llm-d.ai/role in a P/D pool ("" otherwise).
	Role string `json:"role,omitempty"`
}

// OverallTruth is the whole measured range: every phase's requests pooled.
type OverallTruth struct {
	Requests int `json:"requests"`
	// TTFT is arrival to first token over every finished request, in seconds.
	TTFT Quantiles `json:"ttftSeconds"`
	// WronglyHeldRate = held_wrong / known over every phase; null when nothing is known.
	WronglyHeldRate *float64 `json:"wronglyHeldRate"`
}

// SaturationRule defines a saturated window. Windows are the consecutive
// intervals (Start + k·W, Start + (k+1)·W] of the measured range, judged on
// the scrapes whose timestamps fall in them (W/scrape interval of them). A
// pod's window is saturated iff at every one of those scrapes
// vllm:num_requests_waiting > 0, vllm:kv_cache_usage_perc < MaxKVUsage and
// (unless BelowMaxNumSeqs is false) vllm:num_requests_running < max_num_seqs,
// and vllm:num_preemptions_total did not increase between the scrape at the
// window's start and the one at its end.
type SaturationRule struct {
	WindowSeconds   float64 `json:"windowSeconds"`
	MaxKVUsage      float64 `json:"maxKVUsage"`
	BelowMaxNumSeqs bool    `json:"belowMaxNumSeqs"`
}

// Window is one engine's saturated window.
type Window struct {
	Pod string `json:"pod"`
	// Rank is the engine's data-parallel rank in its pod (0 without DP);
	// Engine its vLLM engine index behind the rank's port (internal DP).
	Rank   int `json:"rank"`
	Engine int `json:"engine"`
	// Phase is the phase holding the whole window ("" when it straddles two).
	Phase     string  `json:"phase"`
	Start     float64 `json:"start"` // scenario seconds
	End       float64 `json:"end"`
	StartTime string  `json:"startTime"` // wall time, RFC 3339
	EndTime   string  `json:"endTime"`
	// DrainRate is the engine's prefill work in the window (uncached prompt
	// tokens computed, steps counted pro rata) per second.
	DrainRate float64 `json:"drainRate"`
	// CounterDrainRate is the increase of
	// vllm:prompt_tokens_by_source_total{source="local_compute"} between the
	// window's scrapes per second (lumpy: counted at prefill completion).
	CounterDrainRate float64 `json:"counterDrainRate"`
	// DecodeShare is the share of the window's step time spent on decode tokens.
	DecodeShare float64 `json:"decodeShare"`
}

// PhaseTruth is one measured phase.
type PhaseTruth struct {
	Name      string        `json:"name"`
	Start     float64       `json:"start"`
	End       float64       `json:"end"`
	StartTime string        `json:"startTime"`
	EndTime   string        `json:"endTime"`
	Settings  SettingsTruth `json:"settings"`
	// Requests arrived in the phase; RequestRate is that per second.
	Requests    int        `json:"requests"`
	RequestRate float64    `json:"requestRate"`
	Pods        []PodTruth `json:"pods"`
	// PooledDrainRate is the median over pods of their drain rate (pods with
	// saturated windows in the phase); null without any.
	PooledDrainRate *float64 `json:"pooledDrainRate"`
	// PromptTokens and CachedTokens are per-request distributions (cached =
	// the engine's prefix-cache hit at first admission).
	PromptTokens Quantiles `json:"promptTokens"`
	CachedTokens Quantiles `json:"cachedTokens"`
	// CacheHitRate is cached over prompt tokens, summed over requests.
	CacheHitRate float64 `json:"cacheHitRate"`
	// TTFT is arrival to first token (queueing included), in seconds.
	TTFT Quantiles `json:"ttftSeconds"`
	// Unfinished counts requests that got no first token before the drain limit.
	Unfinished int `json:"unfinished"`
	// Outcomes are the EPP's decision outcomes; Verdicts their gate.Judge
	// verdicts (an exploration draw counts as not_gated).
	Outcomes Outcomes `json:"outcomes"`
	Verdicts Verdicts `json:"verdicts"`
	// WronglyHeldRate = held_wrong / known; ForfeitedRate = released_wrong /
	// known (known = held_* + released_*); null when nothing is known.
	WronglyHeldRate *float64 `json:"wronglyHeldRate"`
	ForfeitedRate   *float64 `json:"forfeitedRate"`
	// ExcessTokens sums the verdicts' excess costs.
	ExcessTokens ExcessTokens `json:"excessTokens"`
	// DecodeOnly and Disaggregated count a P/D pool's requests by the
	// decider's choice (Outcomes and Verdicts count the gate's decisions
	// only: with the gate in the prefill profile, the disaggregated ones).
	DecodeOnly    int64 `json:"decodeOnly,omitempty"`
	Disaggregated int64 `json:"disaggregated,omitempty"`
	// SchedulingFailures counts requests the EPP found no endpoint for
	// (pods departed); they are in Requests and Unfinished.
	SchedulingFailures int `json:"schedulingFailures,omitempty"`
}

// PodTruth is one engine (a pod, or one data-parallel rank of a pod) in one
// phase.
type PodTruth struct {
	Pod string `json:"pod"`
	// Rank is the data-parallel rank (0 without DP); Endpoint the EPP's name
	// for the engine; Scraped whether its vLLM series reach Prometheus.
	Rank        int     `json:"rank"`
	Engine      int     `json:"engine"`
	Endpoint    string  `json:"endpoint"`
	Scraped     bool    `json:"scraped"`
	Role        string  `json:"role,omitempty"`
	NominalRate float64 `json:"nominalRate"`
	// DrainRate is the engine's prefill work over the pod's saturated windows
	// in the phase divided by their length; null without any.
	DrainRate        *float64 `json:"drainRate"`
	CounterDrainRate *float64 `json:"counterDrainRate"`
	DecodeShare      *float64 `json:"decodeShare"`
	SaturatedWindows int      `json:"saturatedWindows"`
	// PerRequestRate is estimator A's reading: computed prompt tokens of the
	// requests whose prefill completed in the phase over the sum of their
	// prefill times (first scheduled to first token).
	PerRequestRate *float64 `json:"perRequestRate"`
	// Routed counts the requests the EPP sent to the pod.
	Routed int `json:"routed"`
	// TTFT is the TTFT of the requests routed to the pod, in seconds.
	TTFT Quantiles `json:"ttftSeconds"`
	// ComputedTokens is the engine's prefill work in the phase.
	ComputedTokens float64 `json:"computedTokens"`
	// BusyFraction is the share of the phase the engine was stepping.
	BusyFraction float64 `json:"busyFraction"`
}

// Quantiles summarise a distribution (linear interpolation between order
// statistics); all zero when N = 0.
type Quantiles struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
}

// Outcomes count decisions by outcome.
type Outcomes struct {
	NotApplicable int64 `json:"not_applicable"`
	Exploration   int64 `json:"exploration"`
	NoMatch       int64 `json:"no_match"`
	Sticky        int64 `json:"sticky"`
	LoadOverride  int64 `json:"load_override"`
	MissingSignal int64 `json:"missing_signal"`
}

// Verdicts count decisions by verdict.
type Verdicts struct {
	NotGated        int64 `json:"not_gated"`
	Unknown         int64 `json:"unknown"`
	HeldOK          int64 `json:"held_ok"`
	HeldWrong       int64 `json:"held_wrong"`
	ReleasedOK      int64 `json:"released_ok"`
	ReleasedWrong   int64 `json:"released_wrong"`
	ReleasedCeiling int64 `json:"released_ceiling"`
}

// Known is the number of decisions with a known verdict.
func (v *Verdicts) Known() int64 {
	return v.HeldOK + v.HeldWrong + v.ReleasedOK + v.ReleasedWrong + v.ReleasedCeiling
}

// ExcessTokens are the summed excess costs of wrong verdicts.
type ExcessTokens struct {
	HeldWrong int64 `json:"heldWrong"`
	Released  int64 `json:"released"`
}

// SettingsTruth are the gate settings in force in a phase.
type SettingsTruth struct {
	Mode                   string  `json:"mode"`
	MaxTTFTPenaltyMs       float64 `json:"maxTTFTPenaltyMs"`
	PeakPrefillThroughput  float64 `json:"peakPrefillThroughput"`
	AffinityThreshold      float64 `json:"affinityThreshold"`
	ExplorationProbability float64 `json:"explorationProbability"`
	TTFTSource             string  `json:"ttftSource"`
	Semantics              string  `json:"semantics"`
	// BarTokens is maxTTFTPenaltyMs × peakPrefillThroughput / 1000.
	BarTokens float64 `json:"barTokens"`
}

func settingsTruth(s gate.Settings) SettingsTruth {
	return SettingsTruth{Mode: s.Mode.String(), MaxTTFTPenaltyMs: s.MaxTTFTPenaltyMs, PeakPrefillThroughput: s.PeakPrefillThroughput,
		AffinityThreshold: s.AffinityThreshold, ExplorationProbability: s.ExplorationProbability, TTFTSource: s.Source.String(),
		Semantics: s.Semantics.String(), BarTokens: s.BarTokens()}
}

// Phase returns the named phase's truth, or nil.
func (t *Truth) Phase(name string) *PhaseTruth {
	for i := range t.Phases {
		if t.Phases[i].Name == name {
			return &t.Phases[i]
		}
	}
	return nil
}

// WriteJSON writes the truth as indented JSON.
func (t *Truth) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(t)
}

// --- accumulation ---

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

type truthAcc struct {
	phases  []phaseAcc
	sampleT []int64
	samples [][]podSample // per pod
}

func (a *truthAcc) init(s *sim) {
	a.phases = make([]phaseAcc, len(s.sc.Phases))
	for i := range a.phases {
		n := len(s.pods)
		a.phases[i].pods = make([]podPhaseAcc, n)
		a.phases[i].workStart, a.phases[i].busyStart = make([]float64, n), make([]float64, n)
		a.phases[i].workEnd, a.phases[i].busyEnd = make([]float64, n), make([]float64, n)
	}
	a.samples = make([][]podSample, len(s.pods))
}

func (a *truthAcc) decided(s *sim, r *request, dec *decision, measured bool) {
	if !measured {
		return
	}
	ph := &a.phases[r.phase]
	ph.requests++
	ph.pods[r.pod].routed++
	if s.epp.pd != nil {
		ph.disagg[boolInt(dec.prefill >= 0)]++
		if !dec.gated {
			return
		}
	}
	ph.outcomes[dec.outcome]++
	d := dec.d
	d.Outcome = dec.outcome
	v, excess := gate.Judge(&d)
	ph.verdicts[v]++
	switch v {
	case gate.HeldWrong:
		ph.excessHeld += excess
	case gate.ReleasedWrong, gate.ReleasedCeiling:
		ph.excessRel += excess
	}
}

// failed counts a request whose scheduling failed (no endpoint).
func (a *truthAcc) failed(r *request, measured bool) {
	if measured {
		a.phases[r.phase].requests++
		a.phases[r.phase].failed++
	}
}

func (a *truthAcc) firstToken(s *sim, p *pod, r *request, now int64) {
	if r.arrival >= s.measStart {
		// A disaggregated request's prefix reuse is its prefill leg's hit
		// (its decode leg "caches" the transferred prompt).
		cached := r.firstCached
		if r.peer != nil {
			cached = r.peer.firstCached
		}
		ph := &a.phases[r.phase]
		ph.ttft = append(ph.ttft, float64(now-r.arrival)/1e9)
		ph.pods[p.idx].ttft = append(ph.pods[p.idx].ttft, float64(now-r.arrival)/1e9)
		ph.prompt = append(ph.prompt, float64(r.prompt))
		ph.cached = append(ph.cached, float64(cached))
		ph.promptSum += float64(r.prompt)
		ph.cachedSum += float64(cached)
	}
	a.podFirstToken(s, p, r, now)
}

// podFirstToken accounts a first token to its engine's per-request rate
// (prefill legs included).
func (a *truthAcc) podFirstToken(s *sim, p *pod, r *request, now int64) {
	if now >= s.measStart && now <= s.runEnd {
		pa := &a.phases[s.phaseAt(now)].pods[p.idx]
		pa.computedTok += float64(r.prompt - r.firstCached)
		pa.prefillSec += float64(now-r.firstSched) / 1e9
	}
}

func (a *truthAcc) sample(s *sim, t int64) {
	a.sampleT = append(a.sampleT, t)
	for i, p := range s.pods {
		w, b, d := p.progress(t)
		a.samples[i] = append(a.samples[i], podSample{
			waiting: int32(p.waiting.len()), running: p.nRunning,
			kvUsage: float64(p.usedBlocks()) / float64(p.cfg.totalBlocks),
			preempt: p.m.preemptions, work: w, busy: b, dec: d, localCompute: p.m.localCompute,
		})
	}
	// Phase start/end snapshots of engine work.
	for pi := range a.phases {
		ph := &a.phases[pi]
		if !ph.startSet && t >= s.phaseStart[pi] && t >= s.measStart {
			ph.startSet = true
			for i, p := range s.pods {
				ph.workStart[i], ph.busyStart[i], _ = p.progress(t)
			}
		}
		if ph.startSet && t <= s.phaseEnd[pi] {
			ph.endSet = true
			for i, p := range s.pods {
				ph.workEnd[i], ph.busyEnd[i], _ = p.progress(t)
			}
		}
	}
}

// quantiles computes the summary of vs (sorted in place).
func quantiles(vs []float64) Quantiles {
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

func (s *sim) rfc(t int64) string {
	return s.base.Add(time.Duration(t)).UTC().Format(time.RFC3339Nano)
}

// windowSamples is the number of scrapes per saturation window.
func (s *sim) windowSamples() int {
	w := s.opt.SaturationWindow
	if w <= 0 {
		w = DefaultSaturationWindow
	}
	n := int(math.Round(float64(w) / float64(s.scrapeNs)))
	return max(n, 1)
}

// windows computes every pod's saturated windows from the truth samples.
func (s *sim) windows() []Window {
	a := &s.acc
	n := s.windowSamples()
	kvMax := s.opt.MaxKVUsage
	if kvMax <= 0 {
		kvMax = DefaultMaxKVUsage
	}
	maxSeqs := int32(s.sc.Pods.Engine.MaxNumSeqs)
	var out []Window
	for j := 0; (j+1)*n < len(a.sampleT); j++ {
		i0, i1 := j*n, (j+1)*n
		t0, t1 := a.sampleT[i0], a.sampleT[i1]
		phase := ""
		for pi := range s.sc.Phases {
			if t0 >= s.phaseStart[pi] && t1 <= s.phaseEnd[pi] {
				phase = s.sc.Phases[pi].Name
			}
		}
		for pi := range s.pods {
			smp := a.samples[pi]
			ok := smp[i1].preempt == smp[i0].preempt
			for k := i0 + 1; ok && k <= i1; k++ {
				x := &smp[k]
				ok = x.waiting > 0 && x.kvUsage < kvMax && (s.opt.IgnoreMaxNumSeqs || x.running < maxSeqs)
			}
			if !ok {
				continue
			}
			sec := float64(t1-t0) / 1e9
			ep := s.x.endpointOf(pi)
			w := Window{Pod: s.x.podName(s.sc, s.x.podOf(ep)), Rank: s.x.rankOf(ep), Engine: pi % s.x.DPEngines, Phase: phase, Start: float64(t0) / 1e9, End: float64(t1) / 1e9,
				StartTime: s.rfc(t0), EndTime: s.rfc(t1),
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

func (s *sim) truth() *Truth {
	a := &s.acc
	kvMax := s.opt.MaxKVUsage
	if kvMax <= 0 {
		kvMax = DefaultMaxKVUsage
	}
	t := &Truth{
		Scenario: s.sc.Name, Seed: s.opt.Seed, BaseTime: s.base.UTC().Format(time.RFC3339),
		Start: float64(s.measStart) / 1e9, End: float64(min(s.runEnd, s.now)) / 1e9,
		ScrapeIntervalSeconds: float64(s.scrapeNs) / 1e9,
		Saturation: SaturationRule{WindowSeconds: float64(s.windowSamples()) * float64(s.scrapeNs) / 1e9,
			MaxKVUsage: kvMax, BelowMaxNumSeqs: !s.opt.IgnoreMaxNumSeqs},
		Windows: s.windows(),
		Trace:   s.wl.traceTruth(),
	}
	if t.Windows == nil {
		t.Windows = []Window{}
	}
	t.Exporters = ExportersTruth{Shape: s.x.Name, GateProducer: s.x.Producers[0], EPPReplicas: s.x.EPPReplicas,
		SyncedReplicas: s.x.SyncReplicas && s.x.EPPReplicas > 1}
	if s.x.pd() {
		t.Exporters.PD = &PDTruth{GateProfile: s.x.PDGateProfile, NonCachedTokens: s.x.PDNonCachedTokens, UsageCached: s.x.PDUsageCached}
	}
	for i := range s.pods {
		ep := s.x.endpointOf(i)
		pod := s.x.podOf(ep)
		t.Exporters.Engines = append(t.Exporters.Engines, EngineTruth{Pod: s.x.podName(s.sc, pod), Rank: s.x.rankOf(ep),
			Engine: i % s.x.DPEngines, Port: s.x.port(ep), Endpoint: s.x.endpointName(s.sc, ep), Scraped: s.x.scraped(i), Role: s.x.role(s.sc, pod)})
		if pd := t.Exporters.PD; pd != nil {
			if s.x.isPrefill(s.sc, pod) {
				pd.PrefillPods = append(pd.PrefillPods, s.x.podName(s.sc, pod))
			} else {
				pd.DecodePods = append(pd.DecodePods, s.x.podName(s.sc, pod))
			}
		}
	}
	end := s.runEnd
	if s.live {
		end = s.now
	}
	var allTTFT []float64
	var heldWrong, known int64
	days := newDayPool(s.sc)
	for pi := range s.sc.Phases {
		ps, pe := s.phaseStart[pi], s.phaseEnd[pi]
		if pe <= s.measStart || ps >= end {
			continue
		}
		ps, pe = max(ps, s.measStart), min(pe, end)
		acc := &a.phases[pi]
		pt := PhaseTruth{Name: s.sc.Phases[pi].Name, Start: float64(ps) / 1e9, End: float64(pe) / 1e9,
			StartTime: s.rfc(ps), EndTime: s.rfc(pe), Settings: settingsTruth(s.settings[pi]),
			Requests: acc.requests, RequestRate: float64(acc.requests) / (float64(pe-ps) / 1e9)}
		pt.Unfinished = acc.requests - len(acc.ttft)
		var pooled []float64
		for i := range s.pods {
			ep := s.x.endpointOf(i)
			pod := PodTruth{Pod: s.x.podName(s.sc, s.x.podOf(ep)), Rank: s.x.rankOf(ep), Engine: i % s.x.DPEngines, Endpoint: s.x.endpointName(s.sc, ep),
				Scraped: s.x.scraped(i), Role: s.x.role(s.sc, s.x.podOf(ep)), NominalRate: s.sc.Pods.Engine.NominalRate, Routed: acc.pods[i].routed,
				TTFT: quantiles(acc.pods[i].ttft)}
			var work, cwork, dec, busy, sec float64
			for _, w := range t.Windows {
				if w.Pod != pod.Pod || w.Rank != pod.Rank || w.Engine != pod.Engine || w.Phase != pt.Name {
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
			if sec > 0 {
				pod.DrainRate, pod.CounterDrainRate, pod.DecodeShare = ptr(work/sec), ptr(cwork/sec), ptr(dec/busy)
				pooled = append(pooled, work/sec)
			}
			if acc.pods[i].prefillSec > 0 {
				pod.PerRequestRate = ptr(acc.pods[i].computedTok / acc.pods[i].prefillSec)
			}
			if acc.startSet && acc.endSet {
				pod.ComputedTokens = acc.workEnd[i] - acc.workStart[i]
				pod.BusyFraction = (acc.busyEnd[i] - acc.busyStart[i]) / float64(pe-ps)
			}
			pt.Pods = append(pt.Pods, pod)
		}
		if len(pooled) > 0 {
			q := quantiles(pooled)
			pt.PooledDrainRate = ptr(q.P50)
		}
		pt.PromptTokens = quantiles(acc.prompt)
		pt.CachedTokens = quantiles(acc.cached)
		if acc.promptSum > 0 {
			pt.CacheHitRate = acc.cachedSum / acc.promptSum
		}
		pt.TTFT = quantiles(acc.ttft)
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
		t.Phases = append(t.Phases, pt)
		allTTFT = append(allTTFT, acc.ttft...)
		t.Overall.Requests += acc.requests
		heldWrong, known = heldWrong+pt.Verdicts.HeldWrong, known+pt.Verdicts.Known()
		days.add(pi, acc.ttft, acc.requests, pt.Verdicts)
	}
	t.Overall.TTFT = quantiles(allTTFT)
	if known > 0 {
		t.Overall.WronglyHeldRate = ptr(float64(heldWrong) / float64(known))
	}
	t.Days = days.truth()
	return t
}

// dayPool pools the measured phases of each simulated day.
type dayPool struct {
	perDay          int
	ttft            [][]float64
	requests        []int
	heldWrong, know []int64
	seen            []bool
}

func newDayPool(sc *Scenario) *dayPool {
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
		out[d] = OverallTruth{Requests: p.requests[d], TTFT: quantiles(p.ttft[d])}
		if p.know[d] > 0 {
			out[d].WronglyHeldRate = ptr(float64(p.heldWrong[d]) / float64(p.know[d]))
		}
	}
	return out
}
