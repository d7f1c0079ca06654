// Package gate is an exact re-implementation of the llm-d EPP's
// prefix-cache-affinity load gate: its plugin parameters (parsed and validated
// the way a given EPP build does), its decision in `static` and `matchedTokens`
// penalty modes under both generations of missing-signal semantics, and the
// shadow verdict that says whether a decision held or released a cache pin
// rightly.
//
// The package is pure: it does no I/O and imports nothing else of gatetuner.
// Decide and DecideAll do not allocate.
//
// The decision matches the EPP decision for decision, including the float
// evaluation order of the TTFT estimate (tokens / throughput * 1000, per
// endpoint) and tie-breaking (the first endpoint in input order wins).
package gate
