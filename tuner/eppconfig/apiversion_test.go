package eppconfig

import (
	"errors"
	"strings"
	"testing"

	"github.com/gatetuner/gatetuner/gate"
)

// v1Profile is a custom profile for an EPP with PR #2923's loader.
func v1Profile(t *testing.T) gate.Profile {
	t.Helper()
	p, err := gate.NewCustomProfile(gate.ProfileSpec{Name: "v1-build", Keys: []string{"base"}, MissingSignal: "v2", ThresholdRule: "0to1",
		ConfigAPIVersions: []string{APIVersionV1, APIVersion}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAPIVersionFollowsTheProfile: the apiVersions a config may have are
// its target profile's (Parse: the built-in ones). llm-d.ai/v1 is refused
// for every built-in profile with what the sources say, and loaded by a
// custom profile that declares it, which then refuses the deprecated group.
func TestAPIVersionFollowsTheProfile(t *testing.T) {
	doc := func(v string) string {
		return "apiVersion: " + v + "\nkind: EndpointPickerConfig\nplugins:\n- type: prefix-cache-affinity-filter\n  parameters: {maxTTFTPenaltyMs: 4000}\n"
	}
	cm := func(v string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: epp\ndata:\n  epp.yaml: |\n" +
			"    # the router's values\n    apiVersion: " + v + "\n    kind: EndpointPickerConfig\n"
	}
	const v1Known = `no built-in profile's build is known to load llm-d.ai/v1: only llm-d-router PR #2923's loader ` +
		`(open when last read; configloader.go@e0412de546de in red-hat-data-services/llm-d-router) accepts it; ` +
		`if your EPP image loads it, declare a custom profile with configAPIVersions: [llm-d.ai/v1, llm-d.ai/v1alpha1]`
	cases := []struct {
		name string
		prof *gate.Profile // nil: Parse
		in   string
		want string // exact error; "" loads
	}{
		{"Parse refuses v1 saying what is known", nil, doc(APIVersionV1),
			`epp.yaml:1: apiVersion "llm-d.ai/v1" is not one the EPP loads (llm-d.ai/v1alpha1 or inference.networking.x-k8s.io/v1alpha1): ` + v1Known},
		{"in a ConfigMap the line and data key are named", nil, cm(APIVersionV1),
			`epp.yaml:8: data key "epp.yaml": apiVersion "llm-d.ai/v1" is not one the EPP loads (llm-d.ai/v1alpha1 or inference.networking.x-k8s.io/v1alpha1): ` + v1Known},
		{"a built-in profile refuses v1, named", ptr(mustProfile(t, gate.ProfileRouter202609V2)), doc(APIVersionV1),
			`epp.yaml:1: apiVersion "llm-d.ai/v1" is not one the EPP of build profile router-2026-09-v2 loads (llm-d.ai/v1alpha1 or inference.networking.x-k8s.io/v1alpha1): ` + v1Known},
		{"a built-in profile loads the deprecated group", ptr(mustProfile(t, gate.ProfileRouter202608)), doc(DeprecatedAPIVersion), ""},
		{"a v1 custom profile loads v1", ptr(v1Profile(t)), doc(APIVersionV1), ""},
		{"a v1 custom profile loads v1 in a ConfigMap", ptr(v1Profile(t)), cm(APIVersionV1), ""},
		{"a v1 custom profile loads v1alpha1", ptr(v1Profile(t)), doc(APIVersion), ""},
		{"a v1 custom profile refuses the deprecated group", ptr(v1Profile(t)), doc(DeprecatedAPIVersion),
			`epp.yaml:1: apiVersion "inference.networking.x-k8s.io/v1alpha1" is not one the EPP of build profile v1-build loads (llm-d.ai/v1 or llm-d.ai/v1alpha1): ` +
				`PR #2923's loader, which loads llm-d.ai/v1, no longer registers it; llm-d.ai/v1alpha1 has the same schema`},
		{"a v1 custom profile refuses an unknown version", ptr(v1Profile(t)), doc("llm-d.ai/v2"),
			`epp.yaml:1: apiVersion "llm-d.ai/v2" is not one the EPP of build profile v1-build loads (llm-d.ai/v1 or llm-d.ai/v1alpha1)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var f *File
			var err error
			if tc.prof == nil {
				f, err = Parse([]byte(tc.in), "epp.yaml")
			} else {
				f, err = ParseFor([]byte(tc.in), "epp.yaml", *tc.prof)
			}
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got := f.Configs()[0].APIVersion; !strings.Contains(tc.in, "apiVersion: "+got+"\n") {
					t.Errorf("APIVersion %q", got)
				}
				return
			}
			if err == nil || err.Error() != tc.want || !errors.Is(err, ErrMalformed) {
				t.Fatalf("error:\n got %v\nwant %s", err, tc.want)
			}
		})
	}
}

// TestEditAV1ConfigWithItsProfile: a config under llm-d.ai/v1 is edited
// like any other (PR #2923 copies plugins[].parameters byte for byte, so the
// filter's keys are the same): the edit re-reads the result under the
// loader it was parsed with, and changes one value only.
func TestEditAV1ConfigWithItsProfile(t *testing.T) {
	prof := v1Profile(t)
	in := "apiVersion: llm-d.ai/v1\nkind: EndpointPickerConfig\nplugins:\n- name: gate\n  type: prefix-cache-affinity-filter\n" +
		"  parameters:\n    maxTTFTPenaltyMs: 18000   # the bar\n"
	f, err := ParseFor([]byte(in), "epp.yaml", prof)
	if err != nil {
		t.Fatal(err)
	}
	out, err := f.Edit([]Change{{Target: Target{Plugin: "gate"}, Set: set(gate.KeyMaxTTFTPenaltyMs, Number(4092))}}, prof)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Replace(in, "18000", "4092", 1); string(out) != want {
		t.Fatalf("edited:\n%s\nwant:\n%s", out, want)
	}
	if _, err := Parse(out, "epp.yaml"); err == nil {
		t.Fatal("the built-in loader read the v1 result")
	}
}

func ptr[T any](v T) *T { return &v }
