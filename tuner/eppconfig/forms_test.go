package eppconfig

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gatetuner/gatetuner/gate"
)

// TestFormsGolden edits a config in every form it is kept in: Helm values
// files (both chart layouts), a Flux HelmRelease, an Argo CD Application
// (values string and valuesObject), a kind: List of ConfigMaps. Each edit
// changes exactly the intended lines (the embedding's indentation kept), and
// the result reads back with exactly the new values.
func TestFormsGolden(t *testing.T) {
	cases := []struct {
		file     string
		golden   string // default: file
		form     string
		path     string
		inUse    bool
		changes  []Change
		removed  []string
		added    []string
		readBack map[gate.Key]string
	}{
		{
			file: "helm-values-router.yaml", form: "Helm values",
			path: `router.epp.pluginsCustomConfig["prefix-affinity.yaml"]`, inUse: true,
			changes: []Change{{Set: map[gate.Key]Value{gate.KeyMaxTTFTPenaltyMs: Number(4092), gate.KeyPeakPrefillThroughput: Number(21000.5)}}},
			removed: []string{
				"            maxTTFTPenaltyMs: 18000      # ~286k queued tokens at the throughput below",
				"            peakPrefillThroughput: 15928 # tok/s, calibrate.sh, median of 20 probes",
			},
			added: []string{
				"            maxTTFTPenaltyMs: 4092      # ~286k queued tokens at the throughput below",
				"            peakPrefillThroughput: 21000.5 # tok/s, calibrate.sh, median of 20 probes",
			},
			readBack: map[gate.Key]string{gate.KeyMaxTTFTPenaltyMs: "4092", gate.KeyPeakPrefillThroughput: "21000.5"},
		},
		{
			file: "helm-values-inference-extension.yaml", form: "Helm values",
			path: `inferenceExtension.pluginsCustomConfig["gate.yaml"]`, inUse: true,
			changes:  []Change{{Target: Target{Plugin: "prefill-affinity"}, Set: set(gate.KeyMaxTTFTPenaltyMs, Number(6000))}},
			removed:  []string{"          maxTTFTPenaltyMs: 30000"},
			added:    []string{"          maxTTFTPenaltyMs: 6000"},
			readBack: map[gate.Key]string{gate.KeyMaxTTFTPenaltyMs: "6000", gate.KeyPeakPrefillThroughput: "4783"},
		},
		{
			file: "flux-helmrelease.yaml", form: "HelmRelease",
			path: `spec.values.router.epp.pluginsCustomConfig["tuned.yaml"]`, inUse: true,
			changes:  []Change{{Set: map[gate.Key]Value{gate.KeyMaxTTFTPenaltyMs: Number(9000), gate.KeyPeakPrefillThroughput: Number(12000)}}},
			removed:  []string{"                maxTTFTPenaltyMs: 12000"},
			added:    []string{"                maxTTFTPenaltyMs: 9000", "                peakPrefillThroughput: 12000"},
			readBack: map[gate.Key]string{gate.KeyMaxTTFTPenaltyMs: "9000", gate.KeyPeakPrefillThroughput: "12000"},
		},
		{
			file: "argocd-application-values.yaml", form: "Application",
			path: `spec.source.helm.values / router.epp.pluginsCustomConfig["custom-plugins.yaml"]`, inUse: true,
			changes:  []Change{{Set: map[gate.Key]Value{gate.KeyMaxTTFTPenaltyMs: Number(5000), gate.KeyPeakPrefillThroughput: Number(9000)}}},
			removed:  []string{"                    maxTTFTPenaltyMs: 18000"},
			added:    []string{"                    maxTTFTPenaltyMs: 5000", "                    peakPrefillThroughput: 9000"},
			readBack: map[gate.Key]string{gate.KeyMaxTTFTPenaltyMs: "5000", gate.KeyPeakPrefillThroughput: "9000"},
		},
		{
			file: "argocd-application-valuesobject.yaml", form: "Application",
			path: `spec.sources[1].helm.valuesObject.router.epp.pluginsCustomConfig["affinity.yaml"]`, inUse: true,
			changes:  []Change{{Target: Target{Plugin: "gate"}, Remove: []gate.Key{gate.KeyPeakPrefillThroughput}, Set: set(gate.KeyMaxTTFTPenaltyMs, Number(12500))}},
			removed:  []string{"                    maxTTFTPenaltyMs: 9000   # p90 TTFT budget on the sticky pod", "                    peakPrefillThroughput: 7400"},
			added:    []string{"                    maxTTFTPenaltyMs: 12500   # p90 TTFT budget on the sticky pod"},
			readBack: map[gate.Key]string{gate.KeyMaxTTFTPenaltyMs: "12500"},
		},
		{
			// kubectl get configmap -o yaml: a line with trailing whitespace made the
			// value a double-quoted string, folded at 80 columns (\n escapes, raw
			// line breaks read as spaces, "\ " for a continuation's leading space).
			file: "configmap-kubectl-folded.yaml", form: "ConfigMap",
			path:    `data["default-plugins.yaml"]`,
			changes: []Change{{Set: map[gate.Key]Value{gate.KeyMaxTTFTPenaltyMs: Number(4092), gate.KeyPeakPrefillThroughput: Number(21000.5)}}},
			removed: []string{
				`    \ parameters:\n    affinityThreshold: 0.8\n    maxTTFTPenaltyMs: 18000\n    peakPrefillThroughput:`,
				`    15928\n    inFlightLoadProducerName: \"inflight-load-producer\"\n- type: token-load-scorer\nschedulingProfiles:\n-`,
			},
			added: []string{
				`    \ parameters:\n    affinityThreshold: 0.8\n    maxTTFTPenaltyMs: 4092\n    peakPrefillThroughput:`,
				`    21000.5\n    inFlightLoadProducerName: \"inflight-load-producer\"\n- type: token-load-scorer\nschedulingProfiles:\n-`,
			},
			readBack: map[gate.Key]string{gate.KeyMaxTTFTPenaltyMs: "4092", gate.KeyPeakPrefillThroughput: "21000.5"},
		},
		{
			// The same file: a key added after the last parameter and another removed.
			file: "configmap-kubectl-folded.yaml", golden: "configmap-kubectl-folded-insert-remove.yaml", form: "ConfigMap",
			path:    `data["default-plugins.yaml"]`,
			changes: []Change{{Set: set(gate.KeyExplorationProbability, Number(0.05)), Remove: []gate.Key{gate.KeyInFlightLoadProducerName}}},
			removed: []string{
				`    15928\n    inFlightLoadProducerName: \"inflight-load-producer\"\n- type: token-load-scorer\nschedulingProfiles:\n-`,
			},
			added: []string{
				`    15928\n    explorationProbability: 0.05\n- type: token-load-scorer\nschedulingProfiles:\n-`,
			},
			readBack: map[gate.Key]string{gate.KeyMaxTTFTPenaltyMs: "18000", gate.KeyPeakPrefillThroughput: "15928"},
		},
		{
			// helm template: toYaml wrote the value as one double-quoted line.
			file: "configmap-double-quoted.yaml", form: "ConfigMap",
			path:     `data["default-plugins.yaml"]`,
			changes:  []Change{{Set: set(gate.KeyMaxTTFTPenaltyMs, Number(5000))}},
			removed:  []string{`  default-plugins.yaml: "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer \n- type: inflight-load-producer\n- type: prefix-cache-affinity-filter\n  parameters:\n    maxTTFTPenaltyMs: 18000\n    peakPrefillThroughput: 15928\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: prefix-cache-affinity-filter\n  - pluginRef: queue-scorer\n"`},
			added:    []string{`  default-plugins.yaml: "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer \n- type: inflight-load-producer\n- type: prefix-cache-affinity-filter\n  parameters:\n    maxTTFTPenaltyMs: 5000\n    peakPrefillThroughput: 15928\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: prefix-cache-affinity-filter\n  - pluginRef: queue-scorer\n"`},
			readBack: map[gate.Key]string{gate.KeyMaxTTFTPenaltyMs: "5000", gate.KeyPeakPrefillThroughput: "15928"},
		},
		{
			file: "list-configmaps.yaml", form: "ConfigMap in a List",
			path:     `items[0].data["default-plugins.yaml"]`,
			changes:  []Change{{Target: Target{DataKey: "default-plugins.yaml"}, Set: set(gate.KeyPeakPrefillThroughput, Number(8000))}},
			removed:  []string{"          peakPrefillThroughput: 15928"},
			added:    []string{"          peakPrefillThroughput: 8000"},
			readBack: map[gate.Key]string{gate.KeyMaxTTFTPenaltyMs: "18000", gate.KeyPeakPrefillThroughput: "8000"},
		},
	}
	prof := mustProfile(t, "")
	for _, tc := range cases {
		if tc.golden == "" {
			tc.golden = tc.file
		}
		t.Run(tc.golden, func(t *testing.T) {
			name := filepath.Join("forms", tc.file)
			in := readSample(t, name)
			f, err := Parse(in, tc.file)
			if err != nil {
				t.Fatal(err)
			}
			sel, err := f.Select(tc.changes[0].Target)
			if err != nil {
				t.Fatal(err)
			}
			if c := sel.Config; c.Form != tc.form || c.Path != tc.path || c.InUse != tc.inUse {
				t.Errorf("config found as %q at %q (in use %v), want %q at %q (in use %v)", c.Form, c.Path, c.InUse, tc.form, tc.path, tc.inUse)
			}
			if err := sel.Config.Editable(); err != nil {
				t.Fatalf("not editable: %v", err)
			}
			out, err := f.Edit(tc.changes, prof)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "golden", "forms", tc.golden)
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
				t.Fatalf("%v (run go test -run TestFormsGolden -update to write it, then review it)", err)
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
			g, err := Parse(out, tc.file)
			if err != nil {
				t.Fatalf("the result does not parse: %v", err)
			}
			gin, err := g.Select(tc.changes[0].Target)
			if err != nil {
				t.Fatal(err)
			}
			owned, err := gin.Owned()
			if err != nil {
				t.Fatal(err)
			}
			got := map[gate.Key]string{}
			for _, o := range owned {
				if o.Present {
					got[o.Key] = o.Value
				}
			}
			if !reflect.DeepEqual(got, tc.readBack) {
				t.Errorf("read back %v, want %v", got, tc.readBack)
			}
		})
	}
}

