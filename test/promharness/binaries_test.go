package promharness_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gatetuner/gatetuner/test/kubeharness"
	"github.com/gatetuner/gatetuner/test/promharness"
)

// fakePair writes prometheus and promtool scripts into dir that answer
// --version with "prometheus, version <tag>"; without promtool when only is
// "prometheus".
func fakePair(t *testing.T, dir, tag, only string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"prometheus", "promtool"} {
		if only != "" && name != only {
			continue
		}
		script := "#!/bin/sh\necho \"" + name + ", version " + tag + "\"\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFindLooksInTheCacheThenTheDirThenPath(t *testing.T) {
	type place struct{ tag, only string } // zero: nothing there
	tests := []struct {
		name            string
		cache, dir, pth place
		dirSet          bool
		want            string   // version tag found; empty: ErrNotFound
		wantErr         []string // substrings of the error
	}{
		{name: "the cache wins over the dir and PATH",
			cache: place{tag: "cache"}, dir: place{tag: "dir"}, dirSet: true, pth: place{tag: "path"}, want: "cache"},
		{name: "the dir when the cache has no build",
			dir: place{tag: "dir"}, dirSet: true, pth: place{tag: "path"}, want: "dir"},
		{name: "PATH when the cache has no build and the dir is unset",
			pth: place{tag: "path"}, want: "path"},
		{name: "a cache build without promtool is not used",
			cache: place{tag: "cache", only: "prometheus"}, pth: place{tag: "path"}, want: "path"},
		{name: "a configured dir without the binaries fails rather than falling back to PATH",
			dirSet: true, pth: place{tag: "path"},
			wantErr: []string{"make test-components", promharness.EnvDir + "=", "no "}},
		{name: "nothing anywhere names the build command and every place",
			wantErr: []string{"run `make test-components` to build Prometheus " + promharness.Version,
				filepath.Join("bin", "prometheus-"+promharness.Version, "prometheus"),
				promharness.EnvDir + " unset", "prometheus not on PATH"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cache, dir, pth := t.TempDir(), t.TempDir(), t.TempDir()
			if tc.cache.tag != "" {
				fakePair(t, promharness.DirIn(cache), tc.cache.tag, tc.cache.only)
			}
			if tc.dir.tag != "" {
				fakePair(t, dir, tc.dir.tag, tc.dir.only)
			}
			if tc.pth.tag != "" {
				fakePair(t, pth, tc.pth.tag, tc.pth.only)
			}
			t.Setenv(kubeharness.CacheEnv, cache)
			t.Setenv(promharness.EnvDir, "")
			if tc.dirSet {
				t.Setenv(promharness.EnvDir, dir)
			}
			t.Setenv("PATH", pth)
			got, err := promharness.Find()
			if tc.want == "" {
				if !errors.Is(err, promharness.ErrNotFound) {
					t.Fatalf("got %+v, %v; want ErrNotFound", got, err)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Version != "prometheus, version "+tc.want {
				t.Errorf("found %+v, want the %s pair", got, tc.want)
			}
			if filepath.Dir(got.Prometheus) != filepath.Dir(got.Promtool) {
				t.Errorf("prometheus and promtool from different folders: %+v", got)
			}
		})
	}
}

// moduleRoot is the folder holding go.mod, two levels up.
const moduleRoot = "../.."

func TestPinnedVersionsAgree(t *testing.T) {
	gomod, err := os.ReadFile(filepath.Join(moduleRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?github\.com/prometheus/prometheus (\S+)`).FindSubmatch(gomod)
	if m == nil || string(m[1]) != promharness.ModuleVersion {
		t.Errorf("go.mod requires github.com/prometheus/prometheus %q, promharness.ModuleVersion is %s", m, promharness.ModuleVersion)
	}
	script, err := os.ReadFile("build-prometheus.sh")
	if err != nil {
		t.Fatal(err)
	}
	m = regexp.MustCompile(`(?m)^PROM_MODULE_VERSION="([^"]+)"`).FindSubmatch(script)
	if m == nil || string(m[1]) != promharness.ModuleVersion {
		t.Errorf("build-prometheus.sh PROM_MODULE_VERSION %q, promharness.ModuleVersion %s", m, promharness.ModuleVersion)
	}
	// v0.<major><minor, two digits>.<patch> publishes v<major>.<minor>.<patch>.
	p := regexp.MustCompile(`^v0\.(\d)(\d\d)\.(\d+)$`).FindStringSubmatch(promharness.ModuleVersion)
	if p == nil {
		t.Fatalf("ModuleVersion %s is not v0.<major><minor>.<patch>", promharness.ModuleVersion)
	}
	if want := "v" + p[1] + "." + strings.TrimPrefix(p[2], "0") + "." + p[3]; promharness.Version != want {
		t.Errorf("Version %s, ModuleVersion %s publishes %s", promharness.Version, promharness.ModuleVersion, want)
	}
}

func TestBuildScript(t *testing.T) {
	t.Run("no cache dir is a usage error", func(t *testing.T) {
		out, err := exec.Command("./build-prometheus.sh").CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "usage: ./build-prometheus.sh CACHE_DIR") {
			t.Fatalf("got %v: %s; want exit 2 and the usage line", err, out)
		}
	})
	t.Run("without go it says so and exits 1", func(t *testing.T) {
		noGo := t.TempDir()
		for _, tool := range []string{"bash", "sed", "awk", "mkdir"} {
			p, err := exec.LookPath(tool)
			if err != nil {
				t.Skipf("no %s", tool)
			}
			if err := os.Symlink(p, filepath.Join(noGo, tool)); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command(filepath.Join(noGo, "bash"), "./build-prometheus.sh", t.TempDir())
		cmd.Env = append(os.Environ(), "PATH="+noGo)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "build-prometheus: go not found in PATH") {
			t.Fatalf("got %v: %s; want exit 1 naming the missing go", err, out)
		}
	})
	t.Run("binaries that answer --version are kept", func(t *testing.T) {
		cache := t.TempDir()
		fakePair(t, promharness.DirIn(cache), "kept", "")
		out, err := exec.Command("./build-prometheus.sh", cache).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "present: prometheus, version kept") {
			t.Fatalf("got %v: %s; want it to keep the answering pair", err, out)
		}
		if _, err := os.Stat(filepath.Join(cache, "src")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("it wrote a scratch module though nothing needed building (%v)", err)
		}
	})
}

