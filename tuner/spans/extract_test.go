package spans_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/spans"
	"github.com/gatetuner/gatetuner/tuner/spans/spanstest"
)

var pool = spans.Resource{ServiceName: "llm-d-router/epp", Namespace: "llm", Pod: "glm-epp-7d9f-abcde"}

func extractOne(t *testing.T, sp *tracepb.Span) (spans.Counts, []spans.GateSpan) {
	t.Helper()
	req := spanstest.Request(pool, nil, 0, rand.New(rand.NewPCG(1, 2)))
	req.ResourceSpans[0].ScopeSpans[0].Spans = []*tracepb.Span{sp}
	var c spans.Counts
	var got []spans.GateSpan
	spans.Extract(req, &c, func(gs *spans.GateSpan) { got = append(got, *gs) })
	return c, got
}

func TestExtractReadsEveryDecisionTheEPPEmits(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	cases := []struct {
		name string
		d    spanstest.Decision
		want gate.Outcome
	}{
		{"not_applicable one endpoint", spanstest.Decision{Outcome: "not_applicable", Candidates: 1, Threshold: 0.8}, gate.OutcomeNotApplicable},
		{"not_applicable threshold 0", spanstest.Decision{Outcome: "not_applicable", Candidates: 4, Threshold: 0}, gate.OutcomeNotApplicable},
		{"exploration", spanstest.Decision{Outcome: "exploration", Candidates: 4, Threshold: 0.8}, gate.OutcomeExploration},
		{"no_match", spanstest.Decision{Outcome: "no_match", Candidates: 4, HasSticky: true, Threshold: 0.8}, gate.OutcomeNoMatch},
		{"sticky gate ran", spanstest.Sticky(1200.5, "glm-5", "r-1"), gate.OutcomeSticky},
		{"sticky all sticky", spanstest.Decision{Outcome: "sticky", Candidates: 3, Sticky: 3, HasSticky: true, Threshold: 0.8}, gate.OutcomeSticky},
		{"load_override", spanstest.Decision{Outcome: "load_override", Candidates: 4, Sticky: 1, HasSticky: true, Threshold: 0.8, PenaltyMs: 9000, HasPenalty: true}, gate.OutcomeLoadOverride},
		{"missing_signal", spanstest.Decision{Outcome: "missing_signal", Candidates: 4, Sticky: 1, HasSticky: true, Threshold: 0.8}, gate.OutcomeMissingSignal},
		{"request_load_override", spanstest.Decision{Outcome: "request_load_override", Candidates: 4, Sticky: 1, HasSticky: true, Threshold: 0.8, PenaltyMs: 10, HasPenalty: true}, spans.OutcomeRequestLoadOverride},
		{"unknown decision", spanstest.Decision{Outcome: "session_cost_stay", Candidates: 4, Threshold: 0.8}, spans.OutcomeOther},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cnt, got := extractOne(t, spanstest.Span(c.d, 5e18, rng))
			if len(got) != 1 || cnt.MalformedTotal() != 0 {
				t.Fatalf("got %d spans, malformed %v (%s)", len(got), cnt.Malformed, cnt.FirstFault)
			}
			g := got[0]
			if g.Outcome != c.want || g.Candidates != c.d.Candidates || g.Threshold != c.d.Threshold ||
				g.HasSticky != c.d.HasSticky || g.Sticky != c.d.Sticky || g.HasPenalty != c.d.HasPenalty ||
				g.PenaltyMs != c.d.PenaltyMs || g.Model != c.d.Model || g.RequestID != c.d.RequestID {
				t.Fatalf("got %+v from %+v", g, c.d)
			}
			if g.Resource != pool || g.EndNano != 5e18 || g.StartNano != 5e18-1000 {
				t.Fatalf("resource/time %+v %d %d", g.Resource, g.StartNano, g.EndNano)
			}
		})
	}
}

