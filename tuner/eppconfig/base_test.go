package eppconfig

import (
	"errors"
	"strings"
	"testing"

	"github.com/gatetuner/gatetuner/gate"
)

// TestCheckBaseRefusesAnotherConfigsNumbers: a config is accepted as the
// base of a recommendation only when the instance holds the values the
// recommendation was computed from; any refusal wraps ErrOtherBase and
// names the value that differs.
func TestCheckBaseRefusesAnotherConfigsNumbers(t *testing.T) {
	const base = head + `- name: gate
  type: prefix-cache-affinity-filter
  parameters:
    maxTTFTPenaltyMs: 18000
    peakPrefillThroughput: 15928
`
	change := []Change{{Target: Target{Plugin: "gate"}, Set: set(gate.KeyMaxTTFTPenaltyMs, Number(4092))}}
	never := func(gate.Settings) bool { return false }
	always := func(gate.Settings) bool { return true }
	cases := []struct {
		name, base, file, profile string
		tokenBarOnly              func(gate.Settings) bool
		want                      string // "" accepted; else a substring of the refusal
	}{
		{"the same values", base, base, "", never, ""},
		{"the same values under other comments and layout", base,
			strings.Replace(base, "maxTTFTPenaltyMs: 18000", "maxTTFTPenaltyMs: 18000 # hand-picked", 1), "", never, ""},
		{"another bar", base, strings.Replace(base, "18000", "30000", 1), "", never,
			"maxTTFTPenaltyMs is 30000 here but the recommendation was computed from 18000"},
		{"another throughput", base, strings.Replace(base, "15928", "9000", 1), "", never,
			"peakPrefillThroughput is 9000 (explicit) here but the recommendation was computed from 15928 (explicit)"},
		{"the default throughput instead of an explicit one", base, strings.Replace(base, "    peakPrefillThroughput: 15928\n", "", 1), "", never,
			"peakPrefillThroughput is 15928 (default) here but the recommendation was computed from 15928 (explicit)"},
		{"another penalty mode under a profile that has it", base, base + "    penaltyMode: matchedTokens\n", gate.ProfilePenaltyMode, never,
			"penaltyMode is matchedTokens here but the recommendation was computed from static"},
		{"the latency predictor", base, base + "    ttftSource: latencyPredictor\n", "", never,
			"takes TTFT from the latency predictor; gatetuner does not tune such instances"},
		{"the latency predictor under a token bar alone is tuned (then ttftSource differs)", base, base + "    ttftSource: latencyPredictor\n", "", always,
			"ttftSource is latencyPredictor here but the recommendation was computed from prefillThroughput"},
		{"a base that does not parse", "plugins: [", base, "", never, "the recommendation's own config does not parse"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse([]byte(tc.file), "values.yaml")
			if err != nil {
				t.Fatal(err)
			}
			b := Base{Data: []byte(tc.base), Source: "live.yaml", Targets: []Target{{Plugin: "gate"}}}
			err = f.CheckBase(b, change, mustProfile(t, tc.profile), tc.tokenBarOnly)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("CheckBase = %v, want nil", err)
			case tc.want == "":
			case err == nil || !errors.Is(err, ErrOtherBase):
				t.Fatalf("CheckBase = %v, want a refusal wrapping ErrOtherBase", err)
			case !strings.Contains(err.Error(), tc.want):
				t.Errorf("CheckBase = %q, want it to say %q", err, tc.want)
			}
		})
	}
}
