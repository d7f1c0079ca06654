package spans_test

import (
	"strings"
	"testing"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/spans"
)

func viewOf(t *testing.T, gss ...spans.GateSpan) spans.View {
	t.Helper()
	in := spans.NewInterner()
	v := spans.View{}
	for i := range gss {
		r, _ := in.Record(&gss[i])
		v.Records = append(v.Records, r)
	}
	v.Tables = in.Tables
	return v
}

func gateSpan(o gate.Outcome, threshold, penalty float64) spans.GateSpan {
	return spans.GateSpan{Outcome: o, Candidates: 4, Sticky: 1, HasSticky: true, Threshold: threshold,
		PenaltyMs: penalty, HasPenalty: penalty != 0}
}

func TestBoundsCatchSettingsNotInForce(t *testing.T) {
	// At 15928 tok/s: 3000 ms = 47784 tokens, 6000 ms = 95568 tokens.
	v := viewOf(t, gateSpan(gate.OutcomeSticky, 0.8, 3000), gateSpan(gate.OutcomeLoadOverride, 0.8, 6000),
		gateSpan(gate.OutcomeNoMatch, 0.8, 0))
	b := spans.SettingsBounds(&v, 15928)
	if !b.HasKept || b.MaxKept != 3000 || !b.HasReleased || b.MinReleased != 6000 || b.Penalties != 2 || b.GapOff != 0 {
		t.Fatalf("bounds %+v", b)
	}
	cases := []struct {
		name string
		s    gate.Settings
		want string
	}{
		{"in force", gate.Settings{AffinityThreshold: 0.8, MaxTTFTPenaltyMs: 5000, PeakPrefillThroughput: 15928}, ""},
		{"bar below a kept penalty", gate.Settings{AffinityThreshold: 0.8, MaxTTFTPenaltyMs: 2000, PeakPrefillThroughput: 15928}, "was kept sticky"},
		{"bar above a released penalty", gate.Settings{AffinityThreshold: 0.8, MaxTTFTPenaltyMs: 6000, PeakPrefillThroughput: 15928}, "was released"},
		{"gate off", gate.Settings{AffinityThreshold: 0.8, PeakPrefillThroughput: 15928}, "gate off"},
		{"threshold", gate.Settings{AffinityThreshold: 0.5, MaxTTFTPenaltyMs: 5000, PeakPrefillThroughput: 15928}, "spans carry 0.8"},
		{"throughput", gate.Settings{AffinityThreshold: 0.8, MaxTTFTPenaltyMs: 5000, PeakPrefillThroughput: 16001.5}, "no whole token gap"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := spans.SettingsBounds(&v, c.s.PeakPrefillThroughput)
			var got []string
			for _, m := range b.Check(&c.s) {
				got = append(got, m.String())
			}
			all := strings.Join(got, "; ")
			if (c.want == "") != (all == "") || !strings.Contains(all, c.want) {
				t.Fatalf("mismatches %q, want %q", all, c.want)
			}
		})
	}
}

func TestTwoThresholdsAreTwoInstances(t *testing.T) {
	v := viewOf(t, gateSpan(gate.OutcomeNoMatch, 0.8, 0), gateSpan(gate.OutcomeNoMatch, 0.99, 0), gateSpan(gate.OutcomeNoMatch, 0.8, 0))
	th := v.Thresholds()
	if len(th) != 2 || th[0] != (spans.ThresholdCount{Threshold: 0.8, Spans: 2}) || th[1].Spans != 1 {
		t.Fatalf("thresholds %+v", th)
	}
	b := spans.SettingsBounds(&v, 0)
	ms := b.Check(&gate.Settings{AffinityThreshold: 0.8})
	if len(ms) == 0 || !strings.Contains(ms[0].Reason, "2 distinct thresholds") {
		t.Fatalf("mismatches %v", ms)
	}
}
