package vmharness

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gatetuner/gatetuner/test/kubeharness"
)

// Version is the VictoriaMetrics version built by build-backends.sh; they must match.
const Version = "v1.151.0"

// ErrNotBuilt reports that the victoria-metrics binary is not in the component cache.
var ErrNotBuilt = errors.New("victoria-metrics not built")

// BinaryIn is the victoria-metrics path inside the component cache cacheDir.
func BinaryIn(cacheDir string) string {
	return filepath.Join(cacheDir, "bin", "victoria-metrics-"+Version, "victoria-metrics")
}

// Find locates the victoria-metrics binary in the component cache ($GATETUNER_CACHE, else
// <module root>/.cache); the error wraps ErrNotBuilt and says how to build it.
func Find() (string, error) {
	dir, err := kubeharness.CacheDir()
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNotBuilt, err)
	}
	bin := BinaryIn(dir)
	if _, err := exec.LookPath(bin); err != nil {
		return "", fmt.Errorf("%w: %s: run `make test-components` (%w)", ErrNotBuilt, bin, err)
	}
	return bin, nil
}

// Require returns the binary; when it is missing it skips the test under -short and fails it
// otherwise.
func Require(t testing.TB) string {
	t.Helper()
	bin, err := Find()
	if err == nil {
		return bin
	}
	if testing.Short() {
		t.Skipf("vmharness: a real VictoriaMetrics is needed: %v", err)
	}
	t.Fatalf("vmharness: a real VictoriaMetrics is needed: %v", err)
	return ""
}
