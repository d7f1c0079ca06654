package fleetsim

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
)

// nodeTree is the prefix tree of every prompt the workload produces. A node
// is an immutable run of tokens [start, end) following its parent's; a
// prompt is the path from a root to its last node. Two prompts share block k
// (of any block size) iff they share the node holding the block's last
// token, so caches can work on nodes instead of hashing blocks.
//
// Nodes are reference counted and recycled, so that the tree holds only what
// can still matter and a long run's memory stays flat: a node is held by each
// of its children, each cache entry on it, and each holder outside the tree
// (a request in flight holds its output node, a session its tip, the
// workload's shared prompts and a trace pass their nodes). add returns a node
// held once for the caller; release drops a hold, and a node left unheld
// goes to the free list (dropping its hold on its parent). No outcome
// depends on a node's number, only on the tree's shape.
type nodeTree struct {
	parent []int32
	start  []int32
	end    []int32
	ref    []int32
	free   []int32
}

func (t *nodeTree) add(parent int32, length int) int32 {
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

// hold takes another hold on node n (none for n < 0).
func (t *nodeTree) hold(n int32) {
	if n >= 0 {
		t.ref[n]++
	}
}

// release drops a hold on node n (none for n < 0), recycling it and then
// its ancestors as they become unheld.
func (t *nodeTree) release(n int32) {
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

// len is the number of node slots (live and free).
func (t *nodeTree) len() int { return len(t.parent) }

// live is the number of held nodes.
func (t *nodeTree) live() int { return len(t.parent) - len(t.free) }

// blocks is the number of full blocks of size bs whose last token lies in node n.
func (t *nodeTree) blocks(n int32, bs int32) int32 { return t.end[n]/bs - t.start[n]/bs }

// path writes the nodes from the root to leaf into buf.
func (t *nodeTree) path(leaf int32, buf []int32) []int32 {
	buf = buf[:0]
	for n := leaf; n >= 0; n = t.parent[n] {
		buf = append(buf, n)
	}
	for i, j := 0, len(buf)-1; i < j; i, j = i+1, j-1 {
		buf[i], buf[j] = buf[j], buf[i]
	}
	return buf
}

// arrival is one request as the workload produces it.
type arrival struct {
	t       int64 // ns, scenario time
	leaf    int32 // last prompt node
	out     int32 // the output's node (child of leaf)
	prompt  int32
	output  int32
	class   int16
	session int64
	turn    int32
}

type session struct {
	id        int64
	class     int16
	tip       int32
	turn      int32
	turnsLeft int32
	pace      float64
}

type pendingTurn struct {
	t   int64
	seq uint64
	s   *session
}

type turnHeap []pendingTurn

func (h turnHeap) Len() int { return len(h) }
func (h turnHeap) Less(i, j int) bool {
	if h[i].t != h[j].t {
		return h[i].t < h[j].t
	}
	return h[i].seq < h[j].seq
}
func (h turnHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *turnHeap) Push(x any)   { *h = append(*h, x.(pendingTurn)) }
func (h *turnHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type poolState struct {
	spec    *PoolSpec
	lengths []int
	cdf     []float64
	// minLive is, with churn, the oldest birth a pick can still return.
	minLive int
}

// dead reports whether item key can never be picked again.
func (ps *poolState) dead(key int) bool {
	return ps != nil && ps.spec.Churn > 0 && key >= 0 && key < ps.minLive
}

func newPool(spec *PoolSpec, r *rand.Rand) *poolState {
	if spec == nil {
		return nil
	}
	ps := &poolState{spec: spec}
	if spec.Count > 0 {
		ps.lengths = make([]int, spec.Count)
		ps.cdf = make([]float64, spec.Count)
		var sum float64
		for i := range ps.lengths {
			ps.lengths[i] = spec.Tokens.SampleInt(r, 1)
			sum += math.Pow(float64(i+1), -spec.Zipf)
			ps.cdf[i] = sum
		}
		for i := range ps.cdf {
			ps.cdf[i] /= sum
		}
	}
	return ps
}

// pick returns an item key, or -1 with a fresh length for a per-session
// item, at scenario time t (ns). With churn, the item at rank r in churn step
// k was born (entered as the hottest) in step k-r; its key is that birth
// step, so every step brings a brand-new item that no cache holds yet.
func (ps *poolState) pick(r *rand.Rand, t int64) (int, int) {
	if ps.spec.Count == 0 {
		return -1, ps.spec.Tokens.SampleInt(r, 1)
	}
	u := r.Float64()
	i := sort.SearchFloat64s(ps.cdf, u)
	if i >= len(ps.cdf) {
		i = len(ps.cdf) - 1
	}
	if ps.spec.Churn > 0 {
		ps.minLive = int(t/int64(ps.spec.Churn)) + 1
		birth := int(t/int64(ps.spec.Churn)) - i + len(ps.cdf)
		return birth, ps.lengths[birth%len(ps.lengths)]
	}
	return i, ps.lengths[i]
}

type classState struct {
	spec    *SessionClass
	sys     *poolState
	doc     *poolState
	sysNode map[int]int32      // system prompt key → node (each held)
	docNode map[[2]int32]int32 // (system prompt key, document key) → node (each held)
	pruneAt int                // prune the maps when they grow past this
}

// prune drops (and releases) the shared prompts a churning pool can never
// pick again, once the maps have doubled since the last prune, so a long
// run's maps stay as large as the live items. Nodes are released in
// number order, so the tree's recycling is the same in every run.
func (cs *classState) prune(tree *nodeTree) {
	if len(cs.sysNode)+len(cs.docNode) <= cs.pruneAt {
		return
	}
	var gone []int32
	for k, n := range cs.sysNode {
		if cs.sys.dead(k) {
			gone = append(gone, n)
			delete(cs.sysNode, k)
		}
	}
	for k, n := range cs.docNode {
		if cs.sys.dead(int(k[0])) || cs.doc.dead(int(k[1])) {
			gone = append(gone, n)
			delete(cs.docNode, k)
		}
	}
	slices.Sort(gone)
	for _, n := range gone {
		tree.release(n)
	}
	cs.pruneAt = 2*(len(cs.sysNode)+len(cs.docNode)) + 64
}

// workload produces the scenario's requests in time order, from its own
// random stream: the same seed gives the same requests whatever the gate
// settings or the fleet do (sessions are open-loop).
type workload struct {
	sc       *Scenario
	r        *rand.Rand
	tree     *nodeTree
	classes  []classState
	phaseEnd []int64 // ns
	live     bool    // the last phase never ends

	pending   turnHeap
	seq       uint64
	nextStart int64 // next session start, ns; math.MaxInt64 when none
	startPh   int   // phase of nextStart's draw
	sessions  int64
	maxLen    int

	trace *traceSource // the trace class, when the scenario has one
}

func newWorkload(sc *Scenario, seed uint64, tree *nodeTree, live bool) (*workload, error) {
	w := &workload{sc: sc, r: rand.New(rand.NewPCG(seed, 0x776f726b6c6f6164)), tree: tree, live: live,
		maxLen: sc.Pods.Engine.MaxModelLen}
	var t int64
	for i := range sc.Phases {
		t += int64(sc.Phases[i].Duration)
		w.phaseEnd = append(w.phaseEnd, t)
	}
	if live {
		w.phaseEnd[len(w.phaseEnd)-1] = math.MaxInt64
	}
	w.classes = make([]classState, len(sc.Classes))
	for i := range sc.Classes {
		c := &sc.Classes[i]
		cs := &w.classes[i]
		cs.spec = c
		cs.sys = newPool(c.SystemPrompt, w.r)
		cs.doc = newPool(c.Document, w.r)
		cs.sysNode = map[int]int32{}
		cs.docNode = map[[2]int32]int32{}
	}
	w.nextStart = 0
	w.drawNextStart(0, 0)
	if sc.Trace != nil {
		var err error
		if w.trace, err = newTraceSource(sc, int16(len(sc.Classes)), tree); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// measure bounds the range whose trace arrivals Truth.Trace counts.
func (w *workload) measure(start, end int64) {
	if w.trace != nil {
		w.trace.measStart, w.trace.measEnd = start, end
	}
}

// err is the trace's read error that ended its arrivals, if any.
func (w *workload) err() error {
	if w.trace != nil {
		return w.trace.err
	}
	return nil
}

// traceTruth is the trace class's truth (nil without one).
func (w *workload) traceTruth() *TraceTruth {
	if w.trace == nil {
		return nil
	}
	return w.trace.truth()
}

// phaseAt returns the phase index holding scenario time t (ns).
func (w *workload) phaseAt(t int64) int {
	for i, e := range w.phaseEnd {
		if t < e {
			return i
		}
	}
	return len(w.phaseEnd) - 1
}

func (w *workload) sessionRate(ph int, t int64) (rate, rmax float64) {
	p := &w.sc.Phases[ph]
	if p.RequestRate <= 0 {
		return 0, 0
	}
	var turns, wsum float64
	for i, wt := range p.Mix {
		turns += wt * w.sc.Classes[i].meanTurns
		wsum += wt
	}
	base := p.RequestRate / (turns / wsum)
	var start float64
	if ph > 0 {
		start = float64(w.phaseEnd[ph-1]) / 1e9
	}
	f, fmax := p.Arrivals.rateFactor(float64(t)/1e9, start)
	return base * f, base * fmax
}

// drawNextStart draws the next session start after t (ns) in phase ph by
// thinning a Poisson process at the phase's maximum rate.
func (w *workload) drawNextStart(t int64, ph int) {
	for {
		if ph >= len(w.phaseEnd) {
			w.nextStart = math.MaxInt64
			return
		}
		_, rmax := w.sessionRate(ph, t)
		if rmax <= 0 {
			if w.phaseEnd[ph] == math.MaxInt64 {
				w.nextStart = math.MaxInt64
				return
			}
			t, ph = w.phaseEnd[ph], ph+1
			continue
		}
		dt := w.r.ExpFloat64() / rmax * 1e9
		if float64(t)+dt >= float64(w.phaseEnd[ph]) {
			t, ph = w.phaseEnd[ph], ph+1
			continue
		}
		t += int64(dt)
		rate, _ := w.sessionRate(ph, t)
		if w.r.Float64()*rmax < rate {
			w.nextStart, w.startPh = t, ph
			return
		}
	}
}

// peek returns the time of the next request (math.MaxInt64 when none).
func (w *workload) peek() int64 {
	if w.trace != nil {
		return min(w.trace.peek(), w.sessionPeek())
	}
	return w.sessionPeek()
}

// sessionPeek is peek for the session classes.
func (w *workload) sessionPeek() int64 {
	// A session start emits its first turn at once; pending turns keep theirs.
	if len(w.pending) > 0 && w.pending[0].t <= w.nextStart {
		return w.pending[0].t
	}
	return w.nextStart
}

// next consumes the event peek announced and returns its request; ok is
// false when the event yields none (a session turn dropped for outgrowing
// maxModelLen) or the workload is over. One event per call, so every request
// comes at the time peek gave: a caller that got nothing peeks again.
func (w *workload) next() (arrival, bool) {
	if w.trace != nil && w.trace.has && w.trace.peek() < w.sessionPeek() {
		return w.trace.pop(), true
	}
	return w.nextSession()
}

// nextSession is next for the session classes: a pending turn, or a session
// start with its first turn.
func (w *workload) nextSession() (arrival, bool) {
	if len(w.pending) > 0 && w.pending[0].t <= w.nextStart {
		pt := heap.Pop(&w.pending).(pendingTurn)
		return w.turn(pt.s, pt.t)
	}
	if w.nextStart == math.MaxInt64 {
		return arrival{}, false
	}
	t, ph := w.nextStart, w.startPh
	s := w.startSession(ph, t)
	w.drawNextStart(t, ph)
	return w.turn(s, t)
}

func (w *workload) startSession(ph int, t int64) *session {
	mix := w.sc.Phases[ph].Mix
	var sum float64
	for _, m := range mix {
		sum += m
	}
	u := w.r.Float64() * sum
	ci := len(mix) - 1
	for i, m := range mix {
		if u < m {
			ci = i
			break
		}
		u -= m
	}
	cs := &w.classes[ci]
	w.sessions++
	s := &session{id: w.sessions, class: int16(ci), tip: -1}
	sys := int32(-1)
	if cs.sys != nil {
		i, n := cs.sys.pick(w.r, t)
		if i < 0 {
			s.tip = w.tree.add(-1, n)
		} else {
			node, ok := cs.sysNode[i]
			if !ok {
				node = w.tree.add(-1, n) // the map's hold
				cs.sysNode[i] = node
			}
			w.tree.hold(node)
			s.tip = node
			sys = int32(i)
		}
	}
	if cs.doc != nil {
		i, n := cs.doc.pick(w.r, t)
		prev := s.tip
		if i < 0 || (s.tip >= 0 && sys < 0) {
			s.tip = w.tree.add(s.tip, n)
		} else {
			key := [2]int32{sys, int32(i)}
			node, ok := cs.docNode[key]
			if !ok {
				node = w.tree.add(s.tip, n) // the map's hold
				cs.docNode[key] = node
			}
			w.tree.hold(node)
			s.tip = node
		}
		w.tree.release(prev)
	}
	cs.prune(w.tree)
	s.turnsLeft = int32(cs.spec.Turns.SampleInt(w.r, 1))
	s.pace = cs.spec.Pace.Sample(w.r)
	return s
}

// turn emits session s's next turn at time t and schedules the one after.
func (w *workload) turn(s *session, t int64) (arrival, bool) {
	c := w.classes[s.class].spec
	ud := &c.UserTokens
	if s.turn == 0 && c.FirstUserTokens != nil {
		ud = c.FirstUserTokens
	}
	user := ud.SampleInt(w.r, 1)
	out := c.OutputTokens.SampleInt(w.r, 1)
	think := c.ThinkSeconds.Sample(w.r) * s.pace
	var base int32
	if s.tip >= 0 {
		base = w.tree.end[s.tip]
	}
	prompt := int(base) + user
	if prompt+out > w.maxLen {
		w.tree.release(s.tip)
		return arrival{}, false // the conversation outgrew the context: it ends
	}
	leaf := w.tree.add(s.tip, user)
	outNode := w.tree.add(leaf, out) // the arrival's hold (the request's)
	w.tree.release(leaf)             // held by outNode
	w.tree.release(s.tip)            // held by leaf
	a := arrival{t: t, leaf: leaf, out: outNode, prompt: int32(prompt), output: int32(out),
		class: s.class, session: s.id, turn: s.turn}
	s.tip = outNode
	s.turn++
	s.turnsLeft--
	if s.turnsLeft <= 0 {
		return a, true // the session ends: no hold on its tip
	}
	w.tree.hold(outNode) // the session's
	next := t + int64(math.Max(think, 0.001)*1e9)
	w.seq++
	heap.Push(&w.pending, pendingTurn{t: next, seq: w.seq, s: s})
	return a, true
}
