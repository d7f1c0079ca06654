package main

import (
	"bytes"
	"compress/gzip"
	"errors"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/test/promharness"
	"github.com/gatetuner/gatetuner/tuner"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/spf13/viper"
)

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// fileTargetConfig is a daemon config with one file target.
func fileTargetConfig(t *testing.T, dir, promURL, eppFile string) string {
	t.Helper()
	return writeFile(t, dir, "gatetuner-"+filepath.Base(eppFile)+".yaml", `prometheus:
  url: `+promURL+`
  timeout: 2s
targets:
- name: a
  file: `+eppFile+`
  plugin: prefill-affinity
  selector:
    vllm: 'namespace="llm-d"'
`)
}

type exitCase struct {
	name     string
	stdin    string
	args     []string
	code     int
	stderr   string // a fragment the one-line reason on stderr holds
	noStdout bool
}

func runExitCases(t *testing.T, cases []exitCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := gt(t, tc.stdin, tc.args...)
			if code != tc.code || !strings.Contains(errs, tc.stderr) {
				t.Fatalf("exit %d (want %d), stderr %q (want %q)\nstdout: %s", code, tc.code, errs, tc.stderr, out)
			}
			if tc.noStdout && out != "" {
				t.Errorf("wrote to stdout: %q", out)
			}
		})
	}
}

// TestExitCodesWithoutPrometheus pins the table of docs/cli.md for what
// needs no Prometheus: 0 done, 1 runtime failure, 2 usage/config, 3 ran but
// concluded nothing usable.
func TestExitCodesWithoutPrometheus(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "epp.yaml", eppConfig)
	recs := writeFile(t, dir, "r.jsonl", recordsIn)
	empty := writeFile(t, dir, "empty.jsonl", "")
	allBad := writeFile(t, dir, "bad.jsonl", "not json\n{\"endpoints\": 3}\n")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(recordsIn))
	zw.Close()
	gzNoSuffix := writeFile(t, dir, "records", gz.String())
	down := "http://" + closedPort(t)
	runExitCases(t, []exitCase{
		{"shadow done", "", []string{"shadow", "--records", recs, "--epp-config", cfg}, 0, "", false},
		{"shadow reads gzip on stdin", gz.String(), []string{"shadow", "--records", "-", "--epp-config", cfg}, 0, "", false},
		{"shadow reads gzip without .gz", "", []string{"shadow", "--records", gzNoSuffix, "--epp-config", cfg}, 0, "", false},
		{"shadow on an empty file", "", []string{"shadow", "--records", empty, "--epp-config", cfg}, 3, "no usable record", false},
		{"shadow where every line is bad", "", []string{"shadow", "--records", allBad, "--epp-config", cfg}, 3, "2 bad lines", false},
		{"shadow where every record is skipped", "", []string{"shadow", "--records", recs, "--epp-config", cfg, "--target", "other"}, 3, "skipped", false},
		{"shadow --strict stop", "", []string{"shadow", "--records", recs, "--epp-config", cfg, "--strict"}, 1, "line 3", true},
		{"shadow usage", "", []string{"shadow", "--epp-config", cfg}, 2, "--records is required", true},
		{"estimate usage", "", []string{"estimate"}, 2, "--prometheus is required", true},
		{"estimate on connection refused", "", []string{"estimate", "--prometheus", down, "--namespace", "llm-d", "--query-timeout", "2s", "--timeout", "20s"}, 1, "could not be queried", false},
		{"recommend usage", "", []string{"recommend"}, 2, "--config", true},
		{"recommend bad --phase", "", []string{"recommend", "--scenario", "steady", "--epp-config", cfg, "--phase", "nope"}, 2, `no phase "nope"`, true},
		{"recommend with Prometheus unreachable", "", []string{"recommend", "--config", fileTargetConfig(t, dir, down, cfg)}, 1, "Prometheus could not be queried", false},
		{"recommend -o patch with Prometheus unreachable", "", []string{"recommend", "-o", "patch", "--config", fileTargetConfig(t, dir, down, cfg)}, 1, "Prometheus could not be queried", true},
		{"recommend with the target file missing", "", []string{"recommend", "--config", fileTargetConfig(t, dir, down, filepath.Join(dir, "gone.yaml"))}, 1, "gone.yaml", false},
		{"doctor usage", "", []string{"doctor"}, 2, "--config is required", true},
		{"doctor --target not in the config", "", []string{"doctor", "--config", fileTargetConfig(t, dir, down, cfg), "--target", "nope"}, 2, `--target "nope"`, true},
		{"doctor with Prometheus unreachable", "", []string{"doctor", "--config", fileTargetConfig(t, dir, down, cfg)}, 1, "prometheus (" + down + " cannot be queried", false},
		{"recommend with an embedded Prometheus", "", []string{"recommend", "--config", fileTargetConfig(t, t.TempDir(), "embedded", cfg)}, 2, "prometheus.url is embedded", true},
		{"rollback usage", "", []string{"rollback", "--file", cfg}, 2, "--target is required", true},
		{"rollback of a missing file", "", []string{"rollback", "--target", "a", "--file", filepath.Join(dir, "gone.yaml")}, 2, "gone.yaml", true},
		{"rollback without history", "", []string{"rollback", "--target", "a", "--file", cfg}, 2, "history", true},
		{"simulate usage", "", []string{"simulate"}, 2, "--scenario is required", true},
		{"simulate bad --last", "", []string{"simulate", "--scenario", "steady", "--last", "nope"}, 2, `no phase "nope"`, true},
		{"demo bad --profile", "", []string{"demo", "--profile", "router-1999"}, 2, "router-1999", true},
		{"run usage", "", []string{"run"}, 2, "--config is required", true},
		{"unknown command", "", []string{"frobnicate"}, 2, "unknown command", true},
		{"version", "", []string{"version"}, 0, "", false},
	})
}

