// Package prefix is the prefix tree every simulated prompt is a path in, and
// the per-pod block caches over its nodes: the engines' prefix caches and the
// EPP's approximate prefix index.
package prefix

import "fmt"

// Tree is the prefix tree of every prompt the workload produces. A node is
// an immutable run of tokens [start, end) following its parent's; a prompt
// is the path from a root to its last node. Two prompts share block k (of
// any block size) iff they share the node holding the block's last token,
// so caches can work on nodes instead of hashing blocks.
//
// Nodes are reference counted and recycled, so that the tree holds only what
// can still matter and a long run's memory stays flat: a node is held by each
// of its children, each cache entry on it, and each holder outside the tree
// (a request in flight holds its output node, a session its tip, the
// workload's shared prompts and a trace pass their nodes). Add returns a node
// held once for the caller; Release drops a hold, and a node left unheld
// goes to the free list (dropping its hold on its parent). No outcome
// depends on a node's number, only on the tree's shape.
type Tree struct {
	parent []int32
	start  []int32
	end    []int32
	ref    []int32
	free   []int32
}

// Add adds a node of length tokens after parent (-1: a root), held once for
// the caller.
func (t *Tree) Add(parent int32, length int) int32 {
	var s int32
	if parent >= 0 {
		s = t.end[parent]
		t.ref[parent]++
	}
	if n := len(t.free); n > 0 {
		id := t.free[n-1]
		t.free = t.free[:n-1]
		t.parent[id], t.start[id], t.end[id], t.ref[id] = parent, s, s+int32(length), 1
		return id
	}
	t.parent = append(t.parent, parent)
	t.start = append(t.start, s)
	t.end = append(t.end, s+int32(length))
	t.ref = append(t.ref, 1)
	return int32(len(t.parent) - 1)
}

// Hold takes another hold on node n (none for n < 0).
func (t *Tree) Hold(n int32) {
	if n >= 0 {
		t.ref[n]++
	}
}

// Release drops a hold on node n (none for n < 0), recycling it and then
// its ancestors as they become unheld.
func (t *Tree) Release(n int32) {
	for n >= 0 {
		if t.ref[n]--; t.ref[n] > 0 {
			return
		}
		if t.ref[n] < 0 {
			panic(fmt.Sprintf("fleetsim: node %d released more often than held", n))
		}
		t.free = append(t.free, n)
		n = t.parent[n]
	}
}

// Len is the number of node slots (live and free).
func (t *Tree) Len() int { return len(t.parent) }

// Live is the number of held nodes.
func (t *Tree) Live() int { return len(t.parent) - len(t.free) }

// Ref is the number of holds on node n.
func (t *Tree) Ref(n int32) int32 { return t.ref[n] }

// End is the prompt length up to and including node n.
func (t *Tree) End(n int32) int32 { return t.end[n] }

// Blocks is the number of full blocks of size bs whose last token lies in node n.
func (t *Tree) Blocks(n int32, bs int32) int32 { return t.end[n]/bs - t.start[n]/bs }

// Path writes the nodes from the root to leaf into buf.
func (t *Tree) Path(leaf int32, buf []int32) []int32 {
	buf = buf[:0]
	for n := leaf; n >= 0; n = t.parent[n] {
		buf = append(buf, n)
	}
	for i, j := 0, len(buf)-1; i < j; i, j = i+1, j-1 {
		buf[i], buf[j] = buf[j], buf[i]
	}
	return buf
}

// Holds calls hold once for each hold a live node has on its parent.
func (t *Tree) Holds(hold func(n int32)) {
	free := make([]bool, t.Len())
	for _, n := range t.free {
		free[n] = true
	}
	for n := range t.Len() {
		if !free[n] && t.parent[n] >= 0 {
			hold(t.parent[n])
		}
	}
}
