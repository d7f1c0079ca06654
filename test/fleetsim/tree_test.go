package fleetsim

import (
	"context"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/test/fleetsim/internal/fleettest"
)

// wantRefs recounts every node's holds from the holders themselves: its
// children, the cache entries on it, the requests in flight, the sessions,
// the shared prompts and the trace pass.
func wantRefs(s *sim) []int32 {
	want := make([]int32, s.tree.Len())
	hold := func(n int32) { want[n]++ }
	s.tree.Holds(hold)
	s.ec.Holds(hold)
	for i := range s.epp.Replicas {
		s.epp.Replicas[i].Index.Holds(hold)
	}
	for _, p := range s.pods {
		p.Holds(hold)
	}
	s.wl.Holds(hold)
	return want
}

func TestPrefixTreeHoldsExactlyWhatItsHoldersHold(t *testing.T) {
	sc := fleettest.Load(t, "trace-drift")
	for i := range sc.Phases {
		sc.Phases[i].Duration = 4 * time.Minute
	}
	s, err := newSim(sc, Options{Seed: 3}, false)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var grown int
	for step, at := 0, s.runStart; at < s.runEnd; step++ {
		at = min(at+int64(2*time.Minute), s.runEnd)
		if err := s.advance(ctx, at); err != nil {
			t.Fatal(err)
		}
		if step == 5 {
			s.epp.Restart() // the indexes drop every entry
		}
		want := wantRefs(s)
		for n := range want {
			if s.tree.Ref(int32(n)) != want[n] {
				t.Fatalf("at %v node %d: ref %d, its holders hold it %d times", time.Duration(at), n, s.tree.Ref(int32(n)), want[n])
			}
		}
		grown = max(grown, s.tree.Len())
	}
	if got := s.tree.Len() - s.tree.Live(); got == 0 {
		t.Errorf("no node was recycled in %v of trace-drift (%d slots)", time.Duration(s.runEnd), grown)
	}
	tr := s.wl.TraceTruth()
	if tr.Passes < 2 {
		t.Errorf("the run saw %d trace passes, want >= 2 (a pass's end must release its nodes)", tr.Passes)
	}
}
