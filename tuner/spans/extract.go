package spans

import (
	"fmt"
	"math"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/gatetuner/gatetuner/gate"
)

// Fault names what makes a gate span malformed: the attribute or field that
// is missing, of the wrong type or out of range, or the inconsistency.
type Fault uint8

// Faults.
const (
	FaultTraceID Fault = iota
	FaultSpanID
	FaultTime
	FaultDecision
	FaultCandidates
	FaultSticky
	FaultThreshold
	FaultPenalty
	FaultModel
	FaultRequestID
	// FaultInconsistent: the decision contradicts the counts (e.g. no_match
	// with sticky endpoints, load_override without a penalty).
	FaultInconsistent
	NumFaults
)

var faultNames = [NumFaults]string{"trace_id", "span_id", "time", AttrDecision, AttrCandidates, AttrSticky,
	AttrThreshold, AttrPenalty, AttrModel, AttrRequestID, "inconsistent"}

// String names the fault's attribute or field.
func (f Fault) String() string {
	if f < NumFaults {
		return faultNames[f]
	}
	return fmt.Sprintf("Fault(%d)", uint8(f))
}

// Counts tallies what Extract saw.
type Counts struct {
	// Spans is every span in the requests; Gate the spans named SpanName.
	Spans, Gate uint64
	// Skipped counts spans of other names.
	Skipped uint64
	// ForeignScope counts gate spans whose instrumentation scope is not
	// Scope (accepted: the name and attributes decide).
	ForeignScope uint64
	// Malformed counts gate spans rejected, by fault.
	Malformed [NumFaults]uint64
	// FirstFault describes the first malformed span ("" when none).
	FirstFault string
}

// MalformedTotal sums Malformed.
func (c *Counts) MalformedTotal() uint64 {
	var n uint64
	for _, v := range c.Malformed {
		n += v
	}
	return n
}

// Add adds o to c (FirstFault kept when set).
func (c *Counts) Add(o *Counts) {
	c.Spans += o.Spans
	c.Gate += o.Gate
	c.Skipped += o.Skipped
	c.ForeignScope += o.ForeignScope
	for i := range c.Malformed {
		c.Malformed[i] += o.Malformed[i]
	}
	if c.FirstFault == "" {
		c.FirstFault = o.FirstFault
	}
}

// Extract calls fn for every well-formed gate span of req, in order, and
// counts every span in c. fn's GateSpan is reused between calls.
func Extract(req *coltracepb.ExportTraceServiceRequest, c *Counts, fn func(*GateSpan)) {
	var gs GateSpan
	for _, rs := range req.GetResourceSpans() {
		res := resourceOf(rs.GetResource())
		for _, ss := range rs.GetScopeSpans() {
			foreign := ss.GetScope().GetName() != Scope
			for _, sp := range ss.GetSpans() {
				c.Spans++
				if sp.GetName() != SpanName {
					c.Skipped++
					continue
				}
				c.Gate++
				if foreign {
					c.ForeignScope++
				}
				if f, msg, ok := parseSpan(sp, &gs); !ok {
					c.Malformed[f]++
					if c.FirstFault == "" {
						c.FirstFault = fmt.Sprintf("span %x: %s", sp.GetSpanId(), msg)
					}
					continue
				}
				gs.Resource = res
				fn(&gs)
			}
		}
	}
}

func resourceOf(r *resourcepb.Resource) Resource {
	var res Resource
	for _, kv := range r.GetAttributes() {
		switch kv.GetKey() {
		case ResServiceName:
			res.ServiceName = kv.GetValue().GetStringValue()
		case ResNamespace:
			res.Namespace = kv.GetValue().GetStringValue()
		case ResPod:
			res.Pod = kv.GetValue().GetStringValue()
		}
	}
	return res
}

// parseSpan fills gs from sp; on a fault it says which and why.
func parseSpan(sp *tracepb.Span, gs *GateSpan) (Fault, string, bool) {
	*gs = GateSpan{}
	if len(sp.GetTraceId()) != len(gs.TraceID) {
		return FaultTraceID, fmt.Sprintf("trace_id has %d bytes, want 16", len(sp.GetTraceId())), false
	}
	if len(sp.GetSpanId()) != len(gs.SpanID) {
		return FaultSpanID, fmt.Sprintf("span_id has %d bytes, want 8", len(sp.GetSpanId())), false
	}
	copy(gs.TraceID[:], sp.GetTraceId())
	copy(gs.SpanID[:], sp.GetSpanId())
	start, end := sp.GetStartTimeUnixNano(), sp.GetEndTimeUnixNano()
	if end == 0 || end < start || end > math.MaxInt64 {
		return FaultTime, fmt.Sprintf("end_time_unix_nano %d with start %d", end, start), false
	}
	gs.StartNano, gs.EndNano = int64(start), int64(end)
	var seen [NumFaults]bool
	for _, kv := range sp.GetAttributes() {
		if f, msg, ok := setAttr(gs, kv, &seen); !ok {
			return f, msg, false
		}
	}
	for _, f := range [...]Fault{FaultDecision, FaultCandidates, FaultThreshold} {
		if !seen[f] {
			return f, "attribute " + f.String() + " missing", false
		}
	}
	return checkConsistent(gs)
}

