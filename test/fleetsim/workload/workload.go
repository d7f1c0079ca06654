// Package workload produces a scenario's requests in time order: sessions
// of the scenario's classes arriving per phase, and a Mooncake-format trace
// replayed beside them, every prompt a path in a prefix tree.
package workload

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"slices"
	"sort"

	"github.com/gatetuner/gatetuner/test/fleetsim/prefix"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
)

// Arrival is one request as the workload produces it.
type Arrival struct {
	T       int64 // ns, scenario time
	Leaf    int32 // last prompt node
	Out     int32 // the output's node (child of Leaf), held for the request
	Prompt  int32
	Output  int32
	Class   int16
	Session int64
	Turn    int32
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
	spec    *scenario.PoolSpec
	lengths []int
	cdf     []float64
	// minLive is, with churn, the oldest birth a pick can still return.
	minLive int
}

// dead reports whether item key can never be picked again.
func (ps *poolState) dead(key int) bool {
	return ps != nil && ps.spec.Churn > 0 && key >= 0 && key < ps.minLive
}

func newPool(spec *scenario.PoolSpec, r *rand.Rand) *poolState {
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
	spec    *scenario.SessionClass
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
func (cs *classState) prune(tree *prefix.Tree) {
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
		tree.Release(n)
	}
	cs.pruneAt = 2*(len(cs.sysNode)+len(cs.docNode)) + 64
}

