// Package e2e holds the closed-loop test: the daemon fixes a drifting gate on
// a live simulated pool, with only Prometheus as its source of truth, on a
// real kube-apiserver and a real Prometheus, at real time.
package e2e