func TestMakeTestComponentsBuildsPrometheus(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	cache := t.TempDir()
	out, err := exec.Command("make", "-n", "-C", moduleRoot, "test-components", "CACHE="+cache).CombinedOutput()
	if err != nil {
		t.Fatalf("make -n test-components: %v\n%s", err, out)
	}
	if want := `./test/promharness/build-prometheus.sh "` + cache + `"`; !strings.Contains(string(out), want) {
		t.Errorf("make -n test-components does not run %s:\n%s", want, out)
	}
	ci, err := os.ReadFile(filepath.Join(moduleRoot, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	for _, pm := range []string{"apt-get", "apt ", "yum", "dnf", "apk "} {
		if strings.Contains(string(ci), pm) {
			t.Errorf(".ci/run installs with %s; make test-components builds what the tests need", pm)
		}
	}
}

func TestTheCachedBuildIsThePinnedRelease(t *testing.T) {
	b := promharness.Require(t)
	cache, err := kubeharness.CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(b.Prometheus) != promharness.DirIn(cache) {
		t.Skipf("Prometheus from %s, not the component cache: %s", b.Prometheus, b.Version)
	}
	if want := "prometheus, version " + strings.TrimPrefix(promharness.Version, "v") + " "; !strings.HasPrefix(b.Version, want) {
		t.Errorf("%s --version says %q, want it to start %q", b.Prometheus, b.Version, want)
	}
	t.Log(b.Version)
}
