package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gt runs the CLI in-process.
func gt(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const eppConfig = `apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- name: prefill-affinity
  type: prefix-cache-affinity-filter
  parameters:
    peakPrefillThroughput: 4783
    maxTTFTPenaltyMs: 30000   # a comment
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: prefill-affinity
  - pluginRef: max-score-picker
`

const recordsIn = `{"requestId":"a","target":"t1","endpoints":[{"name":"x","matchBlocks":90,"totalBlocks":100,"blockSizeTokens":16,"inFlightTokens":100000},{"name":"y","totalBlocks":100,"inFlightTokens":0}],"observed":{"outcome":"sticky"}}
{"requestId":"b","target":"t2","endpoints":[{"name":"x","matchBlocks":90,"totalBlocks":100,"blockSizeTokens":16,"inFlightTokens":100000},{"name":"y","totalBlocks":100,"inFlightTokens":0}]}
{"requestId":"c","target":"t1","endpoints":[{"name":"x","matchBlocks":90,"totalBlocks":100,"blockSizeTokens":16,"inFlightTokens":-5}]}
`

func TestShadowJSONSummary(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "epp.yaml", eppConfig)
	recs := writeFile(t, dir, "r.jsonl", recordsIn)
	dec := filepath.Join(dir, "decisions.jsonl")
	code, out, errs := gt(t, "", "shadow", "--records", recs, "--epp-config", cfg, "--target", "t1", "--output", "json",
		"--sweep", "maxTTFTPenaltyMs=1000,60000", "--decisions-out", dec)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var s struct {
		Records  map[string]int64 `json:"records"`
		BadLines []struct {
			Line   int
			Reason string
		} `json:"badLines"`
		Settings struct {
			Plugin           string  `json:"plugin"`
			MaxTTFTPenaltyMs float64 `json:"maxTTFTPenaltyMs"`
			PPTSource        string  `json:"pptSource"`
			BarTokens        float64 `json:"barTokens"`
		} `json:"settings"`
		Verdicts map[string]int64 `json:"verdicts"`
		Rates    struct {
			WronglyHeld *float64 `json:"wronglyHeld"`
		} `json:"rates"`
		ExcessCost struct {
			Tokens  float64  `json:"tokens"`
			Seconds *float64 `json:"seconds"`
		} `json:"excessCost"`
		ObservedAgreement map[string]int64 `json:"observedAgreement"`
		Sweep             []struct {
			Label    string           `json:"label"`
			Verdicts map[string]int64 `json:"verdicts"`
		} `json:"sweep"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if s.Records["read"] != 1 || s.Records["skipped"] != 1 || s.Records["bad"] != 1 || len(s.BadLines) != 1 || s.BadLines[0].Line != 3 {
		t.Fatalf("records %+v bad %+v", s.Records, s.BadLines)
	}
	if s.Settings.Plugin != "prefill-affinity" || s.Settings.MaxTTFTPenaltyMs != 30000 || s.Settings.PPTSource != "config" || s.Settings.BarTokens != 143490 {
		t.Fatalf("settings %+v", s.Settings)
	}
	if s.Verdicts["held_wrong"] != 1 || s.Rates.WronglyHeld == nil || *s.Rates.WronglyHeld != 1 {
		t.Fatalf("verdicts %+v rates %+v", s.Verdicts, s.Rates)
	}
	if s.ExcessCost.Tokens != 100000-1440 || s.ExcessCost.Seconds == nil || *s.ExcessCost.Seconds != (100000-1440)/4783.0 {
		t.Fatalf("excess %+v", s.ExcessCost)
	}
	if s.ObservedAgreement["agree"] != 1 {
		t.Fatalf("agreement %+v", s.ObservedAgreement)
	}
	if len(s.Sweep) != 2 || s.Sweep[0].Verdicts["released_ok"] != 1 || s.Sweep[1].Verdicts["held_wrong"] != 1 {
		t.Fatalf("sweep %+v", s.Sweep)
	}
	lines, err := os.ReadFile(dec)
	if err != nil || strings.Count(string(lines), "\n") != 1 || !strings.Contains(string(lines), `"verdict":"held_wrong"`) {
		t.Fatalf("decisions file %q, %v", lines, err)
	}
}

func TestShadowTextReadsStdin(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "epp.yaml", eppConfig)
	code, out, errs := gt(t, recordsIn, "shadow", "--records", "-", "--epp-config", cfg)
	if code != 0 || !strings.Contains(out, "wrongly held 100.0%") || !strings.Contains(out, "line 3: endpoints[0].inFlightTokens: negative count") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
}

func TestShadowErrorsAndExitCodes(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "epp.yaml", eppConfig)
	recs := writeFile(t, dir, "r.jsonl", recordsIn)
	noFilter := writeFile(t, dir, "nofilter.yaml", "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: max-score-picker\n")
	malformed := writeFile(t, dir, "bad.yaml", "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: [unclosed\n")
	invalid := writeFile(t, dir, "invalid.yaml", strings.Replace(eppConfig, "30000", "-1", 1))
	withMode := writeFile(t, dir, "mode.yaml", strings.Replace(eppConfig, "    maxTTFTPenaltyMs: 30000", "    maxTTFTPenaltyMs: 30000\n    penaltyMode: matchedTokens", 1))
	dec := filepath.Join(dir, "out", "decisions.jsonl")
	tests := []struct {
		name     string
		args     []string
		code     int
		contains string
	}{
		{"missing records flag", []string{"shadow", "--epp-config", cfg}, 2, "--records is required"},
		{"missing records file", []string{"shadow", "--records", filepath.Join(dir, "nope.jsonl"), "--epp-config", cfg}, 2, "nope.jsonl"},
		{"missing config file", []string{"shadow", "--records", recs, "--epp-config", filepath.Join(dir, "nope.yaml")}, 2, "nope.yaml"},
		{"config without the filter", []string{"shadow", "--records", recs, "--epp-config", noFilter}, 2, "nofilter.yaml"},
		{"malformed YAML names the line", []string{"shadow", "--records", recs, "--epp-config", malformed}, 2, "bad.yaml:4"},
		{"invalid parameter names the key", []string{"shadow", "--records", recs, "--epp-config", invalid}, 2, `"maxTTFTPenaltyMs": must be >= 0`},
		{"key the profile rejects", []string{"shadow", "--records", recs, "--epp-config", withMode}, 2, "penaltyMode"},
		{"unknown profile", []string{"shadow", "--records", recs, "--epp-config", cfg, "--profile", "router-1999"}, 2, "router-1999"},
		{"bad sweep", []string{"shadow", "--records", recs, "--epp-config", cfg, "--sweep", "noSuchKey=1"}, 2, "noSuchKey"},
		{"bad output", []string{"shadow", "--records", recs, "--epp-config", cfg, "-o", "yaml"}, 2, "--output"},
		{"unknown flag", []string{"shadow", "--recordz", recs}, 2, "recordz"},
		{"strict stops at the bad line", []string{"shadow", "--records", recs, "--epp-config", cfg, "--strict", "--decisions-out", filepath.Join(dir, "d.jsonl")}, 1, "line 3"},
		{"decisions-out into a missing directory", []string{"shadow", "--records", recs, "--epp-config", cfg, "--decisions-out", dec}, 2, "--decisions-out"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := gt(t, "", tc.args...)
			if code != tc.code || !strings.Contains(errs, tc.contains) {
				t.Fatalf("exit %d (want %d), stderr %q (want %q)", code, tc.code, errs, tc.contains)
			}
			if strings.Count(strings.TrimSpace(errs), "\n") != 0 {
				t.Errorf("error is not one line: %q", errs)
			}
			if out != "" {
				t.Errorf("wrote to stdout on failure: %q", out)
			}
		})
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 6 {
		names := []string{}
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("a failed run left files behind: %v", names)
	}
}

func TestShadowPenaltyModeProfileAcceptsMode(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "mode.yaml", strings.Replace(eppConfig, "    maxTTFTPenaltyMs: 30000", "    maxTTFTPenaltyMs: 0\n    penaltyMode: matchedTokens", 1))
	code, out, errs := gt(t, recordsIn, "shadow", "--records", "-", "--epp-config", cfg, "--profile", "penalty-mode", "-o", "json")
	if code != 0 || !strings.Contains(out, `"released_ok": 2`) {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := gt(t, "", "version")
	if code != 0 || !strings.HasPrefix(out, "gatetuner ") || !strings.Contains(out, "go1.") {
		t.Fatalf("version: %d %q", code, out)
	}
}

// TestShadowJSONNonFinite: a tiny throughput overflows the estimated TTFT
// and a -Inf latency prediction makes the penalty +Inf; the JSON summary and
// the decision lines still come out, non-finite numbers as the strings
// "NaN", "+Inf", "-Inf" (docs/shadow.md), instead of failing.
func TestShadowJSONNonFinite(t *testing.T) {
	const lpRecords = `{"requestId":"a","target":"t1","endpoints":[{"name":"x","matchBlocks":90,"totalBlocks":100,"blockSizeTokens":16,"inFlightTokens":100000,"predictedTTFTMs":900},{"name":"y","totalBlocks":100,"inFlightTokens":0,"predictedTTFTMs":"-Inf"}]}
`
	cases := []struct {
		name, from, to, records, inDecisions string
	}{
		{"tiny throughput", "peakPrefillThroughput: 4783", "peakPrefillThroughput: 1e-305", recordsIn, ""},
		{"-Inf prediction", "peakPrefillThroughput: 4783", "ttftSource: latencyPredictor", lpRecords, `"penaltyMs":"+Inf"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := writeFile(t, dir, "epp.yaml", strings.Replace(eppConfig, tc.from, tc.to, 1))
			recs := writeFile(t, dir, "r.jsonl", tc.records)
			dec := filepath.Join(dir, "decisions.jsonl")
			code, out, errs := gt(t, "", "shadow", "--records", recs, "--epp-config", cfg, "--target", "t1", "--output", "json", "--decisions-out", dec)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			if !json.Valid([]byte(out)) || !strings.Contains(out, `"+Inf"`) {
				t.Fatalf("summary is not JSON or lacks \"+Inf\":\n%s", out)
			}
			lines, err := os.ReadFile(dec)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range strings.Split(strings.TrimSpace(string(lines)), "\n") {
				if !json.Valid([]byte(l)) {
					t.Errorf("decision line is not JSON: %s", l)
				}
			}
			if !strings.Contains(string(lines), tc.inDecisions) {
				t.Errorf("decision lines lack %s:\n%s", tc.inDecisions, lines)
			}
		})
	}
}
