package fleetsim

import (
	"math"
	"testing"
)

// TestEveryArrivalComesAtThePeekedTime pins the workload's contract with the
// simulator: next consumes exactly the event peek announced, so a request
// arrives at the peeked time (the simulator enqueues it then), and an event
// that yields nothing — a session turn dropped for outgrowing maxModelLen —
// does not hand over a later request early, past other events. The
// scenarios' long-context classes drop turns; the test requires that they do.
func TestEveryArrivalComesAtThePeekedTime(t *testing.T) {
	for _, name := range []string{"prompt-shift", "trace-drift"} {
		t.Run(name, func(t *testing.T) {
			sc, err := LoadScenario(name)
			if err != nil {
				t.Fatal(err)
			}
			var tree nodeTree
			w, err := newWorkload(sc, 11, &tree, false)
			if err != nil {
				t.Fatal(err)
			}
			var arrivals, empty, early int
			last, end := int64(math.MinInt64), int64(sc.Duration())
			for {
				at := w.peek()
				if at >= end { // a looped trace never ends: the run does
					break
				}
				if at < last {
					t.Fatalf("peek went back in time: %d after %d", at, last)
				}
				last = at
				a, ok := w.next()
				if !ok {
					empty++
					continue
				}
				arrivals++
				tree.release(a.out)
				if a.t != at {
					if early < 5 {
						t.Errorf("arrival %d (session %d turn %d) at %d ns, peeked %d ns (%.3f s later)",
							arrivals, a.session, a.turn, a.t, at, float64(a.t-at)/1e9)
					}
					early++
				}
			}
			if err := w.err(); err != nil {
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
