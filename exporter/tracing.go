package exporter

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TracerName is the instrumentation scope of gatetuner's spans.
const TracerName = "github.com/gatetuner/gatetuner"

// Tracing is the process's tracer and how to flush it.
type Tracing struct {
	Tracer trace.Tracer
	// Exporting: spans leave the process (an OTLP endpoint is configured).
	Exporting bool
	shutdown  func(context.Context) error
}

// Shutdown flushes and stops span export.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t.shutdown == nil {
		return nil
	}
	return t.shutdown(ctx)
}

// SetupTracing exports spans over OTLP/HTTP when the standard OTEL_*
// variables ask for it (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set, OTEL_TRACES_EXPORTER not "none",
// OTEL_SDK_DISABLED not "true"); otherwise spans are not recorded. getenv is
// os.Getenv in production.
func SetupTracing(ctx context.Context, getenv func(string) string, version string) (*Tracing, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	wanted := getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	exp := strings.ToLower(getenv("OTEL_TRACES_EXPORTER"))
	if !wanted || exp == "none" || strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return &Tracing{Tracer: noop.NewTracerProvider().Tracer(TracerName)}, nil
	}
	if exp != "" && exp != "otlp" {
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: only otlp (over HTTP) or none is supported", exp)
	}
	if p := getenv("OTEL_EXPORTER_OTLP_PROTOCOL"); p != "" && p != "http/protobuf" {
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: only http/protobuf is supported", p)
	}
	endpoint := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if endpoint == "" {
		endpoint = strings.TrimRight(getenv("OTEL_EXPORTER_OTLP_ENDPOINT"), "/") + "/v1/traces"
	}
	// Other OTEL_EXPORTER_OTLP_* variables (headers, timeout, certificates)
	// are read by the exporter itself.
	exporter, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, fmt.Errorf("create OTLP trace exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", serviceName(getenv)),
		attribute.String("service.version", version)))
	if err != nil {
		return nil, fmt.Errorf("build trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return &Tracing{Tracer: tp.Tracer(TracerName), Exporting: true, shutdown: tp.Shutdown}, nil
}

func serviceName(getenv func(string) string) string {
	if s := getenv("OTEL_SERVICE_NAME"); s != "" {
		return s
	}
	return "gatetuner"
}
