package estimator

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/prometheus/prometheus/promql/parser"

	"github.com/gatetuner/gatetuner/gate"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultLookback            = 6 * time.Hour
	DefaultWindow              = 2 * time.Minute
	DefaultSnapshotStep        = 30 * time.Second
	DefaultMinSaturatedWindows = 6
	DefaultMaxKVUsage          = 0.95
	DefaultMinSamplesPerWindow = 4
	DefaultStaleAfter          = 2 * time.Minute
	DefaultMinPodCoverage      = 1.0
	DefaultFreshnessHalfLife   = 12 * time.Hour
	// DefaultMaxPointsPerSeries stays under Prometheus' 11,000-point limit.
	DefaultMaxPointsPerSeries = 11000
	DefaultConcurrency        = 4
	// DefaultPriorConfidence is a prior's confidence: below the tuner's
	// default minimum (0.7), so a prior alone never drives an apply.
	DefaultPriorConfidence = 0.5
)

// DefaultReplicaLabels are the labels that tell EPP replicas apart.
var DefaultReplicaLabels = []string{"pod", "instance"}

// Config tunes the estimator; zero fields take the defaults above.
type Config struct {
	// Lookback is how far back evidence is read.
	Lookback time.Duration
	// Window is the saturation window (≥ 4 scrape intervals, ≥ 10× the p99
	// prefill time).
	Window time.Duration
	// SnapshotStep is the spacing of in-flight snapshots.
	SnapshotStep time.Duration
	// MinSaturatedWindows is the evidence B needs before it is reported.
	MinSaturatedWindows int
	// MaxKVUsage: a window whose KV usage reaches it is not saturated-clean.
	MaxKVUsage float64
	// MinSamplesPerWindow: a window with fewer waiting-queue samples is not judged.
	MinSamplesPerWindow int
	// StaleAfter: a pod whose newest sample is older is stale.
	StaleAfter time.Duration
	// MinPodCoverage in (0,1]: the share of expected pods that must be covered.
	MinPodCoverage float64
	// FreshnessHalfLife ages confidence: ×½ per half-life since the newest window.
	FreshnessHalfLife time.Duration
	// MaxPointsPerSeries bounds every range query (steps are chosen to stay under it).
	MaxPointsPerSeries int
	// Concurrency bounds the queries in flight at once.
	Concurrency int
	// ReplicaLabels tell EPP replicas apart.
	ReplicaLabels []string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Lookback <= 0 {
		c.Lookback = DefaultLookback
	}
	if c.Window <= 0 {
		c.Window = DefaultWindow
	}
	if c.SnapshotStep <= 0 {
		c.SnapshotStep = DefaultSnapshotStep
	}
	if c.MinSaturatedWindows <= 0 {
		c.MinSaturatedWindows = DefaultMinSaturatedWindows
	}
	if c.MaxKVUsage <= 0 {
		c.MaxKVUsage = DefaultMaxKVUsage
	}
	if c.MinSamplesPerWindow <= 0 {
		c.MinSamplesPerWindow = DefaultMinSamplesPerWindow
	}
	if c.StaleAfter <= 0 {
		c.StaleAfter = DefaultStaleAfter
	}
	if c.MinPodCoverage <= 0 {
		c.MinPodCoverage = DefaultMinPodCoverage
	}
	if c.FreshnessHalfLife <= 0 {
		c.FreshnessHalfLife = DefaultFreshnessHalfLife
	}
	if c.MaxPointsPerSeries <= 0 {
		c.MaxPointsPerSeries = DefaultMaxPointsPerSeries
	}
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
	}
	if len(c.ReplicaLabels) == 0 {
		c.ReplicaLabels = DefaultReplicaLabels
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Window < time.Second:
		return fmt.Errorf("window %v: want at least 1s", c.Window)
	case c.Lookback < c.Window:
		return fmt.Errorf("lookback %v is shorter than the window %v", c.Lookback, c.Window)
	case c.MaxKVUsage > 1:
		return fmt.Errorf("maxKVUsage %v: want (0,1]", c.MaxKVUsage)
	case c.MinPodCoverage > 1:
		return fmt.Errorf("minPodCoverage %v: want (0,1]", c.MinPodCoverage)
	case c.MaxPointsPerSeries < 2:
		return fmt.Errorf("maxPointsPerSeries %d: want at least 2", c.MaxPointsPerSeries)
	}
	for _, l := range c.ReplicaLabels {
		if !isLabelName(l) {
			return fmt.Errorf("replica label %q is not a valid label name", l)
		}
	}
	return nil
}

