package gate

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// upstreamKeys are the JSON tags of each cited build's Config struct, in
// source order (docs/gate.md cites the file@commit of each).
var upstreamKeys = map[string][]string{
	// plugin.go@800ec0e45 (main ebab68792) and @ff37a5592 (v0.9.0 … v0.10.0).
	ProfileRouter202608: {"affinityThreshold", "explorationProbability", "maxTTFTPenaltyMs", "ttftSource", "peakPrefillThroughput",
		"prefixMatchInfoProducerName", "latencyPredictionInfoProducerName", "inFlightLoadProducerName"},
	// plugin.go@920d38f3e (PR #2494): the same Config as ebab68792.
	ProfileRouter202608Counter: {"affinityThreshold", "explorationProbability", "maxTTFTPenaltyMs", "ttftSource", "peakPrefillThroughput",
		"prefixMatchInfoProducerName", "latencyPredictionInfoProducerName", "inFlightLoadProducerName"},
	// red-hat-data-services/llm-d-router plugin.go@4a00e2dd5: the same Config.
	ProfileRouter202609V2: {"affinityThreshold", "explorationProbability", "maxTTFTPenaltyMs", "ttftSource", "peakPrefillThroughput",
		"prefixMatchInfoProducerName", "latencyPredictionInfoProducerName", "inFlightLoadProducerName"},
	// main after PR #2720: the same Config.
	ProfileRouter202609: {"affinityThreshold", "explorationProbability", "maxTTFTPenaltyMs", "ttftSource", "peakPrefillThroughput",
		"prefixMatchInfoProducerName", "latencyPredictionInfoProducerName", "inFlightLoadProducerName"},
	// plugin.go@17dd1ab57 (PeakPrefillThroughputSource is json:"-", not a key).
	ProfileRouterCalibration: {"affinityThreshold", "explorationProbability", "maxTTFTPenaltyMs", "ttftSource", "peakPrefillThroughput",
		"prefillCalibrationFile", "prefillCalibrationFingerprint", "prefillCalibrationRequired",
		"prefixMatchInfoProducerName", "latencyPredictionInfoProducerName", "inFlightLoadProducerName"},
	// plugin.go@066c20ea1: the same Config as 17dd1ab57.
	ProfileRouterCalibrationV2: {"affinityThreshold", "explorationProbability", "maxTTFTPenaltyMs", "ttftSource", "peakPrefillThroughput",
		"prefillCalibrationFile", "prefillCalibrationFingerprint", "prefillCalibrationRequired",
		"prefixMatchInfoProducerName", "latencyPredictionInfoProducerName", "inFlightLoadProducerName"},
	// plugin.go@a42e39d3d.
	ProfileRouterTokenBar: {"affinityThreshold", "explorationProbability", "maxTTFTPenaltyMs", "maxTokensInFlightPenalty",
		"prefixMatchInfoProducerName", "latencyPredictionInfoProducerName", "inFlightLoadProducerName"},
	// the seed's build: router-2026-08 plus penaltyMode.
	ProfilePenaltyMode: {"affinityThreshold", "explorationProbability", "maxTTFTPenaltyMs", "ttftSource", "peakPrefillThroughput",
		"prefixMatchInfoProducerName", "latencyPredictionInfoProducerName", "inFlightLoadProducerName", "penaltyMode"},
}

