// Package promharness runs a real Prometheus server for tests: it finds or
// installs the prometheus and promtool binaries, backfills OpenMetrics text
// into TSDB blocks with promtool, and starts, restarts and stops a server on a
// free loopback port.
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
)

// EnvDir names the environment variable holding a folder with the prometheus
// and promtool binaries; when unset they are looked up on PATH.
const EnvDir = "GATETUNER_PROMETHEUS_DIR"

// EnvNoInstall names the environment variable that, set to a non-empty
// value, stops FindOrInstall from installing the Debian package.
const EnvNoInstall = "GATETUNER_PROMETHEUS_NO_INSTALL"

// installTimeout bounds apt-get update plus apt-get install.
const installTimeout = 10 * time.Minute

// Binaries are the paths of the Prometheus server and promtool, and the
// server's version line.
type Binaries struct {
	Prometheus string
	Promtool   string
	Version    string
}

// ErrNotFound reports that prometheus or promtool could not be located.
var ErrNotFound = errors.New("prometheus/promtool not found")

// Find locates prometheus and promtool in $GATETUNER_PROMETHEUS_DIR, or on
// PATH when that variable is unset. It never installs anything.
func Find() (Binaries, error) {
	var b Binaries
	var err error
	if dir := os.Getenv(EnvDir); dir != "" {
		b.Prometheus, err = executableIn(dir, "prometheus")
		if err != nil {
			return Binaries{}, err
		}
		b.Promtool, err = executableIn(dir, "promtool")
		if err != nil {
			return Binaries{}, err
		}
	} else {
		if b.Prometheus, err = exec.LookPath("prometheus"); err != nil {
			return Binaries{}, fmt.Errorf("%w: prometheus not on PATH (set %s or install the Debian package \"prometheus\")", ErrNotFound, EnvDir)
		}
		if b.Promtool, err = exec.LookPath("promtool"); err != nil {
			return Binaries{}, fmt.Errorf("%w: promtool not on PATH (set %s or install the Debian package \"prometheus\")", ErrNotFound, EnvDir)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, b.Prometheus, "--version").CombinedOutput()
	if err != nil {
		return Binaries{}, fmt.Errorf("run %s --version: %w: %s", b.Prometheus, err, bytes.TrimSpace(out))
	}
	b.Version, _, _ = strings.Cut(strings.TrimSpace(string(out)), "\n")
	return b, nil
}

func executableIn(dir, name string) (string, error) {
	p := filepath.Join(dir, name)
	st, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("%w: %s=%s: %w", ErrNotFound, EnvDir, dir, err)
	}
	if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%w: %s is not an executable file", ErrNotFound, p)
	}
	return p, nil
}

// FindOrInstall locates the binaries like Find; when they are missing, no
// folder is configured, we run as root and apt-get exists, it installs the
// Debian package "prometheus" once (serialised across processes by a file
// lock) and looks again.
func FindOrInstall(ctx context.Context) (Binaries, error) {
	b, err := Find() //nolint:contextcheck // Find only looks up files
	if err == nil {
		return b, nil
	}
	if os.Getenv(EnvDir) != "" || os.Getenv(EnvNoInstall) != "" {
		return Binaries{}, err
	}
	if os.Geteuid() != 0 {
		return Binaries{}, fmt.Errorf("%w (not root, so not installing the Debian package)", err)
	}
	aptGet, lerr := exec.LookPath("apt-get")
	if lerr != nil {
		return Binaries{}, fmt.Errorf("%w (no apt-get to install it with)", err)
	}
	unlock, lerr := lockFile(ctx, filepath.Join(os.TempDir(), "gatetuner-prometheus-install.lock"))
	if lerr != nil {
		return Binaries{}, fmt.Errorf("lock before installing prometheus: %w", lerr)
	}
	defer unlock()
	// Another process may have installed it while we waited for the lock.
	if b, err := Find(); err == nil { //nolint:contextcheck // Find only looks up files
		return b, nil
	}
	if ierr := aptInstall(ctx, aptGet); ierr != nil {
		return Binaries{}, ierr
	}
	return Find() //nolint:contextcheck // Find only looks up files
}

func aptInstall(ctx context.Context, aptGet string) error {
	ctx, cancel := context.WithTimeout(ctx, installTimeout)
	defer cancel()
	env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	for _, args := range [][]string{
		{"update"},
		{"install", "-y", "--no-install-recommends", "prometheus"},
	} {
		cmd := exec.CommandContext(ctx, aptGet, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("apt-get %s: %w\n%s", strings.Join(args, " "), err, tail(string(out), 20))
		}
	}
	return nil
}

// Require returns the binaries, installing them when possible (see
// FindOrInstall). When they are still missing it skips the test under
// -short and fails it otherwise.
func Require(t testing.TB) Binaries {
	t.Helper()
	b, err := FindOrInstall(context.Background())
	if err == nil {
		return b
	}
	msg := fmt.Sprintf("a real Prometheus is needed: %v. Install it with `apt-get install prometheus` "+
		"(Debian/Ubuntu) or point %s at a folder holding the prometheus and promtool binaries", err, EnvDir)
	if testing.Short() {
		t.Skip(msg)
	}
	t.Fatal(msg)
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
