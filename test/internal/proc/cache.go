package proc

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gatetuner/gatetuner/test/kubeharness"
)

// CachedBinary is the path of a component built at version into the component
// cache cacheDir: bin/<name>-<version>/<name>.
func CachedBinary(cacheDir, name, version string) string {
	return filepath.Join(cacheDir, "bin", name+"-"+version, name)
}

// FindCached locates a component in the component cache ($GATETUNER_CACHE,
// else <module root>/.cache); the error wraps notBuilt and names the command
// that builds it.
func FindCached(name, version, buildCmd string, notBuilt error) (string, error) {
	dir, err := kubeharness.CacheDir()
	if err != nil {
		return "", fmt.Errorf("%w: %w", notBuilt, err)
	}
	bin := CachedBinary(dir, name, version)
	if _, err := exec.LookPath(bin); err != nil {
		return "", fmt.Errorf("%w: %s: run `%s` (%w)", notBuilt, bin, buildCmd, err)
	}
	return bin, nil
}

// Require returns find's binary; when it is missing it skips the test under
// -short and fails it otherwise (what names the component in the message).
func Require(t testing.TB, what string, find func() (string, error)) string {
	t.Helper()
	bin, err := find()
	if err == nil {
		return bin
	}
	if testing.Short() {
		t.Skipf("a real %s is needed: %v", what, err)
	}
	t.Fatalf("a real %s is needed: %v", what, err)
	return ""
}
