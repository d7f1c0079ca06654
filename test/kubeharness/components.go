package kubeharness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Pinned component versions; they must match the variables at the top of build-components.sh.
const (
	// KubeVersion is the kube-apiserver version built by build-components.sh.
	KubeVersion = "v1.37.2"
	// EtcdVersion is the etcd version built by build-components.sh.
	EtcdVersion = "v3.6.16"
)

// CacheEnv names the environment variable holding the component cache directory.
const CacheEnv = "GATETUNER_CACHE"

// ErrComponentsMissing reports that kube-apiserver or etcd has not been built.
var ErrComponentsMissing = errors.New("test components missing")

// Binaries holds the paths of the component executables.
type Binaries struct {
	APIServer string
	Etcd      string
}

// CacheDir returns the component cache directory: $GATETUNER_CACHE, else <module root>/.cache
// where the module root is the nearest directory above the working directory holding go.mod.
func CacheDir() (string, error) {
	if dir := os.Getenv(CacheEnv); dir != "" {
		return filepath.Abs(dir)
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("locate component cache: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, ".cache"), nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("locate component cache: no go.mod above %s and %s unset", wd, CacheEnv)
		}
	}
}

// BinariesIn returns the component paths inside cacheDir at the pinned versions.
func BinariesIn(cacheDir string) Binaries {
	return Binaries{
		APIServer: filepath.Join(cacheDir, "bin", "kube-"+KubeVersion, "kube-apiserver"),
		Etcd:      filepath.Join(cacheDir, "bin", "etcd-"+EtcdVersion, "etcd"),
	}
}

// FindBinaries locates the built components; the error wraps ErrComponentsMissing when one
// is absent and says how to build it.
func FindBinaries() (Binaries, error) {
	dir, err := CacheDir()
	if err != nil {
		return Binaries{}, fmt.Errorf("%w: %w", ErrComponentsMissing, err)
	}
	b := BinariesIn(dir)
	for _, c := range []struct{ name, path string }{{"kube-apiserver", b.APIServer}, {"etcd", b.Etcd}} {
		if err := checkExecutable(c.path); err != nil {
			return Binaries{}, fmt.Errorf("%w: %s not found at %s: run `make test-components` (%w)",
				ErrComponentsMissing, c.name, c.path, err)
		}
	}
	return b, nil
}

func checkExecutable(path string) error {
	if _, err := exec.LookPath(path); err != nil {
		return err
	}
	return nil
}