// TestFormsRefusals pins what cannot be spliced: the error names the key and
// says what to do, and no bytes come back. (A double-quoted ConfigMap value
// was refused here before; it is now edited inside the string, see
// TestFormsGolden. The forms below still are refused.)
func TestFormsRefusals(t *testing.T) {
	const cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: epp\ndata:\n"
	cases := []struct {
		name    string
		in      string
		changes []Change
		want    string
	}{
		{
			name:    "a single-quoted string",
			in:      cm + "  epp.yaml: 'apiVersion: llm-d.ai/v1alpha1\n\n    kind: EndpointPickerConfig\n\n    plugins:\n\n    - {type: prefix-cache-affinity-filter, parameters: {maxTTFTPenaltyMs: 7}}\n\n    '\n",
			changes: []Change{{Set: set(gate.KeyMaxTTFTPenaltyMs, Number(5000))}},
			want: `cm.yaml:6: data key "epp.yaml": plugin "prefix-cache-affinity-filter": the value of data key "epp.yaml" is not a literal block scalar (|); cannot splice it: ` +
				`it is a single-quoted string (as Helm's toYaml or kubectl -o yaml write one when a line has trailing whitespace), and gatetuner does not re-encode it: ` +
				`rewrite it as a literal block scalar (epp.yaml: |, the config lines indented below it, trailing spaces removed) or edit it by hand`,
		},
		{
			name:    "a folded block scalar",
			in:      cm + "  epp.yaml: >\n    apiVersion: llm-d.ai/v1alpha1\n\n    kind: EndpointPickerConfig\n\n    plugins:\n\n    - {type: prefix-cache-affinity-filter, parameters: {maxTTFTPenaltyMs: 7}}\n",
			changes: []Change{{Set: set(gate.KeyMaxTTFTPenaltyMs, Number(5000))}},
			want: `cm.yaml:6: data key "epp.yaml": plugin "prefix-cache-affinity-filter": the value of data key "epp.yaml" is not a literal block scalar (|); cannot splice it: ` +
				`it is a folded block scalar (>) (as Helm's toYaml or kubectl -o yaml write one when a line has trailing whitespace), and gatetuner does not re-encode it: ` +
				`rewrite it as a literal block scalar (epp.yaml: |, the config lines indented below it, trailing spaces removed) or edit it by hand`,
		},
		{
			// Hand-written: the blank line after peakPrefillThroughput is two raw line
			// breaks folded into "\n\n"; removing the key would end inside them.
			name: "a double-quoted string, a change ending inside a folded line break",
			in: cm + "  epp.yaml: \"apiVersion: llm-d.ai/v1alpha1\\nkind: EndpointPickerConfig\\nplugins:\\n- type: prefix-cache-affinity-filter\\n  parameters:\\n    peakPrefillThroughput: 15928\n\n\n" +
				"    \\    maxTTFTPenaltyMs: 1\\n\"\n",
			changes: []Change{{Remove: []gate.Key{gate.KeyPeakPrefillThroughput}}},
			want: `cm.yaml:6: data key "epp.yaml": plugin "prefix-cache-affinity-filter": the value of key "epp.yaml" is a double-quoted string and the change would begin or end ` +
				`inside an escape sequence or a folded line break of it; rewrite it as a literal block scalar (epp.yaml: |, the config lines indented below it, trailing spaces removed) ` +
				`or edit it by hand`,
		},
		{
			name: "an Application's values as a double-quoted string",
			in: "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {name: epp}\nspec:\n  source:\n    helm:\n      values: \"router:\\n  epp:\\n    pluginsCustomConfig:\\n" +
				"      a.yaml: |\\n        apiVersion: llm-d.ai/v1alpha1\\n        kind: EndpointPickerConfig\\n        plugins:\\n        - type: prefix-cache-affinity-filter\\n\"\n",
			changes: []Change{{Set: set(gate.KeyMaxTTFTPenaltyMs, Number(5000))}},
			want: `cm.yaml:7: data key "a.yaml": plugin "prefix-cache-affinity-filter": the value of data key "values" is not a literal block scalar (|); cannot splice it: ` +
				`it is a double-quoted string (as Helm's toYaml or kubectl -o yaml write one when a line has trailing whitespace), and gatetuner does not re-encode it: ` +
				`rewrite it as a literal block scalar (values: |, the config lines indented below it, trailing spaces removed) or edit it by hand`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse([]byte(tc.in), "cm.yaml")
			if err != nil {
				t.Fatalf("the value must still be readable: %v", err)
			}
			if _, err := f.Select(Target{}); err != nil {
				t.Fatal(err)
			}
			out, err := f.Edit(tc.changes, mustProfile(t, ""))
			if err == nil || out != nil {
				t.Fatalf("Edit = %d bytes, %v; want a refusal\n%s", len(out), err, out)
			}
			if err.Error() != tc.want {
				t.Errorf("error:\n got %s\nwant %s", err, tc.want)
			}
			if !errors.Is(err, ErrUnsupported) {
				t.Errorf("error does not wrap ErrUnsupported")
			}
		})
	}
}

