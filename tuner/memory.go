package tuner

import (
	"sync"

	"github.com/gatetuner/gatetuner/tuner/decide"
)

// Memory is what one target's cycles carry from one to the next: the
// decision's carry (the shadow replay built so far and the end of the last
// counted window), the completed spans' estimates, and the Events last
// announced. A cycle is passed its target's Memory and updates it.
type Memory struct {
	carry decide.Carry
	// days holds the completed spans' estimates, bounded by the history
	// (spans the history left are dropped each cycle).
	days map[spanKey]cachedSpan
	// announced is the recommendation hash whose awaiting approval was last
	// announced in an Event (approve mode).
	announced string
	// joinAnnounced are the join reasons last announced in Events
	// (joinSeen: some were, or their clearing was).
	joinAnnounced []string
	joinSeen      bool
}

// Memories are the per-target memories of one runner (the daemon's, or a
// Tuner's own for Cycle and CycleGroup). A cycle takes its target's memory
// and puts it back when it ends: two cycles of one target at once never
// share one — the later starts empty, as after a daemon restart, and the
// one that ends last is kept.
type Memories struct {
	mu sync.Mutex
	m  map[string]*Memory
}

// take removes and returns target's memory (a new one when there is none).
func (ms *Memories) take(target string) *Memory {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	m, ok := ms.m[target]
	if !ok {
		return &Memory{}
	}
	delete(ms.m, target)
	return m
}

// put keeps m as target's memory.
func (ms *Memories) put(target string, m *Memory) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.m == nil {
		ms.m = map[string]*Memory{}
	}
	ms.m[target] = m
}