// Workload produces the scenario's requests in time order, from its own
// random stream: the same seed gives the same requests whatever the gate
// settings or the fleet do (sessions are open-loop).
type Workload struct {
	sc       *scenario.Scenario
	r        *rand.Rand
	tree     *prefix.Tree
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

// New returns the workload of sc for seed, building prompts in tree; with
// live the last phase never ends.
func New(sc *scenario.Scenario, seed uint64, tree *prefix.Tree, live bool) (*Workload, error) {
	w := &Workload{sc: sc, r: rand.New(rand.NewPCG(seed, 0x776f726b6c6f6164)), tree: tree, live: live,
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

// Measure bounds the range whose trace arrivals TraceTruth counts.
func (w *Workload) Measure(start, end int64) {
	if w.trace != nil {
		w.trace.measStart, w.trace.measEnd = start, end
	}
}

// Err is the trace's read error that ended its arrivals, if any.
func (w *Workload) Err() error {
	if w.trace != nil {
		return w.trace.err
	}
	return nil
}

// TraceTruth is the trace class's truth (nil without one).
func (w *Workload) TraceTruth() *TraceTruth {
	if w.trace == nil {
		return nil
	}
	return w.trace.truth()
}

// phaseAt returns the phase index holding scenario time t (ns).
func (w *Workload) phaseAt(t int64) int {
	for i, e := range w.phaseEnd {
		if t < e {
			return i
		}
	}
	return len(w.phaseEnd) - 1
}

func (w *Workload) sessionRate(ph int, t int64) (rate, rmax float64) {
	p := &w.sc.Phases[ph]
	if p.RequestRate <= 0 {
		return 0, 0
	}
	var turns, wsum float64
	for i, wt := range p.Mix {
		turns += wt * w.sc.Classes[i].MeanTurns()
		wsum += wt
	}
	base := p.RequestRate / (turns / wsum)
	var start float64
	if ph > 0 {
		start = float64(w.phaseEnd[ph-1]) / 1e9
	}
	f, fmax := rateFactor(&p.Arrivals, float64(t)/1e9, start)
	return base * f, base * fmax
}

// drawNextStart draws the next session start after t (ns) in phase ph by
// thinning a Poisson process at the phase's maximum rate.
func (w *Workload) drawNextStart(t int64, ph int) {
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

// Peek returns the time of the next request (math.MaxInt64 when none).
func (w *Workload) Peek() int64 {
	if w.trace != nil {
		return min(w.trace.peek(), w.sessionPeek())
	}
	return w.sessionPeek()
}

// sessionPeek is peek for the session classes.
func (w *Workload) sessionPeek() int64 {
	// A session start emits its first turn at once; pending turns keep theirs.
	if len(w.pending) > 0 && w.pending[0].t <= w.nextStart {
		return w.pending[0].t
	}
	return w.nextStart
}

// Next consumes the event Peek announced and returns its request; ok is
// false when the event yields none (a session turn dropped for outgrowing
// maxModelLen) or the workload is over. One event per call, so every request
// comes at the time Peek gave: a caller that got nothing peeks again.
func (w *Workload) Next() (Arrival, bool) {
	if w.trace != nil && w.trace.has && w.trace.peek() < w.sessionPeek() {
		return w.trace.pop(), true
	}
	return w.nextSession()
}

// nextSession is next for the session classes: a pending turn, or a session
// start with its first turn.
func (w *Workload) nextSession() (Arrival, bool) {
	if len(w.pending) > 0 && w.pending[0].t <= w.nextStart {
		pt := heap.Pop(&w.pending).(pendingTurn)
		return w.turn(pt.s, pt.t)
	}
	if w.nextStart == math.MaxInt64 {
		return Arrival{}, false
	}
	t, ph := w.nextStart, w.startPh
	s := w.startSession(ph, t)
	w.drawNextStart(t, ph)
	return w.turn(s, t)
}

func (w *Workload) startSession(ph int, t int64) *session {
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
			s.tip = w.tree.Add(-1, n)
		} else {
			node, ok := cs.sysNode[i]
			if !ok {
				node = w.tree.Add(-1, n) // the map's hold
				cs.sysNode[i] = node
			}
			w.tree.Hold(node)
			s.tip = node
			sys = int32(i)
		}
	}
	if cs.doc != nil {
		i, n := cs.doc.pick(w.r, t)
		prev := s.tip
		if i < 0 || (s.tip >= 0 && sys < 0) {
			s.tip = w.tree.Add(s.tip, n)
		} else {
			key := [2]int32{sys, int32(i)}
			node, ok := cs.docNode[key]
			if !ok {
				node = w.tree.Add(s.tip, n) // the map's hold
				cs.docNode[key] = node
			}
			w.tree.Hold(node)
			s.tip = node
		}
		w.tree.Release(prev)
	}
	cs.prune(w.tree)
	s.turnsLeft = int32(cs.spec.Turns.SampleInt(w.r, 1))
	s.pace = cs.spec.Pace.Sample(w.r)
	return s
}

// turn emits session s's next turn at time t and schedules the one after.
func (w *Workload) turn(s *session, t int64) (Arrival, bool) {
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
		base = w.tree.End(s.tip)
	}
	prompt := int(base) + user
	if prompt+out > w.maxLen {
		w.tree.Release(s.tip)
		return Arrival{}, false // the conversation outgrew the context: it ends
	}
	leaf := w.tree.Add(s.tip, user)
	outNode := w.tree.Add(leaf, out) // the arrival's hold (the request's)
	w.tree.Release(leaf)             // held by outNode
	w.tree.Release(s.tip)            // held by leaf
	a := Arrival{T: t, Leaf: leaf, Out: outNode, Prompt: int32(prompt), Output: int32(out),
		Class: s.class, Session: s.id, Turn: s.turn}
	s.tip = outNode
	s.turn++
	s.turnsLeft--
	if s.turnsLeft <= 0 {
		return a, true // the session ends: no hold on its tip
	}
	w.tree.Hold(outNode) // the session's
	next := t + int64(math.Max(think, 0.001)*1e9)
	w.seq++
	heap.Push(&w.pending, pendingTurn{t: next, seq: w.seq, s: s})
	return a, true
}

// Holds calls hold once for each hold the workload has on a prefix-tree
// node: its sessions' tips, its classes' shared prompts and the trace pass's
// nodes (the pending arrival's included).
func (w *Workload) Holds(hold func(n int32)) {
	for _, pt := range w.pending {
		hold(pt.s.tip)
	}
	for _, cs := range w.classes {
		for _, n := range cs.sysNode {
			hold(n)
		}
		for _, n := range cs.docNode {
			hold(n)
		}
	}
	if tr := w.trace; tr != nil {
		for _, n := range tr.held {
			hold(n)
		}
		if tr.has {
			hold(tr.next.Out)
		}
	}
}

// rateFactor is the arrival modulation at scenario time t (seconds) in a
// phase starting at start, and its maximum.
func rateFactor(a *scenario.ArrivalSpec, t, start float64) (f, fmax float64) {
	switch a.Process {
	case scenario.ArrivalBursts:
		every, dur := a.BurstEvery.Seconds(), a.BurstDuration.Seconds()
		frac := dur / every
		base := 1 / (1 + (a.BurstFactor-1)*frac)
		if math.Mod(t-start, every) < dur {
			return base * a.BurstFactor, base * a.BurstFactor
		}
		return base, base * a.BurstFactor
	case scenario.ArrivalDiurnal:
		amp := (a.PeakToTrough - 1) / (a.PeakToTrough + 1)
		return 1 + amp*math.Sin(2*math.Pi*t/a.Period.Seconds()), 1 + amp
	}
	return 1, 1
}