// TestExitCodesAgainstAnEmptyPrometheus: a real Prometheus that holds no
// series: estimate is inconclusive (3), and recommend holds (3) — in patch
// form printing nothing.
func TestExitCodesAgainstAnEmptyPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Prometheus")
	}
	srv := promharness.Start(t, promharness.Options{})
	dir := t.TempDir()
	cfg := writeFile(t, dir, "epp.yaml", eppConfig)
	conf := fileTargetConfig(t, dir, srv.URL(), cfg)
	runExitCases(t, []exitCase{
		{"estimate inconclusive", "", []string{"estimate", "--prometheus", srv.URL(), "--namespace", "llm-d"}, 3, "inconclusive", false},
		{"recommend held", "", []string{"recommend", "--config", conf}, 3, "held (inconclusive-estimate)", false},
		{"recommend -o patch held prints nothing", "", []string{"recommend", "--config", conf, "-o", "patch"}, 3, "held (inconclusive-estimate)", true},
	})
	if b, _ := os.ReadFile(cfg); string(b) != eppConfig {
		t.Fatalf("a dry run changed the config")
	}
}

// TestCycleOutcomes pins how a dry-run cycle maps to an exit code, for the
// outcomes an empty Prometheus cannot produce.
func TestCycleOutcomes(t *testing.T) {
	rec := &tuner.Recommendation{}
	for _, tc := range []struct {
		name string
		r    tuner.Report
		code int
	}{
		{"a change that passed its guards", tuner.Report{Result: tuner.ResultRecommended, Recommendation: rec, NewConfig: []byte("x")}, 0},
		{"no change: the recommendation is the current setting", tuner.Report{Result: tuner.ResultHeld, Recommendation: rec, Hold: &tuner.Hold{Reason: tuner.HoldDeadband}}, 0},
		{"a change the tuner held", tuner.Report{Result: tuner.ResultHeld, Recommendation: rec, NewConfig: []byte("x"), Hold: &tuner.Hold{Reason: tuner.HoldNoGain}}, 3},
		{"held before any recommendation", tuner.Report{Result: tuner.ResultHeld, Hold: &tuner.Hold{Reason: tuner.HoldInconclusive}}, 3},
		{"cannot edit this target", tuner.Report{Result: tuner.ResultHeld, Recommendation: rec, Hold: &tuner.Hold{Reason: tuner.HoldTargetError, Detail: "the recommended edit is refused"}}, 1},
		{"the cycle failed", tuner.Report{Result: tuner.ResultError, Error: "read EPP config"}, 1},
		{"Prometheus unreachable", tuner.Report{Result: tuner.ResultHeld, Hold: &tuner.Hold{Reason: tuner.HoldInconclusive},
			Estimates: &estimator.Estimates{Reasons: []estimator.Reason{{Code: estimator.ReasonPrometheusUnavailable}}}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.r
			r.Target = "a"
			if got := exitCode(cycleOutcome(&r)); got != tc.code {
				t.Fatalf("exit %d, want %d (%v)", got, tc.code, cycleOutcome(&r))
			}
			var out, errb bytes.Buffer
			err := writePatches(&out, &errb, []*tuner.Report{&r}, "", &config.Config{})
			if exitCode(err) != tc.code {
				t.Fatalf("patch exit %d, want %d", exitCode(err), tc.code)
			}
			if tc.code != 0 && out.Len() > 0 {
				t.Fatalf("printed a patch for a cycle that exits %d: %q", tc.code, out.String())
			}
		})
	}
	if exitCode(errors.New("unknown flag: --x")) != exitUsage || exitCode(errors.New("boom")) != exitFailure {
		t.Fatal("cobra's usage errors exit 2, others 1")
	}
}

// TestEveryCommandHasAnExitRow: docs/cli.md has a row for every command.
func TestEveryCommandHasAnExitRow(t *testing.T) {
	doc, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	a := &app{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, stdin: strings.NewReader(""), v: viper.New()}
	for _, add := range commands {
		name := add(a).Name()
		if !regexp.MustCompile("(?m)^\\| `" + name + "`").Match(doc) {
			t.Errorf("docs/cli.md has no exit-code row for %s", name)
		}
	}
}
