package decide

import (
	"testing"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/eppconfig"
)

// TestRecommendationHashCoversOnlyTheWrittenChange pins that the hash
// follows what would be written — target, instance, keys and rendered
// values — and nothing else.
func TestRecommendationHashCoversOnlyTheWrittenChange(t *testing.T) {
	ch := func(plugin string, kv ...any) []eppconfig.Change {
		c := eppconfig.Change{Target: eppconfig.Target{Plugin: plugin}, Set: map[gate.Key]eppconfig.Value{}}
		for i := 0; i < len(kv); i += 2 {
			c.Set[kv[i].(gate.Key)] = eppconfig.Number(kv[i+1].(float64))
		}
		return []eppconfig.Change{c}
	}
	base := recHash("t", ch("p", gate.KeyMaxTTFTPenaltyMs, 5000.0, gate.KeyPeakPrefillThroughput, 9000.0))
	for _, tc := range []struct {
		name string
		got  string
		same bool
	}{
		{"the same change is the same hash", recHash("t", ch("p", gate.KeyPeakPrefillThroughput, 9000.0, gate.KeyMaxTTFTPenaltyMs, 5000.0)), true},
		{"another value is another hash", recHash("t", ch("p", gate.KeyMaxTTFTPenaltyMs, 5000.5, gate.KeyPeakPrefillThroughput, 9000.0)), false},
		{"another key set is another hash", recHash("t", ch("p", gate.KeyMaxTTFTPenaltyMs, 5000.0)), false},
		{"another instance is another hash", recHash("t", ch("q", gate.KeyMaxTTFTPenaltyMs, 5000.0, gate.KeyPeakPrefillThroughput, 9000.0)), false},
		{"another target is another hash", recHash("u", ch("p", gate.KeyMaxTTFTPenaltyMs, 5000.0, gate.KeyPeakPrefillThroughput, 9000.0)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if (tc.got == base) != tc.same || len(tc.got) != 16 {
				t.Errorf("hash %s vs %s, want same=%v", tc.got, base, tc.same)
			}
		})
	}
	if h := recHash("t", ch("p")); h != "" {
		t.Errorf("no change hashed as %q, want empty", h)
	}
}
