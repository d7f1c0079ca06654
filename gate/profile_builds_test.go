package gate

import (
	"errors"
	"strings"
	"testing"
)

// TestBuiltinProfilesMirrorCitedBuilds pins each built-in profile's key set,
// missing-signal rule, threshold rule and defaults to the upstream source it
// cites (docs/gate.md has the file@commit for each).
func TestBuiltinProfilesMirrorCitedBuilds(t *testing.T) {
	cases := []struct {
		name      string
		keys      string // canonical, in canonical order
		sem       Semantics
		threshold ThresholdRule
		upstream  string // the commit the profile names
		defaults  Params
	}{
		{ProfileRouter202608,
			"affinityThreshold, explorationProbability, maxTTFTPenaltyMs, ttftSource, peakPrefillThroughput, prefixMatchInfoProducerName, latencyPredictionInfoProducerName, inFlightLoadProducerName",
			SemanticsV1, ThresholdAtMostOne, "ebab687927f5331c1b39defcb579a07951bce56c",
			Params{AffinityThreshold: 0.80, ExplorationProbability: 0, MaxTTFTPenaltyMs: 18000, TTFTSource: SourcePrefillThroughput, PeakPrefillThroughput: 15928}},
		{ProfileRouterTokenBar,
			"affinityThreshold, explorationProbability, maxTTFTPenaltyMs, prefixMatchInfoProducerName, latencyPredictionInfoProducerName, inFlightLoadProducerName, maxTokensInFlightPenalty",
			SemanticsV1, ThresholdAtMostOne, "a42e39d3d",
			Params{AffinityThreshold: 0.80, ExplorationProbability: 0.01, MaxTTFTPenaltyMs: 5000, TTFTSource: SourceLatencyPredictor}},
		{ProfilePenaltyMode,
			"affinityThreshold, explorationProbability, maxTTFTPenaltyMs, ttftSource, peakPrefillThroughput, prefixMatchInfoProducerName, latencyPredictionInfoProducerName, inFlightLoadProducerName, penaltyMode",
			SemanticsV1, ThresholdAtMostOne, "router-2026-08",
			Params{AffinityThreshold: 0.80, MaxTTFTPenaltyMs: 18000, TTFTSource: SourcePrefillThroughput, PeakPrefillThroughput: 15928}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := LookupProfile(tc.name)
			if err != nil {
				t.Fatal(err)
			}
			if p.Keys.String() != tc.keys {
				t.Errorf("keys %s\nwant %s", p.Keys, tc.keys)
			}
			if p.MissingSignal != tc.sem || p.Threshold != tc.threshold {
				t.Errorf("semantics %s threshold %s, want %s %s", p.MissingSignal, p.Threshold, tc.sem, tc.threshold)
			}
			if !strings.Contains(p.Upstream, tc.upstream) {
				t.Errorf("upstream %q does not name %s", p.Upstream, tc.upstream)
			}
			d, err := ParseParams(nil, p)
			if err != nil {
				t.Fatal(err)
			}
			if d.AffinityThreshold != tc.defaults.AffinityThreshold || d.ExplorationProbability != tc.defaults.ExplorationProbability ||
				d.MaxTTFTPenaltyMs != tc.defaults.MaxTTFTPenaltyMs || d.TTFTSource != tc.defaults.TTFTSource ||
				d.PeakPrefillThroughput != tc.defaults.PeakPrefillThroughput || d.MaxTokensInFlightPenalty != 0 {
				t.Errorf("defaults %+v\nwant %+v", d, tc.defaults)
			}
		})
	}
	for _, p := range BuiltinProfiles() {
		if p.Upstream == "" {
			t.Errorf("profile %s names no upstream source", p.Name)
		}
	}
}

