package gate

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// The EPP's own word about the filter's decisions (docs/gate.md, "What each
// build reports"; docs/exporters.md for the counter's exact shape).
const (
	// DecisionCounterName is the counter PR #2494 adds
	// (prefixcacheaffinity/metrics.go@920d38f3e: subsystem llm_d_epp, name
	// prefix_cache_affinity_filter_decisions_total), labelled plugin_name
	// and outcome; one increment per Filter call.
	DecisionCounterName = "llm_d_epp_prefix_cache_affinity_filter_decisions_total"
	// GateSpanName is the span PR #2594 adds, one per Filter call, with the
	// outcome in attribute llm_d.epp.filter.decision (plugin.go@066c20ea1).
	GateSpanName = "filter_prefix_cache_affinity"
)

// Reports is what an EPP build exports about each filter decision.
type Reports struct {
	// DecisionCounter: the build counts every Filter call in
	// DecisionCounterName{plugin_name, outcome}.
	DecisionCounter bool
	// GateSpan: the build starts a GateSpanName span per Filter call.
	GateSpan bool
	// Outcomes are the outcome label values the build records (on the
	// counter and the span); nil when it reports neither.
	Outcomes []Outcome
	// Evidence names the sources read and says what is inferred.
	Evidence string
}

// Records reports whether the build records outcome o.
func (r Reports) Records(o Outcome) bool { return slices.Contains(r.Outcomes, o) }

// Any reports whether the build exports the counter or the span.
func (r Reports) Any() bool { return r.DecisionCounter || r.GateSpan }

// String renders "counter+span: sticky, no_match, …", or "none".
func (r Reports) String() string {
	var what []string
	if r.DecisionCounter {
		what = append(what, "counter")
	}
	if r.GateSpan {
		what = append(what, "span")
	}
	if len(what) == 0 {
		return "none"
	}
	names := make([]string, len(r.Outcomes))
	for i, o := range r.Outcomes {
		names[i] = o.String()
	}
	return strings.Join(what, "+") + ": " + strings.Join(names, ", ")
}

// outcomesV1 are the outcomes of PR #2494 (metrics.go@920d38f3e).
var outcomesV1 = []Outcome{OutcomeSticky, OutcomeNoMatch, OutcomeLoadOverride, OutcomeExploration, OutcomeNotApplicable}

// outcomesV2 add PR #2652's missing_signal (metrics.go@a8456660a in
// red-hat-data-services/llm-d-router; plugin.go@066c20ea1).
var outcomesV2 = append(slices.Clone(outcomesV1), OutcomeMissingSignal)

// DefaultOutcomes are the outcomes a build with the counter or the span
// records under missing-signal semantics sem: the five of PR #2494, plus
// missing_signal under v2 (every stored v2 build records it).
func DefaultOutcomes(sem Semantics) []Outcome {
	if sem == SemanticsV2 {
		return slices.Clone(outcomesV2)
	}
	return slices.Clone(outcomesV1)
}

