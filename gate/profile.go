package gate

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Key identifies one plugin parameter of the prefix-cache-affinity filter.
type Key uint8

// The parameter keys any EPP build may know.
const (
	KeyAffinityThreshold Key = iota
	KeyExplorationProbability
	KeyMaxTTFTPenaltyMs
	KeyTTFTSource
	KeyPeakPrefillThroughput
	KeyPrefixMatchInfoProducerName
	KeyLatencyPredictionInfoProducerName
	KeyInFlightLoadProducerName
	KeyPenaltyMode
	KeyMaxInFlightRequestsDelta
	KeyPrefillCalibrationFile
	KeyPrefillCalibrationFingerprint
	KeyPrefillCalibrationRequired
	KeyMaxTokensInFlightPenalty
	numKeys
)

var keyNames = [numKeys]string{
	KeyAffinityThreshold:                 "affinityThreshold",
	KeyExplorationProbability:            "explorationProbability",
	KeyMaxTTFTPenaltyMs:                  "maxTTFTPenaltyMs",
	KeyTTFTSource:                        "ttftSource",
	KeyPeakPrefillThroughput:             "peakPrefillThroughput",
	KeyPrefixMatchInfoProducerName:       "prefixMatchInfoProducerName",
	KeyLatencyPredictionInfoProducerName: "latencyPredictionInfoProducerName",
	KeyInFlightLoadProducerName:          "inFlightLoadProducerName",
	KeyPenaltyMode:                       "penaltyMode",
	KeyMaxInFlightRequestsDelta:          "maxInFlightRequestsDelta",
	KeyPrefillCalibrationFile:            "prefillCalibrationFile",
	KeyPrefillCalibrationFingerprint:     "prefillCalibrationFingerprint",
	KeyPrefillCalibrationRequired:        "prefillCalibrationRequired",
	KeyMaxTokensInFlightPenalty:          "maxTokensInFlightPenalty",
}

// String returns the key's canonical spelling.
func (k Key) String() string {
	if k < numKeys {
		return keyNames[k]
	}
	return fmt.Sprintf("Key(%d)", uint8(k))
}

// LookupKey finds a key by name the way Go's encoding/json does: case-insensitively.
func LookupKey(name string) (Key, bool) {
	for k := Key(0); k < numKeys; k++ {
		if strings.EqualFold(keyNames[k], name) {
			return k, true
		}
	}
	return 0, false
}

// AllKeys returns every key known to the package, in canonical order.
func AllKeys() []Key {
	out := make([]Key, numKeys)
	for k := range out {
		out[k] = Key(k)
	}
	return out
}

// KeySet is a set of parameter keys.
type KeySet uint32

// Has reports whether k is in the set.
func (s KeySet) Has(k Key) bool { return s&(1<<k) != 0 }

// With returns the set with k added.
func (s KeySet) With(k Key) KeySet { return s | 1<<k }

// Keys returns the members in canonical order.
func (s KeySet) Keys() []Key {
	var out []Key
	for k := Key(0); k < numKeys; k++ {
		if s.Has(k) {
			out = append(out, k)
		}
	}
	return out
}

// String lists the members' canonical names, comma-separated.
func (s KeySet) String() string {
	var names []string
	for _, k := range s.Keys() {
		names = append(names, k.String())
	}
	return strings.Join(names, ", ")
}

func keySetOf(keys ...Key) KeySet {
	var s KeySet
	for _, k := range keys {
		s = s.With(k)
	}
	return s
}

// BaseKeys are the keys every supported EPP build accepts.
var baseKeys = keySetOf(KeyAffinityThreshold, KeyExplorationProbability, KeyMaxTTFTPenaltyMs,
	KeyTTFTSource, KeyPeakPrefillThroughput, KeyPrefixMatchInfoProducerName,
	KeyLatencyPredictionInfoProducerName, KeyInFlightLoadProducerName)

// BaseKeys returns the keys every supported EPP build accepts.
func BaseKeys() KeySet { return baseKeys }

