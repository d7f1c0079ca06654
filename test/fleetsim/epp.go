package fleetsim

import (
	"math/rand/v2"

	"github.com/gatetuner/gatetuner/gate"
)

// epp is the endpoint picker: the approximate prefix producer (an index of
// what it routed where), the in-flight load producer, the gate and a picker.
// With several replicas each has its own index and in-flight counters;
// requests alternate among them.
type epp struct {
	tree     *nodeTree
	settings gate.Settings
	index    *blockCache // replica 0's
	bs       int32
	capacity int64
	maxBlk   int32
	npods    int
	// byRequests breaks in-flight token ties by in-flight requests.
	byRequests bool
	// synced: the gate sees the in-flight sum over replicas.
	synced bool

	// In-flight load summed over replicas: uncached prompt tokens until the
	// first token, requests until the response ends.
	tokens []int64
	reqs   []int64
	epoch  uint32

	reps []eppReplica
	// pd is the P/D routing state (nil without disaggregation).
	pd *eppPD
	// active marks the endpoints in the datastore (nil: all, always);
	// pool and poolEps are the candidates' scratch.
	active  []bool
	pool    []int
	poolEps []gate.Endpoint

	eps     []gate.Endpoint
	kept    []int
	matched []int32
	alive   []int32
	path    []int32
	needs   []int32
}

// eppReplica is one EPP pod: its prefix index, the in-flight load it
// counted itself (what its gauges show), which endpoints have in-flight
// series, and its metrics.
type eppReplica struct {
	index   *blockCache
	tokens  []int64 // the fleet's slices with one replica
	reqs    []int64
	seen    []bool
	explore *rand.Rand
	m       eppMetrics
}

func newEPP(sc *Scenario, tree *nodeTree, seed uint64, n, replicas int, synced bool) *epp {
	pi := sc.EPP.PrefixIndex
	e := &epp{
		tree:       tree,
		settings:   sc.EPP.Settings,
		bs:         int32(pi.BlockSizeTokens),
		capacity:   int64(pi.LRUCapacityPerServer),
		maxBlk:     int32(pi.MaxPrefixBlocksToMatch),
		npods:      n,
		byRequests: sc.EPP.Picker == PickerLeastTokensThenRequests,
		synced:     synced || replicas == 1,
		tokens:     make([]int64, n),
		reqs:       make([]int64, n),
		eps:        make([]gate.Endpoint, n),
		matched:    make([]int32, n),
		alive:      make([]int32, 0, n),
	}
	for k := 0; k < replicas; k++ {
		rp := eppReplica{index: newBlockCache(e.bs, n, tree), tokens: e.tokens, reqs: e.reqs, seen: make([]bool, n),
			explore: rand.New(rand.NewPCG(seed+uint64(k), 0x6578706c6f7265))}
		if replicas > 1 {
			rp.tokens, rp.reqs = make([]int64, n), make([]int64, n)
		}
		rp.m.init(n)
		e.reps = append(e.reps, rp)
	}
	e.index = e.reps[0].index
	return e
}

// restart models an EPP pod restart: the prefix index and the in-flight
// accounting start empty; requests routed by the old pod are no longer
// counted.
func (e *epp) restart() {
	for k := range e.reps {
		rp := &e.reps[k]
		rp.index.clear()
		for i := range rp.tokens {
			rp.tokens[i], rp.reqs[i], rp.seen[i] = 0, 0, false
		}
	}
	for i := range e.tokens {
		e.tokens[i], e.reqs[i] = 0, 0
	}
	e.epoch++
}

// replica is the EPP replica request id goes to.
func (e *epp) replica(id int64) int { return int(id % int64(len(e.reps))) }

// match fills e.matched with each pod's matched blocks for the prompt ending
// at leaf and returns TotalBlocks and the tokens beyond the indexed cap.
func (e *epp) match(index *blockCache, leaf int32, prompt int32) (total int32, beyond int64) {
	bs := e.bs
	total = ceilDiv(prompt, bs)
	if e.maxBlk > 0 && total > e.maxBlk {
		total = e.maxBlk
		beyond = int64(prompt) - int64(total)*int64(bs)
	}
	for i := range e.matched {
		e.matched[i] = 0
	}
	e.alive = e.alive[:0]
	for i := 0; i < e.npods; i++ {
		e.alive = append(e.alive, int32(i))
	}
	e.path = e.tree.path(leaf, e.path)
	var cum int32
	for _, n := range e.path {
		need := e.tree.blocks(n, bs)
		if need == 0 {
			continue
		}
		if e.maxBlk > 0 && cum+need > e.maxBlk {
			need = e.maxBlk - cum
		}
		cum += need
		keep := e.alive[:0]
		for _, p := range e.alive {
			have := min(index.cached(p, n), need)
			e.matched[p] += have
			if have == need {
				keep = append(keep, p)
			}
		}
		e.alive = keep
		if len(e.alive) == 0 || (e.maxBlk > 0 && cum >= e.maxBlk) {
			break
		}
	}
	return total, beyond
}

// record remembers that the prompt ending at leaf went to pod: its blocks
// (up to the cap) become the pod's most recent, the root last, so the tail
// ages out first.
func (e *epp) record(index *blockCache, pod int32, leaf int32) {
	e.path = e.tree.path(leaf, e.path)
	e.needs = e.needs[:0]
	var cum int32
	for _, n := range e.path {
		need := e.tree.blocks(n, e.bs)
		if e.maxBlk > 0 && cum+need > e.maxBlk {
			need = e.maxBlk - cum
		}
		e.needs = append(e.needs, need)
		cum += need
		if e.maxBlk > 0 && cum >= e.maxBlk {
			break
		}
	}
	for i := len(e.needs) - 1; i >= 0; i-- {
		if e.needs[i] > 0 {
			index.record(pod, e.path[i], e.needs[i])
		}
	}
	l := &index.pods[pod]
	if l.lruBlocks > e.capacity {
		index.evictLRU(pod, l.lruBlocks-e.capacity)
	}
}