// TestBuiltinProfilesMirrorCitedBuilds pins each built-in profile's key set,
// missing-signal rule, threshold rule and defaults to the upstream source it
// cites (docs/gate.md has the file@commit for each).
func TestBuiltinProfilesMirrorCitedBuilds(t *testing.T) {
	v1Defaults := Params{AffinityThreshold: 0.80, ExplorationProbability: 0, MaxTTFTPenaltyMs: 18000, TTFTSource: SourcePrefillThroughput, PeakPrefillThroughput: 15928}
	cases := []struct {
		name      string
		sem       Semantics
		threshold ThresholdRule
		upstream  string // the commit (or pull request) the profile names
		defaults  Params
	}{
		{ProfileRouter202608, SemanticsV1, ThresholdAtMostOne, "ebab687927f5331c1b39defcb579a07951bce56c", v1Defaults},
		{ProfileRouter202608Counter, SemanticsV1, ThresholdAtMostOne, "920d38f3e306f96a6f08ac658bbd10db56059969", v1Defaults},
		{ProfileRouter202609, SemanticsV1, ThresholdUnitInterval, "PR #2720", v1Defaults},
		{ProfileRouter202609V2, SemanticsV2, ThresholdUnitInterval, "4a00e2dd5f9f548b2a5b249dd4ea6ad8570a254f", v1Defaults},
		{ProfileRouterCalibration, SemanticsV1, ThresholdUnitInterval, "17dd1ab57f145604fa82b9ddbbb82b8de2a0bd67", v1Defaults},
		{ProfileRouterCalibrationV2, SemanticsV2, ThresholdUnitInterval, "066c20ea107e538797d3256ab0803a4f50625975", v1Defaults},
		{ProfileRouterTokenBar, SemanticsV1, ThresholdAtMostOne, "a42e39d3d",
			Params{AffinityThreshold: 0.80, ExplorationProbability: 0.01, MaxTTFTPenaltyMs: 5000, TTFTSource: SourceLatencyPredictor}},
		{ProfilePenaltyMode, SemanticsV1, ThresholdAtMostOne, "router-2026-08", v1Defaults},
	}
	if len(cases) != len(BuiltinProfiles()) {
		t.Fatalf("%d cases for %d built-in profiles: pin every profile", len(cases), len(BuiltinProfiles()))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := LookupProfile(tc.name)
			if err != nil {
				t.Fatal(err)
			}
			var want KeySet
			for _, name := range upstreamKeys[tc.name] {
				k, ok := LookupKey(name)
				if !ok || k.String() != name {
					t.Fatalf("cited key %q is not a canonical key", name)
				}
				want = want.With(k)
			}
			if p.Keys != want {
				t.Errorf("keys %s\nwant %s", p.Keys, want)
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
			// The threshold rule as the build's validate() has it.
			_, errNeg := ParseParams([]byte(`{"affinityThreshold":-0.5}`), p)
			_, errHigh := ParseParams([]byte(`{"affinityThreshold":1.5}`), p)
			if (errNeg != nil) != (tc.threshold == ThresholdUnitInterval) || errHigh == nil {
				t.Errorf("threshold -0.5: %v; 1.5: %v (rule %s)", errNeg, errHigh, tc.threshold)
			}
		})
	}
	for _, p := range BuiltinProfiles() {
		if p.Upstream == "" {
			t.Errorf("profile %s names no upstream source", p.Name)
		}
	}
}

// TestRouterNewestIsRemoved: the old name is refused with an error naming the
// real builds that replace it, and is no longer listed.
func TestRouterNewestIsRemoved(t *testing.T) {
	_, err := LookupProfile(ProfileRouterNewest)
	if !errors.Is(err, ErrRemovedProfile) {
		t.Fatalf("LookupProfile(%q) = %v, want ErrRemovedProfile", ProfileRouterNewest, err)
	}
	for _, want := range []string{ProfileRouter202608, ProfileRouter202609, ProfileRouterCalibration, ProfileRouterCalibrationV2, "custom profile", "doctor"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error spans lines: %q", err)
	}
	for _, n := range ProfileNames() {
		if n == ProfileRouterNewest {
			t.Errorf("%s still listed", n)
		}
	}
}