// tokenBarKeys are the keys of the token-bar generation: no ttftSource and no
// peakPrefillThroughput (its TTFT gate reads the latency predictor only).
var tokenBarKeys = keySetOf(KeyAffinityThreshold, KeyExplorationProbability, KeyMaxTTFTPenaltyMs,
	KeyMaxTokensInFlightPenalty, KeyPrefixMatchInfoProducerName, KeyLatencyPredictionInfoProducerName,
	KeyInFlightLoadProducerName)

// Semantics is a generation of the filter's missing-signal behaviour.
type Semantics uint8

const (
	// SemanticsV1 (every release and main up to the newest stored): a missing
	// InFlightLoad counts as 0 tokens and a missing latency prediction as
	// math.MaxFloat64.
	SemanticsV1 Semantics = 1
	// SemanticsV2 (PR #2652's rule, as in 066c20ea1): endpoints without the
	// signal are skipped when taking a group minimum; a group without any
	// signal ends the decision with outcome missing_signal, keeping all.
	SemanticsV2 Semantics = 2
)

// String returns "v1" or "v2".
func (s Semantics) String() string {
	switch s {
	case SemanticsV1:
		return "v1"
	case SemanticsV2:
		return "v2"
	}
	return fmt.Sprintf("Semantics(%d)", uint8(s))
}

// ParseSemantics parses "v1" or "v2".
func ParseSemantics(s string) (Semantics, error) {
	switch strings.ToLower(s) {
	case "v1":
		return SemanticsV1, nil
	case "v2":
		return SemanticsV2, nil
	}
	return 0, fmt.Errorf("missing-signal semantics must be v1 or v2, got %q", s)
}

// ThresholdRule is how a build validates affinityThreshold.
type ThresholdRule uint8

const (
	// ThresholdAtMostOne accepts any value ≤ 1 (≤ 0 disables the filter at run time).
	ThresholdAtMostOne ThresholdRule = iota
	// ThresholdUnitInterval accepts values in [0, 1].
	ThresholdUnitInterval
)

// String returns "le1" or "0to1".
func (r ThresholdRule) String() string {
	if r == ThresholdUnitInterval {
		return "0to1"
	}
	return "le1"
}

// ParseThresholdRule parses "le1" or "0to1".
func ParseThresholdRule(s string) (ThresholdRule, error) {
	switch s {
	case "le1", "":
		return ThresholdAtMostOne, nil
	case "0to1":
		return ThresholdUnitInterval, nil
	}
	return 0, fmt.Errorf("threshold rule must be le1 or 0to1, got %q", s)
}

// Profile is what a target's EPP build accepts: its parameter keys, its
// missing-signal semantics, its threshold rule and the config apiVersions
// its loader registers; what it reports about each decision; and, for
// built-in profiles, the upstream source it mirrors and that build's
// defaults.
type Profile struct {
	Name          string
	Keys          KeySet
	MissingSignal Semantics
	Threshold     ThresholdRule
	// ConfigAPIVersions are the EndpointPickerConfig apiVersions the
	// build's loader registers; nil means DefaultConfigAPIVersions.
	ConfigAPIVersions []string
	// Reports is what the build exports about each filter decision.
	Reports Reports
	// Upstream names the llm-d-router source the profile mirrors
	// (repository@commit, with the release tags that carry the same filter);
	// "" for custom profiles.
	Upstream string
	// Defaults are the build's defaults where they differ from the
	// router-2026-08 build's (DefaultParams); nil means those.
	Defaults *BuildDefaults
}

// BuildDefaults are the defaults of an older filter generation.
type BuildDefaults struct {
	ExplorationProbability float64
	MaxTTFTPenaltyMs       float64
	// TTFTSource is the only source the build has (it has no ttftSource key).
	TTFTSource TTFTSource
	// PeakPrefillThroughput is 0 when the build has no such key.
	PeakPrefillThroughput float64
}

