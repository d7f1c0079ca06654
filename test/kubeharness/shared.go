package kubeharness

import (
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// Shared is one test package's API server: started by the first test that
// needs it (so fuzzing and -short runs start none) and stopped by Stop,
// which the package's TestMain calls after m.Run.
type Shared struct {
	once sync.Once
	env  *Env
	err  error
}

// Need returns the shared API server and a fresh namespace named after the
// test; it skips under -short and fails loudly when the server cannot start.
func (s *Shared) Need(t testing.TB) (*Env, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a real kube-apiserver; skipped under -short")
	}
	s.once.Do(func() {
		bins, err := FindBinaries()
		if err == nil {
			s.env, err = New(context.Background(), Options{Binaries: bins})
		}
		s.err = err
	})
	if s.env == nil {
		t.Fatalf("no API server (%v): build kube-apiserver and etcd with `make test-components`", s.err)
	}
	ns := NamespaceFor(t)
	if err := s.env.CreateNamespace(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return s.env, ns
}

// Stop stops the API server if a test started it.
func (s *Shared) Stop() {
	if s.env != nil {
		s.env.Stop()
	}
}

var nonDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// NamespaceFor is a DNS-label namespace named after the test ("t-" and the
// last 50 characters of its lower-cased name).
func NamespaceFor(t testing.TB) string {
	n := strings.Trim(nonDNS.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if len(n) > 50 {
		n = strings.Trim(n[len(n)-50:], "-")
	}
	return "t-" + n
}
