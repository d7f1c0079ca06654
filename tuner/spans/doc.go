// Package spans holds the EPP's gate spans: the compact value of one
// `filter_prefix_cache_affinity` span (GateSpan) and its fixed-size stored
// form (Record), their extraction from OTLP trace data, the routing of spans
// to tuning targets by resource attributes, the OTLP JSON-lines file format
// of batch mode, and pure analysis over a target's window of spans: the
// sampling rate against the decision counter, outcome shares against the
// counter's, the release decision of a candidate setting from the measured
// penalty, and the bounds the spans put on the settings in force.
//
// The format, the bounds and which decisions are exact are in docs/spans.md.
// Subpackage window keeps a bounded, restart-safe window of records per
// target; subpackage receiver serves OTLP/gRPC and OTLP/HTTP.
package spans