// DefaultParams returns the parameters of a filter of this build configured
// with no keys.
func (p Profile) DefaultParams() Params {
	d := DefaultParams()
	if b := p.Defaults; b != nil {
		d.ExplorationProbability, d.MaxTTFTPenaltyMs = b.ExplorationProbability, b.MaxTTFTPenaltyMs
		d.TTFTSource, d.PeakPrefillThroughput = b.TTFTSource, b.PeakPrefillThroughput
	}
	return d
}

// Built-in profile names.
const (
	ProfileRouter202608 = "router-2026-08"
	ProfilePenaltyMode  = "penalty-mode"
	// ProfileRouterTokenBar is the generation whose gate had the token bar
	// maxTokensInFlightPenalty next to a TTFT gate fed by the latency
	// predictor (May–June 2026, before peakPrefillThroughput).
	ProfileRouterTokenBar = "router-2026-05-tokens"
	// ProfileRouter202609 is llm-d-router main from 2026-09-06 (PR #2720):
	// the router-2026-08 filter with affinityThreshold checked in [0, 1].
	ProfileRouter202609 = "router-2026-09"
	// ProfileRouterCalibration is the calibration build of PR #2938
	// (commit 17dd1ab57): router-2026-09 plus the three
	// prefillCalibration* keys.
	ProfileRouterCalibration = "router-2026-09-calibration"
	// ProfileRouterCalibrationV2 is commit 066c20ea1: the calibration build
	// with the missing-signal rule of PR #2652 (v2).
	ProfileRouterCalibrationV2 = "router-2026-09-calibration-v2"
	// ProfileRouter202609V2 is router-2026-09 with PR #2652's missing-signal
	// rule (v2) and without calibration: the filter of
	// red-hat-data-services/llm-d-router plugin.go@4a00e2dd5, whose Filter
	// is the same text as 066c20ea1's.
	ProfileRouter202609V2 = "router-2026-09-v2"
	// ProfileRouter202608Counter is router-2026-08 with PR #2494's decision
	// counter and without the span (plugin.go@920d38f3e): main between the
	// merges of #2494 and #2594.
	ProfileRouter202608Counter = "router-2026-08-counter"
)

// ProfileRouterNewest is the removed profile "router-newest": it matched no
// single build. LookupProfile refuses it with ErrRemovedProfile, naming the
// builds that replace it.
const ProfileRouterNewest = "router-newest"

// ErrRemovedProfile marks a profile name that gatetuner no longer accepts.
var ErrRemovedProfile = errors.New("removed build profile")

// Upstream sources the built-in profiles mirror (docs/gate.md).
const (
	upstreamRouter202608 = "llm-d/llm-d-router@ebab687927f5331c1b39defcb579a07951bce56c (main, 2026-08-21; " +
		"filter plugin.go@800ec0e45, the same decision and keys as plugin.go@ff37a5592 in tags v0.9.0-rc.1 … v0.10.0)"
	upstreamRouter202609 = "llm-d/llm-d-router main from PR #2720 (opened and approved 2026-09-06, merged): the filter of 17dd1ab57 " +
		"without its calibration additions; the merge commit is not recorded in the sources gatetuner read (docs/gate.md)"
	upstreamCalibration = "llm-d/llm-d-router@17dd1ab57f145604fa82b9ddbbb82b8de2a0bd67 (head of PR #2938, " +
		"\"resolve peak prefill throughput from a calibration record\", opened 2026-09-20; not in main or any release tag)"
	upstreamCalibrationV2 = "llm-d/llm-d-router@066c20ea107e538797d3256ab0803a4f50625975 (PR #2938's calibration " +
		"with PR #2652's missing-signal rule; not in main or any release tag)"
	upstreamTokenBar = "llm-d/llm-d-router@a42e39d3d (main, 2026-06-01; maxTokensInFlightPenalty added in 3a160b650, " +
		"removed by afdf6bcf5 on 2026-06-11; in no release tag)"
	upstreamPenaltyMode    = "router-2026-08 plus the seed's penaltyMode extension (not upstream)"
	upstreamRouter202609V2 = "red-hat-data-services/llm-d-router@4a00e2dd5f9f548b2a5b249dd4ea6ad8570a254f (plugin.go; metrics.go@a8456660a): " +
		"router-2026-09 with PR #2652's missing-signal rule (open when read); a downstream repository, whether the commit " +
		"mirrors an upstream main state is not recorded; its Filter is the same text as llm-d/llm-d-router plugin.go@066c20ea1"
	upstreamRouter202608Counter = "llm-d/llm-d-router@920d38f3e306f96a6f08ac658bbd10db56059969 (head of PR #2494, marked merged; " +
		"the merge commit is not recorded): router-2026-08 plus the decision counter, no span"
)

