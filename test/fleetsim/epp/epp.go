// Package epp is the simulated llm-d endpoint picker: the approximate prefix
// producer, the in-flight load producer, the exact gate (package gate), the
// picker, P/D routing, replicas and restarts; and the EPP configs the
// simulated EPP pods read their gate settings from.
package epp

import (
	"math/rand/v2"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim/prefix"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
)

// EPP is the endpoint picker: the approximate prefix producer (an index of
// what it routed where), the in-flight load producer, the gate and a picker.
// With several replicas each has its own index and in-flight counters;
// requests alternate among them.
type EPP struct {
	// Settings are the gate settings in force.
	Settings gate.Settings
	// PD is the P/D routing state (nil without disaggregation).
	PD *PD
	// Active marks the endpoints in the datastore (nil: all, always).
	Active []bool
	// Replicas are the EPP pods.
	Replicas []Replica
	// Tokens and Reqs are the in-flight load summed over replicas:
	// uncached prompt tokens until the first token, requests until the
	// response ends.
	Tokens []int64
	Reqs   []int64
	// Endpoints are the gate's inputs of the last decision over every
	// endpoint.
	Endpoints []gate.Endpoint

	tree     *prefix.Tree
	index    *prefix.Cache // replica 0's
	bs       int32
	capacity int64
	maxBlk   int32
	npods    int
	// byRequests breaks in-flight token ties by in-flight requests.
	byRequests bool
	// synced: the gate sees the in-flight sum over replicas.
	synced bool
	epoch  uint32

	// pool and poolEps are the candidates' scratch.
	pool    []int
	poolEps []gate.Endpoint

	kept    []int
	matched []int32
	alive   []int32
	path    []int32
	needs   []int32
}

// Replica is one EPP pod: its prefix index, the in-flight load it counted
// itself (what its gauges show), which endpoints have in-flight series
// (Seen), and its metrics.
type Replica struct {
	Index   *prefix.Cache
	Tokens  []int64 // the EPP's slices with one replica
	Reqs    []int64
	Seen    []bool
	Metrics Metrics
	explore *rand.Rand
}

// Ticket is a request's routing: its endpoint and the in-flight load the
// EPP charged for it (and for its P/D prefill pick), released at its first
// token and at its end.
type Ticket struct {
	// Ep is the endpoint the request was routed to.
	Ep      int32
	Tokens  int64
	Epoch   uint32
	Rep     uint8
	TokHeld bool
	ReqHeld bool
	// Cached is the matched tokens on the chosen endpoint (the EPP's view).
	Cached int32
	// PfEp is the prefill endpoint the EPP charged (PfHeld while charged).
	PfEp      int32
	PfTokens  int64
	PfHeld    bool
	PfReqHeld bool
}

// New returns the EPP of sc over n endpoints with replicas replicas
// (synced: the gate sees the in-flight sum over replicas), its exploration
// draws seeded by seed.
func New(sc *scenario.Scenario, tree *prefix.Tree, seed uint64, n, replicas int, synced bool) *EPP {
	pi := sc.EPP.PrefixIndex
	e := &EPP{
		tree:       tree,
		Settings:   sc.EPP.Settings,
		bs:         int32(pi.BlockSizeTokens),
		capacity:   int64(pi.LRUCapacityPerServer),
		maxBlk:     int32(pi.MaxPrefixBlocksToMatch),
		npods:      n,
		byRequests: sc.EPP.Picker == scenario.PickerLeastTokensThenRequests,
		synced:     synced || replicas == 1,
		Tokens:     make([]int64, n),
		Reqs:       make([]int64, n),
		Endpoints:  make([]gate.Endpoint, n),
		matched:    make([]int32, n),
		alive:      make([]int32, 0, n),
	}
	for k := 0; k < replicas; k++ {
		rp := Replica{Index: prefix.NewCache(e.bs, n, tree), Tokens: e.Tokens, Reqs: e.Reqs, Seen: make([]bool, n),
			explore: rand.New(rand.NewPCG(seed+uint64(k), 0x6578706c6f7265))}
		if replicas > 1 {
			rp.Tokens, rp.Reqs = make([]int64, n), make([]int64, n)
		}
		rp.Metrics.init(n)
		e.Replicas = append(e.Replicas, rp)
	}
	e.index = e.Replicas[0].Index
	return e
}