// ParseOutcomes parses outcome label values, refusing the ones gatetuner
// does not model (the request gate's request_load_override, the sessionCost
// head's session_cost_*) with an error that says so.
func ParseOutcomes(names []string) ([]Outcome, error) {
	var out []Outcome
	for _, n := range names {
		o, ok := ParseOutcome(n)
		if !ok {
			return nil, fmt.Errorf("outcome %q is not one gatetuner models (%s); the request gate's request_load_override "+
				"and other pull-request heads' outcomes are counted by the estimator as outcomes outside the model", n, strings.Join(outcomeNames[:], ", "))
		}
		if !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	return out, nil
}

// Config apiVersions an EPP loader registers for EndpointPickerConfig.
const (
	// ConfigAPIVersionV1Alpha1 is registered by every loader read.
	ConfigAPIVersionV1Alpha1 = "llm-d.ai/v1alpha1"
	// ConfigAPIVersionDeprecated is registered beside v1alpha1 by the loader
	// of every release and of main up to the newest stored
	// (configloader.go@ebab687 deprecatedSchemeGroupVersion); PR #2923's
	// loader drops it.
	ConfigAPIVersionDeprecated = "inference.networking.x-k8s.io/v1alpha1"
	// ConfigAPIVersionV1 is registered only by PR #2923's loader
	// (configloader.go@e0412de546de in red-hat-data-services/llm-d-router,
	// stored index id 68527678887), which also registers v1alpha1.
	ConfigAPIVersionV1 = "llm-d.ai/v1"
)

// loaderAPIVersions is what the loader of every release through v0.10.0
// and of main at ebab687 registers (configloader.go@ebab687 L49-71).
var loaderAPIVersions = []string{ConfigAPIVersionV1Alpha1, ConfigAPIVersionDeprecated}

// DefaultConfigAPIVersions returns the apiVersions every built-in profile's
// build loads: llm-d.ai/v1alpha1 and the deprecated
// inference.networking.x-k8s.io/v1alpha1.
func DefaultConfigAPIVersions() []string { return slices.Clone(loaderAPIVersions) }

// v1Unknown is what the sources say about llm-d.ai/v1.
const v1Unknown = "no built-in profile's build is known to load " + ConfigAPIVersionV1 + ": only llm-d-router PR #2923's loader " +
	"(open when last read; configloader.go@e0412de546de in red-hat-data-services/llm-d-router) accepts it; " +
	"if your EPP image loads it, declare a custom profile with configAPIVersions: [" + ConfigAPIVersionV1 + ", " + ConfigAPIVersionV1Alpha1 + "]"

// ParseConfigAPIVersions checks a custom profile's apiVersions: each one a
// loader read registers, and not a pair no loader registers together (v1
// with the deprecated group: PR #2923 adds the one and drops the other).
func ParseConfigAPIVersions(vs []string) ([]string, error) {
	known := []string{ConfigAPIVersionV1, ConfigAPIVersionV1Alpha1, ConfigAPIVersionDeprecated}
	var out []string
	for _, v := range vs {
		if !slices.Contains(known, v) {
			return nil, fmt.Errorf("configAPIVersions: %q is registered by no EPP loader read (known: %s)", v, strings.Join(known, ", "))
		}
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	if slices.Contains(out, ConfigAPIVersionV1) && slices.Contains(out, ConfigAPIVersionDeprecated) {
		return nil, fmt.Errorf("configAPIVersions: no loader read registers both %s and %s (PR #2923 adds the first and drops the second)",
			ConfigAPIVersionV1, ConfigAPIVersionDeprecated)
	}
	return out, nil
}

// LoadsConfigAPIVersion returns nil when the profile's build loads an
// EndpointPickerConfig of apiVersion v, else an error saying what is known
// about it. A profile without ConfigAPIVersions takes the built-in ones.
// The error names the profile unless it has no name (the EPP in general).
func (p Profile) LoadsConfigAPIVersion(v string) error {
	accepted := p.ConfigAPIVersions
	if len(accepted) == 0 {
		accepted = loaderAPIVersions
	}
	if slices.Contains(accepted, v) {
		return nil
	}
	who := "the EPP"
	if p.Name != "" {
		who = "the EPP of build profile " + p.Name
	}
	msg := fmt.Sprintf("apiVersion %q is not one %s loads (%s)", v, who, orList(accepted))
	custom := p.Name != "" && p.Upstream == ""
	switch {
	case v == ConfigAPIVersionV1 && !custom:
		msg += ": " + v1Unknown
	case v == ConfigAPIVersionV1:
		msg += ": add " + ConfigAPIVersionV1 + " to the profile's configAPIVersions if your EPP image loads it (only llm-d-router PR #2923's loader is known to)"
	case v == ConfigAPIVersionDeprecated && slices.Contains(accepted, ConfigAPIVersionV1):
		msg += ": PR #2923's loader, which loads " + ConfigAPIVersionV1 + ", no longer registers it; " + ConfigAPIVersionV1Alpha1 + " has the same schema"
	}
	return errors.New(msg)
}

// orList renders "a or b", "a, b or c".
func orList(s []string) string {
	if len(s) <= 1 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}