// What each built-in profile's build reports (docs/gate.md, "What each
// build reports").
var (
	reportsNone = Reports{Evidence: "no metrics.go in the filter package and no recordDecision or span in plugin.go at " +
		"ebab687, v0.9.0, v0.10.0, release-0.10 (plugin.go@800ec0e45, @ff37a5592)"}
	reportsTokenBar = Reports{Evidence: "plugin.go@a42e39d3d calls no recordDecision and starts no span; no metrics.go"}
	reportsSeed     = Reports{Evidence: "the seed's build is router-2026-08's filter plus penaltyMode: no counter, no span"}
	reportsCounter  = Reports{DecisionCounter: true, Outcomes: outcomesV1,
		Evidence: "plugin.go@920d38f3e: Factory registers the counter through the handle, Filter records one outcome per call " +
			"(metrics.go@920d38f3e); no span"}
	reports202609 = Reports{DecisionCounter: true, GateSpan: true, Outcomes: outcomesV1,
		Evidence: "inference: the only stored filter carrying PR #2720 without calibration (code index id 60059204061, commit not " +
			"recorded) carries PR #2494's counter and PR #2594's span; that every main commit from #2720 has both depends on " +
			"#2594 merging before #2720, which is not recorded"}
	reportsCalibration = Reports{DecisionCounter: true, GateSpan: true, Outcomes: outcomesV1,
		Evidence: "plugin.go@17dd1ab57: Factory registers the counter, Filter records the outcome and starts the span"}
	reportsCalibrationV2 = Reports{DecisionCounter: true, GateSpan: true, Outcomes: outcomesV2,
		Evidence: "plugin.go@066c20ea1: counter and span, missing_signal recorded on both (all endpoints kept)"}
	reports202609V2 = Reports{DecisionCounter: true, GateSpan: true, Outcomes: outcomesV2,
		Evidence: "red-hat-data-services/llm-d-router plugin.go@4a00e2dd5 (span, recordDecision on every return) and " +
			"metrics.go@a8456660a (outcome missing_signal)"}
)

// DefaultProfileName is the profile assumed when a target declares none.
const DefaultProfileName = ProfileRouter202608

// calibrationKeys are the keys PR #2938 adds.
var calibrationKeys = keySetOf(KeyPrefillCalibrationFile, KeyPrefillCalibrationFingerprint, KeyPrefillCalibrationRequired)