func TestExtractNamesTheFaultOfAMalformedGateSpan(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	good := spanstest.Sticky(100, "m", "r")
	drop := func(key string) func(*tracepb.Span) {
		return func(sp *tracepb.Span) {
			var kept []*commonpb.KeyValue
			for _, kv := range sp.Attributes {
				if kv.Key != key {
					kept = append(kept, kv)
				}
			}
			sp.Attributes = kept
		}
	}
	set := func(key string, v *commonpb.AnyValue) func(*tracepb.Span) {
		return func(sp *tracepb.Span) {
			drop(key)(sp)
			sp.Attributes = append(sp.Attributes, &commonpb.KeyValue{Key: key, Value: v})
		}
	}
	str := &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "x"}}
	cases := []struct {
		name  string
		d     spanstest.Decision
		edit  func(*tracepb.Span)
		fault spans.Fault
		msg   string
	}{
		{"no decision", good, drop(spans.AttrDecision), spans.FaultDecision, "missing"},
		{"no candidates", good, drop(spans.AttrCandidates), spans.FaultCandidates, "missing"},
		{"no threshold", good, drop(spans.AttrThreshold), spans.FaultThreshold, "missing"},
		{"threshold as string", good, set(spans.AttrThreshold, str), spans.FaultThreshold, "want double"},
		{"candidates as string", good, set(spans.AttrCandidates, str), spans.FaultCandidates, "want int"},
		{"negative sticky", good, set(spans.AttrSticky, &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: -1}}), spans.FaultSticky, "int -1"},
		{"no sticky after partition", good, drop(spans.AttrSticky), spans.FaultSticky, "missing on sticky"},
		{"short trace id", good, func(sp *tracepb.Span) { sp.TraceId = sp.TraceId[:8] }, spans.FaultTraceID, "8 bytes"},
		{"no span id", good, func(sp *tracepb.Span) { sp.SpanId = nil }, spans.FaultSpanID, "0 bytes"},
		{"end before start", good, func(sp *tracepb.Span) { sp.EndTimeUnixNano = sp.StartTimeUnixNano - 1 }, spans.FaultTime, "end_time"},
		{"repeated decision", good, func(sp *tracepb.Span) { sp.Attributes = append(sp.Attributes, sp.Attributes[len(sp.Attributes)-1]) }, spans.FaultDecision, "repeated"},
		{"load_override without penalty", spanstest.Decision{Outcome: "load_override", Candidates: 4, Sticky: 1, HasSticky: true, Threshold: 0.8}, nil, spans.FaultInconsistent, "without"},
		{"no_match with sticky", spanstest.Decision{Outcome: "no_match", Candidates: 4, Sticky: 2, HasSticky: true, Threshold: 0.8}, nil, spans.FaultInconsistent, "with sticky"},
		{"sticky above candidates", spanstest.Decision{Outcome: "sticky", Candidates: 2, Sticky: 3, HasSticky: true, Threshold: 0.8}, nil, spans.FaultInconsistent, "above"},
		{"not_applicable on an applicable set", spanstest.Decision{Outcome: "not_applicable", Candidates: 4, Threshold: 0.8}, nil, spans.FaultInconsistent, "more than one"},
		{"penalty on missing_signal", spanstest.Decision{Outcome: "missing_signal", Candidates: 4, Sticky: 1, HasSticky: true, Threshold: 0.8, HasPenalty: true}, nil, spans.FaultInconsistent, "only a gate that ran"},
		{"penalty with every endpoint sticky", spanstest.Decision{Outcome: "sticky", Candidates: 4, Sticky: 4, HasSticky: true, Threshold: 0.8, HasPenalty: true}, nil, spans.FaultInconsistent, "every endpoint sticky"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sp := spanstest.Span(c.d, 5e18, rng)
			if c.edit != nil {
				c.edit(sp)
			}
			cnt, got := extractOne(t, sp)
			if len(got) != 0 || cnt.Malformed[c.fault] != 1 || cnt.MalformedTotal() != 1 {
				t.Fatalf("got %d spans, malformed %v, want one %s", len(got), cnt.Malformed, c.fault)
			}
			if !strings.Contains(cnt.FirstFault, c.msg) {
				t.Fatalf("fault %q does not say %q", cnt.FirstFault, c.msg)
			}
		})
	}
}

func TestExtractSkipsOtherSpansAndCountsAForeignScope(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	req := spanstest.Request(pool, []spanstest.Decision{spanstest.Sticky(1, "", "")}, 5e18, rng)
	other := spanstest.Span(spanstest.Sticky(1, "", ""), 5e18, rng)
	other.Name = "filter_endpoints"
	ss := req.ResourceSpans[0].ScopeSpans
	ss[0].Spans = append(ss[0].Spans, other)
	foreign := &tracepb.ScopeSpans{Scope: &commonpb.InstrumentationScope{Name: "someone-else"},
		Spans: []*tracepb.Span{spanstest.Span(spanstest.Sticky(2, "", ""), 5e18, rng)}}
	req.ResourceSpans[0].ScopeSpans = append(ss, foreign)
	var c spans.Counts
	n := 0
	spans.Extract(req, &c, func(*spans.GateSpan) { n++ })
	if n != 2 || c.Spans != 3 || c.Gate != 2 || c.Skipped != 1 || c.ForeignScope != 1 {
		t.Fatalf("n %d counts %+v", n, c)
	}
}
