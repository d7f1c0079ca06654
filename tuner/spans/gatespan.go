package spans

import (
	"github.com/gatetuner/gatetuner/gate"
)

// Span and attribute names the EPP uses (docs/spans.md cites the source).
const (
	// SpanName is the name of the prefix-cache-affinity filter's span.
	SpanName = "filter_prefix_cache_affinity"
	// Scope is the instrumentation scope of the EPP's scheduling plugins.
	Scope = "llm-d-router/pkg/epp/framework/plugins/scheduling"

	AttrDecision   = "llm_d.epp.filter.decision"
	AttrCandidates = "llm_d.epp.filter.candidate_endpoints"
	AttrSticky     = "llm_d.epp.filter.sticky_endpoints"
	AttrThreshold  = "llm_d.epp.filter.affinity_threshold"
	AttrPenalty    = "llm_d.epp.filter.ttft_penalty_ms"
	AttrModel      = "gen_ai.request.model"
	AttrRequestID  = "gen_ai.request.id"

	ResServiceName = "service.name"
	ResNamespace   = "k8s.namespace.name"
	ResPod         = "k8s.pod.name"
)

// Outcomes the gate package does not model. They share gate.Outcome's type
// so one field holds every decision; their values sit far above
// gate.NumOutcomes so that a new gate outcome never collides with them.
const (
	// OutcomeRequestLoadOverride is request_load_override, set only by the
	// request-gate heads of the filter.
	OutcomeRequestLoadOverride gate.Outcome = 0xF0
	// OutcomeOther is a decision value no known build sets.
	OutcomeOther gate.Outcome = 0xFF
)

// OutcomeName returns the EPP's decision value for o ("other" for
// OutcomeOther).
func OutcomeName(o gate.Outcome) string {
	switch o {
	case OutcomeRequestLoadOverride:
		return "request_load_override"
	case OutcomeOther:
		return "other"
	}
	return o.String()
}

// parseDecision maps a decision attribute value to an outcome; unknown
// values are OutcomeOther.
func parseDecision(s string) gate.Outcome {
	if o, ok := gate.ParseOutcome(s); ok {
		return o
	}
	if s == "request_load_override" {
		return OutcomeRequestLoadOverride
	}
	return OutcomeOther
}

// Resource is the identity of the process that sent a span, from its
// resource attributes; the EPP chart sets them (docs/spans.md).
type Resource struct {
	ServiceName, Namespace, Pod string
}

// GateSpan is one filter_prefix_cache_affinity span: one filter decision as
// the EPP reported it. Strings alias the decoded message.
type GateSpan struct {
	// StartNano and EndNano are Unix nanoseconds.
	StartNano, EndNano int64
	TraceID            [16]byte
	SpanID             [8]byte
	// Outcome is the decision (OutcomeRequestLoadOverride and OutcomeOther
	// included).
	Outcome gate.Outcome
	// Candidates is the endpoint count the filter received.
	Candidates int
	// Sticky is the count at or above the threshold; set only after the
	// partition (HasSticky).
	Sticky    int
	HasSticky bool
	// Threshold is the affinityThreshold in force.
	Threshold float64
	// PenaltyMs is best sticky TTFT − best non-sticky TTFT; present only when
	// the load gate ran (HasPenalty).
	PenaltyMs  float64
	HasPenalty bool
	// Model and RequestID are gen_ai.request.model and gen_ai.request.id
	// ("" when absent).
	Model, RequestID string
	Resource         Resource
}