// BuiltinProfiles returns the built-in profiles.
func BuiltinProfiles() []Profile {
	profiles := []Profile{
		{Name: ProfileRouter202608, Keys: baseKeys, MissingSignal: SemanticsV1, Threshold: ThresholdAtMostOne, Upstream: upstreamRouter202608,
			Reports: reportsNone},
		{Name: ProfileRouter202608Counter, Keys: baseKeys, MissingSignal: SemanticsV1, Threshold: ThresholdAtMostOne,
			Upstream: upstreamRouter202608Counter, Reports: reportsCounter},
		{Name: ProfileRouter202609, Keys: baseKeys, MissingSignal: SemanticsV1, Threshold: ThresholdUnitInterval, Upstream: upstreamRouter202609,
			Reports: reports202609},
		{Name: ProfileRouter202609V2, Keys: baseKeys, MissingSignal: SemanticsV2, Threshold: ThresholdUnitInterval,
			Upstream: upstreamRouter202609V2, Reports: reports202609V2},
		{Name: ProfileRouterCalibration, Keys: baseKeys | calibrationKeys, MissingSignal: SemanticsV1, Threshold: ThresholdUnitInterval,
			Upstream: upstreamCalibration, Reports: reportsCalibration},
		{Name: ProfileRouterCalibrationV2, Keys: baseKeys | calibrationKeys, MissingSignal: SemanticsV2, Threshold: ThresholdUnitInterval,
			Upstream: upstreamCalibrationV2, Reports: reportsCalibrationV2},
		{Name: ProfilePenaltyMode, Keys: baseKeys | keySetOf(KeyPenaltyMode), MissingSignal: SemanticsV1, Threshold: ThresholdAtMostOne,
			Upstream: upstreamPenaltyMode, Reports: reportsSeed},
		{Name: ProfileRouterTokenBar, Keys: tokenBarKeys, MissingSignal: SemanticsV1, Threshold: ThresholdAtMostOne,
			Upstream: upstreamTokenBar, Defaults: &BuildDefaults{ExplorationProbability: 0.01, MaxTTFTPenaltyMs: 5000, TTFTSource: SourceLatencyPredictor},
			Reports: reportsTokenBar},
	}
	// Every built-in build's loader is the one of configloader.go@ebab687:
	// the 2026-09 builds' loaders are not stored, and the only loader
	// change of apiVersions read is PR #2923, open when read (docs/gate.md).
	for i := range profiles {
		profiles[i].ConfigAPIVersions = DefaultConfigAPIVersions()
		profiles[i].Reports.Outcomes = slices.Clone(profiles[i].Reports.Outcomes)
	}
	return profiles
}

// removedProfiles explain profile names gatetuner no longer accepts.
var removedProfiles = map[string]string{
	ProfileRouterNewest: "it matched no single EPP build (the calibration keys of PR #2938 with the request gate and " +
		"missing-signal rule of other unmerged pull requests); name the build your EPP runs: " +
		ProfileRouter202608 + " (tags v0.9.0 … v0.10.0, main before PR #2720), " +
		ProfileRouter202609 + " (main from PR #2720, 2026-09-06), " + ProfileRouter202609V2 + " (with PR #2652's missing-signal rule), " +
		ProfileRouterCalibration + " or " + ProfileRouterCalibrationV2 + " (PR #2938's calibration builds), " +
		"or declare a custom profile (profiles: in the daemon config) with your build's keys, missingSignal and thresholdRule; " +
		"gatetuner doctor suggests one from the EPP image tag",
}

// LookupProfile returns a built-in profile by name. A removed name is an
// ErrRemovedProfile error that names its replacements.
func LookupProfile(name string) (Profile, error) {
	if name == "" {
		name = DefaultProfileName
	}
	if why, ok := removedProfiles[name]; ok {
		return Profile{}, fmt.Errorf("%w %q: %s", ErrRemovedProfile, name, why)
	}
	var names []string
	for _, p := range BuiltinProfiles() {
		if p.Name == name {
			return p, nil
		}
		names = append(names, p.Name)
	}
	return Profile{}, fmt.Errorf("unknown build profile %q (built in: %s; custom profiles are declared in the config)", name, strings.Join(names, ", "))
}

// NewProfile builds a custom profile from the keys its build accepts (any
// spelling; "base" stands for BaseKeys), its missing-signal semantics ("v1" or
// "v2", default v1) and its threshold rule ("le1" or "0to1", default le1);
// it reports nothing and loads the built-in apiVersions (NewCustomProfile
// declares those too).
func NewProfile(name string, keys []string, missingSignal string, thresholdRule string) (Profile, error) {
	return NewCustomProfile(ProfileSpec{Name: name, Keys: keys, MissingSignal: missingSignal, ThresholdRule: thresholdRule})
}

