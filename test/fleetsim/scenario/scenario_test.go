package scenario_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenarios"
)

const minimalScenario = `name: tiny
pods:
  count: 2
  engine:
    nominalRate: 1000
    maxNumBatchedTokens: 512
    numGPUBlocks: 1000
    maxModelLen: 4096
epp:
  profile: penalty-mode
  parameters:
    penaltyMode: matchedTokens
    maxTTFTPenaltyMs: 0
classes:
  - name: chat
    userTokens: 100
    outputTokens: {dist: uniform, min: 1, max: 20}
phases:
  - name: only
    duration: 1m
    requestRate: 1
    parameters:
      maxTTFTPenaltyMs: 5000
`

func TestParseScenarioAppliesDefaultsAndPhaseParameters(t *testing.T) {
	sc, err := scenario.Parse("tiny.yaml", []byte(minimalScenario))
	if err != nil {
		t.Fatal(err)
	}
	if sc.Target != "tiny" || sc.Model != "tiny" || sc.PodName(1) != "tiny-decode-1" || sc.EPP.Pod != "tiny-epp-0" {
		t.Errorf("name defaults: target %q model %q pod %q epp %q", sc.Target, sc.Model, sc.PodName(1), sc.EPP.Pod)
	}
	if sc.ScrapeInterval != 15*time.Second || sc.Pods.Engine.BlockSize != 16 || sc.EPP.PrefixIndex.BlockSizeTokens != 64 {
		t.Errorf("defaults: scrape %v block %d index block %d", sc.ScrapeInterval, sc.Pods.Engine.BlockSize, sc.EPP.PrefixIndex.BlockSizeTokens)
	}
	if sc.EPP.Settings.Mode != gate.ModeMatchedTokens || sc.EPP.Settings.MaxTTFTPenaltyMs != 0 {
		t.Errorf("epp settings = %s", sc.EPP.Settings.String())
	}
	ph := sc.Phases[0]
	if ph.Settings.Mode != gate.ModeMatchedTokens || ph.Settings.MaxTTFTPenaltyMs != 5000 {
		t.Errorf("phase settings = %s, want matchedTokens with a 5000 ms ceiling", ph.Settings.String())
	}
	if string(ph.Parameters) != `{"penaltyMode":"matchedTokens","maxTTFTPenaltyMs":5000}` {
		t.Errorf("phase parameters = %s", ph.Parameters)
	}
	if len(ph.Mix) != 1 || ph.Mix[0] != 1 {
		t.Errorf("default mix = %v", ph.Mix)
	}
}