func isLabelName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// Target is one deployment: its vLLM pods, its EPP and what its config says.
type Target struct {
	// Name identifies the target (the tracker keeps one history per name).
	Name string `json:"name"`
	// VLLMSelector are PromQL label matchers, without braces, selecting the
	// target's vLLM engine series, e.g. `namespace="llm-d",pod=~"qwen-decode-.*"`.
	VLLMSelector string `json:"vllmSelector"`
	// EPPSelector selects the target's EPP series (llm_d_epp_*); empty means
	// the EPP is not read (no in-flight snapshots, no routing shares).
	EPPSelector string `json:"eppSelector,omitempty"`
	// MaxNumBatchedTokens is vLLM's --max-num-batched-tokens (0 = unknown):
	// needed by the step rate and the nominal estimate.
	MaxNumBatchedTokens int `json:"maxNumBatchedTokens,omitempty"`
	// MaxNumSeqs is vLLM's --max-num-seqs (0 = unknown).
	MaxNumSeqs int `json:"maxNumSeqs,omitempty"`
	// Prior stands in for the drain rate until live evidence suffices.
	Prior *Prior `json:"prior,omitempty"`
	// InFlightProducer is the producer_name of the in-flight series the
	// gate reads (the gate's inFlightLoadProducerName); empty: the only
	// producer found.
	InFlightProducer string `json:"inFlightProducer,omitempty"`
	// SyncedEPPReplicas: the EPP replicas sync in-flight load across
	// replicas (each gauge holds its own share, the gate sees the sum), so
	// snapshots add the replicas up.
	SyncedEPPReplicas bool `json:"syncedEPPReplicas,omitempty"`
	// PDGateProfile, for a P/D-disaggregated pool, is the scheduling
	// profile whose plugins include the gate: PDGatePrefill or PDGateDecode;
	// empty: inferred from the gate's decision count when possible.
	PDGateProfile string `json:"pdGateProfile,omitempty"`
	// GatePlugin is the plugin_name the decision counter labels the
	// target's filter with: its name in the EPP config. Empty: every
	// plugin_name is counted and none is checked.
	GatePlugin string `json:"gatePlugin,omitempty"`
	// Reports is what the target's EPP build exports about each decision
	// (its build profile's gate.Profile.Reports); nil: not known, the
	// counter is read when its series exist.
	Reports *gate.Reports `json:"-"`
}

// Validate checks the selectors parse as PromQL label matchers.
func (t *Target) Validate() error {
	if t.Name == "" {
		return errors.New("target: name is required")
	}
	if strings.TrimSpace(t.VLLMSelector) == "" {
		return fmt.Errorf("target %s: vllmSelector is required (e.g. namespace=\"llm-d\",pod=~\"name-.*\")", t.Name)
	}
	if err := checkSelector(t.VLLMSelector); err != nil {
		return fmt.Errorf("target %s: vllmSelector: %w", t.Name, err)
	}
	if t.EPPSelector != "" {
		if err := checkSelector(t.EPPSelector); err != nil {
			return fmt.Errorf("target %s: eppSelector: %w", t.Name, err)
		}
	}
	if t.PDGateProfile != "" && t.PDGateProfile != PDGatePrefill && t.PDGateProfile != PDGateDecode {
		return fmt.Errorf("target %s: pdGateProfile must be %s or %s, got %q", t.Name, PDGatePrefill, PDGateDecode, t.PDGateProfile)
	}
	if t.MaxNumBatchedTokens < 0 || t.MaxNumSeqs < 0 {
		return fmt.Errorf("target %s: maxNumBatchedTokens and maxNumSeqs must be >= 0", t.Name)
	}
	if t.Prior != nil {
		if err := t.Prior.validate(); err != nil {
			return fmt.Errorf("target %s: prior: %w", t.Name, err)
		}
	}
	return nil
}

// checkSelector parses sel as the inside of a PromQL vector selector.
func checkSelector(sel string) error {
	ms, err := parser.NewParser(parser.Options{}).ParseMetricSelector("{" + sel + "}")
	if err != nil {
		return fmt.Errorf("%q does not parse as label matchers: %w", sel, err)
	}
	for _, m := range ms {
		if m.Name == "__name__" {
			return fmt.Errorf("%q: do not match __name__, the estimator picks the metric names", sel)
		}
	}
	return nil
}

// Prior is a drain-rate value known before live evidence: an llm-d
// calibration record or a configured number.
type Prior struct {
	// Value in tokens per second.
	Value float64 `json:"value"`
	// Origin is "configured" or "calibration-record".
	Origin string `json:"origin"`
	// Detail says where it came from (a file, a fingerprint).
	Detail string `json:"detail,omitempty"`
	// Confidence reported while the prior is in use; 0 means DefaultPriorConfidence.
	Confidence float64 `json:"confidence,omitempty"`
}

// Prior origins.
const (
	PriorConfigured        = "configured"
	PriorCalibrationRecord = "calibration-record"
)

func (p *Prior) validate() error {
	if !(p.Value > 0) || math.IsInf(p.Value, 0) {
		return fmt.Errorf("value %v: want a positive finite tok/s", p.Value)
	}
	if p.Confidence < 0 || p.Confidence > 1 || math.IsNaN(p.Confidence) {
		return fmt.Errorf("confidence %v: want [0,1]", p.Confidence)
	}
	if p.Origin != PriorConfigured && p.Origin != PriorCalibrationRecord {
		return fmt.Errorf("origin %q: want %q or %q", p.Origin, PriorConfigured, PriorCalibrationRecord)
	}
	return nil
}

func (p *Prior) confidence() float64 {
	if p.Confidence > 0 {
		return p.Confidence
	}
	return DefaultPriorConfidence
}