// ProfileSpec declares a custom profile, as the daemon config's profiles:
// entries do (docs/config.md).
type ProfileSpec struct {
	Name          string
	Keys          []string
	MissingSignal string
	ThresholdRule string
	// DecisionCounter and GateSpan: the build exports the decision counter
	// and the span (default false: not declared, so not expected).
	DecisionCounter, GateSpan bool
	// Outcomes the build records; default DefaultOutcomes(missingSignal)
	// when it reports the counter or the span. Only with one of them.
	Outcomes []string
	// ConfigAPIVersions its loader registers; default
	// DefaultConfigAPIVersions.
	ConfigAPIVersions []string
}

// NewCustomProfile builds and checks a custom profile.
func NewCustomProfile(spec ProfileSpec) (Profile, error) {
	name := spec.Name
	if name == "" {
		return Profile{}, fmt.Errorf("custom profile: name is required")
	}
	p := Profile{Name: name}
	for _, k := range spec.Keys {
		if k == "base" {
			p.Keys |= baseKeys
			continue
		}
		key, ok := LookupKey(k)
		if !ok {
			return Profile{}, fmt.Errorf("custom profile %q: unknown parameter key %q (known: %s)", name, k, KeySet(1<<numKeys-1))
		}
		p.Keys = p.Keys.With(key)
	}
	for _, k := range []Key{KeyAffinityThreshold, KeyMaxTTFTPenaltyMs, KeyPeakPrefillThroughput, KeyTTFTSource} {
		if !p.Keys.Has(k) {
			return Profile{}, fmt.Errorf("custom profile %q: key %s is required (every EPP build accepts it)", name, k)
		}
	}
	var err error
	if p.MissingSignal, err = ParseSemantics(orDefault(spec.MissingSignal, "v1")); err != nil {
		return Profile{}, fmt.Errorf("custom profile %q: %w", name, err)
	}
	if p.Threshold, err = ParseThresholdRule(spec.ThresholdRule); err != nil {
		return Profile{}, fmt.Errorf("custom profile %q: %w", name, err)
	}
	if p.Reports, err = customReports(spec, p.MissingSignal); err != nil {
		return Profile{}, fmt.Errorf("custom profile %q: %w", name, err)
	}
	p.ConfigAPIVersions = DefaultConfigAPIVersions()
	if len(spec.ConfigAPIVersions) > 0 {
		if p.ConfigAPIVersions, err = ParseConfigAPIVersions(spec.ConfigAPIVersions); err != nil {
			return Profile{}, fmt.Errorf("custom profile %q: %w", name, err)
		}
	}
	return p, nil
}

// customReports is what a custom profile declares its build reports.
func customReports(spec ProfileSpec, sem Semantics) (Reports, error) {
	r := Reports{DecisionCounter: spec.DecisionCounter, GateSpan: spec.GateSpan, Evidence: "declared in the config"}
	switch {
	case len(spec.Outcomes) > 0 && !r.Any():
		return Reports{}, fmt.Errorf("outcomes are declared but neither decisionCounter nor gateSpan: a build records outcomes only on them")
	case !r.Any():
		return r, nil
	case len(spec.Outcomes) == 0:
		r.Outcomes = DefaultOutcomes(sem)
		return r, nil
	}
	var err error
	if r.Outcomes, err = ParseOutcomes(spec.Outcomes); err != nil {
		return Reports{}, err
	}
	if r.Records(OutcomeMissingSignal) && sem != SemanticsV2 {
		return Reports{}, fmt.Errorf("outcome missing_signal with missingSignal v1: only v2 builds record it")
	}
	return r, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Accepts reports whether the build accepts key k.
func (p Profile) Accepts(k Key) bool { return p.Keys.Has(k) }

// ProfileNames returns the names of the built-in profiles, sorted.
func ProfileNames() []string {
	var out []string
	for _, p := range BuiltinProfiles() {
		out = append(out, p.Name)
	}
	sort.Strings(out)
	return out
}
