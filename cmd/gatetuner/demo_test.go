package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// demoRun runs the demo in-process and returns its output, the number of
// cycles it printed and the applies it counted.
func demoRun(t *testing.T, args ...string) (string, int, int) {
	t.Helper()
	code, out, errs := gt(t, "", append([]string{"demo", "--metrics-address", "127.0.0.1:0"}, args...)...)
	if code != 0 {
		t.Fatalf("demo exit %d: %s\n%s", code, errs, out)
	}
	cycles := len(regexp.MustCompile(`(?m)^\d\d:\d\d:\d\d \S+\s+(held|applied|recommended|pending|error|rolled-back)\s`).FindAllString(out, -1))
	m := regexp.MustCompile(`applies: (\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no summary in the demo output:\n%s", out)
	}
	applies, _ := strconv.Atoi(m[1])
	return out, cycles, applies
}

// TestStationaryRunBarelyApplies: a noisy but stationary pool (steady) gets
// at most one apply in twenty cycles.
func TestStationaryRunBarelyApplies(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates 40 minutes")
	}
	for _, profile := range []string{"router-2026-08", "penalty-mode"} {
		out, cycles, applies := demoRun(t, "--scenario", "steady", "--cycle-every", "2m", "--profile", profile)
		if cycles < 20 {
			t.Fatalf("%s: %d cycles, want 20\n%s", profile, cycles, out)
		}
		if applies > 1 {
			t.Errorf("%s: %d applies in %d cycles of a stationary run, want at most 1\n%s", profile, applies, cycles, out)
		}
		t.Logf("%s: %d applies in %d cycles", profile, applies, cycles)
	}
}

// TestShiftStillApplies: the same loop with a real shift (prompt-shift)
// applies, and the summary shows the day against the default.
func TestShiftStillApplies(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates a compressed day")
	}
	out, cycles, applies := demoRun(t, "--scenario", "prompt-shift")
	if applies < 1 {
		t.Fatalf("no apply in %d cycles of prompt-shift:\n%s", cycles, out)
	}
	if !strings.Contains(out, "default→tuned") || !strings.Contains(out, "+++ ") {
		t.Fatalf("the demo shows no applied diff or no summary:\n%s", out)
	}
	// It explains itself: a reason on every applied or held row, the bar's
	// units, the whole run and a plain verdict.
	rows := regexp.MustCompile(`(?m)^\d\d:\d\d:\d\d \S+\s+(held|applied)\s.*$`).FindAllString(out, -1)
	why := regexp.MustCompile(`\d\.\d\d\s+\S+.*[a-z]{4}`)
	for _, r := range rows {
		if !why.MatchString(r) {
			t.Errorf("row without a reason: %q", r)
		}
	}
	for _, want := range []string{"bar = maxTTFTPenaltyMs × peakPrefillThroughput / 1000 = ", "whole run", "overall: ", "gatetuner set this value"} {
		if !strings.Contains(out, want) {
			t.Errorf("the demo output lacks %q:\n%s", want, out)
		}
	}
	t.Logf("%d applies in %d cycles", applies, cycles)
}

// TestDemoPluginNamesTheInstance: --plugin names the filter instance in the
// demo's EPP config, and the daemon manages that instance.
func TestDemoPluginNamesTheInstance(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates a day")
	}
	dir := t.TempDir()
	demoRun(t, "--scenario", "steady", "--cycle-every", "10m", "--plugin", "my-gate", "--dir", dir)
	cfg, err := os.ReadFile(filepath.Join(dir, "epp-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(cfg), "name: my-gate") || !strings.Contains(string(cfg), "pluginRef: my-gate") {
		t.Fatalf("the demo's EPP config does not name the instance my-gate:\n%s", cfg)
	}
	if code, _, errs := gt(t, "", "demo", "--plugin", "a: b"); code == 0 || !strings.Contains(errs, "--plugin") {
		t.Errorf("a name that is not a plain scalar: exit %d, %s", code, errs)
	}
}
