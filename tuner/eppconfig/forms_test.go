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
		t.Run(tc.file, func(t *testing.T) {
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
			golden := filepath.Join("testdata", "golden", "forms", tc.file)
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
// says what to do, and no bytes come back.
func TestFormsRefusals(t *testing.T) {
	in := readSample(t, filepath.Join("forms", "configmap-double-quoted.yaml"))
	f, err := Parse(in, "configmap-double-quoted.yaml")
	if err != nil {
		t.Fatalf("a double-quoted value must still be readable: %v", err)
	}
	sel, err := f.Select(Target{})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := sel.Params(mustProfile(t, "")); err != nil || p.MaxTTFTPenaltyMs != 18000 {
		t.Fatalf("Params = %v, %v; want the value read through the quoting", p.MaxTTFTPenaltyMs, err)
	}
	out, err := f.Edit([]Change{{Set: set(gate.KeyMaxTTFTPenaltyMs, Number(5000))}}, mustProfile(t, ""))
	if err == nil || out != nil {
		t.Fatalf("Edit = %d bytes, %v; want a refusal", len(out), err)
	}
	const want = `configmap-double-quoted.yaml:8: data key "default-plugins.yaml": plugin "prefix-cache-affinity-filter": the value of data key "default-plugins.yaml" is not a literal block scalar (|); cannot splice it: it is a double-quoted string (as Helm's toYaml or kubectl -o yaml write one when a line has trailing whitespace), and gatetuner does not re-encode it: rewrite it as a literal block scalar (default-plugins.yaml: |, the config lines indented below it, trailing spaces removed) or edit it by hand`
	if err.Error() != want {
		t.Errorf("error:\n got %s\nwant %s", err, want)
	}
	if !errors.Is(err, ErrUnsupported) {
		t.Errorf("error does not wrap ErrUnsupported")
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
