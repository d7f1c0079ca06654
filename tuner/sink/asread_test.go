package sink

import (
	"os"
	"strings"
	"testing"

	"github.com/gatetuner/gatetuner/gate"
)

// TestAsReadHoldsAWriteOverAnEarlierRead: a write applied over a fresh read
// carrying an earlier read's owned values holds changed-externally when the
// owned keys changed in between, and writes when they did not.
func TestAsReadHoldsAWriteOverAnEarlierRead(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    bool
		outcome Outcome
	}{
		{name: "unchanged since the earlier read", outcome: OutcomeApplied},
		{name: "owned key edited since the earlier read", edit: true, outcome: OutcomeHeld},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, path := newFileTarget(t, "epp-config-production-commented.yaml", nil, gate.ProfileRouter202608, Options{})
			earlier := mustRead(t, s)
			if tc.edit {
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(strings.Replace(string(b), "maxTTFTPenaltyMs: 30000", "maxTTFTPenaltyMs: 25000", 1)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			fresh := mustRead(t, s)
			res := mustApply(t, s, fresh.AsRead(earlier), Meta{}, set("prefill-affinity", gate.KeyMaxTTFTPenaltyMs, 1000))
			if res.Outcome != tc.outcome {
				t.Fatalf("outcome %s (%+v), want %s", res.Outcome, res.Hold, tc.outcome)
			}
			if tc.edit && (res.Hold.Reason != HoldChangedExternally || !strings.Contains(res.Hold.Message, "25000")) {
				t.Errorf("hold %+v, want changed-externally naming the new value", res.Hold)
			}
		})
	}
}
