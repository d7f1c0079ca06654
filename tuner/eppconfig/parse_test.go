package eppconfig

import (
	"errors"
	"strings"
	"testing"

	"github.com/gatetuner/gatetuner/gate"
)

func TestParseErrorsNameSourceLineAndKey(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		wantErr error
		want    string // exact error text
	}{
		{
			name:    "malformed YAML names the offending line",
			in:      head + "- type: a\n  parameters:\n    - b\n    c: d\n",
			wantErr: ErrMalformed,
			want:    "epp.yaml:7: malformed YAML: did not find expected '-' indicator",
		},
		{
			name:    "malformed YAML on the first line",
			in:      "a: b: c\n",
			wantErr: ErrMalformed,
			want:    "epp.yaml:1: malformed YAML: mapping values are not allowed in this context",
		},
		{
			name:    "unterminated quote names where it opens",
			in:      head + "- type: 'a\n- type: b\n",
			wantErr: ErrMalformed,
			want:    "epp.yaml:4: malformed YAML: found unexpected end of stream",
		},
		{
			name: "malformed YAML inside a ConfigMap value names the file line",
			in: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: epp\ndata:\n  epp.yaml: |\n" +
				"    apiVersion: llm-d.ai/v1alpha1\n    kind: EndpointPickerConfig\n    plugins:\n    - type: a\n      b: [1,\n",
			wantErr: ErrMalformed,
			want:    `epp.yaml:11: data key "epp.yaml": malformed YAML: did not find expected node content`,
		},
		{
			name:    "duplicate keys are refused as the EPP refuses them",
			in:      head + "- type: prefix-cache-affinity-filter\n  parameters:\n    maxTTFTPenaltyMs: 1\n    maxTTFTPenaltyMs: 2\n",
			wantErr: ErrMalformed,
			want:    `epp.yaml:7: the EPP would reject the config: key "maxTTFTPenaltyMs" already set in map`,
		},
		{
			name: "duplicate keys inside a ConfigMap value name the file line",
			in: "apiVersion: v1\nkind: ConfigMap\ndata:\n  epp.yaml: |\n    apiVersion: llm-d.ai/v1alpha1\n    kind: EndpointPickerConfig\n" +
				"    plugins:\n    - type: a\n      type: b\n",
			wantErr: ErrMalformed,
			want:    `epp.yaml:9: data key "epp.yaml": the EPP would reject the config: key "type" already set in map`,
		},
		{
			name:    "structural keys differing only in case",
			in:      head + "- type: prefix-cache-affinity-filter\n  Type: x\n",
			wantErr: ErrCaseConflict,
			want:    `epp.yaml:5: keys "type" (line 4) and "Type" differ only in case`,
		},
		{
			name:    "unknown apiVersion",
			in:      "apiVersion: llm-d.ai/v2\nkind: EndpointPickerConfig\n",
			wantErr: ErrMalformed,
			want:    `epp.yaml:1: apiVersion "llm-d.ai/v2" is not one the EPP loads (llm-d.ai/v1alpha1 or inference.networking.x-k8s.io/v1alpha1)`,
		},
		{
			name:    "no config at all",
			in:      "apiVersion: v1\nkind: ConfigMap\ndata:\n  other.txt: hello\n",
			wantErr: ErrNoConfig,
			want:    "epp.yaml: no EndpointPickerConfig found (neither a bare document nor a ConfigMap data value)",
		},
		{
			name:    "duplicate plugin names",
			in:      head + "- type: prefix-cache-affinity-filter\n- name: prefix-cache-affinity-filter\n  type: x\n",
			wantErr: ErrMalformed,
			want:    `epp.yaml:5: plugin name "prefix-cache-affinity-filter" is used twice (lines 4 and 5); the EPP requires unique names`,
		},
		{
			name:    "not UTF-8",
			in:      head + "- type: \xff\n",
			wantErr: ErrMalformed,
			want:    "epp.yaml: not UTF-8 text",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in), "epp.yaml")
			if err == nil {
				t.Fatal("Parse succeeded, want error")
			}
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("error %q does not wrap %v", err, tc.wantErr)
			}
			if err.Error() != tc.want {
				t.Errorf("error:\n got %s\nwant %s", err, tc.want)
			}
		})
	}
}

