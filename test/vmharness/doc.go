// Package vmharness runs a real VictoriaMetrics single-node server for tests, the
// Prometheus-compatible store users scale to: it finds the binary that build-backends.sh built
// into the component cache, starts and stops a server on a free loopback port, and backfills
// the same OpenMetrics text the promharness feeds promtool through /api/v1/import/prometheus.
//
// Build the binary with `make test-components` (test/vmharness/build-backends.sh); tests that
// need it fail with that command when it is missing, and skip only under -short.
package vmharness
