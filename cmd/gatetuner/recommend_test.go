package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/eppconfig"
)

// gitRepo makes a Git work tree holding a file at rel with content.
func gitRepo(t *testing.T, rel string, content []byte) (root, path string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	root = t.TempDir()
	if out, err := exec.Command("git", "-C", root, "init", "-q").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v: %s", err, out)
	}
	path = filepath.Join(root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, content, 0o644); err != nil {
		t.Fatal(err)
	}
	return root, path
}

func gitApplyCheck(t *testing.T, root, patch string) {
	t.Helper()
	cmd := exec.Command("git", "apply", "--check", "-v")
	cmd.Dir = root
	cmd.Stdin = strings.NewReader(patch)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git apply --check from the repository root: %v: %s\npatch:\n%s", err, out, patch)
	}
}

// recommendation builds the report a cycle makes for a config text.
func recommendation(t *testing.T, source string, text []byte, changes []eppconfig.Change) *tuner.Report {
	t.Helper()
	f, err := eppconfig.Parse(text, source)
	if err != nil {
		t.Fatal(err)
	}
	out, err := f.Edit(changes, mustLookup(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	return &tuner.Report{Target: "t", Source: source, OldConfig: text, NewConfig: out, Changes: changes}
}

func mustLookup(t *testing.T, name string) gate.Profile {
	t.Helper()
	p, err := gate.LookupProfile(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func readForm(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "tuner", "eppconfig", "testdata", "forms", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPatchAppliesFromRepositoryRoot: -o patch names files relative to the
// root of their Git work tree, and git apply takes the patch there, for a
// file target and for --patch-file, in every form (a double-quoted ConfigMap
// value, folded as kubectl writes it or on one line as Helm does, included).
func TestPatchAppliesFromRepositoryRoot(t *testing.T) {
	set := map[gate.Key]eppconfig.Value{gate.KeyMaxTTFTPenaltyMs: eppconfig.Number(4092)}
	for _, form := range []string{"helm-values-router.yaml", "flux-helmrelease.yaml", "argocd-application-values.yaml", "list-configmaps.yaml",
		"configmap-kubectl-folded.yaml", "configmap-double-quoted.yaml"} {
		t.Run(form, func(t *testing.T) {
			text := readForm(t, form)
			root, path := gitRepo(t, "deploy/llm-d/"+form, text)
			rep := recommendation(t, path, text, []eppconfig.Change{{Set: set}})
			cfg := &config.Config{Targets: []config.Target{{Name: "t", File: path}}}

			var target bytes.Buffer
			if err := writePatches(&target, io.Discard, []*tuner.Report{rep}, "", cfg); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(target.String(), "--- a/deploy/llm-d/"+form+"\n+++ b/deploy/llm-d/"+form+"\n") {
				t.Errorf("file target patch does not name the repository path:\n%s", target.String())
			}
			gitApplyCheck(t, root, target.String())

			var pf bytes.Buffer
			if err := writePatches(&pf, io.Discard, []*tuner.Report{rep}, path, cfg); err != nil {
				t.Fatal(err)
			}
			if pf.String() != target.String() {
				t.Errorf("--patch-file patch differs from the target's:\n%s\n%s", pf.String(), target.String())
			}
			gitApplyCheck(t, root, pf.String())
		})
	}
}

// TestPatchFileRefusesAnotherConfigsNumbers: --patch-file splices only into
// a file holding the values the recommendation was computed from.
func TestPatchFileRefusesAnotherConfigsNumbers(t *testing.T) {
	text := readForm(t, "helm-values-router.yaml")
	set := map[gate.Key]eppconfig.Value{gate.KeyMaxTTFTPenaltyMs: eppconfig.Number(4092)}
	rep := recommendation(t, "live.yaml", text, []eppconfig.Change{{Set: set}})
	cfg := &config.Config{Targets: []config.Target{{Name: "t", File: "live.yaml"}}}
	cases := []struct {
		name, from, to, want string
	}{
		{"another bar", "maxTTFTPenaltyMs: 18000 ", "maxTTFTPenaltyMs: 30000 ",
			`maxTTFTPenaltyMs is 30000 here but the recommendation was computed from 18000`},
		{"another throughput", "peakPrefillThroughput: 15928", "peakPrefillThroughput: 9000",
			`peakPrefillThroughput is 9000 (explicit) here but the recommendation was computed from 15928 (explicit)`},
		{"the default throughput instead of an explicit one", "            peakPrefillThroughput: 15928 # tok/s, calibrate.sh, median of 20 probes\n", "",
			`peakPrefillThroughput is 15928 (default) here but the recommendation was computed from 15928 (explicit)`},
		{"the latency predictor", "affinityThreshold: 0.80", "affinityThreshold: 0.80\n            ttftSource: latencyPredictor",
			`takes TTFT from the latency predictor; gatetuner does not tune such instances`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			other := strings.Replace(string(text), tc.from, tc.to, 1)
			if other == string(text) {
				t.Fatalf("the case does not change the file")
			}
			path := filepath.Join(t.TempDir(), "values.yaml")
			if err := os.WriteFile(path, []byte(other), 0o644); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			err := writePatches(&out, io.Discard, []*tuner.Report{rep}, path, cfg)
			if err == nil || !errors.Is(err, eppconfig.ErrOtherBase) {
				t.Fatalf("writePatches = %v, want a refusal wrapping eppconfig.ErrOtherBase; output:\n%s", err, out.String())
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if out.Len() != 0 {
				t.Errorf("a refused patch printed:\n%s", out.String())
			}
		})
	}
}

// TestRecommendPluginSelectsTheInstance: --plugin names the instance of
// --epp-config the simulated fleet runs; an unknown name is refused before
// anything is simulated, and --plugin without --scenario is a usage error.
func TestRecommendPluginSelectsTheInstance(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "two-gates.yaml")
	two, err := os.ReadFile(filepath.Join("..", "..", "tuner", "eppconfig", "testdata", "epp-config-two-gates.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, two, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs := gt(t, "", "recommend", "--scenario", "steady", "--epp-config", cfg)
	if code == 0 || !strings.Contains(errs, "2 instances") {
		t.Errorf("two instances, no --plugin: exit %d, %s", code, errs)
	}
	code, _, errs = gt(t, "", "recommend", "--scenario", "steady", "--epp-config", cfg, "--plugin", "nope")
	if code == 0 || !strings.Contains(errs, `no plugin "nope"`) {
		t.Errorf("unknown --plugin: exit %d, %s", code, errs)
	}
	code, _, errs = gt(t, "", "recommend", "--config", cfg, "--plugin", "strict-affinity-filter")
	if code == 0 || !strings.Contains(errs, "--plugin goes with --scenario") {
		t.Errorf("--plugin with --config: exit %d, %s", code, errs)
	}
}
