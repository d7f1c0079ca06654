package gate

import (
	"slices"
	"strings"
	"testing"
)

// TestConfigAPIVersionPerProfile pins which apiVersions each profile loads
// and what the refusal says: every built-in build loads v1alpha1 and the
// deprecated group; llm-d.ai/v1 is refused saying only PR #2923's loader is
// known to load it; a custom profile that declares v1 loads it and refuses
// the deprecated group, as that loader does.
func TestConfigAPIVersionPerProfile(t *testing.T) {
	v1Custom, err := NewCustomProfile(ProfileSpec{Name: "v1-build", Keys: []string{"base"}, MissingSignal: "v2", ThresholdRule: "0to1",
		ConfigAPIVersions: []string{ConfigAPIVersionV1, ConfigAPIVersionV1Alpha1}})
	if err != nil {
		t.Fatal(err)
	}
	plainCustom, err := NewProfile("plain", []string{"base"}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		prof    Profile
		version string
		want    string // "" loads; else a substring of the error
	}{
		{"built-in loads v1alpha1", mustProfile(t, ProfileRouter202609V2), ConfigAPIVersionV1Alpha1, ""},
		{"built-in loads the deprecated group", mustProfile(t, ProfileRouter202608), ConfigAPIVersionDeprecated, ""},
		{"built-in refuses v1 saying what is known", mustProfile(t, ProfileRouterCalibrationV2), ConfigAPIVersionV1,
			`apiVersion "llm-d.ai/v1" is not one the EPP of build profile router-2026-09-calibration-v2 loads (llm-d.ai/v1alpha1 or inference.networking.x-k8s.io/v1alpha1): ` +
				`no built-in profile's build is known to load llm-d.ai/v1: only llm-d-router PR #2923's loader (open when last read; ` +
				`configloader.go@e0412de546de in red-hat-data-services/llm-d-router) accepts it; if your EPP image loads it, ` +
				`declare a custom profile with configAPIVersions: [llm-d.ai/v1, llm-d.ai/v1alpha1]`},
		{"no profile named: the EPP", Profile{}, "llm-d.ai/v2",
			`apiVersion "llm-d.ai/v2" is not one the EPP loads (llm-d.ai/v1alpha1 or inference.networking.x-k8s.io/v1alpha1)`},
		{"no profile named refuses v1 the built-in way", Profile{}, ConfigAPIVersionV1, "no built-in profile's build is known to load llm-d.ai/v1"},
		{"a custom profile without v1 says to declare it", plainCustom, ConfigAPIVersionV1, "add llm-d.ai/v1 to the profile's configAPIVersions"},
		{"a v1 custom profile loads v1", v1Custom, ConfigAPIVersionV1, ""},
		{"a v1 custom profile loads v1alpha1", v1Custom, ConfigAPIVersionV1Alpha1, ""},
		{"a v1 custom profile refuses the deprecated group", v1Custom, ConfigAPIVersionDeprecated,
			"(llm-d.ai/v1 or llm-d.ai/v1alpha1): PR #2923's loader, which loads llm-d.ai/v1, no longer registers it"},
	}
	for _, tc := range cases {
		err := tc.prof.LoadsConfigAPIVersion(tc.version)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v\nwant it to contain %q", tc.name, err, tc.want)
		case err != nil && strings.Contains(err.Error(), "\n"):
			t.Errorf("%s: multi-line error %q", tc.name, err)
		}
	}
}

// TestCustomProfileDeclaresReports: a custom profile declares what its
// build reports and which apiVersions it loads; what no build does is
// refused.
func TestCustomProfileDeclaresReports(t *testing.T) {
	base := ProfileSpec{Name: "mine", Keys: []string{"base"}}
	ok := []struct {
		name string
		edit func(*ProfileSpec)
		want Reports
		apis []string
	}{
		{"nothing declared: nothing reported, the built-in loader", func(*ProfileSpec) {}, Reports{}, DefaultConfigAPIVersions()},
		{"counter under v1: the five outcomes", func(s *ProfileSpec) { s.DecisionCounter = true },
			Reports{DecisionCounter: true, Outcomes: DefaultOutcomes(SemanticsV1)}, DefaultConfigAPIVersions()},
		{"span under v2: missing_signal too", func(s *ProfileSpec) { s.GateSpan, s.MissingSignal = true, "v2" },
			Reports{GateSpan: true, Outcomes: DefaultOutcomes(SemanticsV2)}, DefaultConfigAPIVersions()},
		{"outcomes listed", func(s *ProfileSpec) { s.DecisionCounter, s.Outcomes = true, []string{"sticky", "no_match", "sticky"} },
			Reports{DecisionCounter: true, Outcomes: []Outcome{OutcomeSticky, OutcomeNoMatch}}, DefaultConfigAPIVersions()},
		{"the v1 loader", func(s *ProfileSpec) {
			s.ConfigAPIVersions = []string{ConfigAPIVersionV1, ConfigAPIVersionV1Alpha1, ConfigAPIVersionV1}
		}, Reports{}, []string{ConfigAPIVersionV1, ConfigAPIVersionV1Alpha1}},
	}
	for _, tc := range ok {
		spec := base
		tc.edit(&spec)
		p, err := NewCustomProfile(spec)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		got := p.Reports
		if got.DecisionCounter != tc.want.DecisionCounter || got.GateSpan != tc.want.GateSpan || !slices.Equal(got.Outcomes, tc.want.Outcomes) ||
			!slices.Equal(p.ConfigAPIVersions, tc.apis) || p.Upstream != "" {
			t.Errorf("%s: reports %s, apiVersions %v; want %s, %v", tc.name, got, p.ConfigAPIVersions, tc.want, tc.apis)
		}
	}
	bad := []struct {
		name string
		edit func(*ProfileSpec)
		want string
	}{
		{"outcomes without counter or span", func(s *ProfileSpec) { s.Outcomes = []string{"sticky"} }, "neither decisionCounter nor gateSpan"},
		{"the request gate's outcome", func(s *ProfileSpec) { s.DecisionCounter, s.Outcomes = true, []string{"request_load_override"} },
			`outcome "request_load_override" is not one gatetuner models`},
		{"missing_signal under v1", func(s *ProfileSpec) { s.DecisionCounter, s.Outcomes = true, []string{"missing_signal"} },
			"only v2 builds record it"},
		{"an apiVersion no loader registers", func(s *ProfileSpec) { s.ConfigAPIVersions = []string{"llm-d.ai/v2"} },
			`"llm-d.ai/v2" is registered by no EPP loader read`},
		{"v1 with the deprecated group", func(s *ProfileSpec) {
			s.ConfigAPIVersions = []string{ConfigAPIVersionV1, ConfigAPIVersionDeprecated}
		}, "no loader read registers both"},
	}
	for _, tc := range bad {
		spec := base
		tc.edit(&spec)
		_, err := NewCustomProfile(spec)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `custom profile "mine"`) {
			t.Errorf("%s: %v, want an error naming the profile and containing %q", tc.name, err, tc.want)
		}
	}
}
