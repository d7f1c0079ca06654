package vmharness

import (
	"errors"
	"testing"

	"github.com/gatetuner/gatetuner/test/internal/proc"
)

// Version is the VictoriaMetrics version built by build-backends.sh; they must match.
const Version = "v1.151.0"

// ErrNotBuilt reports that the victoria-metrics binary is not in the component cache.
var ErrNotBuilt = errors.New("victoria-metrics not built")

// BinaryIn is the victoria-metrics path inside the component cache cacheDir.
func BinaryIn(cacheDir string) string {
	return proc.CachedBinary(cacheDir, "victoria-metrics", Version)
}

// Find locates the victoria-metrics binary in the component cache ($GATETUNER_CACHE, else
// <module root>/.cache); the error wraps ErrNotBuilt and says how to build it.
func Find() (string, error) {
	return proc.FindCached("victoria-metrics", Version, "make test-components", ErrNotBuilt)
}

// Require returns the binary; when it is missing it skips the test under -short and fails it
// otherwise.
func Require(t testing.TB) string {
	t.Helper()
	return proc.Require(t, "VictoriaMetrics (vmharness)", Find)
}