// Index is replica 0's prefix index.
func (e *EPP) Index() *prefix.Cache { return e.index }

// Restart models an EPP pod restart: the prefix index and the in-flight
// accounting start empty; requests routed by the old pod are no longer
// counted.
func (e *EPP) Restart() {
	for k := range e.Replicas {
		rp := &e.Replicas[k]
		rp.Index.Clear()
		for i := range rp.Tokens {
			rp.Tokens[i], rp.Reqs[i], rp.Seen[i] = 0, 0, false
		}
	}
	for i := range e.Tokens {
		e.Tokens[i], e.Reqs[i] = 0, 0
	}
	e.epoch++
}

// ReplicaOf is the EPP replica request id goes to.
func (e *EPP) ReplicaOf(id int64) int { return int(id % int64(len(e.Replicas))) }

// match fills e.matched with each pod's matched blocks for the prompt ending
// at leaf and returns TotalBlocks and the tokens beyond the indexed cap.
func (e *EPP) match(index *prefix.Cache, leaf int32, prompt int32) (total int32, beyond int64) {
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
	e.path = e.tree.Path(leaf, e.path)
	var cum int32
	for _, n := range e.path {
		need := e.tree.Blocks(n, bs)
		if need == 0 {
			continue
		}
		if e.maxBlk > 0 && cum+need > e.maxBlk {
			need = e.maxBlk - cum
		}
		cum += need
		keep := e.alive[:0]
		for _, p := range e.alive {
			have := min(index.Cached(p, n), need)
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
func (e *EPP) record(index *prefix.Cache, pod int32, leaf int32) {
	e.path = e.tree.Path(leaf, e.path)
	e.needs = e.needs[:0]
	var cum int32
	for _, n := range e.path {
		need := e.tree.Blocks(n, e.bs)
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
			index.Record(pod, e.path[i], e.needs[i])
		}
	}
	if lru := index.LRUBlocks(pod); lru > e.capacity {
		index.EvictLRU(pod, lru-e.capacity)
	}
}

// Decision is one routing decision and what the EPP did.
type Decision struct {
	D       gate.Decision
	Outcome gate.Outcome
	// Chosen is the endpoint picked (-1: none, the scheduling failed).
	Chosen int
	Total  int32
	// P/D: Prefill is the prefill pick (-1: decode only); Gated whether the
	// gate ran, over the endpoints Pool (Eps their inputs, GateChosen the
	// pick's index in Pool).
	Prefill    int
	Gated      bool
	Pool       []int
	Eps        []gate.Endpoint
	GateChosen int
}

// Route runs the producers, the gate and the picker for request id (its
// prompt of prompt tokens ending at leaf), charges the chosen pod's
// in-flight load on t and records the prompt in the index.
func (e *EPP) Route(id int64, leaf, prompt int32, t *Ticket) Decision {
	if e.Active != nil {
		return e.routeActive(id, leaf, prompt, t)
	}
	k := e.ReplicaOf(id)
	rp := &e.Replicas[k]
	total, beyond := e.match(rp.Index, leaf, prompt)
	tokens, reqs := e.Tokens, e.Reqs
	if !e.synced {
		tokens, reqs = rp.Tokens, rp.Reqs
	}
	for i := range e.Endpoints {
		e.Endpoints[i] = gate.Endpoint{
			HasMatch: true, MatchBlocks: int(e.matched[i]), TotalBlocks: int(total), BlockSizeTokens: int(e.bs),
			HasLoad: true, InFlightTokens: tokens[i], InFlightRequests: reqs[i],
		}
	}
	var dec Decision
	dec.Total = total
	dec.D = gate.Decide(&e.Settings, e.Endpoints)
	dec.Outcome = dec.D.Outcome
	if dec.D.ExplorationPossible && rp.explore.Float64() < e.Settings.ExplorationProbability {
		dec.Outcome = gate.OutcomeExploration
	}
	e.kept = e.kept[:0]
	if dec.Outcome == gate.OutcomeSticky {
		e.kept = gate.AppendKept(e.kept, &e.Settings, e.Endpoints, &dec.D)
	} else {
		for i := range e.Endpoints {
			e.kept = append(e.kept, i)
		}
	}
	best := e.kept[0]
	for _, i := range e.kept[1:] {
		if tokens[i] < tokens[best] || (e.byRequests && tokens[i] == tokens[best] && reqs[i] < reqs[best]) {
			best = i
		}
	}
	dec.Chosen = best
	e.hold(t, k, best, int64(total-e.matched[best])*int64(e.bs)+beyond)
	e.charge(rp, best, t.Tokens)
	e.record(rp.Index, int32(best), leaf)
	rp.Metrics.Decisions[dec.Outcome]++
	rp.Metrics.Attempts[best]++
	rp.Metrics.observeHit(e.matched[best], total, e.bs)
	return dec
}

// routeActive routes the request among the endpoints in the datastore (pods
// come and go); with none, the scheduling attempt fails (Chosen -1).
func (e *EPP) routeActive(id int64, leaf, prompt int32, t *Ticket) Decision {
	k := e.ReplicaOf(id)
	rp := &e.Replicas[k]
	pool := e.pool[:0]
	for i, a := range e.Active {
		if a {
			pool = append(pool, i)
		}
	}
	e.pool = pool
	if len(pool) == 0 {
		rp.Metrics.SchedFail++
		return Decision{Chosen: -1, Prefill: -1}
	}
	total, beyond := e.match(rp.Index, leaf, prompt)
	tokens, reqs := e.Tokens, e.Reqs
	if !e.synced {
		tokens, reqs = rp.Tokens, rp.Reqs
	}
	dec := Decision{Total: total, Prefill: -1}
	best := e.gatePick(pool, &dec, rp, tokens, reqs, total)
	dec.Chosen = best
	e.hold(t, k, best, int64(total-e.matched[best])*int64(e.bs)+beyond)
	e.charge(rp, best, t.Tokens)
	e.record(rp.Index, int32(best), leaf)
	rp.Metrics.Attempts[best]++
	rp.Metrics.observeHit(e.matched[best], total, e.bs)
	return dec
}

// hold makes t the ticket of a request routed by replica k to endpoint ep,
// charging it tokens.
func (e *EPP) hold(t *Ticket, k, ep int, tokens int64) {
	t.Tokens, t.Epoch, t.Rep = tokens, e.epoch, uint8(k)
	t.TokHeld, t.ReqHeld = true, true
	t.Cached = e.matched[ep] * e.bs
}

// charge adds tokens and a request to endpoint ep's in-flight load, in the
// sum over replicas and in replica rp's own, whose series for ep now exist.
func (e *EPP) charge(rp *Replica, ep int, tokens int64) {
	e.Tokens[ep] += tokens
	e.Reqs[ep]++
	if len(e.Replicas) > 1 {
		rp.Tokens[ep] += tokens
		rp.Reqs[ep]++
	}
	rp.Seen[ep] = true
}

// FirstToken releases t's in-flight tokens (and its prefill pick's).
func (e *EPP) FirstToken(t *Ticket) {
	if t.PfHeld {
		e.firstTokenPD(t)
	}
	if t.TokHeld && t.Epoch == e.epoch {
		e.Tokens[t.Ep] -= t.Tokens
		if len(e.Replicas) > 1 {
			e.Replicas[t.Rep].Tokens[t.Ep] -= t.Tokens
		}
	}
	t.TokHeld = false
}

// Finished releases t's in-flight request.
func (e *EPP) Finished(t *Ticket) {
	if t.ReqHeld && t.Epoch == e.epoch {
		e.Reqs[t.Ep]--
		if len(e.Replicas) > 1 {
			e.Replicas[t.Rep].Reqs[t.Ep]--
		}
	}
	t.ReqHeld = false
}

func ceilDiv(a, b int32) int32 { return (a + b - 1) / b }
