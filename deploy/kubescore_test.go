package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/gatetuner/gatetuner/deploy/internal/render"
	"github.com/gatetuner/gatetuner/test/kubeharness"
)

// kubeScoreModule is the kube-score release the tests run. It is built as
// its own module (its go.mod: k8s.io/apimachinery v0.32) because it does not
// compile against this module's v0.37 (its score/internal MapLabels lacks
// labels.Labels' Lookup), and v1.20.0 is the newest version the module
// proxy serves.
const kubeScoreModule = "github.com/zegl/kube-score/cmd/kube-score@v1.20.0"

// kubeScoreKubernetes is the Kubernetes version kube-score judges API
// versions against: the API server the dry-run tests use (test/kubeharness).
const kubeScoreKubernetes = "v1.37"

// kubeScoreBinary returns the kube-score CLI in the component cache,
// building it there with `go install` the first time (about a minute of
// CPU). Under -short the test is skipped; a failed build fails it.
func kubeScoreBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("kube-score: built into the component cache; skipped under -short")
	}
	cache, err := kubeharness.CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	_, version, _ := strings.Cut(kubeScoreModule, "@")
	dir := filepath.Join(cache, "bin", "kube-score-"+version)
	bin := filepath.Join(dir, "kube-score")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	tmp, err := os.MkdirTemp(cache, "kube-score-build-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command("go", "install", kubeScoreModule)
	// Outside this module, with kube-score's own go.mod.
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install %s: %v\n%s", kubeScoreModule, err, out)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(tmp, "kube-score"), bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// kubeScoreIgnored are the default checks the tests turn off
// (`--ignore-test`), each for a stated reason (docs/deploy.md).
var kubeScoreIgnored = map[string]string{
	// kube-score wants Always so that a cached private image is not run without
	// pull credentials. The image is pinned by tag or digest (the chart's
	// digest wins; TestKustomizeOverlaysSetTheImage refuses latest), where
	// IfNotPresent is Kubernetes' default and keeps a pod start from needing
	// the registry; the chart's image.pullPolicy sets Always for who wants it.
	"container-image-pull-policy": "the image is pinned; IfNotPresent is deliberate",
}

// kubeScore runs `kube-score score --output-format ci` with its default
// checks, less kubeScoreIgnored and the extra checks named, over manifests
// and returns the findings graded WARNING or CRITICAL (what
// `--exit-one-on-warning` fails on), sorted.
func kubeScore(t *testing.T, bin string, manifests []byte, ignore ...string) []string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "manifests.yaml")
	if err := os.WriteFile(f, manifests, 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"score", "--output-format", "ci", "--kubernetes-version", kubeScoreKubernetes}
	for id := range kubeScoreIgnored {
		ignore = append(ignore, id)
	}
	for _, id := range ignore {
		args = append(args, "--ignore-test", id)
	}
	cmd := exec.Command(bin, append(args, f)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("kube-score: %v\n%s", err, stderr.String())
	}
	var findings []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "[WARNING]") || strings.HasPrefix(line, "[CRITICAL]") {
			findings = append(findings, line)
		}
	}
	if err != nil && len(findings) == 0 {
		t.Fatalf("kube-score exited %d with no finding:\n%s\n%s", exit.ExitCode(), out, stderr.String())
	}
	if !strings.Contains(string(out), "apps/v1/Deployment") {
		t.Fatalf("kube-score did not score the Deployment:\n%s\n%s", out, stderr.String())
	}
	sort.Strings(findings)
	return findings
}

// kubeScoreCaseIgnored are checks a chart test case turns off because the
// case exists to render what they refuse.
var kubeScoreCaseIgnored = map[string][]string{
	// One replica without leader election: what ci/off-values.yaml tests.
	"off": {"deployment-replicas"},
	// No fixed UID/GID: OpenShift's SCC assigns them from the namespace's
	// range (above 10000), which kube-score cannot see.
	"openshift": {"container-security-context-user-group-id"},
}

// TestRenderingsPassKubeScore: every rendering an install uses — the chart
// with each ci/*-values.yaml and the example overlay — draws no warning or
// critical finding from kube-score's default checks.
func TestRenderingsPassKubeScore(t *testing.T) {
	bin := kubeScoreBinary(t)
	overlay, err := renderKustomize(kustomizeOverlay)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("kustomize overlay", func(t *testing.T) {
		for _, f := range kubeScore(t, bin, overlay) {
			t.Errorf("kube-score: %s", f)
		}
	})
	for _, c := range helmCases {
		t.Run("helm "+c.name, func(t *testing.T) {
			for _, f := range kubeScore(t, bin, c.render(t), kubeScoreCaseIgnored[c.name]...) {
				t.Errorf("kube-score: %s", f)
			}
		})
	}
}

// TestKubeScoreCaseIgnoresAreNeeded: each check a chart case turns off does
// fail that case when left on, so no ignore outlives its reason.
func TestKubeScoreCaseIgnoresAreNeeded(t *testing.T) {
	bin := kubeScoreBinary(t)
	for _, c := range helmCases {
		for _, id := range kubeScoreCaseIgnored[c.name] {
			findings := kubeScore(t, bin, c.render(t))
			if !slices.ContainsFunc(findings, func(f string) bool { return strings.Contains(f, kubeScoreFinding[id]) }) {
				t.Errorf("helm %s: kube-score passes %s without the ignore (%q): drop it", c.name, id, findings)
			}
		}
	}
}

// kubeScoreFinding is the text kube-score v1.20.0 reports for a check.
var kubeScoreFinding = map[string]string{
	"deployment-replicas":                      "Deployment few replicas",
	"container-security-context-user-group-id": "low user ID",
}

// TestKubeScoreRefusesTheKustomizeBase: the base alone is not an install, and
// kube-score says so — its placeholder image has no tag — and nothing else.
func TestKubeScoreRefusesTheKustomizeBase(t *testing.T) {
	bin := kubeScoreBinary(t)
	base, err := renderKustomize(kustomizeBase)
	if err != nil {
		t.Fatal(err)
	}
	findings := kubeScore(t, bin, base)
	if len(findings) != 1 || !strings.Contains(findings[0], "Image with latest tag") {
		t.Errorf("kube-score on the base: %q, want only its image tag finding (the placeholder)", findings)
	}
}

// renderKustomize is `kustomize build dir`.
func renderKustomize(dir string) ([]byte, error) {
	out, err := render.Kustomize(dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	return out, nil
}
