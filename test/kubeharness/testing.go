package kubeharness

import (
	"context"
	"errors"
	"testing"
)

// Start runs an API server for the test and stops it in t.Cleanup. Under `go test -short` it
// skips the test; when the components are not built it fails the test with the missing path
// and `make test-components`. On test failure the component log tails are logged.
func Start(t testing.TB, opts ...Option) *Env {
	t.Helper()
	if testing.Short() {
		t.Skip("kubeharness: needs a real kube-apiserver; skipped under -short")
	}
	var o Options
	for _, opt := range opts {
		opt(&o)
	}
	if o.Binaries == (Binaries{}) {
		b, err := FindBinaries()
		if err != nil {
			t.Fatalf("kubeharness: %v", err)
		}
		o.Binaries = b
	}
	env, err := New(context.Background(), o)
	if err != nil {
		if errors.Is(err, ErrComponentsMissing) {
			t.Fatalf("kubeharness: %v", err)
		}
		t.Fatalf("kubeharness: start API server: %v", err)
	}
	t.Logf("kubeharness: API server %s ready in %s", env.URL, env.StartupTime)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kubeharness: component logs after failure:\n%s", env.LogTails(logTailLines))
		}
		env.Stop()
	})
	return env
}
