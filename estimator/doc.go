// Package estimator turns a deployment's Prometheus series into the numbers
// the EPP's load gate needs: the prefill drain rate (what
// peakPrefillThroughput should be), a nominal full-chunk rate, prompt and
// cached-token distributions, request rate, in-flight snapshots and routing
// shares. Every part carries a status, a source and, when it cannot be
// trusted, machine-readable reasons; see docs/estimator.md for the queries,
// the saturated-window rule, the confidence formula and the reason enum.
package estimator
