package eppconfig

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gatetuner/gatetuner/gate"
	"gopkg.in/yaml.v3"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

const (
	sampleChart      = "epp-configmap-chart-style.yaml"
	sampleTwoGates   = "epp-config-two-gates.yaml"
	sampleProduction = "epp-config-production-commented.yaml"
	sampleTokenBar   = "epp-config-token-bar.yaml"
)

func readSample(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// changedLines returns the lines a unified diff removes and adds.
func changedLines(diff string) (removed, added []string) {
	for _, l := range strings.Split(diff, "\n") {
		switch {
		case strings.HasPrefix(l, "---") || strings.HasPrefix(l, "+++"):
		case strings.HasPrefix(l, "-"):
			removed = append(removed, l[1:])
		case strings.HasPrefix(l, "+"):
			added = append(added, l[1:])
		}
	}
	return removed, added
}

func commentLines(data []byte) []string {
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if i := strings.Index(l, "#"); i >= 0 {
			out = append(out, l[i:])
		}
	}
	return out
}

func TestGoldenSamples(t *testing.T) {
	cases := []struct {
		name    string
		sample  string
		golden  string // expected output under testdata/golden
		profile string
		changes []Change
		removed []string // exact lines the diff removes
		added   []string // exact lines the diff adds
	}{
		{
			name:    "chart-style ConfigMap: filter in default-plugins.yaml replaced in place",
			golden:  "chart-replace.yaml",
			sample:  sampleChart,
			changes: []Change{{Target: Target{DataKey: "default-plugins.yaml"}, Set: map[gate.Key]Value{gate.KeyMaxTTFTPenaltyMs: Number(4092), gate.KeyPeakPrefillThroughput: Number(21000.5)}}},
			removed: []string{
				"        maxTTFTPenaltyMs: 18000      # ~286k queued tokens at the throughput below",
				"        peakPrefillThroughput: 15928 # tok/s, calibrate.sh, median of 20 probes",
			},
			added: []string{
				"        maxTTFTPenaltyMs: 4092      # ~286k queued tokens at the throughput below",
				"        peakPrefillThroughput: 21000.5 # tok/s, calibrate.sh, median of 20 probes",
			},
		},
		{
			name:    "chart-style ConfigMap: penaltyMode inserted inside the block scalar",
			golden:  "chart-insert-penaltymode.yaml",
			sample:  sampleChart,
			profile: gate.ProfilePenaltyMode,
			changes: []Change{{Set: set(gate.KeyPenaltyMode, String("matchedTokens"))}},
			added:   []string{"        penaltyMode: matchedTokens"},
		},
		{
			name:    "two gates: selecting by name edits only that gate",
			golden:  "two-gates-strict.yaml",
			sample:  sampleTwoGates,
			changes: []Change{{Target: Target{Plugin: "strict-affinity-filter"}, Set: set(gate.KeyMaxTTFTPenaltyMs, Number(2500))}},
			removed: []string{"    maxTTFTPenaltyMs: 5000"},
			added:   []string{"    maxTTFTPenaltyMs: 2500"},
		},
		{
			name:    "production config: values replaced in place under their comments",
			golden:  "production-replace.yaml",
			sample:  sampleProduction,
			changes: []Change{{Target: Target{Plugin: "prefill-affinity"}, Set: map[gate.Key]Value{gate.KeyMaxTTFTPenaltyMs: Number(4092), gate.KeyPeakPrefillThroughput: Number(5120)}}},
			removed: []string{"    peakPrefillThroughput: 4783", "    maxTTFTPenaltyMs: 30000"},
			added:   []string{"    peakPrefillThroughput: 5120", "    maxTTFTPenaltyMs: 4092"},
		},
		{
			name:    "production config: penaltyMode added after the last parameter",
			golden:  "production-insert-penaltymode.yaml",
			sample:  sampleProduction,
			profile: gate.ProfilePenaltyMode,
			changes: []Change{{Set: map[gate.Key]Value{gate.KeyPenaltyMode: String("matchedTokens"), gate.KeyMaxTTFTPenaltyMs: Number(60000)}}},
			removed: []string{"    maxTTFTPenaltyMs: 30000"},
			added:   []string{"    maxTTFTPenaltyMs: 60000", "    penaltyMode: matchedTokens"},
		},
		{
			name:    "token-bar build: maxTokensInFlightPenalty replaced in place, whole tokens",
			golden:  "token-bar-replace.yaml",
			sample:  sampleTokenBar,
			profile: gate.ProfileRouterTokenBar,
			changes: []Change{{Target: Target{Plugin: "prefill-affinity"}, Set: set(gate.KeyMaxTokensInFlightPenalty, Number(84090))}},
			removed: []string{"    maxTokensInFlightPenalty: 200000"},
			added:   []string{"    maxTokensInFlightPenalty: 84090"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := readSample(t, tc.sample)
			f, err := Parse(in, tc.sample)
			if err != nil {
				t.Fatal(err)
			}
			out, err := f.Edit(tc.changes, mustProfile(t, tc.profile))
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "golden", tc.golden)
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, out, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -run TestGoldenSamples -update to write it, then review it)", err)
			}
			if !bytes.Equal(out, want) {
				t.Errorf("output differs from %s:\n%s", golden, Diff(golden, "got", want, out))
			}
			removed, added := changedLines(Diff("a", "b", in, out))
			if !reflect.DeepEqual(removed, tc.removed) || !reflect.DeepEqual(added, tc.added) {
				t.Errorf("diff touches other lines:\n removed %q\n   added %q\nwant removed %q\n   added %q", removed, added, tc.removed, tc.added)
			}
			if got, want := commentLines(out), commentLines(in); !reflect.DeepEqual(got, want) {
				t.Errorf("comments changed:\n got %q\nwant %q", got, want)
			}
		})
	}
}

