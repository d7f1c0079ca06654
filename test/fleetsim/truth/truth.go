// Package truth is the ground truth of a simulated run: what really happened
// per phase and per engine (drain rates over saturated windows, TTFT,
// verdicts of the gate's decisions), accumulated as the run goes.
package truth

import (
	"encoding/json"
	"io"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim/workload"
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
	Trace *workload.TraceTruth `json:"trace,omitempty"`
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