// decision is one routing decision and what the EPP did.
type decision struct {
	d       gate.Decision
	outcome gate.Outcome
	chosen  int
	total   int32
	// P/D: prefill is the prefill pick (-1: decode only); gated whether the
	// gate ran, over the endpoints pool (eps their inputs, gateChosen the
	// pick's index in pool).
	prefill    int
	gated      bool
	pool       []int
	eps        []gate.Endpoint
	gateChosen int
}

// route runs the producers, the gate and the picker for r, charges the
// chosen pod's in-flight load and records the prompt in the index.
func (e *epp) route(r *request) decision {
	if e.active != nil {
		return e.routeActive(r)
	}
	k := e.replica(r.id)
	rp := &e.reps[k]
	total, beyond := e.match(rp.index, r.leaf, r.prompt)
	tokens, reqs := e.tokens, e.reqs
	if !e.synced {
		tokens, reqs = rp.tokens, rp.reqs
	}
	for i := range e.eps {
		e.eps[i] = gate.Endpoint{
			HasMatch: true, MatchBlocks: int(e.matched[i]), TotalBlocks: int(total), BlockSizeTokens: int(e.bs),
			HasLoad: true, InFlightTokens: tokens[i], InFlightRequests: reqs[i],
		}
	}
	var dec decision
	dec.total = total
	dec.d = gate.Decide(&e.settings, e.eps)
	dec.outcome = dec.d.Outcome
	if dec.d.ExplorationPossible && rp.explore.Float64() < e.settings.ExplorationProbability {
		dec.outcome = gate.OutcomeExploration
	}
	e.kept = e.kept[:0]
	if dec.outcome == gate.OutcomeSticky {
		e.kept = gate.AppendKept(e.kept, &e.settings, e.eps, &dec.d)
	} else {
		for i := range e.eps {
			e.kept = append(e.kept, i)
		}
	}
	best := e.kept[0]
	for _, i := range e.kept[1:] {
		if tokens[i] < tokens[best] || (e.byRequests && tokens[i] == tokens[best] && reqs[i] < reqs[best]) {
			best = i
		}
	}
	dec.chosen = best
	charge := int64(total-e.matched[best])*int64(e.bs) + beyond
	r.eppTokens = charge
	r.eppEpoch = e.epoch
	r.eppRep = uint8(k)
	r.eppTokHeld, r.eppReqHeld = true, true
	r.eppCached = e.matched[best] * e.bs
	e.tokens[best] += charge
	e.reqs[best]++
	if len(e.reps) > 1 {
		rp.tokens[best] += charge
		rp.reqs[best]++
	}
	rp.seen[best] = true
	e.record(rp.index, int32(best), r.leaf)
	rp.m.decisions[dec.outcome]++
	rp.m.attempts[best]++
	rp.m.observeHit(e.matched[best], total, e.bs)
	return dec
}

// routeActive routes r among the endpoints in the datastore (pods come
// and go); with none, the scheduling attempt fails (chosen -1).
func (e *epp) routeActive(r *request) decision {
	k := e.replica(r.id)
	rp := &e.reps[k]
	pool := e.pool[:0]
	for i, a := range e.active {
		if a {
			pool = append(pool, i)
		}
	}
	e.pool = pool
	if len(pool) == 0 {
		rp.m.schedFail++
		return decision{chosen: -1, prefill: -1}
	}
	total, beyond := e.match(rp.index, r.leaf, r.prompt)
	tokens, reqs := e.tokens, e.reqs
	if !e.synced {
		tokens, reqs = rp.tokens, rp.reqs
	}
	dec := decision{total: total, prefill: -1}
	best := e.gatePick(pool, &dec, rp, tokens, reqs, total)
	dec.chosen = best
	charge := int64(total-e.matched[best])*int64(e.bs) + beyond
	r.eppTokens, r.eppEpoch, r.eppRep = charge, e.epoch, uint8(k)
	r.eppTokHeld, r.eppReqHeld = true, true
	r.eppCached = e.matched[best] * e.bs
	e.tokens[best] += charge
	e.reqs[best]++
	if len(e.reps) > 1 {
		rp.tokens[best] += charge
		rp.reqs[best]++
	}
	rp.seen[best] = true
	e.record(rp.index, int32(best), r.leaf)
	rp.m.attempts[best]++
	rp.m.observeHit(e.matched[best], total, e.bs)
	return dec
}

// firstToken releases r's in-flight tokens (and its prefill pick's).
func (e *epp) firstToken(r *request) {
	if r.pfHeld {
		e.firstTokenPD(r)
	}
	if r.eppTokHeld && r.eppEpoch == e.epoch {
		e.tokens[r.ep] -= r.eppTokens
		if len(e.reps) > 1 {
			e.reps[r.eppRep].tokens[r.ep] -= r.eppTokens
		}
	}
	r.eppTokHeld = false
}

// finished releases r's in-flight request.
func (e *epp) finished(r *request) {
	if r.eppReqHeld && r.eppEpoch == e.epoch {
		e.reqs[r.ep]--
		if len(e.reps) > 1 {
			e.reps[r.eppRep].reqs[r.ep]--
		}
	}
	r.eppReqHeld = false
}
