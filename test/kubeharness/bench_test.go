package kubeharness_test

import (
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/test/kubeharness"
)

// BenchmarkStartStop measures starting etcd + kube-apiserver until /readyz passes, and
// stopping them; startup-ms is the time to ready alone.
func BenchmarkStartStop(b *testing.B) {
	var startup time.Duration
	for b.Loop() {
		env := kubeharness.Start(b)
		startup += env.StartupTime
		env.Stop()
	}
	b.ReportMetric(float64(startup.Milliseconds())/float64(b.N), "startup-ms")
}
