// Package promharness runs a real Prometheus server for tests: it finds the
// prometheus and promtool binaries (built from the pinned module by
// build-prometheus.sh), backfills OpenMetrics text into TSDB blocks with
// promtool, and starts, restarts and stops a server on a free loopback port.
package promharness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/test/kubeharness"
)

// Pinned versions; build-prometheus.sh and go.mod must say the same
// (TestPinnedVersionsAgree).
const (
	// ModuleVersion is the github.com/prometheus/prometheus module version
	// build-prometheus.sh builds: the one go.mod requires.
	ModuleVersion = "v0.316.0"
	// Version is the Prometheus release ModuleVersion publishes
	// (module v0.<major><minor>.<patch>).
	Version = "v3.16.0"
)

// BuildCommand builds the pinned prometheus and promtool into the component
// cache (it runs test/promharness/build-prometheus.sh).
const BuildCommand = "make test-components"

// EnvDir names the environment variable holding a folder with the prometheus
// and promtool binaries, used when the component cache has none.
const EnvDir = "GATETUNER_PROMETHEUS_DIR"

// Binaries are the paths of the Prometheus server and promtool, and the
// server's version line.
type Binaries struct {
	Prometheus string
	Promtool   string
	Version    string
}

// ErrNotFound reports that prometheus or promtool could not be located.
var ErrNotFound = errors.New("prometheus/promtool not found")

// DirIn is the folder build-prometheus.sh builds into inside the component
// cache cacheDir: bin/prometheus-<Version>.
func DirIn(cacheDir string) string {
	return filepath.Join(cacheDir, "bin", "prometheus-"+Version)
}

// Find locates prometheus and promtool, first in the component cache
// ($GATETUNER_CACHE, else <module root>/.cache) where BuildCommand puts them,
// then in $GATETUNER_PROMETHEUS_DIR, then (when that is unset) on PATH, and
// asks the server for its version. It never builds or installs anything; the error wraps
// ErrNotFound, says where it looked and names BuildCommand.
func Find() (Binaries, error) {
	var tried []string
	b, err := findCached()
	if err == nil {
		return withVersion(b)
	}
	tried = append(tried, err.Error())
	// A folder named in EnvDir is meant: PATH is not searched behind it.
	if dir := os.Getenv(EnvDir); dir != "" {
		b, err := pair(dir)
		if err == nil {
			return withVersion(b)
		}
		return Binaries{}, notFound(append(tried, fmt.Sprintf("%s=%s: %v", EnvDir, dir, err)))
	}
	tried = append(tried, EnvDir+" unset")
	b, err = onPath()
	if err == nil {
		return withVersion(b)
	}
	return Binaries{}, notFound(append(tried, err.Error()))
}

// notFound is the error Find returns after looking in the places tried.
func notFound(tried []string) error {
	return fmt.Errorf("%w: run `%s` to build Prometheus %s into the component cache (looked in: %s)",
		ErrNotFound, BuildCommand, Version, strings.Join(tried, "; "))
}

func findCached() (Binaries, error) {
	cache, err := kubeharness.CacheDir()
	if err != nil {
		return Binaries{}, err
	}
	b, err := pair(DirIn(cache))
	if err != nil {
		return Binaries{}, fmt.Errorf("component cache: %w", err)
	}
	return b, nil
}

// pair returns prometheus and promtool from dir, both executable files.
func pair(dir string) (Binaries, error) {
	var b Binaries
	var err error
	if b.Prometheus, err = executableIn(dir, "prometheus"); err != nil {
		return Binaries{}, err
	}
	if b.Promtool, err = executableIn(dir, "promtool"); err != nil {
		return Binaries{}, err
	}
	return b, nil
}

func executableIn(dir, name string) (string, error) {
	p := filepath.Join(dir, name)
	st, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("no %s", p)
	}
	if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%s is not an executable file", p)
	}
	return p, nil
}

func onPath() (Binaries, error) {
	var b Binaries
	var err error
	if b.Prometheus, err = exec.LookPath("prometheus"); err != nil {
		return Binaries{}, errors.New("prometheus not on PATH")
	}
	if b.Promtool, err = exec.LookPath("promtool"); err != nil {
		return Binaries{}, errors.New("promtool not on PATH")
	}
	return b, nil
}

// withVersion fills in the first line of `prometheus --version`.
func withVersion(b Binaries) (Binaries, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, b.Prometheus, "--version").CombinedOutput()
	if err != nil {
		return Binaries{}, fmt.Errorf("run %s --version: %w: %s", b.Prometheus, err, bytes.TrimSpace(out))
	}
	b.Version, _, _ = strings.Cut(strings.TrimSpace(string(out)), "\n")
	return b, nil
}

// Require returns the binaries (see Find). When they are missing it skips
// the test under -short and fails it otherwise, naming BuildCommand.
func Require(t testing.TB) Binaries {
	t.Helper()
	b, err := Find()
	if err == nil {
		return b
	}
	if testing.Short() {
		t.Skipf("a real Prometheus is needed: %v", err)
	}
	t.Fatalf("a real Prometheus is needed: %v", err)
	return Binaries{}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	s = strings.TrimRight(s, "\n")
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