// TestHelmValuesSelectsTheFileInUse: with several custom configs holding a
// filter, the one pluginsConfigFile names is the one selected.
func TestHelmValuesSelectsTheFileInUse(t *testing.T) {
	const values = `router:
  epp:
    pluginsConfigFile: b.yaml
    pluginsCustomConfig:
      a.yaml: |
        apiVersion: llm-d.ai/v1alpha1
        kind: EndpointPickerConfig
        plugins:
        - type: prefix-cache-affinity-filter
          parameters:
            affinityThreshold: 0.7
      b.yaml: |
        apiVersion: llm-d.ai/v1alpha1
        kind: EndpointPickerConfig
        plugins:
        - type: prefix-cache-affinity-filter
          parameters:
            affinityThreshold: 0.9
`
	f, err := Parse([]byte(values), "values.yaml")
	if err != nil {
		t.Fatalf("%v\n%s", err, values)
	}
	in, err := f.Select(Target{})
	if err != nil {
		t.Fatal(err)
	}
	if in.Config.DataKey != "b.yaml" || !in.Config.InUse {
		t.Errorf("selected %s (in use %v), want b.yaml", in, in.Config.InUse)
	}
	if _, err := f.Select(Target{DataKey: "a.yaml"}); err != nil {
		t.Errorf("naming the other key: %v", err)
	}
	noFile := strings.Replace(values, "    pluginsConfigFile: b.yaml\n", "", 1)
	g, err := Parse([]byte(noFile), "values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Select(Target{}); !errors.Is(err, ErrAmbiguous) {
		t.Errorf("without pluginsConfigFile: %v, want ErrAmbiguous", err)
	}
}
