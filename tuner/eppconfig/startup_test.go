package eppconfig

import (
	"errors"
	"strings"
	"testing"

	"github.com/gatetuner/gatetuner/gate"
)

// TestEditRefusesConfigsTheEPPRejects: an edit whose result the EPP would
// refuse at startup is refused before anything is written, naming the line.
func TestEditRefusesConfigsTheEPPRejects(t *testing.T) {
	const gateEntry = "- name: gate\n  type: prefix-cache-affinity-filter\n  parameters:\n    maxTTFTPenaltyMs: 18000\n"
	cases := []struct {
		name, in, want string
		wantErr        error
	}{
		{
			name:    "a pluginRef to an undeclared plugin",
			in:      head + gateEntry + "schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: gate\n  - pluginRef: max-score-picker\n",
			want:    `epp.yaml:12: scheduling profile "default" references plugin "max-score-picker", which is not declared in plugins; the EPP would refuse the config at startup`,
			wantErr: ErrStartup,
		},
		{
			name:    "a duplicate scheduling profile",
			in:      head + gateEntry + "schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: gate\n- name: default\n  plugins:\n  - pluginRef: gate\n",
			want:    `epp.yaml:12: scheduling profile name "default" is used twice; the EPP would refuse the config at startup`,
			wantErr: ErrStartup,
		},
		{
			name:    "a parser that is not declared",
			in:      head + gateEntry + "requestHandler:\n  parsers:\n  - pluginRef: openai-parser\n",
			want:    `epp.yaml:8: requestHandler.parsers[0] references plugin "openai-parser", which is not declared in plugins; the EPP would refuse the config at startup`,
			wantErr: ErrStartup,
		},
		{
			name:    "an unknown key in another filter instance",
			in:      head + gateEntry + "- name: other\n  type: prefix-cache-affinity-filter\n  parameters:\n    penaltyMode: static\n",
			want:    `epp.yaml:11: plugin "other": parameter "penaltyMode": unknown key: build profile router-2026-08 does not accept penaltyMode; an EPP of that build would crash-loop on it`,
			wantErr: gate.ErrUnknownKey,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse([]byte(tc.in), "epp.yaml")
			if err != nil {
				t.Fatal(err)
			}
			out, err := f.Edit([]Change{{Target: Target{Plugin: "gate"}, Set: set(gate.KeyMaxTTFTPenaltyMs, Number(5000))}}, mustProfile(t, ""))
			if err == nil || out != nil {
				t.Fatalf("Edit = %d bytes, %v; want a refusal", len(out), err)
			}
			if err.Error() != tc.want {
				t.Errorf("error:\n got %s\nwant %s", err, tc.want)
			}
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("error does not wrap %v", tc.wantErr)
			}
		})
	}
	// The same config with the reference declared is edited.
	ok := head + gateEntry + "- type: max-score-picker\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: gate\n  - pluginRef: max-score-picker\n"
	f, err := Parse([]byte(ok), "epp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out, err := f.Edit([]Change{{Target: Target{Plugin: "gate"}, Set: set(gate.KeyMaxTTFTPenaltyMs, Number(5000))}}, mustProfile(t, ""))
	if err != nil || !strings.Contains(string(out), "maxTTFTPenaltyMs: 5000") {
		t.Fatalf("Edit = %q, %v", out, err)
	}
}