func TestChartStyleOtherKeysUntouched(t *testing.T) {
	in := readSample(t, sampleChart)
	f, err := Parse(in, sampleChart)
	if err != nil {
		t.Fatal(err)
	}
	out, err := f.Edit([]Change{{Target: Target{DataKey: "default-plugins.yaml"}, Set: set(gate.KeyMaxTTFTPenaltyMs, Number(4092))}}, mustProfile(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	type cm struct {
		Metadata map[string]any    `yaml:"metadata"`
		Data     map[string]string `yaml:"data"`
	}
	var a, b cm
	if err := yaml.Unmarshal(in, &a); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(out, &b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a.Metadata, b.Metadata) {
		t.Errorf("metadata changed: %v -> %v", a.Metadata, b.Metadata)
	}
	if a.Data["payload-agnostic.yaml"] != b.Data["payload-agnostic.yaml"] {
		t.Errorf("payload-agnostic.yaml changed")
	}
	if want := strings.Replace(a.Data["default-plugins.yaml"], "maxTTFTPenaltyMs: 18000 ", "maxTTFTPenaltyMs: 4092 ", 1); b.Data["default-plugins.yaml"] != want {
		t.Errorf("default-plugins.yaml = %q, want %q", b.Data["default-plugins.yaml"], want)
	}
	// The bytes outside the edited line are identical.
	i := bytes.Index(in, []byte("18000"))
	if !bytes.Equal(in[:i], out[:i]) || !bytes.Equal(in[i+5:], out[i+4:]) {
		t.Errorf("bytes outside the value changed")
	}
}

func TestSampleRefusals(t *testing.T) {
	cases := []struct {
		name    string
		sample  string
		profile string
		changes []Change
		wantErr error
		errMsg  string
	}{
		{
			name:    "two gates with no name given",
			sample:  sampleTwoGates,
			changes: []Change{{Set: set(gate.KeyMaxTTFTPenaltyMs, Number(2500))}},
			wantErr: ErrAmbiguous,
			errMsg:  `epp-config-two-gates.yaml: 2 instances of prefix-cache-affinity-filter (plugin "strict-affinity-filter" (line 8), plugin "loose-affinity-filter" (line 14)); name the one to use`,
		},
		{
			name:    "matchedTokens on gates fed by the latency predictor",
			sample:  sampleTwoGates,
			profile: gate.ProfilePenaltyMode,
			changes: []Change{{Target: Target{Plugin: "loose-affinity-filter"}, Set: set(gate.KeyPenaltyMode, String("matchedTokens"))}},
			errMsg:  `epp-config-two-gates.yaml:16: plugin "loose-affinity-filter": edit refused: parameter "penaltyMode": matchedTokens cannot be used with ttftSource latencyPredictor (milliseconds from a model have no token interpretation)`,
		},
		{
			name:    "penaltyMode on an EPP build that lacks it",
			sample:  sampleProduction,
			profile: gate.ProfileRouter202608,
			changes: []Change{{Set: set(gate.KeyPenaltyMode, String("matchedTokens"))}},
			wantErr: gate.ErrUnknownKey,
			errMsg:  `epp-config-production-commented.yaml:19: plugin "prefill-affinity": parameter "penaltyMode": unknown key: build profile router-2026-08 does not accept penaltyMode; an EPP of that build would crash-loop on it`,
		},
		{
			name:    "a plugin of another type",
			sample:  sampleProduction,
			changes: []Change{{Target: Target{Plugin: "token-load-scorer"}, Set: set(gate.KeyMaxTTFTPenaltyMs, Number(1))}},
			wantErr: ErrNotFound,
			errMsg:  `epp-config-production-commented.yaml:31: plugin "token-load-scorer": is of type "token-load-scorer", not prefix-cache-affinity-filter`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse(readSample(t, tc.sample), tc.sample)
			if err != nil {
				t.Fatal(err)
			}
			out, err := f.Edit(tc.changes, mustProfile(t, tc.profile))
			if err == nil || out != nil {
				t.Fatalf("Edit = %d bytes, %v; want an error and no bytes", len(out), err)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("error %q does not wrap %v", err, tc.wantErr)
			}
			if err.Error() != tc.errMsg {
				t.Errorf("error:\n got %s\nwant %s", err, tc.errMsg)
			}
		})
	}
}
