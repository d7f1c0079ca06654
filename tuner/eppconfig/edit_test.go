package eppconfig

import (
	"errors"
	"strings"
	"testing"

	"github.com/gatetuner/gatetuner/gate"
)

func set(k gate.Key, v Value) map[gate.Key]Value { return map[gate.Key]Value{k: v} }

func mustProfile(t testing.TB, name string) gate.Profile {
	t.Helper()
	p, err := gate.LookupProfile(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

const head = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n"

type editCase struct {
	name    string
	in      string
	profile string // default router-2026-08
	changes []Change
	want    string // expected output when no error is expected
	wantErr error  // sentinel the error must wrap
	errHas  string // substring the error must contain
}

func runEditCases(t *testing.T, cases []editCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			prof := mustProfile(t, tc.profile)
			f, err := Parse([]byte(tc.in), "epp.yaml")
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			out, err := f.Edit(tc.changes, prof)
			if tc.wantErr != nil || tc.errHas != "" {
				if err == nil {
					t.Fatalf("Edit succeeded, want error; output:\n%s", out)
				}
				if out != nil {
					t.Errorf("Edit returned bytes with its error")
				}
				if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
					t.Errorf("error %q does not wrap %v", err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.errHas) {
					t.Errorf("error %q does not contain %q", err, tc.errHas)
				}
				if strings.ContainsAny(err.Error(), "\n\r") {
					t.Errorf("error is not one line: %q", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Edit: %v", err)
			}
			if string(out) != tc.want {
				t.Errorf("output differs:\n%s", Diff("want", "got", []byte(tc.want), out))
			}
		})
	}
}

func TestEditFlowStyleParameters(t *testing.T) {
	plugin := "- name: gate\n  type: prefix-cache-affinity-filter\n  parameters: "
	runEditCases(t, []editCase{
		{
			name:    "insert into non-empty flow mapping stays inside the braces",
			in:      head + plugin + "{affinityThreshold: 0.8}   # keep\n- type: max-score-picker\n",
			changes: []Change{{Target: Target{Plugin: "gate"}, Set: set(gate.KeyMaxTTFTPenaltyMs, Number(4092))}},
			want:    head + plugin + "{affinityThreshold: 0.8, maxTTFTPenaltyMs: 4092}   # keep\n- type: max-score-picker\n",
		},
		{
			name:    "insert into empty flow mapping",
			in:      head + plugin + "{}\n",
			changes: []Change{{Set: map[gate.Key]Value{gate.KeyMaxTTFTPenaltyMs: Number(4092), gate.KeyPeakPrefillThroughput: Number(1234.5)}}},
			want:    head + plugin + "{maxTTFTPenaltyMs: 4092, peakPrefillThroughput: 1234.5}\n",
		},
		{
			name:    "insert into empty flow mapping with inner space",
			in:      head + plugin + "{ }\n",
			changes: []Change{{Set: set(gate.KeyMaxTTFTPenaltyMs, Number(4092))}},
			want:    head + plugin + "{maxTTFTPenaltyMs: 4092 }\n",
		},
		{
			name:    "replace inside flow mapping",
			in:      head + plugin + "{maxTTFTPenaltyMs: 18000, affinityThreshold: 0.80}\n",
			changes: []Change{{Set: set(gate.KeyMaxTTFTPenaltyMs, Number(4092))}},
			want:    head + plugin + "{maxTTFTPenaltyMs: 4092, affinityThreshold: 0.80}\n",
		},
		{
			name:    "remove first key of flow mapping",
			in:      head + plugin + "{maxTTFTPenaltyMs: 18000, affinityThreshold: 0.80}\n",
			changes: []Change{{Remove: []gate.Key{gate.KeyMaxTTFTPenaltyMs}}},
			want:    head + plugin + "{affinityThreshold: 0.80}\n",
		},
		{
			name:    "remove last key of flow mapping",
			in:      head + plugin + "{affinityThreshold: 0.80, maxTTFTPenaltyMs: 18000}\n",
			changes: []Change{{Remove: []gate.Key{gate.KeyMaxTTFTPenaltyMs}}},
			want:    head + plugin + "{affinityThreshold: 0.80}\n",
		},
		{
			name:    "remove only key of flow mapping leaves an empty mapping",
			in:      head + plugin + "{maxTTFTPenaltyMs: 18000,}\n",
			changes: []Change{{Remove: []gate.Key{gate.KeyMaxTTFTPenaltyMs}}},
			want:    head + plugin + "{}\n",
		},
		{
			name:    "remove and insert in one flow mapping",
			in:      head + plugin + "{maxTTFTPenaltyMs: 18000}\n",
			profile: gate.ProfilePenaltyMode,
			changes: []Change{{Remove: []gate.Key{gate.KeyMaxTTFTPenaltyMs}, Set: set(gate.KeyPenaltyMode, String("matchedTokens"))}},
			want:    head + plugin + "{penaltyMode: matchedTokens}\n",
		},
		{
			name:    "multi-line flow mapping with comments",
			in:      head + plugin + "{\n    affinityThreshold: 0.8, # why\n    maxTTFTPenaltyMs: 18000 # bar\n  }\n",
			changes: []Change{{Set: map[gate.Key]Value{gate.KeyMaxTTFTPenaltyMs: Number(2000), gate.KeyPeakPrefillThroughput: Number(9000)}}},
			want:    head + plugin + "{\n    affinityThreshold: 0.8, # why\n    maxTTFTPenaltyMs: 2000, peakPrefillThroughput: 9000 # bar\n  }\n",
		},
		{
			name:    "columns count characters, not bytes",
			in:      head + plugin + "{prefixMatchInfoProducerName: \"préfixe-ü\", maxTTFTPenaltyMs: 18000} # ✓\n",
			changes: []Change{{Set: set(gate.KeyMaxTTFTPenaltyMs, Number(4092))}},
			want:    head + plugin + "{prefixMatchInfoProducerName: \"préfixe-ü\", maxTTFTPenaltyMs: 4092} # ✓\n",
		},
		{
			name:    "flow plugin entry gets flow parameters",
			in:      head + "- {type: prefix-cache-affinity-filter, name: gate}\n",
			changes: []Change{{Set: set(gate.KeyMaxTTFTPenaltyMs, Number(4092))}},
			want:    head + "- {type: prefix-cache-affinity-filter, name: gate, parameters: {maxTTFTPenaltyMs: 4092}}\n",
		},
		{
			name:    "flow plugin entry with null parameters",
			in:      head + "- {type: prefix-cache-affinity-filter, parameters: null}\n",
			changes: []Change{{Set: set(gate.KeyMaxTTFTPenaltyMs, Number(4092))}},
			want:    head + "- {type: prefix-cache-affinity-filter, parameters: {maxTTFTPenaltyMs: 4092}}\n",
		},
	})
}

func TestEditMissingOrNullParameters(t *testing.T) {
	max4092 := []Change{{Set: set(gate.KeyMaxTTFTPenaltyMs, Number(4092))}}
	runEditCases(t, []editCase{
		{
			name:    "missing block is inserted under the entry with its indentation",
			in:      head + "- type: prefix-cache-affinity-filter\n  name: gate\n- type: max-score-picker\n",
			changes: max4092,
			want:    head + "- type: prefix-cache-affinity-filter\n  name: gate\n  parameters:\n    maxTTFTPenaltyMs: 4092\n- type: max-score-picker\n",
		},
		{
			name:    "missing block in the last entry of the list at end of file without newline",
			in:      head + "- type: max-score-picker\n- type: prefix-cache-affinity-filter",
			changes: max4092,
			want:    head + "- type: max-score-picker\n- type: prefix-cache-affinity-filter\n  parameters:\n    maxTTFTPenaltyMs: 4092",
		},
		{
			name: "missing block follows the file's indentation step",
			in: head + "    - type: x-producer\n      parameters:\n          a: 1\n" +
				"    - type: prefix-cache-affinity-filter   # the gate\n    # next: picker\n    - type: max-score-picker\n",
			changes: max4092,
			want: head + "    - type: x-producer\n      parameters:\n          a: 1\n" +
				"    - type: prefix-cache-affinity-filter   # the gate\n      parameters:\n          maxTTFTPenaltyMs: 4092\n    # next: picker\n    - type: max-score-picker\n",
		},
		{
			name:    "empty parameters gets an indented key",
			in:      head + "- type: prefix-cache-affinity-filter\n  parameters:\n- type: max-score-picker\n",
			changes: max4092,
			want:    head + "- type: prefix-cache-affinity-filter\n  parameters:\n    maxTTFTPenaltyMs: 4092\n- type: max-score-picker\n",
		},
		{
			name:    "null parameters keeps its comment",
			in:      head + "- type: prefix-cache-affinity-filter\n  parameters: null   # defaults\n",
			changes: max4092,
			want:    head + "- type: prefix-cache-affinity-filter\n  parameters:   # defaults\n    maxTTFTPenaltyMs: 4092\n",
		},
		{
			name:    "tilde parameters",
			in:      head + "- type: prefix-cache-affinity-filter\n  parameters: ~\n",
			changes: max4092,
			want:    head + "- type: prefix-cache-affinity-filter\n  parameters:\n    maxTTFTPenaltyMs: 4092\n",
		},
		{
			name:    "parameters as first key of the entry",
			in:      head + "- parameters:\n  type: prefix-cache-affinity-filter\n",
			changes: max4092,
			want:    head + "- parameters:\n    maxTTFTPenaltyMs: 4092\n  type: prefix-cache-affinity-filter\n",
		},
		{
			name:    "removing from absent parameters changes nothing",
			in:      head + "- type: prefix-cache-affinity-filter\n",
			changes: []Change{{Remove: []gate.Key{gate.KeyPenaltyMode}}},
			want:    head + "- type: prefix-cache-affinity-filter\n",
		},
	})
}

func TestEditBlockParameters(t *testing.T) {
	gateEntry := "- name: gate\n  type: prefix-cache-affinity-filter\n  parameters:\n"
	runEditCases(t, []editCase{
		{
			name:    "value replaced in place keeps the trailing comment",
			in:      head + gateEntry + "    maxTTFTPenaltyMs: 18000   # ~286k tokens\n    peakPrefillThroughput: 15928\n",
			changes: []Change{{Set: set(gate.KeyMaxTTFTPenaltyMs, Number(4092))}},
			want:    head + gateEntry + "    maxTTFTPenaltyMs: 4092   # ~286k tokens\n    peakPrefillThroughput: 15928\n",
		},
		{
			name:    "key spelled MaxTTFTPenaltyMs keeps its spelling",
			in:      head + gateEntry + "    MaxTTFTPenaltyMs: 18000\n",
			changes: []Change{{Set: set(gate.KeyMaxTTFTPenaltyMs, Number(1234.5))}},
			want:    head + gateEntry + "    MaxTTFTPenaltyMs: 1234.5\n",
		},
		{
			name:    "inserted after the last key, before comment lines that follow",
			in:      head + gateEntry + "    affinityThreshold: 0.80  # sticky\n    # the scorer below is tuned separately\n\n- type: max-score-picker\n",
			changes: []Change{{Set: set(gate.KeyPeakPrefillThroughput, Number(4783))}},
			want:    head + gateEntry + "    affinityThreshold: 0.80  # sticky\n    peakPrefillThroughput: 4783\n    # the scorer below is tuned separately\n\n- type: max-score-picker\n",
		},
		{
			name:    "inserted into the last plugin of the list",
			in:      head + "- type: max-score-picker\n" + gateEntry + "    affinityThreshold: 0.80\n",
			profile: gate.ProfilePenaltyMode,
			changes: []Change{{Set: map[gate.Key]Value{gate.KeyPenaltyMode: String("matchedTokens"), gate.KeyMaxTTFTPenaltyMs: Number(30000)}}},
			want:    head + "- type: max-score-picker\n" + gateEntry + "    affinityThreshold: 0.80\n    maxTTFTPenaltyMs: 30000\n    penaltyMode: matchedTokens\n",
		},
		{
			name:    "removed key takes only its own line",
			in:      head + gateEntry + "    # why the ceiling\n    maxTTFTPenaltyMs: 18000 # comment goes with it\n    affinityThreshold: 0.80\n",
			changes: []Change{{Remove: []gate.Key{gate.KeyMaxTTFTPenaltyMs}}},
			want:    head + gateEntry + "    # why the ceiling\n    affinityThreshold: 0.80\n",
		},
		{
			name:    "removing the only key leaves null parameters",
			in:      head + gateEntry + "    penaltyMode: matchedTokens\n- type: max-score-picker\n",
			changes: []Change{{Remove: []gate.Key{gate.KeyPenaltyMode}}},
			want:    head + gateEntry + "- type: max-score-picker\n",
		},
		{
			name:    "remove every key and insert another",
			in:      head + gateEntry + "    maxTTFTPenaltyMs: 18000\n- type: max-score-picker\n",
			changes: []Change{{Remove: []gate.Key{gate.KeyMaxTTFTPenaltyMs}, Set: set(gate.KeyPeakPrefillThroughput, Number(4783))}},
			want:    head + gateEntry + "    peakPrefillThroughput: 4783\n- type: max-score-picker\n",
		},
		{
			name:    "removing the last line of a file without final newline",
			in:      head + gateEntry + "    affinityThreshold: 0.80\n    maxTTFTPenaltyMs: 18000",
			changes: []Change{{Remove: []gate.Key{gate.KeyMaxTTFTPenaltyMs}}},
			want:    head + gateEntry + "    affinityThreshold: 0.80",
		},
		{
			name:    "double-quoted string keeps its quotes",
			in:      head + gateEntry + "    penaltyMode: \"static\" # default\n",
			profile: gate.ProfilePenaltyMode,
			changes: []Change{{Set: set(gate.KeyPenaltyMode, String("matchedTokens"))}},
			want:    head + gateEntry + "    penaltyMode: \"matchedTokens\" # default\n",
		},
		{
			name:    "single-quoted string keeps its quotes",
			in:      head + gateEntry + "    penaltyMode: 'static'\n",
			profile: gate.ProfilePenaltyMode,
			changes: []Change{{Set: set(gate.KeyPenaltyMode, String("matchedTokens"))}},
			want:    head + gateEntry + "    penaltyMode: 'matchedTokens'\n",
		},
		{
			name:    "empty value gets one",
			in:      head + gateEntry + "    maxTTFTPenaltyMs:   # unset\n",
			changes: []Change{{Set: set(gate.KeyMaxTTFTPenaltyMs, Number(0.8))}},
			want:    head + gateEntry + "    maxTTFTPenaltyMs: 0.8   # unset\n",
		},
		{
			name:    "numbers are written without exponent",
			in:      head + gateEntry + "    maxTTFTPenaltyMs: 1.8e4\n    peakPrefillThroughput: 15928.0\n",
			changes: []Change{{Set: map[gate.Key]Value{gate.KeyMaxTTFTPenaltyMs: Number(4783), gate.KeyPeakPrefillThroughput: Number(0.000125)}}},
			want:    head + gateEntry + "    maxTTFTPenaltyMs: 4783\n    peakPrefillThroughput: 0.000125\n",
		},
		{
			name:    "setting the value already there changes no byte",
			in:      head + gateEntry + "    affinityThreshold: 0.80\n    maxTTFTPenaltyMs: 18000.0\n",
			changes: []Change{{Set: set(gate.KeyMaxTTFTPenaltyMs, Number(18000))}},
			want:    head + gateEntry + "    affinityThreshold: 0.80\n    maxTTFTPenaltyMs: 18000.0\n",
		},
		{
			name:    "tabs and odd indentation are kept",
			in:      head + "-   name: gate\n    type: prefix-cache-affinity-filter\n    parameters:\n       maxTTFTPenaltyMs:\t18000\t# tab\n",
			changes: []Change{{Set: map[gate.Key]Value{gate.KeyMaxTTFTPenaltyMs: Number(4092), gate.KeyPeakPrefillThroughput: Number(4783)}}},
			want:    head + "-   name: gate\n    type: prefix-cache-affinity-filter\n    parameters:\n       maxTTFTPenaltyMs:\t4092\t# tab\n       peakPrefillThroughput: 4783\n",
		},
		{
			name:    "CRLF line endings are kept and used for inserted lines",
			in:      strings.ReplaceAll(head+gateEntry+"    maxTTFTPenaltyMs: 18000 # c\n- type: max-score-picker\n", "\n", "\r\n"),
			changes: []Change{{Set: map[gate.Key]Value{gate.KeyMaxTTFTPenaltyMs: Number(4092), gate.KeyPeakPrefillThroughput: Number(4783)}}},
			want:    strings.ReplaceAll(head+gateEntry+"    maxTTFTPenaltyMs: 4092 # c\n    peakPrefillThroughput: 4783\n- type: max-score-picker\n", "\n", "\r\n"),
		},
		{
			name:    "CRLF removal",
			in:      strings.ReplaceAll(head+gateEntry+"    maxTTFTPenaltyMs: 18000\n    affinityThreshold: 0.8\n", "\n", "\r\n"),
			changes: []Change{{Remove: []gate.Key{gate.KeyMaxTTFTPenaltyMs}}},
			want:    strings.ReplaceAll(head+gateEntry+"    affinityThreshold: 0.8\n", "\n", "\r\n"),
		},
		{
			name: "anchors elsewhere in the document do not stop an edit",
			in: head + "- type: x-scorer\n  parameters: &shared {a: 1}\n- type: y-scorer\n  parameters: *shared\n" +
				gateEntry + "    maxTTFTPenaltyMs: 18000\n",
			changes: []Change{{Set: set(gate.KeyMaxTTFTPenaltyMs, Number(4092))}},
			want: head + "- type: x-scorer\n  parameters: &shared {a: 1}\n- type: y-scorer\n  parameters: *shared\n" +
				gateEntry + "    maxTTFTPenaltyMs: 4092\n",
		},
	})
}

func TestEditRefusals(t *testing.T) {
	gateEntry := "- name: gate\n  type: prefix-cache-affinity-filter\n  parameters:\n"
	runEditCases(t, []editCase{
		{
			name:    "a value the EPP would reject returns an error and no bytes",
			in:      head + gateEntry + "    maxTTFTPenaltyMs: 18000\n",
			changes: []Change{{Set: set(gate.KeyMaxTTFTPenaltyMs, Number(-1))}},
			errHas:  `epp.yaml:7: plugin "gate": edit refused: parameter "maxTTFTPenaltyMs": must be >= 0, got -1`,
		},
		{
			name:    "penaltyMode into a router-2026-08 target would crash-loop its EPP",
			in:      head + gateEntry + "    maxTTFTPenaltyMs: 18000\n",
			profile: gate.ProfileRouter202608,
			changes: []Change{{Set: set(gate.KeyPenaltyMode, String("matchedTokens"))}},
			wantErr: gate.ErrUnknownKey,
			errHas:  "build profile router-2026-08 does not accept penaltyMode",
		},
		{
			name:    "keys differing only in case",
			in:      head + gateEntry + "    maxTTFTPenaltyMs: 18000\n    MaxTTFTPenaltyMs: 5000\n",
			changes: []Change{{Set: set(gate.KeyMaxTTFTPenaltyMs, Number(4092))}},
			wantErr: ErrCaseConflict,
			errHas:  `epp.yaml:8: plugin "gate": parameters "maxTTFTPenaltyMs" (line 7) and "MaxTTFTPenaltyMs" (line 8) differ only in case`,
		},
		{
			name:    "aliased parameters node",
			in:      head + "- name: other\n  type: prefix-cache-affinity-filter\n  parameters: &p\n    maxTTFTPenaltyMs: 1\n" + gateEntry[:len(gateEntry)-1] + " *p\n",
			changes: []Change{{Target: Target{Plugin: "gate"}, Set: set(gate.KeyMaxTTFTPenaltyMs, Number(4092))}},
			wantErr: ErrUnsupported,
			errHas:  "parameters is an alias (*p)",
		},
		{
			name:    "anchored parameters node that another plugin reuses",
			in:      head + "- name: other\n  type: prefix-cache-affinity-filter\n  parameters: &p\n    maxTTFTPenaltyMs: 1\n" + gateEntry[:len(gateEntry)-1] + " *p\n",
			changes: []Change{{Target: Target{Plugin: "other"}, Set: set(gate.KeyMaxTTFTPenaltyMs, Number(4092))}},
			wantErr: ErrUnsupported,
			errHas:  "anchor &p",
		},
		{
			name:    "merge key in parameters",
			in:      head + "- type: x\n  parameters: &base {affinityThreshold: 0.9}\n" + gateEntry + "    <<: *base\n    maxTTFTPenaltyMs: 1\n",
			changes: []Change{{Target: Target{Plugin: "gate"}, Set: set(gate.KeyMaxTTFTPenaltyMs, Number(4092))}},
			wantErr: ErrUnsupported,
			errHas:  "merge key",
		},
		{
			name:    "block scalar value",
			in:      head + gateEntry + "    penaltyMode: |\n      static\n",
			profile: gate.ProfilePenaltyMode,
			changes: []Change{{Set: set(gate.KeyPenaltyMode, String("matchedTokens"))}},
			wantErr: ErrUnsupported,
			errHas:  "block scalar",
		},
		{
			name:    "non-finite number",
			in:      head + gateEntry + "    maxTTFTPenaltyMs: 1\n",
			changes: []Change{{Set: set(gate.KeyMaxTTFTPenaltyMs, Number(posInf()))}},
			wantErr: ErrInvalidChange,
			errHas:  "not finite",
		},
		{
			name:    "set and remove the same key",
			in:      head + gateEntry + "    maxTTFTPenaltyMs: 1\n",
			changes: []Change{{Set: set(gate.KeyMaxTTFTPenaltyMs, Number(2)), Remove: []gate.Key{gate.KeyMaxTTFTPenaltyMs}}},
			wantErr: ErrInvalidChange,
		},
		{
			name:    "no name with two instances",
			in:      head + gateEntry + "    maxTTFTPenaltyMs: 1\n- name: gate2\n  type: prefix-cache-affinity-filter\n",
			changes: []Change{{Set: set(gate.KeyMaxTTFTPenaltyMs, Number(2))}},
			wantErr: ErrAmbiguous,
			errHas:  `2 instances of prefix-cache-affinity-filter (plugin "gate" (line 4), plugin "gate2" (line 8))`,
		},
		{
			name:    "string for a numeric key is refused by the EPP's validation",
			in:      head + gateEntry + "    maxTTFTPenaltyMs: 1\n",
			changes: []Change{{Set: set(gate.KeyMaxTTFTPenaltyMs, String("fast"))}},
			errHas:  `parameter "maxTTFTPenaltyMs": must be a number`,
		},
	})
}

func posInf() float64 { return 1 / zero() }
func zero() float64   { return 0 }

func TestEditSeveralSchedulingProfiles(t *testing.T) {
	in := head + "- type: prefill-filter\n- type: decode-filter\n- name: gate\n  type: prefix-cache-affinity-filter\n  parameters:\n    maxTTFTPenaltyMs: 18000\n" +
		"- type: max-score-picker\nschedulingProfiles:\n- name: prefill\n  plugins:\n  - pluginRef: prefill-filter\n  - pluginRef: gate\n" +
		"- name: decode\n  plugins:\n  - pluginRef: decode-filter\n- name: prefill-long\n  plugins:\n  - pluginRef: gate\n    weight: 3\n"
	f, err := Parse([]byte(in), "epp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	in0, err := f.Select(Target{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(in0.Profiles(), ","); got != "prefill,prefill-long" {
		t.Errorf("profiles referencing the gate = %q, want prefill,prefill-long", got)
	}
	sp := f.Configs()[0].SchedulingProfiles
	if len(sp) != 3 || sp[2].Line != 19 || sp[2].Plugins[0].Weight == nil || *sp[2].Plugins[0].Weight != 3 {
		t.Errorf("scheduling profiles = %+v", sp)
	}
	out, err := f.Edit([]Change{{Set: set(gate.KeyMaxTTFTPenaltyMs, Number(4092))}}, mustProfile(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Replace(in, "18000", "4092", 1); string(out) != want {
		t.Errorf("output differs:\n%s", Diff("want", "got", []byte(want), out))
	}
}
