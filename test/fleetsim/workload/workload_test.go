package workload

import (
	"math"
	"testing"

	"github.com/gatetuner/gatetuner/test/fleetsim/prefix"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenarios"
)

// TestEveryArrivalComesAtThePeekedTime pins the workload's contract with the
// simulator: Next consumes exactly the event Peek announced, so a request
// arrives at the peeked time (the simulator enqueues it then), and an event
// that yields nothing — a session turn dropped for outgrowing maxModelLen —
// does not hand over a later request early, past other events. The
// scenarios' long-context classes drop turns; the test requires that they do.
func TestEveryArrivalComesAtThePeekedTime(t *testing.T) {
	for _, name := range []string{"prompt-shift", "trace-drift"} {
		t.Run(name, func(t *testing.T) {
			sc, err := scenarios.Load(name)
			if err != nil {
				t.Fatal(err)
			}
			var tree prefix.Tree
			w, err := New(sc, 11, &tree, false)
			if err != nil {
				t.Fatal(err)
			}
			var arrivals, empty, early int
			last, end := int64(math.MinInt64), int64(sc.Duration())
			for {
				at := w.Peek()
				if at >= end { // a looped trace never ends: the run does
					break
				}
				if at < last {
					t.Fatalf("peek went back in time: %d after %d", at, last)
				}
				last = at
				a, ok := w.Next()
				if !ok {
					empty++
					continue
				}
				arrivals++
				tree.Release(a.Out)
				if a.T != at {
					if early < 5 {
						t.Errorf("arrival %d (session %d turn %d) at %d ns, peeked %d ns (%.3f s later)",
							arrivals, a.Session, a.Turn, a.T, at, float64(a.T-at)/1e9)
					}
					early++
				}
			}
			if err := w.Err(); err != nil {
				t.Fatal(err)
			}
			if early > 0 {
				t.Fatalf("%d of %d arrivals came later than the peeked time", early, arrivals)
			}
			if empty == 0 {
				t.Fatalf("no event yielded nothing in %d arrivals: the scenario drops no turn, the test proves nothing", arrivals)
			}
			t.Logf("%d arrivals, %d events yielding nothing (dropped turns)", arrivals, empty)
		})
	}
}