func TestParamsAsTheEPPDecodesThem(t *testing.T) {
	prof := mustProfile(t, "")
	cases := []struct {
		name   string
		params string
		check  func(t *testing.T, p gate.Params)
		errMsg string
	}{
		{
			name:   "invalid value names line, plugin and key",
			params: "    affinityThreshold: 0.8\n    maxTTFTPenaltyMs: -1\n",
			errMsg: `epp.yaml:8: plugin "prefill-affinity": parameter "maxTTFTPenaltyMs": must be >= 0, got -1`,
		},
		{
			name:   "YAML 1.1 booleans reach the EPP as booleans",
			params: "    prefixMatchInfoProducerName: yes\n",
			errMsg: `epp.yaml:7: plugin "prefill-affinity": parameter "prefixMatchInfoProducerName": must be a string, got true`,
		},
		{
			name:   "differently spelled key is the same key",
			params: "    MaxTTFTPenaltyMs: 4092\n    PEAKPREFILLTHROUGHPUT: 0x10\n",
			check: func(t *testing.T, p gate.Params) {
				if p.MaxTTFTPenaltyMs != 4092 || p.PeakPrefillThroughput != 16 || p.Spelling[gate.KeyMaxTTFTPenaltyMs] != "MaxTTFTPenaltyMs" {
					t.Errorf("params = %+v", p)
				}
			},
		},
		{
			name:   "keys differing only in case",
			params: "    maxTTFTPenaltyMs: 1\n    MAXTTFTPENALTYMS: 2\n",
			errMsg: `epp.yaml:8: plugin "prefill-affinity": parameters "maxTTFTPenaltyMs" (line 7) and "MAXTTFTPENALTYMS" (line 8) differ only in case; the EPP matches keys case-insensitively, refusing to guess which one it reads`,
		},
		{
			name:   "explicit null keeps the default",
			params: "    maxTTFTPenaltyMs: null\n",
			check: func(t *testing.T, p gate.Params) {
				if p.MaxTTFTPenaltyMs != gate.DefaultMaxTTFTPenaltyMs || p.Present.Has(gate.KeyMaxTTFTPenaltyMs) {
					t.Errorf("params = %+v", p)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := head + "- name: prefill-affinity\n  type: prefix-cache-affinity-filter\n  parameters:\n" + tc.params
			f, err := Parse([]byte(in), "epp.yaml")
			if err != nil {
				t.Fatal(err)
			}
			inst, err := f.Select(Target{Plugin: "prefill-affinity"})
			if err != nil {
				t.Fatal(err)
			}
			p, err := inst.Params(prof)
			if tc.errMsg != "" {
				if err == nil || err.Error() != tc.errMsg {
					t.Fatalf("error:\n got %v\nwant %s", err, tc.errMsg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, p)
		})
	}
}

func TestSelect(t *testing.T) {
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: epp\n  namespace: ns\ndata:\n" +
		"  a.yaml: |\n    apiVersion: llm-d.ai/v1alpha1\n    kind: EndpointPickerConfig\n    plugins:\n    - type: prefix-cache-affinity-filter\n    - type: queue-scorer\n" +
		"  b.yaml: |\n    apiVersion: inference.networking.x-k8s.io/v1alpha1\n    kind: EndpointPickerConfig\n    plugins:\n    - type: prefix-cache-affinity-filter\n      name: gate-b\n" +
		"  notes.txt: plain text\n"
	f, err := Parse([]byte(cm), "cm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		target  Target
		want    string // "dataKey/plugin" of the selected instance
		wantErr error
		errMsg  string
	}{
		{target: Target{DataKey: "a.yaml"}, want: "a.yaml/prefix-cache-affinity-filter"},
		{target: Target{Plugin: "gate-b"}, want: "b.yaml/gate-b"},
		{target: Target{}, wantErr: ErrAmbiguous, errMsg: `cm.yaml: 2 instances of prefix-cache-affinity-filter (data key "a.yaml" plugin "prefix-cache-affinity-filter" (line 11), data key "b.yaml" plugin "gate-b" (line 17)); name the one to use`},
		{target: Target{DataKey: "c.yaml"}, wantErr: ErrNotFound, errMsg: `cm.yaml: data key "c.yaml": no such ConfigMap data key holding a EndpointPickerConfig (keys holding one: "a.yaml", "b.yaml")`},
		{target: Target{Plugin: "queue-scorer"}, wantErr: ErrNotFound, errMsg: `cm.yaml:12: data key "a.yaml": plugin "queue-scorer": is of type "queue-scorer", not prefix-cache-affinity-filter`},
		{target: Target{Plugin: "nope"}, wantErr: ErrNotFound, errMsg: `cm.yaml: no plugin "nope" (prefix-cache-affinity-filter instances: data key "a.yaml" plugin "prefix-cache-affinity-filter" (line 11), data key "b.yaml" plugin "gate-b" (line 17))`},
	}
	for _, tc := range cases {
		t.Run(tc.target.String(), func(t *testing.T) {
			in, err := f.Select(tc.target)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || err.Error() != tc.errMsg {
					t.Fatalf("error:\n got %v\nwant %s", err, tc.errMsg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := in.Config.DataKey + "/" + in.Plugin.Name; got != tc.want {
				t.Errorf("selected %s, want %s", got, tc.want)
			}
		})
	}
	c := f.Configs()
	if len(c) != 2 || c[0].ConfigMapName != "epp" || c[0].ConfigMapNamespace != "ns" || c[1].APIVersion != DeprecatedAPIVersion || c[0].Line != 8 {
		t.Errorf("configs = %+v %+v", c[0], c[1])
	}
}

func TestConfigMapEdits(t *testing.T) {
	cmHead := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: epp\ndata:\n"
	inner := func(indent string) string {
		lines := []string{"apiVersion: llm-d.ai/v1alpha1", "kind: EndpointPickerConfig", "plugins:",
			"- type: prefix-cache-affinity-filter", "  parameters:", "    maxTTFTPenaltyMs: 18000 # bar", "- type: max-score-picker"}
		return indent + strings.Join(lines, "\n"+indent) + "\n"
	}
	both := map[gate.Key]Value{gate.KeyMaxTTFTPenaltyMs: Number(4092), gate.KeyPeakPrefillThroughput: Number(4783)}
	edited := func(indent string) string {
		return strings.Replace(inner(indent), "18000 # bar\n", "4092 # bar\n"+indent+"    peakPrefillThroughput: 4783\n", 1)
	}
	runEditCases(t, []editCase{
		{
			name:    "literal block with strip chomping",
			in:      cmHead + "  epp.yaml: |-\n" + strings.TrimSuffix(inner("    "), "\n") + "\n  other: x\n",
			changes: []Change{{Set: both}},
			want:    cmHead + "  epp.yaml: |-\n" + strings.TrimSuffix(edited("    "), "\n") + "\n  other: x\n",
		},
		{
			name:    "literal block with explicit indentation and keep chomping",
			in:      cmHead + "  epp.yaml: |2+\n" + inner("      ") + "\n\n  other: x\n",
			changes: []Change{{Set: both}},
			want:    cmHead + "  epp.yaml: |2+\n" + edited("      ") + "\n\n  other: x\n",
		},
		{
			name:    "CRLF manifest",
			in:      strings.ReplaceAll(cmHead+"  epp.yaml: |\n"+inner("    ")+"  other: x\n", "\n", "\r\n"),
			changes: []Change{{Set: both}},
			want:    strings.ReplaceAll(cmHead+"  epp.yaml: |\n"+edited("    ")+"  other: x\n", "\n", "\r\n"),
		},
		{
			name:    "blank lines inside the block",
			in:      cmHead + "  epp.yaml: |\n" + strings.Replace(inner("    "), "    plugins:\n", "\n    plugins:\n  \n", 1) + "  other: x\n",
			changes: []Change{{Set: both}},
			want:    cmHead + "  epp.yaml: |\n" + strings.Replace(edited("    "), "    plugins:\n", "\n    plugins:\n  \n", 1) + "  other: x\n",
		},
		{
			// Was refused ("not a literal block scalar"); a double-quoted value is
			// now edited inside the string. The single-quoted one still is refused.
			name:    "double-quoted value gets a parameters block inside the string",
			in:      cmHead + "  epp.yaml: \"apiVersion: llm-d.ai/v1alpha1\\nkind: EndpointPickerConfig\\nplugins:\\n- type: prefix-cache-affinity-filter\\n\"\n",
			changes: []Change{{Set: both}},
			want: cmHead + "  epp.yaml: \"apiVersion: llm-d.ai/v1alpha1\\nkind: EndpointPickerConfig\\nplugins:\\n- type: prefix-cache-affinity-filter" +
				"\\n  parameters:\\n    maxTTFTPenaltyMs: 4092\\n    peakPrefillThroughput: 4783\\n\"\n",
		},
		{
			name:    "single-quoted value can be read but not spliced",
			in:      cmHead + "  epp.yaml: 'apiVersion: llm-d.ai/v1alpha1\n\n    kind: EndpointPickerConfig\n\n    plugins:\n\n    - type: prefix-cache-affinity-filter\n\n    '\n",
			changes: []Change{{Set: both}},
			wantErr: ErrUnsupported,
			errHas:  `epp.yaml:6: data key "epp.yaml": plugin "prefix-cache-affinity-filter": the value of data key "epp.yaml" is not a literal block scalar (|); cannot splice it: it is a single-quoted string`,
		},
		{
			name: "two data keys edited in one output",
			in:   cmHead + "  a.yaml: |\n" + inner("    ") + "  b.yaml: |\n" + inner("    "),
			changes: []Change{
				{Target: Target{DataKey: "a.yaml"}, Set: set(gate.KeyMaxTTFTPenaltyMs, Number(1000))},
				{Target: Target{DataKey: "b.yaml"}, Set: set(gate.KeyMaxTTFTPenaltyMs, Number(2000))},
			},
			want: cmHead + "  a.yaml: |\n" + strings.Replace(inner("    "), "18000", "1000", 1) + "  b.yaml: |\n" + strings.Replace(inner("    "), "18000", "2000", 1),
		},
		{
			name: "multi-document stream edits only the config document",
			in: "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: epp}\n---\n" + cmHead + "  epp.yaml: |\n" + inner("    ") +
				"---\n# trailing doc\napiVersion: v1\nkind: Service\n",
			changes: []Change{{Set: both}},
			want: "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: epp}\n---\n" + cmHead + "  epp.yaml: |\n" + edited("    ") +
				"---\n# trailing doc\napiVersion: v1\nkind: Service\n",
		},
	})
}

func TestReadOnlyConfigMapValueStillReads(t *testing.T) {
	// A single-quoted value (a double-quoted one, used here before, is now editable).
	in := "apiVersion: v1\nkind: ConfigMap\ndata:\n  epp.yaml: 'apiVersion: llm-d.ai/v1alpha1\n\n    kind: EndpointPickerConfig\n\n    plugins:\n\n    - {type: prefix-cache-affinity-filter, parameters: {maxTTFTPenaltyMs: 7}}\n\n    '\n"
	f, err := Parse([]byte(in), "cm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	inst, err := f.Select(Target{})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(inst.Config.Editable(), ErrUnsupported) {
		t.Errorf("Editable() = %v, want ErrUnsupported", inst.Config.Editable())
	}
	p, err := inst.Params(mustProfile(t, ""))
	if err != nil || p.MaxTTFTPenaltyMs != 7 {
		t.Errorf("Params = %v, %v", p.MaxTTFTPenaltyMs, err)
	}
}

func TestOwnedReportsValuesAndSpellings(t *testing.T) {
	in := head + "- type: prefix-cache-affinity-filter\n  parameters:\n    MaxTTFTPenaltyMs: 4092.0\n    penaltyMode: null\n"
	f, err := Parse([]byte(in), "epp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	inst, err := f.Select(Target{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := inst.Owned()
	if err != nil {
		t.Fatal(err)
	}
	want := []OwnedValue{
		{Key: gate.KeyMaxTTFTPenaltyMs, Present: true, Spelling: "MaxTTFTPenaltyMs", Value: "4092"},
		{Key: gate.KeyPeakPrefillThroughput},
		{Key: gate.KeyPenaltyMode, Present: true, Spelling: "penaltyMode", Value: "null"},
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("owned[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
	// The re-check: an edit of an owned key is seen, an edit elsewhere is not.
	f2, _ := Parse([]byte(strings.Replace(in, "4092.0", "4093", 1)), "epp.yaml")
	f3, _ := Parse([]byte(strings.Replace(in, "- type", "# a comment\n- type", 1)), "epp.yaml")
	i2, _ := f2.Select(Target{})
	i3, _ := f3.Select(Target{})
	o2, _ := i2.Owned()
	o3, _ := i3.Owned()
	if o2[0] == got[0] {
		t.Errorf("changed value not seen: %+v", o2[0])
	}
	for i := range got {
		if o3[i] != got[i] {
			t.Errorf("unrelated edit changed owned[%d]: %+v", i, o3[i])
		}
	}
}

func TestSamePluginNameInTwoDocuments(t *testing.T) {
	doc := head + "- name: gate\n  type: prefix-cache-affinity-filter\n"
	f, err := Parse([]byte(doc+"---\n"+doc), "stream.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Select(Target{Plugin: "gate"})
	want := `stream.yaml: plugin "gate" is defined in 2 documents (document 1 plugin "gate" (line 4), document 2 plugin "gate" (line 10)); edit one document at a time`
	if !errors.Is(err, ErrAmbiguous) || err.Error() != want {
		t.Errorf("error:\n got %v\nwant %s", err, want)
	}
}
