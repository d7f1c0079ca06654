package eppconfig

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/gatetuner/gatetuner/gate"
)

// TestVerifyRefusesUnintendedDifferences plans a real edit, then tampers with
// the spliced bytes the way a faulty splice could, and checks that the
// verifier refuses and says what differed. Tampering with comments only is
// not a semantic difference and passes.
func TestVerifyRefusesUnintendedDifferences(t *testing.T) {
	cases := []struct {
		name    string
		sample  string
		change  Change
		old     string // text replaced in the spliced output
		new     string
		wantMsg string // "" when the tampered output must pass
	}{
		{
			name:    "another plugin's value",
			sample:  sampleProduction,
			change:  Change{Set: set(gate.KeyMaxTTFTPenaltyMs, Number(4092))},
			old:     "blockSizeTokens: 256",
			new:     "blockSizeTokens: 512",
			wantMsg: `document 1: plugins[3].parameters.blockSizeTokens: "256" became "512"`,
		},
		{
			name:    "a scheduling profile weight",
			sample:  sampleProduction,
			change:  Change{Set: set(gate.KeyMaxTTFTPenaltyMs, Number(4092))},
			old:     "weight: 6",
			new:     "weight: 7",
			wantMsg: `document 1: schedulingProfiles[0].plugins[2].weight: "6" became "7"`,
		},
		{
			name:    "the edited key written wrong",
			sample:  sampleProduction,
			change:  Change{Set: set(gate.KeyMaxTTFTPenaltyMs, Number(4092))},
			old:     "maxTTFTPenaltyMs: 4092",
			new:     "maxTTFTPenaltyMs: 4093",
			wantMsg: `document 1: plugins[4].parameters.maxTTFTPenaltyMs: "4092" became "4093"`,
		},
		{
			name:    "a sibling key of the edited instance",
			sample:  sampleTwoGates,
			change:  Change{Target: Target{Plugin: "strict-affinity-filter"}, Set: set(gate.KeyMaxTTFTPenaltyMs, Number(2500))},
			old:     "affinityThreshold: 0.99",
			new:     "affinityThreshold: 0.990",
			wantMsg: `document 1: plugins[1].parameters.affinityThreshold: "0.99" became "0.990"`,
		},
		{
			name:    "another ConfigMap data key",
			sample:  sampleChart,
			change:  Change{Set: set(gate.KeyMaxTTFTPenaltyMs, Number(4092))},
			old:     "weight: 1",
			new:     "weight: 2",
			wantMsg: `document 1: data.payload-agnostic.yaml (line 14 of the value): "    weight: 1" became "    weight: 2"`,
		},
		{
			name:    "ConfigMap labels",
			sample:  sampleChart,
			change:  Change{Set: set(gate.KeyMaxTTFTPenaltyMs, Number(4092))},
			old:     "managed-by: Helm",
			new:     "managed-by: Argo",
			wantMsg: `document 1: metadata.labels.app.kubernetes.io/managed-by: "Helm" became "Argo"`,
		},
		{
			name:    "another plugin inside the edited data key",
			sample:  sampleChart,
			change:  Change{Set: set(gate.KeyMaxTTFTPenaltyMs, Number(4092))},
			old:     "blockSizeTokens: 64",
			new:     "blockSizeTokens: 65",
			wantMsg: `document 1, data key "default-plugins.yaml": plugins[5].parameters.blockSizeTokens: "64" became "65"`,
		},
		{
			name:   "comments only",
			sample: sampleChart,
			change: Change{Set: set(gate.KeyMaxTTFTPenaltyMs, Number(4092))},
			old:    "# tok/s, calibrate.sh",
			new:    "# tokens/s, calibrate.sh",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse(readSample(t, tc.sample), tc.sample)
			if err != nil {
				t.Fatal(err)
			}
			in, err := f.Select(tc.change.Target)
			if err != nil {
				t.Fatal(err)
			}
			var p plan
			if err := p.instance(in, tc.change.Set, nil); err != nil {
				t.Fatal(err)
			}
			out, err := applySplices(f.Bytes(), p.splices)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(out, []byte(tc.old)) {
				t.Fatalf("%q not in the spliced output", tc.old)
			}
			out = bytes.Replace(out, []byte(tc.old), []byte(tc.new), 1)
			g, err := Parse(out, tc.sample)
			if err != nil {
				t.Fatal(err)
			}
			err = f.verify(g, p.expects)
			if tc.wantMsg == "" {
				if err != nil {
					t.Fatalf("verify refused a comment-only difference: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrUnintended) {
				t.Fatalf("verify = %v, want ErrUnintended", err)
			}
			if !strings.HasSuffix(err.Error(), tc.wantMsg) {
				t.Errorf("error %q\ndoes not end with %q", err, tc.wantMsg)
			}
		})
	}
}