// TestTokenBarGeneration pins the token-bar build's parameters and decision
// (plugin.go@a42e39d3d): the bar is in tokens, compared with a strict > after
// the TTFT gate, a missing load reads as 0 tokens.
func TestTokenBarGeneration(t *testing.T) {
	prof, err := LookupProfile(ProfileRouterTokenBar)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ParseParams([]byte(`{"maxTTFTPenaltyMs":0,"maxTokensInFlightPenalty":200000}`), prof)
	if err != nil {
		t.Fatal(err)
	}
	s := p.Settings(prof.MissingSignal)
	if s.BarTokens() != 200000 || s.Source != SourceLatencyPredictor || s.ExplorationProbability != 0.01 {
		t.Fatalf("settings %+v (bar %v)", s, s.BarTokens())
	}
	s.ExplorationProbability = 0 // a shadow takes the draw as not made; pin the gate itself
	load := func(match int, tokens int64) Endpoint {
		return Endpoint{HasMatch: true, MatchBlocks: match, TotalBlocks: 100, BlockSizeTokens: 16, HasLoad: true, InFlightTokens: tokens}
	}
	cases := []struct {
		name    string
		eps     []Endpoint
		outcome Outcome
		reason  Reason
	}{
		{"gap above the bar releases", []Endpoint{load(90, 300001), load(0, 100000)}, OutcomeLoadOverride, ReasonTokens},
		{"gap exactly at the bar stays", []Endpoint{load(90, 300000), load(0, 100000)}, OutcomeSticky, ReasonNone},
		{"a missing load is 0 tokens", []Endpoint{load(90, 200001), {HasMatch: true, TotalBlocks: 100}}, OutcomeLoadOverride, ReasonTokens},
		{"the group minima are compared", []Endpoint{load(90, 1e9), load(95, 250000), load(0, 60000), load(0, 40000)}, OutcomeLoadOverride, ReasonTokens},
	}
	for _, tc := range cases {
		d := Decide(&s, tc.eps)
		if d.Outcome != tc.outcome || d.Reason != tc.reason {
			t.Errorf("%s: %s/%s, want %s/%s", tc.name, d.Outcome, d.Reason, tc.outcome, tc.reason)
		}
	}
	// The TTFT gate (latency predictor) comes first.
	s2 := s
	s2.MaxTTFTPenaltyMs = 5000
	eps := []Endpoint{load(90, 10), load(0, 0)}
	eps[0].HasPrediction, eps[0].PredictedTTFTMs = true, 9000
	eps[1].HasPrediction, eps[1].PredictedTTFTMs = true, 1000
	if d := Decide(&s2, eps); d.Outcome != OutcomeLoadOverride || d.Reason != ReasonTTFT {
		t.Errorf("TTFT gate first: %s/%s", d.Outcome, d.Reason)
	}
	for _, bad := range []struct{ raw, key, msg string }{
		{`{"peakPrefillThroughput":9000}`, "peakPrefillThroughput", "crash-loop"},
		{`{"ttftSource":"prefillThroughput"}`, "ttftSource", "crash-loop"},
		{`{"maxTokensInFlightPenalty":-1}`, "maxTokensInFlightPenalty", ">= 0"},
		{`{"maxTokensInFlightPenalty":1.5}`, "maxTokensInFlightPenalty", "integer"},
	} {
		_, err := ParseParams([]byte(bad.raw), prof)
		var pe *ParamError
		if !errors.As(err, &pe) || pe.Key != bad.key || !strings.Contains(err.Error(), bad.msg) {
			t.Errorf("%s: %v", bad.raw, err)
		}
	}
	newest, _ := LookupProfile(ProfileRouter202608)
	if _, err := ParseParams([]byte(`{"maxTokensInFlightPenalty":1}`), newest); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("the Aug 2026 build accepted the token bar: %v", err)
	}
}

func TestProfileForImageTag(t *testing.T) {
	for tag, want := range map[string]string{
		"v0.10.0": ProfileRouter202608, "ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.9.0": ProfileRouter202608,
		"v0.9.0-rc.1": ProfileRouter202608, "localhost:5000/epp:v0.10.0": ProfileRouter202608,
		"v0.8.0": "", "main": "", "latest": "", "ghcr.io/llm-d/epp@sha256:abc": "", "localhost:5000/epp": "",
	} {
		got, ok := ProfileForImageTag(tag)
		if got != want || ok != (want != "") {
			t.Errorf("ProfileForImageTag(%q) = %q, %v; want %q", tag, got, ok, want)
		}
	}
}

// TestRequestGateNeedsTheTTFTGate: the request gate only adds endpoints
// within the TTFT penalty, so the newest filter refuses it with the gate off.
func TestRequestGateNeedsTheTTFTGate(t *testing.T) {
	prof, err := LookupProfile(ProfileRouterNewest)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ParseParams([]byte(`{"maxInFlightRequestsDelta":3,"maxTTFTPenaltyMs":0}`), prof)
	var pe *ParamError
	if !errors.As(err, &pe) || pe.Key != "maxInFlightRequestsDelta" {
		t.Fatalf("ParseParams = %v, want a maxInFlightRequestsDelta error", err)
	}
	if _, err := ParseParams([]byte(`{"maxInFlightRequestsDelta":3}`), prof); err != nil {
		t.Fatalf("with the default gate on: %v", err)
	}
}
