package prefix

// Cache holds, per pod, which blocks of which prefix-tree nodes are
// cached. An entry (pod, node) caches the first `blocks` of the node's full
// blocks (a contiguous run from the node's start: caches fill prefixes and
// evict from the tail). Entries with ref > 0 are pinned (held by running
// requests); the others sit in the pod's LRU list, most recent at the head.
//
// The same structure serves the engines' prefix caches (block size = vLLM's,
// capacity = the KV blocks no running request holds) and the EPP's
// approximate prefix index (block size >= 64, a fixed LRU capacity per pod,
// no pins).
//
// Each entry holds its node in the tree, so a node outlives its last
// request for as long as a cache keeps any of its blocks.
type Cache struct {
	bs       int32
	tree     *Tree
	entries  []cacheEntry
	free     []int32
	nodeHead []int32 // per node: first entry, -1
	pods     []podLRU
}

type cacheEntry struct {
	node       int32
	pod        int32
	blocks     int32
	ref        int32
	prev, next int32 // LRU links, -1
	nextInNode int32
	inLRU      bool
}

type podLRU struct {
	head, tail int32 // head = most recently used
	lruBlocks  int64 // blocks of entries in the list (unpinned)
	pinned     int64 // blocks of entries with ref > 0
}

// NewCache returns an empty cache of blocks of bs tokens for pods pods.
func NewCache(bs int32, pods int, tree *Tree) *Cache {
	c := &Cache{bs: bs, tree: tree, pods: make([]podLRU, pods)}
	for i := range c.pods {
		c.pods[i] = podLRU{head: -1, tail: -1}
	}
	return c
}

func (c *Cache) growNodes() {
	for len(c.nodeHead) < c.tree.Len() {
		c.nodeHead = append(c.nodeHead, -1)
	}
}

// Find returns pod's entry for node, or -1.
func (c *Cache) Find(pod int32, node int32) int32 {
	if int(node) >= len(c.nodeHead) {
		return -1
	}
	for i := c.nodeHead[node]; i >= 0; i = c.entries[i].nextInNode {
		if c.entries[i].pod == pod {
			return i
		}
	}
	return -1
}

// Cached returns how many of node's blocks pod caches.
func (c *Cache) Cached(pod, node int32) int32 {
	if i := c.Find(pod, node); i >= 0 {
		return c.entries[i].blocks
	}
	return 0
}

// Create adds an empty, unpinned entry that is not yet in the LRU list.
func (c *Cache) Create(pod, node int32) int32 {
	c.growNodes()
	var i int32
	if n := len(c.free); n > 0 {
		i = c.free[n-1]
		c.free = c.free[:n-1]
	} else {
		c.entries = append(c.entries, cacheEntry{})
		i = int32(len(c.entries) - 1)
	}
	c.entries[i] = cacheEntry{node: node, pod: pod, prev: -1, next: -1, nextInNode: c.nodeHead[node]}
	c.nodeHead[node] = i
	c.tree.Hold(node)
	return i
}

func (c *Cache) remove(i int32) {
	e := &c.entries[i]
	// Unlink from the node chain.
	p := &c.nodeHead[e.node]
	for *p != i {
		p = &c.entries[*p].nextInNode
	}
	*p = e.nextInNode
	c.free = append(c.free, i)
	c.tree.Release(e.node)
}

func (c *Cache) unlinkLRU(i int32) {
	e := &c.entries[i]
	if !e.inLRU {
		return
	}
	e.inLRU = false
	l := &c.pods[e.pod]
	if e.prev >= 0 {
		c.entries[e.prev].next = e.next
	} else {
		l.head = e.next
	}
	if e.next >= 0 {
		c.entries[e.next].prev = e.prev
	} else {
		l.tail = e.prev
	}
	e.prev, e.next = -1, -1
	l.lruBlocks -= int64(e.blocks)
}