// TestCalibrationThroughputPresence pins how the calibration builds tell the
// operator's peakPrefillThroughput from the default (calibration.go@17dd1ab57
// parameterPresent: the exact key, null included) and when the file is read
// at all (not with the latency predictor).
func TestCalibrationThroughputPresence(t *testing.T) {
	for _, name := range []string{ProfileRouterCalibration, ProfileRouterCalibrationV2} {
		prof := mustProfile(t, name)
		for _, tc := range []struct {
			raw  string
			want PPTSource
			ppt  float64
		}{
			{`{"prefillCalibrationFile":"/c"}`, PPTCalibrated, 15928},
			{`{"prefillCalibrationFile":"/c","peakPrefillThroughput":15928}`, PPTExplicit, 15928},
			{`{"prefillCalibrationFile":"/c","peakPrefillThroughput":null}`, PPTExplicit, 15928},
			{`{"prefillCalibrationFile":"/c","PeakPrefillThroughput":9000}`, PPTCalibrated, 9000},
			{`{"prefillCalibrationFile":"/c","ttftSource":"latencyPredictor"}`, PPTDefault, 15928},
			{`{"PeakPrefillThroughput":9000}`, PPTExplicit, 9000},
		} {
			p, err := ParseParams([]byte(tc.raw), prof)
			if err != nil {
				t.Fatalf("%s %s: %v", name, tc.raw, err)
			}
			if p.PPTSource() != tc.want || p.PeakPrefillThroughput != tc.ppt {
				t.Errorf("%s %s: %s %v, want %s %v", name, tc.raw, p.PPTSource(), p.PeakPrefillThroughput, tc.want, tc.ppt)
			}
		}
		for _, ok := range []string{
			`{"prefillCalibrationRequired":true,"peakPrefillThroughput":9000}`,
			`{"prefillCalibrationRequired":true,"peakPrefillThroughput":null}`,
			`{"prefillCalibrationRequired":true,"ttftSource":"latencyPredictor"}`,
			`{"prefillCalibrationRequired":true,"prefillCalibrationFile":"/c"}`,
		} {
			if _, err := ParseParams([]byte(ok), prof); err != nil {
				t.Errorf("%s %s: %v (the build starts)", name, ok, err)
			}
		}
		for _, bad := range []string{
			`{"prefillCalibrationRequired":true}`,
			`{"prefillCalibrationRequired":true,"PeakPrefillThroughput":9000}`,
		} {
			var pe *ParamError
			if _, err := ParseParams([]byte(bad), prof); !errors.As(err, &pe) || pe.Key != "prefillCalibrationRequired" {
				t.Errorf("%s %s: %v, want a prefillCalibrationRequired error", name, bad, err)
			}
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
// within the TTFT penalty, so the request-gate builds (PR heads 12a441068 and
// 92781975d; no built-in profile, router-newest named them together with the
// calibration keys) refuse it with the gate off.
func TestRequestGateNeedsTheTTFTGate(t *testing.T) {
	prof := requestGateProfile(t)
	_, err := ParseParams([]byte(`{"maxInFlightRequestsDelta":3,"maxTTFTPenaltyMs":0}`), prof)
	var pe *ParamError
	if !errors.As(err, &pe) || pe.Key != "maxInFlightRequestsDelta" {
		t.Fatalf("ParseParams = %v, want a maxInFlightRequestsDelta error", err)
	}
	if _, err := ParseParams([]byte(`{"maxInFlightRequestsDelta":3}`), prof); err != nil {
		t.Fatalf("with the default gate on: %v", err)
	}
}

// TestWhatEachBuildReports pins each built-in profile's Reports to the
// docs/gate.md table ("What each build reports"): counter, span and the
// outcomes recorded, with evidence named; and the apiVersions its loader
// registers.
func TestWhatEachBuildReports(t *testing.T) {
	v1 := []Outcome{OutcomeSticky, OutcomeNoMatch, OutcomeLoadOverride, OutcomeExploration, OutcomeNotApplicable}
	v2 := append(slices.Clone(v1), OutcomeMissingSignal)
	cases := []struct {
		name           string
		counter, span  bool
		outcomes       []Outcome
		evidenceNames  string
		evidenceInfers bool
	}{
		{ProfileRouter202608, false, false, nil, "800ec0e45", false},
		{ProfileRouter202608Counter, true, false, v1, "920d38f3e", false},
		{ProfileRouter202609, true, true, v1, "60059204061", true},
		{ProfileRouter202609V2, true, true, v2, "4a00e2dd5", false},
		{ProfileRouterCalibration, true, true, v1, "17dd1ab57", false},
		{ProfileRouterCalibrationV2, true, true, v2, "066c20ea1", false},
		{ProfilePenaltyMode, false, false, nil, "seed", false},
		{ProfileRouterTokenBar, false, false, nil, "a42e39d3d", false},
	}
	if len(cases) != len(BuiltinProfiles()) {
		t.Fatalf("%d cases for %d built-in profiles: pin every profile", len(cases), len(BuiltinProfiles()))
	}
	for _, tc := range cases {
		p := mustProfile(t, tc.name)
		r := p.Reports
		if r.DecisionCounter != tc.counter || r.GateSpan != tc.span || !slices.Equal(r.Outcomes, tc.outcomes) {
			t.Errorf("%s reports %s, want counter %v span %v outcomes %v", tc.name, r, tc.counter, tc.span, tc.outcomes)
		}
		if !strings.Contains(r.Evidence, tc.evidenceNames) || strings.Contains(r.Evidence, "inference") != tc.evidenceInfers {
			t.Errorf("%s evidence %q: want it to name %s (inference stated: %v)", tc.name, r.Evidence, tc.evidenceNames, tc.evidenceInfers)
		}
		if r.Records(OutcomeMissingSignal) != (p.MissingSignal == SemanticsV2) {
			t.Errorf("%s: missing_signal recorded %v under %s", tc.name, r.Records(OutcomeMissingSignal), p.MissingSignal)
		}
		if want := []string{"llm-d.ai/v1alpha1", "inference.networking.x-k8s.io/v1alpha1"}; !slices.Equal(p.ConfigAPIVersions, want) {
			t.Errorf("%s loads %v, want %v (configloader.go@ebab687)", tc.name, p.ConfigAPIVersions, want)
		}
	}
	// BuiltinProfiles hands out copies: editing one does not edit the next.
	a := BuiltinProfiles()
	a[1].Reports.Outcomes[0] = OutcomeMissingSignal
	a[1].ConfigAPIVersions[0] = "x"
	if b := BuiltinProfiles(); b[1].Reports.Outcomes[0] != OutcomeSticky || b[1].ConfigAPIVersions[0] != ConfigAPIVersionV1Alpha1 {
		t.Error("BuiltinProfiles shares its slices between calls")
	}
}