func TestParseScenarioErrorsNameFileLineAndField(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(string) string
		want    []string
		line    int
		field   string
		noField bool
	}{
		{"unknown field", func(s string) string { return strings.Replace(s, "  count: 2", "  count: 2\n  replicas: 3", 1) },
			[]string{"unknown field", "known: count, engine, namePrefix"}, 4, "pods.replicas", false},
		{"negative rate", func(s string) string { return strings.Replace(s, "requestRate: 1", "requestRate: -1", 1) },
			[]string{"must be >= 0"}, 21, "phases[0].requestRate", false},
		{"bad duration", func(s string) string { return strings.Replace(s, "duration: 1m", "duration: 1 minute", 1) },
			[]string{"must be a duration"}, 20, "phases[0].duration", false},
		{"unknown class in mix", func(s string) string {
			return strings.Replace(s, "    requestRate: 1\n", "    requestRate: 1\n    mix: {rag: 1}\n", 1)
		}, []string{"no such class (classes: chat)"}, 22, "phases[0].mix.rag", false},
		{"key the build rejects", func(s string) string {
			return strings.Replace(s, "profile: penalty-mode", "profile: router-2026-08", 1)
		},
			[]string{"would reject it", "router-2026-08", "crash-loop"}, 12, "epp.parameters.penaltyMode", false},
		{"key rejected in a phase", func(s string) string {
			return strings.Replace(s, "      maxTTFTPenaltyMs: 5000", "      maxTTFTPenaltyMs: -5", 1)
		}, []string{"must be >= 0"}, 23, "phases[0].parameters.maxTTFTPenaltyMs", false},
		{"bad distribution", func(s string) string {
			return strings.Replace(s, "{dist: uniform, min: 1, max: 20}", "{dist: gamma, mean: 3}", 1)
		}, []string{"unknown dist \"gamma\""}, 17, "classes[0].outputTokens", false},
		{"missing required", func(s string) string { return strings.Replace(s, "    userTokens: 100\n", "", 1) },
			[]string{"is required"}, 15, "classes[0].userTokens", false},
		{"engine inconsistency", func(s string) string { return strings.Replace(s, "numGPUBlocks: 1000", "numGPUBlocks: 10", 1) },
			[]string{"cannot hold one request"}, 5, "pods.engine", false},
		{"index block too small", func(s string) string {
			return strings.Replace(s, "epp:\n", "epp:\n  prefixIndex: {blockSizeTokens: 16}\n", 1)
		}, []string{"blockSizeTokens: must be >= 64"}, 0, "", true},
		{"not YAML", func(string) string { return "name: [" }, []string{"invalid YAML"}, 0, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := scenario.Parse("tiny.yaml", []byte(tc.edit(minimalScenario)))
			if err == nil {
				t.Fatal("no error")
			}
			var pe *scenario.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T is not a *ParseError: %v", err, err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "tiny.yaml") {
				t.Errorf("error %q does not start with the file name", msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			if !tc.noField {
				if pe.Field != tc.field {
					t.Errorf("field = %q, want %q (%s)", pe.Field, tc.field, msg)
				}
				if pe.Line != tc.line {
					t.Errorf("line = %d, want %d (%s)", pe.Line, tc.line, msg)
				}
			}
		})
	}
}

func TestValidateCatchesEditsThatBreakAScenario(t *testing.T) {
	sc, err := scenarios.Load("steady")
	if err != nil {
		t.Fatal(err)
	}
	c := sc.Clone()
	c.Phases[0].Mix = nil
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "phases[0].mix") {
		t.Errorf("Validate() = %v, want a mix error", err)
	}
	c = sc.Clone()
	c.Pods.Engine.StepOverhead = time.Second
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "stepOverhead") {
		t.Errorf("Validate() = %v, want a stepOverhead error", err)
	}
	if sc.Phases[0].Mix == nil || sc.Pods.Engine.StepOverhead == time.Second {
		t.Error("editing a clone changed the original")
	}
	if _, err := sc.Compressed(0); err == nil {
		t.Error("Compressed(0) succeeded")
	}
	cs, err := sc.Compressed(10)
	if err != nil {
		t.Fatal(err)
	}
	if cs.Phases[0].Duration != sc.Phases[0].Duration/10 {
		t.Errorf("compressed duration %v, want %v", cs.Phases[0].Duration, sc.Phases[0].Duration/10)
	}
}

func TestLoadScenarioFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "tiny.yaml")
	if err := os.WriteFile(p, []byte(minimalScenario), 0o644); err != nil {
		t.Fatal(err)
	}
	sc, err := scenario.LoadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if sc.Source != p {
		t.Errorf("Source = %q, want %q", sc.Source, p)
	}
	if _, err := scenario.LoadFile(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("missing file parsed")
	}
}

func FuzzParseScenario(f *testing.F) {
	f.Add([]byte(minimalScenario))
	for _, n := range scenarios.Names() {
		data, _, err := scenarios.Source(n)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("name: x\npods: {count: 1}\n"))
	f.Add([]byte("- a\n- b\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		sc, err := scenario.Parse("fuzz.yaml", data)
		if err != nil {
			var pe *scenario.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error is not a *ParseError: %v", err)
			}
			return
		}
		if err := sc.Validate(); err != nil {
			t.Fatalf("parsed scenario does not validate: %v", err)
		}
	})
}
