package prefix

import (
	"testing"
)

func TestReleasingAnUnheldNodePanics(t *testing.T) {
	var tr Tree
	root := tr.Add(-1, 10)
	leaf := tr.Add(root, 5)
	tr.Release(root) // still held by leaf
	if tr.Live() != 2 {
		t.Fatalf("live %d, want 2", tr.Live())
	}
	tr.Release(leaf) // frees leaf, then root
	if tr.Live() != 0 {
		t.Fatalf("live %d, want 0", tr.Live())
	}
	if n := tr.Add(-1, 3); n != root {
		t.Errorf("a new node got slot %d, want the recycled slot %d", n, root)
	}
	defer func() {
		if recover() == nil {
			t.Error("releasing a free node did not panic")
		}
	}()
	tr.Release(leaf)
}
