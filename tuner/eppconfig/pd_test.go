package eppconfig

import (
	"slices"
	"testing"
)

// TestPDFindsTheProfileOfTheFilter: the P/D profile handler's type, its
// profile names (defaults, profiles.*, the deprecated *Profile keys) and
// the role of the profile(s) that reference the filter.
func TestPDFindsTheProfileOfTheFilter(t *testing.T) {
	const filter = "- name: gate\n  type: prefix-cache-affinity-filter\n"
	profiles := func(refs ...string) string {
		s := "schedulingProfiles:\n"
		for _, r := range refs {
			s += r
		}
		return s
	}
	prof := func(name string, plugins ...string) string {
		s := "- name: " + name + "\n  plugins:\n"
		for _, p := range plugins {
			s += "  - pluginRef: " + p + "\n"
		}
		return s
	}
	cases := []struct {
		name, config string
		want         PD
	}{
		{"no handler: not P/D", head + filter + profiles(prof("default", "gate")),
			PD{Prefill: "prefill", Decode: "decode", Profiles: []string{"default"}}},
		{"the filter in the prefill profile", head + filter + "- type: disagg-profile-handler\n" + profiles(prof("prefill", "gate"), prof("decode")),
			PD{Handler: "disagg-profile-handler", Prefill: "prefill", Decode: "decode", Gate: RolePrefill, Profiles: []string{"prefill"}}},
		{"the filter in the decode profile", head + filter + "- type: disagg-profile-handler\n" + profiles(prof("prefill"), prof("decode", "gate")),
			PD{Handler: "disagg-profile-handler", Prefill: "prefill", Decode: "decode", Gate: RoleDecode, Profiles: []string{"decode"}}},
		{"the filter in both profiles", head + filter + "- type: disagg-profile-handler\n" + profiles(prof("prefill", "gate"), prof("decode", "gate")),
			PD{Handler: "disagg-profile-handler", Prefill: "prefill", Decode: "decode", Gate: RoleBoth, Profiles: []string{"prefill", "decode"}}},
		{"the filter in neither of the handler's profiles", head + filter + "- type: disagg-profile-handler\n" + profiles(prof("other", "gate")),
			PD{Handler: "disagg-profile-handler", Prefill: "prefill", Decode: "decode", Profiles: []string{"other"}}},
		{"the deprecated alias and profile keys name the profiles",
			head + filter + "- type: pd-profile-handler\n  parameters: {prefillProfile: p, decodeProfile: d}\n" + profiles(prof("p", "gate"), prof("d")),
			PD{Handler: "pd-profile-handler", Prefill: "p", Decode: "d", Gate: RolePrefill, Profiles: []string{"p"}}},
		{"profiles.* win over the deprecated keys",
			head + filter + "- type: disagg-profile-handler\n  parameters: {profiles: {prefill: p2, decode: d2}, prefillProfile: p, decodeProfile: d}\n" +
				profiles(prof("p", "gate"), prof("d2", "gate")),
			PD{Handler: "disagg-profile-handler", Prefill: "p2", Decode: "d2", Gate: RoleDecode, Profiles: []string{"p", "d2"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse([]byte(tc.config), "epp.yaml")
			if err != nil {
				t.Fatal(err)
			}
			in, err := f.Select(Target{Plugin: "gate"})
			if err != nil {
				t.Fatal(err)
			}
			got := in.PD()
			if got.Handler != tc.want.Handler || got.Prefill != tc.want.Prefill || got.Decode != tc.want.Decode ||
				got.Gate != tc.want.Gate || !slices.Equal(got.Profiles, tc.want.Profiles) {
				t.Errorf("PD() = %+v, want %+v", got, tc.want)
			}
		})
	}
}