// PushMRU makes entry i the most recently used of its pod's evictable
// entries.
func (c *Cache) PushMRU(i int32) {
	e := &c.entries[i]
	l := &c.pods[e.pod]
	e.inLRU = true
	e.prev, e.next = -1, l.head
	if l.head >= 0 {
		c.entries[l.head].prev = i
	} else {
		l.tail = i
	}
	l.head = i
	l.lruBlocks += int64(e.blocks)
}

// EvictLRU frees up to n blocks from pod's least recently used unpinned
// entries (trimming the last one's tail) and returns how many it freed.
func (c *Cache) EvictLRU(pod int32, n int64) int64 {
	var freed int64
	l := &c.pods[pod]
	for freed < n && l.tail >= 0 {
		i := l.tail
		e := &c.entries[i]
		if int64(e.blocks) <= n-freed {
			freed += int64(e.blocks)
			c.unlinkLRU(i)
			c.remove(i)
			continue
		}
		cut := int32(n - freed)
		e.blocks -= cut
		l.lruBlocks -= int64(cut)
		freed += int64(cut)
	}
	return freed
}

// Clear drops every entry (an EPP restart losing its index).
func (c *Cache) Clear() {
	for n, i := range c.nodeHead {
		for ; i >= 0; i = c.entries[i].nextInNode {
			c.tree.Release(int32(n))
		}
	}
	c.entries = c.entries[:0]
	c.free = c.free[:0]
	for i := range c.nodeHead {
		c.nodeHead[i] = -1
	}
	for i := range c.pods {
		c.pods[i] = podLRU{head: -1, tail: -1}
	}
}

// Blocks is entry i's cached blocks.
func (c *Cache) Blocks(i int32) int32 { return c.entries[i].blocks }

// SetBlocks sets entry i's cached blocks (an entry not yet in the LRU list).
func (c *Cache) SetBlocks(i, n int32) { c.entries[i].blocks = n }

// Pinned is the blocks of pod's pinned entries.
func (c *Cache) Pinned(pod int32) int64 { return c.pods[pod].pinned }

// LRUBlocks is the blocks of pod's evictable entries.
func (c *Cache) LRUBlocks(pod int32) int64 { return c.pods[pod].lruBlocks }

// Len is the number of entries.
func (c *Cache) Len() int { return len(c.entries) - len(c.free) }

// Holds calls hold once for each entry's hold on its node.
func (c *Cache) Holds(hold func(n int32)) {
	for n, i := range c.nodeHead {
		for ; i >= 0; i = c.entries[i].nextInNode {
			hold(int32(n))
		}
	}
}

// --- engine use: pins ---

// Pin takes a reference on entry i (removing it from the LRU list when it
// becomes pinned).
func (c *Cache) Pin(i int32) {
	e := &c.entries[i]
	if e.ref == 0 {
		c.unlinkLRU(i)
		c.pods[e.pod].pinned += int64(e.blocks)
	}
	e.ref++
}

// Unpin drops a reference; an entry no longer held becomes the most recently
// used of its pod's evictable entries.
func (c *Cache) Unpin(i int32) {
	e := &c.entries[i]
	e.ref--
	if e.ref == 0 {
		c.pods[e.pod].pinned -= int64(e.blocks)
		c.PushMRU(i)
	}
}

// Grow raises entry i's cached blocks to n, returning the number added.
func (c *Cache) Grow(i int32, n int32) int32 {
	e := &c.entries[i]
	if n <= e.blocks {
		return 0
	}
	d := n - e.blocks
	e.blocks = n
	if e.ref > 0 {
		c.pods[e.pod].pinned += int64(d)
	} else if e.inLRU {
		c.pods[e.pod].lruBlocks += int64(d)
	}
	return d
}

// --- EPP index use: touch ---

// Record marks the first `blocks` blocks of node as cached on pod and makes
// the entry the most recently used.
func (c *Cache) Record(pod, node, blocks int32) {
	i := c.Find(pod, node)
	if i < 0 {
		i = c.Create(pod, node)
	} else {
		c.unlinkLRU(i)
	}
	if blocks > c.entries[i].blocks {
		c.entries[i].blocks = blocks
	}
	c.PushMRU(i)
}