// setAttr reads one attribute; the types are the EPP's (int64 counts,
// double threshold and penalty, string decision, model and id).
func setAttr(gs *GateSpan, kv *commonpb.KeyValue, seen *[NumFaults]bool) (Fault, string, bool) {
	v := kv.GetValue()
	var f Fault
	var ok bool
	switch kv.GetKey() {
	case AttrDecision:
		f = FaultDecision
		var s string
		if s, ok = str(v); ok {
			gs.Outcome = parseDecision(s)
		}
	case AttrCandidates:
		f = FaultCandidates
		gs.Candidates, ok = count(v)
	case AttrSticky:
		f = FaultSticky
		gs.Sticky, ok = count(v)
		gs.HasSticky = ok
	case AttrThreshold:
		f = FaultThreshold
		gs.Threshold, ok = double(v)
	case AttrPenalty:
		f = FaultPenalty
		gs.PenaltyMs, ok = double(v)
		gs.HasPenalty = ok
	case AttrModel:
		f = FaultModel
		gs.Model, ok = str(v)
	case AttrRequestID:
		f = FaultRequestID
		gs.RequestID, ok = str(v)
	default:
		return 0, "", true
	}
	if !ok {
		return f, fmt.Sprintf("attribute %s: want %s, got %s", kv.GetKey(), wantType(f), typeName(v)), false
	}
	if seen[f] {
		return f, "attribute " + kv.GetKey() + " repeated", false
	}
	seen[f] = true
	return 0, "", true
}

func str(v *commonpb.AnyValue) (string, bool) {
	s, ok := v.GetValue().(*commonpb.AnyValue_StringValue)
	if !ok {
		return "", false
	}
	return s.StringValue, true
}

// count reads a non-negative int attribute that fits the record's uint16.
func count(v *commonpb.AnyValue) (int, bool) {
	i, ok := v.GetValue().(*commonpb.AnyValue_IntValue)
	if !ok || i.IntValue < 0 || i.IntValue > math.MaxUint16 {
		return 0, false
	}
	return int(i.IntValue), true
}

func double(v *commonpb.AnyValue) (float64, bool) {
	d, ok := v.GetValue().(*commonpb.AnyValue_DoubleValue)
	if !ok {
		return 0, false
	}
	return d.DoubleValue, true
}

func wantType(f Fault) string {
	switch f {
	case FaultCandidates, FaultSticky:
		return "int in [0, 65535]"
	case FaultThreshold, FaultPenalty:
		return "double"
	}
	return "string"
}

func typeName(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return "string"
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprintf("int %d", x.IntValue)
	case *commonpb.AnyValue_DoubleValue:
		return "double"
	case *commonpb.AnyValue_BoolValue:
		return "bool"
	case nil:
		return "no value"
	}
	return "a composite value"
}

// checkConsistent holds the decision against the counts the way every
// known build sets them (docs/spans.md, "What a span must say").
func checkConsistent(gs *GateSpan) (Fault, string, bool) {
	if gs.Outcome == OutcomeOther {
		return 0, "", true
	}
	why := inconsistency(gs)
	if why == "" && !gs.HasSticky && gs.Outcome != gate.OutcomeNotApplicable && gs.Outcome != gate.OutcomeExploration {
		return FaultSticky, "attribute " + AttrSticky + " missing on " + OutcomeName(gs.Outcome), false
	}
	if why != "" {
		return FaultInconsistent, OutcomeName(gs.Outcome) + ": " + why, false
	}
	return 0, "", true
}

// inconsistency says how the decision contradicts the counts ("" when not).
func inconsistency(gs *GateSpan) string {
	if gs.HasSticky && gs.Sticky > gs.Candidates {
		return "sticky_endpoints above candidate_endpoints"
	}
	applicable := gs.Candidates > 1 && gs.Threshold > 0
	if (gs.Outcome == gate.OutcomeNotApplicable) == applicable {
		if applicable {
			return "with more than one endpoint and a positive threshold"
		}
		return "with one endpoint or a threshold ≤ 0"
	}
	penaltyWanted := false
	switch gs.Outcome {
	case gate.OutcomeNoMatch:
		if gs.HasSticky && gs.Sticky != 0 {
			return "with sticky endpoints"
		}
	case gate.OutcomeLoadOverride, OutcomeRequestLoadOverride:
		penaltyWanted = true
		if gs.HasSticky && (gs.Sticky == 0 || gs.Sticky == gs.Candidates) {
			return "with no sticky or no non-sticky endpoint"
		}
	case gate.OutcomeMissingSignal:
		if gs.HasSticky && (gs.Sticky == 0 || gs.Sticky == gs.Candidates) {
			return "with no sticky or no non-sticky endpoint"
		}
	case gate.OutcomeSticky:
		if gs.HasSticky && gs.Sticky == 0 {
			return "without sticky endpoints"
		}
		if gs.HasPenalty && gs.HasSticky && gs.Sticky == gs.Candidates {
			return "with " + AttrPenalty + " and every endpoint sticky (the gate is skipped)"
		}
		return ""
	}
	if gs.HasPenalty && !penaltyWanted {
		return "with " + AttrPenalty + ", which only a gate that ran sets"
	}
	if !gs.HasPenalty && penaltyWanted {
		return "without " + AttrPenalty
	}
	return ""
}
