package gate

import (
	"errors"
	"strings"
	"testing"
)

func mustProfile(t testing.TB, name string) Profile {
	t.Helper()
	p, err := LookupProfile(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// requestGateProfile declares the keys of the request-gate builds (PR heads
// 12a441068 and 92781975d: base keys and maxInFlightRequestsDelta, v2,
// threshold in [0, 1]); no built-in profile has the key.
func requestGateProfile(t testing.TB) Profile {
	t.Helper()
	p, err := NewProfile("request-gate", []string{"base", "maxInFlightRequestsDelta"}, "v2", "0to1")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParseParamsDefaultsAndOverrides(t *testing.T) {
	old := mustProfile(t, ProfileRouter202608)
	pm := mustProfile(t, ProfilePenaltyMode)
	// router-newest carried the calibration keys and maxInFlightRequestsDelta
	// together, which no build does: the case is split between the
	// calibration build and a request-gate build.
	calib := mustProfile(t, ProfileRouterCalibration)
	requestGate := requestGateProfile(t)
	tests := []struct {
		name    string
		raw     string
		prof    Profile
		check   func(Params) bool
		present string
	}{
		{name: "empty parameters take every default", raw: ``, prof: old, check: func(p Params) bool {
			return p.AffinityThreshold == 0.8 && p.MaxTTFTPenaltyMs == 18000 && p.PeakPrefillThroughput == 15928 &&
				p.TTFTSource == SourcePrefillThroughput && p.PenaltyMode == ModeStatic && p.PPTSource() == PPTDefault
		}},
		{name: "explicit zero threshold overrides the default", raw: `{"affinityThreshold":0}`, prof: old, check: func(p Params) bool { return p.AffinityThreshold == 0 }, present: "affinityThreshold"},
		{name: "explicit zero max with zero throughput is valid", raw: `{"maxTTFTPenaltyMs":0,"peakPrefillThroughput":0}`, prof: old, check: func(p Params) bool {
			return p.MaxTTFTPenaltyMs == 0 && p.PeakPrefillThroughput == 0 && p.PPTSource() == PPTExplicit
		}, present: "maxTTFTPenaltyMs, peakPrefillThroughput"},
		{name: "keys match case-insensitively", raw: `{"MaxTTFTPenaltyMs":5000,"PEAKPREFILLTHROUGHPUT":4783}`, prof: old, check: func(p Params) bool {
			return p.MaxTTFTPenaltyMs == 5000 && p.PeakPrefillThroughput == 4783 && p.Spelling[KeyMaxTTFTPenaltyMs] == "MaxTTFTPenaltyMs"
		}, present: "maxTTFTPenaltyMs, peakPrefillThroughput"},
		{name: "null keeps the default like encoding/json", raw: `{"maxTTFTPenaltyMs":null}`, prof: old, check: func(p Params) bool { return p.MaxTTFTPenaltyMs == 18000 }},
		{name: "integers are accepted for floats", raw: `{"peakPrefillThroughput":4783}`, prof: old, check: func(p Params) bool { return p.PeakPrefillThroughput == 4783 }, present: "peakPrefillThroughput"},
		{name: "negative threshold is allowed by the Aug 2026 build", raw: `{"affinityThreshold":-1}`, prof: old, check: func(p Params) bool { return p.AffinityThreshold == -1 }, present: "affinityThreshold"},
		{name: "matchedTokens on the penalty-mode build", raw: `{"penaltyMode":"matchedTokens","maxTTFTPenaltyMs":0,"peakPrefillThroughput":0}`, prof: pm, check: func(p Params) bool { return p.PenaltyMode == ModeMatchedTokens }, present: "maxTTFTPenaltyMs, peakPrefillThroughput, penaltyMode"},
		{name: "default penalty mode is static", raw: `{}`, prof: pm, check: func(p Params) bool { return p.PenaltyMode == ModeStatic }},
		{name: "latency predictor without throughput", raw: `{"ttftSource":"latencyPredictor","peakPrefillThroughput":0}`, prof: old, check: func(p Params) bool { return p.TTFTSource == SourceLatencyPredictor }, present: "ttftSource, peakPrefillThroughput"},
		{name: "calibration file without throughput is calibrated", raw: `{"prefillCalibrationFile":"/cal/ppt.json","prefillCalibrationRequired":true}`, prof: calib, check: func(p Params) bool {
			return p.PPTSource() == PPTCalibrated && p.PrefillCalibrationRequired
		}, present: "prefillCalibrationFile, prefillCalibrationRequired"},
		{name: "the request gate's delta is read", raw: `{"maxInFlightRequestsDelta":4}`, prof: requestGate, check: func(p Params) bool {
			return p.MaxInFlightRequestsDelta == 4
		}, present: "maxInFlightRequestsDelta"},
		{name: "producer names are carried through", raw: `{"inFlightLoadProducerName":"ifl","prefixMatchInfoProducerName":"pm","latencyPredictionInfoProducerName":"lp"}`, prof: old, check: func(p Params) bool {
			return p.InFlightLoadProducerName == "ifl" && p.PrefixMatchInfoProducerName == "pm" && p.LatencyPredictionInfoProducerName == "lp"
		}, present: "prefixMatchInfoProducerName, latencyPredictionInfoProducerName, inFlightLoadProducerName"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParseParams([]byte(tc.raw), tc.prof)
			if err != nil {
				t.Fatalf("ParseParams: %v", err)
			}
			if !tc.check(p) {
				t.Fatalf("unexpected params %+v", p)
			}
			if got := p.Present.String(); got != tc.present {
				t.Fatalf("present = %q, want %q", got, tc.present)
			}
		})
	}
}

func TestParseParamsRejects(t *testing.T) {
	old := mustProfile(t, ProfileRouter202608)
	pm := mustProfile(t, ProfilePenaltyMode)
	sep := mustProfile(t, ProfileRouter202609)
	calib := mustProfile(t, ProfileRouterCalibration)
	requestGate := requestGateProfile(t)
	tests := []struct {
		name    string
		raw     string
		prof    Profile
		key     string
		wantErr string
	}{
		{"explicit empty ttftSource", `{"ttftSource":""}`, old, "ttftSource", "must be"},
		{"unknown ttftSource", `{"ttftSource":"magic"}`, old, "ttftSource", "must be"},
		{"zero throughput with the gate on", `{"peakPrefillThroughput":0}`, old, "peakPrefillThroughput", "must be > 0"},
		{"threshold above one", `{"affinityThreshold":1.01}`, old, "affinityThreshold", "<= 1"},
		{"negative threshold on the Sep 2026 build", `{"affinityThreshold":-0.1}`, sep, "affinityThreshold", "[0, 1]"},
		{"negative threshold on the calibration build", `{"affinityThreshold":-0.1}`, calib, "affinityThreshold", "[0, 1]"},
		{"calibration required without a file", `{"prefillCalibrationRequired":true}`, calib, "prefillCalibrationRequired", "prefillCalibrationFile is empty"},
		{"exploration above one", `{"explorationProbability":1.5}`, old, "explorationProbability", "[0, 1]"},
		{"exploration below zero", `{"explorationProbability":-0.1}`, old, "explorationProbability", "[0, 1]"},
		{"negative max", `{"maxTTFTPenaltyMs":-1}`, old, "maxTTFTPenaltyMs", ">= 0"},
		{"negative throughput", `{"peakPrefillThroughput":-5}`, old, "peakPrefillThroughput", ">= 0"},
		{"unknown key", `{"maxTTFTPenalty":5}`, old, "maxTTFTPenalty", "unknown key"},
		{"penaltyMode on a build without it", `{"penaltyMode":"matchedTokens"}`, old, "penaltyMode", "crash-loop"},
		{"request-gate key on the Aug 2026 build", `{"maxInFlightRequestsDelta":3}`, old, "maxInFlightRequestsDelta", "crash-loop"},
		{"request-gate key on the calibration build", `{"maxInFlightRequestsDelta":3}`, calib, "maxInFlightRequestsDelta", "crash-loop"},
		{"calibration key on the Sep 2026 build", `{"prefillCalibrationFile":"/c"}`, sep, "prefillCalibrationFile", "crash-loop"},
		{"unknown penalty mode", `{"penaltyMode":"tokens"}`, pm, "penaltyMode", "must be"},
		{"matchedTokens with the latency predictor", `{"penaltyMode":"matchedTokens","ttftSource":"latencyPredictor"}`, pm, "penaltyMode", "latencyPredictor"},
		{"string where a number belongs", `{"maxTTFTPenaltyMs":"5000"}`, old, "maxTTFTPenaltyMs", "must be a number"},
		{"boolean where a number belongs", `{"affinityThreshold":true}`, old, "affinityThreshold", "must be a number"},
		{"number where a string belongs", `{"ttftSource":1}`, old, "ttftSource", "must be a string"},
		{"fraction where an integer belongs", `{"maxInFlightRequestsDelta":1.5}`, requestGate, "maxInFlightRequestsDelta", "integer"},
		{"number out of float range", `{"maxTTFTPenaltyMs":1e999}`, old, "maxTTFTPenaltyMs", "finite"},
		{"keys differing only in case", `{"maxTTFTPenaltyMs":1,"MaxTTFTPenaltyMs":2}`, old, "MaxTTFTPenaltyMs", "case-insensitively"},
		{"not a mapping", `[1,2]`, old, "", "mapping"},
		{"malformed JSON", `{"a":`, old, "a", "malformed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseParams([]byte(tc.raw), tc.prof)
			if err == nil {
				t.Fatalf("ParseParams(%s) accepted it", tc.raw)
			}
			var pe *ParamError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a *ParamError", err)
			}
			if pe.Key != tc.key {
				t.Errorf("error names key %q, want %q (%v)", pe.Key, tc.key, err)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %q does not mention %q", err, tc.wantErr)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}

func TestProfiles(t *testing.T) {
	if _, err := LookupProfile("router-2027"); err == nil || !strings.Contains(err.Error(), "router-2026-08") {
		t.Fatalf("unknown profile error should list the built-ins, got %v", err)
	}
	p, err := LookupProfile("")
	if err != nil || p.Name != ProfileRouter202608 || p.MissingSignal != SemanticsV1 {
		t.Fatalf("default profile = %+v, %v", p, err)
	}
	custom, err := NewProfile("fork", []string{"base", "PenaltyMode", "maxInFlightRequestsDelta"}, "v2", "0to1")
	if err != nil {
		t.Fatal(err)
	}
	if !custom.Accepts(KeyPenaltyMode) || !custom.Accepts(KeyMaxInFlightRequestsDelta) || custom.Accepts(KeyPrefillCalibrationFile) || custom.MissingSignal != SemanticsV2 {
		t.Fatalf("custom profile = %+v", custom)
	}
	if _, err := NewProfile("bad", []string{"base", "noSuchKey"}, "", ""); err == nil {
		t.Fatal("custom profile with an unknown key accepted")
	}
	if _, err := NewProfile("thin", []string{"penaltyMode"}, "", ""); err == nil {
		t.Fatal("custom profile without the base keys accepted")
	}
}

func TestBarTokens(t *testing.T) {
	s := static(18000)
	if got := s.BarTokens(); got != 286704 {
		t.Fatalf("default bar = %v tokens, want 286704", got)
	}
}
