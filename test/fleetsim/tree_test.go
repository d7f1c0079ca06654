package fleetsim

import (
	"context"
	"testing"
	"time"
)

// wantRefs recounts every node's holds from the holders themselves: its
// children, the cache entries on it, the requests in flight, the sessions,
// the shared prompts and the trace pass.
func wantRefs(s *sim) []int32 {
	t := &s.tree
	free := make([]bool, t.len())
	for _, n := range t.free {
		free[n] = true
	}
	want := make([]int32, t.len())
	for n := range t.len() {
		if !free[n] && t.parent[n] >= 0 {
			want[t.parent[n]]++
		}
	}
	caches := []*blockCache{s.ec}
	for i := range s.epp.reps {
		caches = append(caches, s.epp.reps[i].index)
	}
	for _, c := range caches {
		for n, i := range c.nodeHead {
			for ; i >= 0; i = c.entries[i].nextInNode {
				want[n]++
			}
		}
	}
	for _, p := range s.pods {
		for r := p.runHead; r != nil; r = r.next {
			want[r.out]++
		}
		q := &p.waiting
		for i := range q.size {
			want[q.buf[(q.head+i)%len(q.buf)].out]++
		}
	}
	for _, pt := range s.wl.pending {
		want[pt.s.tip]++
	}
	for _, cs := range s.wl.classes {
		for _, n := range cs.sysNode {
			want[n]++
		}
		for _, n := range cs.docNode {
			want[n]++
		}
	}
	if tr := s.wl.trace; tr != nil {
		for _, n := range tr.held {
			want[n]++
		}
		if tr.has {
			want[tr.next.out]++
		}
	}
	return want
}

func TestPrefixTreeHoldsExactlyWhatItsHoldersHold(t *testing.T) {
	sc := mustLoad(t, "trace-drift")
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
			s.epp.restart() // the indexes drop every entry
		}
		want := wantRefs(s)
		for n := range want {
			if s.tree.ref[n] != want[n] {
				t.Fatalf("at %v node %d: ref %d, its holders hold it %d times", time.Duration(at), n, s.tree.ref[n], want[n])
			}
		}
		grown = max(grown, s.tree.len())
	}
	if got := s.tree.len() - s.tree.live(); got == 0 {
		t.Errorf("no node was recycled in %v of trace-drift (%d slots)", time.Duration(s.runEnd), grown)
	}
	tr := s.wl.traceTruth()
	if tr.Passes < 2 {
		t.Errorf("the run saw %d trace passes, want >= 2 (a pass's end must release its nodes)", tr.Passes)
	}
}

func TestReleasingAnUnheldNodePanics(t *testing.T) {
	var tr nodeTree
	root := tr.add(-1, 10)
	leaf := tr.add(root, 5)
	tr.release(root) // still held by leaf
	if tr.live() != 2 {
		t.Fatalf("live %d, want 2", tr.live())
	}
	tr.release(leaf) // frees leaf, then root
	if tr.live() != 0 {
		t.Fatalf("live %d, want 0", tr.live())
	}
	if n := tr.add(-1, 3); n != root {
		t.Errorf("a new node got slot %d, want the recycled slot %d", n, root)
	}
	defer func() {
		if recover() == nil {
			t.Error("releasing a free node did not panic")
		}
	}()
	tr.release(leaf)
}
