// Package spanstest makes gate spans shaped exactly like the EPP's: with the
// OpenTelemetry SDK, the way the filter's Filter method starts, fills and
// ends its span, or directly as OTLP messages. Tests and the fleet simulator
// use it; the shape is cited in docs/spans.md.
package spanstest

import (
	"context"
	"encoding/binary"
	"math/rand/v2"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/spans"
)

// Decision is one filter decision as its span reports it.
type Decision struct {
	Outcome    string
	Candidates int
	Sticky     int
	HasSticky  bool
	Threshold  float64
	PenaltyMs  float64
	HasPenalty bool
	Model      string
	RequestID  string
}

// FromGate is the span the EPP emits for decision d, taken with settings s
// on n endpoints: sticky_endpoints once the partition is reached, the
// penalty only when the gate compared one.
func FromGate(s *gate.Settings, n int, d *gate.Decision) Decision {
	sd := Decision{Outcome: d.Outcome.String(), Candidates: n, Threshold: s.AffinityThreshold}
	switch d.Outcome {
	case gate.OutcomeNotApplicable, gate.OutcomeExploration:
		return sd
	}
	sd.Sticky, sd.HasSticky = d.Sticky, true
	if d.TTFTCompared {
		sd.PenaltyMs, sd.HasPenalty = d.PenaltyMs, true
	}
	return sd
}

// Tracer is the tracer of the EPP's scheduling plugins on tp.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	return tp.Tracer(spans.Scope, trace.WithInstrumentationVersion("spanstest"))
}

// Emit starts and ends one span as the filter does: candidates and
// threshold at start, then model and request id, then what the path sets.
func Emit(ctx context.Context, tr trace.Tracer, d Decision) {
	_, sp := tr.Start(ctx, spans.SpanName, trace.WithSpanKind(trace.SpanKindInternal))
	sp.SetAttributes(
		attribute.Int(spans.AttrCandidates, d.Candidates),
		attribute.Float64(spans.AttrThreshold, d.Threshold),
	)
	if d.Model != "" {
		sp.SetAttributes(attribute.String(spans.AttrModel, d.Model))
	}
	if d.RequestID != "" {
		sp.SetAttributes(attribute.String(spans.AttrRequestID, d.RequestID))
	}
	if d.HasSticky {
		sp.SetAttributes(attribute.Int(spans.AttrSticky, d.Sticky))
	}
	if d.HasPenalty {
		sp.SetAttributes(attribute.Float64(spans.AttrPenalty, d.PenaltyMs))
	}
	sp.SetAttributes(attribute.String(spans.AttrDecision, d.Outcome))
	sp.End()
}

// ResourceAttrs are the resource attributes the EPP chart sets.
func ResourceAttrs(res spans.Resource) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String(spans.ResServiceName, res.ServiceName),
		attribute.String(spans.ResNamespace, res.Namespace),
		attribute.String(spans.ResPod, res.Pod),
	}
}

// Request builds an export of decisions ds as gate spans of one resource,
// ending at endNano, 1 µs long, with ids drawn from rng.
func Request(res spans.Resource, ds []Decision, endNano int64, rng *rand.Rand) *coltracepb.ExportTraceServiceRequest {
	ss := &tracepb.ScopeSpans{Scope: &commonpb.InstrumentationScope{Name: spans.Scope}}
	for _, d := range ds {
		ss.Spans = append(ss.Spans, Span(d, endNano, rng))
	}
	return &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{
			strKV(spans.ResServiceName, res.ServiceName),
			strKV(spans.ResNamespace, res.Namespace),
			strKV(spans.ResPod, res.Pod),
		}},
		ScopeSpans: []*tracepb.ScopeSpans{ss},
	}}}
}

// Span builds one gate span.
func Span(d Decision, endNano int64, rng *rand.Rand) *tracepb.Span {
	tid, sid := make([]byte, 16), make([]byte, 8)
	binary.LittleEndian.PutUint64(tid, rng.Uint64())
	binary.LittleEndian.PutUint64(tid[8:], rng.Uint64())
	binary.LittleEndian.PutUint64(sid, rng.Uint64()|1)
	sp := &tracepb.Span{
		TraceId: tid, SpanId: sid, Name: spans.SpanName, Kind: tracepb.Span_SPAN_KIND_INTERNAL,
		StartTimeUnixNano: uint64(endNano - 1000), EndTimeUnixNano: uint64(endNano),
		Attributes: []*commonpb.KeyValue{
			intKV(spans.AttrCandidates, int64(d.Candidates)),
			dblKV(spans.AttrThreshold, d.Threshold),
		},
	}
	if d.Model != "" {
		sp.Attributes = append(sp.Attributes, strKV(spans.AttrModel, d.Model))
	}
	if d.RequestID != "" {
		sp.Attributes = append(sp.Attributes, strKV(spans.AttrRequestID, d.RequestID))
	}
	if d.HasSticky {
		sp.Attributes = append(sp.Attributes, intKV(spans.AttrSticky, int64(d.Sticky)))
	}
	if d.HasPenalty {
		sp.Attributes = append(sp.Attributes, dblKV(spans.AttrPenalty, d.PenaltyMs))
	}
	sp.Attributes = append(sp.Attributes, strKV(spans.AttrDecision, d.Outcome))
	return sp
}

func strKV(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

func intKV(k string, v int64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}}
}

func dblKV(k string, v float64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v}}}
}

// Sticky is a kept-sticky decision with the gate run: 8 endpoints, 2 sticky,
// threshold 0.8, the given penalty.
func Sticky(penalty float64, model, id string) Decision {
	return Decision{Outcome: "sticky", Candidates: 8, Sticky: 2, HasSticky: true, Threshold: 0.8,
		PenaltyMs: penalty, HasPenalty: true, Model: model, RequestID: id}
}
