package estimator

import (
	"strings"
	"testing"

	"github.com/prometheus/common/model"
)

func podVec(vals map[string]float64) model.Vector {
	var v model.Vector
	for pod, x := range vals {
		v = append(v, &model.Sample{Metric: model.Metric{"pod": model.LabelValue(pod)}, Value: model.SampleValue(x)})
	}
	return v
}

func scalarVec(x float64) model.Vector {
	return model.Vector{&model.Sample{Value: model.SampleValue(x)}}
}

func disaggVec(decodeOnly, prefillDecode float64) model.Vector {
	return model.Vector{
		&model.Sample{Metric: model.Metric{"decision_type": "decode-only"}, Value: model.SampleValue(decodeOnly)},
		&model.Sample{Metric: model.Metric{"decision_type": "prefill-decode"}, Value: model.SampleValue(prefillDecode)},
	}
}

// pdFixture is a P/D pool: two decode pods receiving KV, two prefill pods
// generating one token per request; gate decisions d, disaggregated p of
// attempts a.
func pdFixture(d, p, a float64) *pdInputs {
	in := &pdInputs{
		ext:    podVec(map[string]float64{"m-decode-0": 5e6, "m-decode-1": 5e6}),
		gen:    podVec(map[string]float64{"m-decode-0": 4e5, "m-decode-1": 4e5, "m-prefill-0": 1000, "m-prefill-1": 1010}),
		reqs:   podVec(map[string]float64{"m-decode-0": 1000, "m-decode-1": 1000, "m-prefill-0": 1000, "m-prefill-1": 1000}),
		disagg: disaggVec(a-p, p), attemptsTotal: scalarVec(a),
	}
	if d > 0 {
		in.gateDecisions = scalarVec(d)
	}
	return in
}

func TestPDRolesAndTheGateProfileFromTheMetrics(t *testing.T) {
	for _, tc := range []struct {
		name      string
		in        *pdInputs
		setting   string
		wantGate  string
		wantFatal ReasonCode
	}{
		{"gate decisions equal the disaggregated requests: prefill", pdFixture(1800, 1800, 2000), "", PDGatePrefill, ""},
		{"gate decisions equal the attempts: decode", pdFixture(2000, 1800, 2000), "", PDGateDecode, ""},
		{"every request disaggregated: the counts cannot tell", pdFixture(2000, 2000, 2000), "", "", ReasonPDGateProfileUnknown},
		{"no gate decision counter: the counts cannot tell", pdFixture(0, 1800, 2000), "", "", ReasonPDGateProfileUnknown},
		{"the setting decides when the counts cannot", pdFixture(2000, 2000, 2000), PDGatePrefill, PDGatePrefill, ""},
		{"a setting the counts contradict", pdFixture(2000, 1800, 2000), PDGatePrefill, PDGatePrefill, ReasonPDGateProfileMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.in.resolvePD(Target{VLLMSelector: `namespace="x"`, PDGateProfile: tc.setting})
			if got := strings.Join(v.info.PrefillPods, ","); got != "m-prefill-0,m-prefill-1" {
				t.Errorf("prefill pods %s", got)
			}
			if got := strings.Join(v.info.DecodePods, ","); got != "m-decode-0,m-decode-1" {
				t.Errorf("decode pods %s", got)
			}
			if v.info.GateProfile != tc.wantGate {
				t.Errorf("gate profile %q, want %q", v.info.GateProfile, tc.wantGate)
			}
			switch {
			case tc.wantFatal == "" && v.fatal != nil:
				t.Errorf("fatal %v", *v.fatal)
			case tc.wantFatal != "" && (v.fatal == nil || v.fatal.Code != tc.wantFatal):
				t.Errorf("fatal %v, want %s", v.fatal, tc.wantFatal)
			}
		})
	}
}

func TestPDPrefillPodsUnselectedNamesTheEndpoints(t *testing.T) {
	in := pdFixture(1800, 1800, 2000)
	in.gen = podVec(map[string]float64{"m-decode-0": 4e5, "m-decode-1": 4e5})
	in.reqs = podVec(map[string]float64{"m-decode-0": 1000, "m-decode-1": 1000})
	in.inflightEPs = model.Vector{
		&model.Sample{Metric: model.Metric{"endpoint_name": "m-decode-0-rank-0"}, Value: 1},
		&model.Sample{Metric: model.Metric{"endpoint_name": "m-prefill-0-rank-0"}, Value: 1},
	}
	in.attemptsEP = model.Vector{&model.Sample{Metric: model.Metric{"endpoint_name": "m-decode-0"}, Value: 900}}
	v := in.resolvePD(Target{VLLMSelector: `pod=~"m-decode-.*"`})
	if v.fatal == nil || v.fatal.Code != ReasonPDPrefillPodsUnselected || !strings.Contains(v.fatal.Detail, "m-prefill-0-rank-0") ||
		strings.Contains(v.fatal.Detail, "m-decode-0-rank-0") {
		t.Fatalf("fatal %+v", v.fatal)
	}
}

func TestPDCachedTokensFromTheDecodePodsHold(t *testing.T) {
	v := &pdView{info: &PD{DisaggregatedShare: ptr(1.0)}, gateOnPrefill: true}
	for _, tc := range []struct {
		name           string
		eppShare, pool float64
		share          float64
		want           ReasonCode
	}{
		{"the sidecar reports the prefill pod's hits", 0.42, 0.40, 1, ""},
		{"the decode pod's cached tokens (the whole prompt)", 0.999, 0.40, 1, ReasonPDCachedFromDecode},
		{"decode-only requests mixed in", 0.50, 0.40, 0.7, ReasonPDCachedMixed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v.info.DisaggregatedShare = ptr(tc.share)
			est := &Estimates{Cached: Distribution{Status: StatusOK, Source: mEPPCachedTokens}}
			v.checkCached(est, &pdInputs{eppCached: tc.eppShare * 1e6, eppInput: 1e6, poolHit: tc.pool * 1e6, poolPrompt: 1e6})
			var got ReasonCode
			for _, r := range est.Cached.Reasons {
				got = r.Code
			}
			if got != tc.want {
				t.Fatalf("cached %s %v, want %q", est.Cached.Status, est.Cached.Reasons, tc.want)
			}
			if (tc.want == ReasonPDCachedFromDecode) != (est.Cached.Status == StatusInconclusive) {
				t.Errorf("status %s", est.Cached.Status)
			}
		})
	}
}

func TestPDKeepsTheGatePoolsEndpoints(t *testing.T) {
	v := &pdView{pool: map[string]bool{"m-prefill-0": true}, other: map[string]bool{"m-decode-0": true}}
	for ep, want := range map[string]bool{"m-prefill-0-rank-0": true, "m-decode-0-rank-0": false, "m-decode-0": false, "unknown-rank-0": true} {
		if got := v.keepEndpoint(ep); got != want {
			t.Errorf("keep %s = %t, want %t", ep, got, want)
		}
	}
	if sel := v.poolSelector(`namespace="x"`); sel != `namespace="x",pod=~"m-prefill-0"` {
		t.Errorf("pool selector %s", sel)
	}
}
