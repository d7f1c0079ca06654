package fleetsim

import (
	"container/heap"
	"time"

	"github.com/gatetuner/gatetuner/gate"
)

// P/D disaggregation (docs/exporters.md, "P/D pools"). The EPP runs
// llm-d-router's disagg-profile-handler in decode-first order: the decode
// profile picks a decode pod, the prefix-based decider looks at how much of
// the prompt that pod's prefix-index entry lacks, and only when that is at
// least nonCachedTokens the prefill profile picks a prefill pod. The tuned
// prefix-cache-affinity filter sits in one of the two profiles
// (ExportShape.PDGateProfile); the other profile scores like llm-d-router's
// sample P/D config: prefix-cache-scorer (weight 2) + queue-scorer (weight
// 1) + max-score-picker. A disaggregated request runs as a prefill leg on
// the prefill pod (one output token; its KV held until pulled), then as a
// decode leg on the decode pod, which pulls the KV it lacks and computes
// the last prompt token itself.

// eppPD is the EPP's P/D routing state.
type eppPD struct {
	decode, prefill []int // endpoint indices of each role
	gateOnPrefill   bool
	threshold       int32
	// waiting is the vLLM waiting queue the queue-scorer reads (the EPP
	// scrapes vllm:num_requests_waiting; the simulator reads it exactly).
	waiting func(ep int) int64
}

// routePD routes r through the decode profile, the decider and (when it
// disaggregates) the prefill profile, charges the in-flight load of every
// profile's pick (llm-d-router's in-flight producer charges each profile
// result's first endpoint) and records the prompt in the prefix index for
// both picks (the approximate prefix producer records the primary and the
// "prefill" profile's endpoint).
func (e *epp) routePD(r *request) decision {
	k := e.replica(r.id)
	rp := &e.reps[k]
	total, beyond := e.match(rp.index, r.leaf, r.prompt)
	tokens, reqs := e.tokens, e.reqs
	if !e.synced {
		tokens, reqs = rp.tokens, rp.reqs
	}
	pd := e.pd
	dec := decision{total: total, prefill: -1}
	if pd.gateOnPrefill {
		dec.chosen = e.scorePick(pd.decode, total, tokens)
	} else {
		dec.chosen = e.gatePick(pd.decode, &dec, rp, tokens, reqs, total)
	}
	bs := e.bs
	if pd.threshold > 0 && r.prompt >= pd.threshold && r.prompt-e.matched[dec.chosen]*bs >= pd.threshold {
		if pd.gateOnPrefill {
			dec.prefill = e.gatePick(pd.prefill, &dec, rp, tokens, reqs, total)
		} else {
			dec.prefill = e.scorePick(pd.prefill, total, tokens)
		}
	}
	uncached := func(ep int) int64 { return int64(total-e.matched[ep])*int64(bs) + beyond }
	charge := func(ep int, tok int64) {
		e.tokens[ep] += tok
		e.reqs[ep]++
		if len(e.reps) > 1 {
			rp.tokens[ep] += tok
			rp.reqs[ep]++
		}
		rp.seen[ep] = true
	}
	best := dec.chosen
	r.eppTokens = uncached(best)
	r.eppEpoch = e.epoch
	r.eppRep = uint8(k)
	r.eppTokHeld, r.eppReqHeld = true, true
	r.eppCached = e.matched[best] * bs
	charge(best, r.eppTokens)
	if dec.prefill >= 0 {
		r.pfEp, r.pfTokens, r.pfHeld, r.pfReqHeld = int32(dec.prefill), uncached(dec.prefill), true, true
		charge(dec.prefill, r.pfTokens)
	}
	e.record(rp.index, int32(best), r.leaf)
	if dec.prefill >= 0 {
		e.record(rp.index, int32(dec.prefill), r.leaf)
		rp.m.disagg[1]++
	} else {
		rp.m.disagg[0]++
	}
	rp.m.attempts[best]++
	rp.m.observeHit(e.matched[best], total, bs)
	return dec
}

// gatePick runs the gate over pool (the candidates, or the P/D profile
// carrying the gate) and picks the
// fewest in-flight tokens among the endpoints it kept; it returns the
// endpoint index and fills dec's gate fields.
func (e *epp) gatePick(pool []int, dec *decision, rp *eppReplica, tokens, reqs []int64, total int32) int {
	eps := e.poolEps[:0]
	for _, i := range pool {
		eps = append(eps, gate.Endpoint{HasMatch: true, MatchBlocks: int(e.matched[i]), TotalBlocks: int(total), BlockSizeTokens: int(e.bs),
			HasLoad: true, InFlightTokens: tokens[i], InFlightRequests: reqs[i]})
	}
	e.poolEps = eps
	dec.d = gate.Decide(&e.settings, eps)
	dec.outcome = dec.d.Outcome
	if dec.d.ExplorationPossible && rp.explore.Float64() < e.settings.ExplorationProbability {
		dec.outcome = gate.OutcomeExploration
	}
	e.kept = e.kept[:0]
	if dec.outcome == gate.OutcomeSticky {
		e.kept = gate.AppendKept(e.kept, &e.settings, eps, &dec.d)
	} else {
		for i := range eps {
			e.kept = append(e.kept, i)
		}
	}
	best := e.kept[0]
	for _, i := range e.kept[1:] {
		if eps[i].InFlightTokens < eps[best].InFlightTokens ||
			(e.byRequests && eps[i].InFlightTokens == eps[best].InFlightTokens && eps[i].InFlightRequests < eps[best].InFlightRequests) {
			best = i
		}
	}
	dec.gated, dec.pool, dec.eps, dec.gateChosen = true, pool, eps, best
	rp.m.decisions[dec.outcome]++
	return pool[best]
}

// scorePick is the profile without the gate: prefix-cache-scorer (match /
// total, weight 2) plus queue-scorer (the waiting queue min-max normalised,
// 1 when all equal; weight 1), the highest score winning, ties to the fewest
// in-flight tokens, then the first.
func (e *epp) scorePick(pool []int, total int32, tokens []int64) int {
	pd := e.pd
	lo, hi := int64(-1), int64(-1)
	for _, i := range pool {
		w := pd.waiting(i)
		if lo < 0 || w < lo {
			lo = w
		}
		if w > hi {
			hi = w
		}
	}
	best, bestScore := -1, 0.0
	for _, i := range pool {
		score := 0.0
		if total > 0 {
			score = 2 * float64(e.matched[i]) / float64(total)
		}
		if hi == lo {
			score++
		} else {
			score += float64(hi-pd.waiting(i)) / float64(hi-lo)
		}
		if best < 0 || score > bestScore || (score == bestScore && tokens[i] < tokens[best]) {
			best, bestScore = i, score
		}
	}
	return best
}

// firstTokenPD releases, at the EPP's first response chunk, the prefill
// pick's tokens and request (its entry is released in full then).
func (e *epp) firstTokenPD(r *request) {
	if !r.pfHeld {
		return
	}
	if r.eppEpoch == e.epoch {
		e.tokens[r.pfEp] -= r.pfTokens
		e.reqs[r.pfEp]--
		if len(e.reps) > 1 {
			e.reps[r.eppRep].tokens[r.pfEp] -= r.pfTokens
			e.reps[r.eppRep].reqs[r.pfEp]--
		}
	}
	r.pfHeld, r.pfReqHeld = false, false
}

// arrivePD routes a request in a P/D pool: decode-only requests go to the
// decode pod; disaggregated ones start as a prefill leg on the prefill pod.
func (s *sim) arrivePD(r *request, measured bool) {
	dec := s.epp.routePD(r)
	r.ep = int32(dec.chosen)
	r.pod = int32(dec.chosen)
	if measured && s.rec != nil && dec.gated {
		s.rec.writePool(r, dec.eps, &dec, dec.pool)
	}
	s.acc.decided(s, r, &dec, measured)
	s.pendingFirst++
	if dec.prefill < 0 {
		s.pods[r.pod].enqueue(r, s.now)
		return
	}
	leg := &request{id: r.id, arrival: r.arrival, vArr: r.arrival, phase: r.phase, leaf: r.leaf, out: -1, prompt: r.prompt, output: 1,
		pod: int32(dec.prefill), ep: int32(dec.prefill), firstSched: -1, firstToken: -1, heapIdx: -1, isLeg: true, peer: r}
	r.peer, r.remote = leg, true
	s.pods[dec.prefill].enqueue(leg, s.now)
}

// legFinished: the prefill leg returned its token; the routing sidecar
// sends the request on to the decode pod.
func (s *sim) legFinished(leg *request, now int64) {
	r := leg.peer
	r.vArr = now
	s.pods[r.pod].enqueue(r, now)
}

// kvRequested starts a decode leg's KV transfer from its prefill pod.
func (s *sim) kvRequested(_ *pod, r *request, now int64) {
	d := kvTransferLatency + time.Duration(float64(r.ext)/s.x.KVTransferTokensPerSec*float64(time.Second))
	s.seq++
	heap.Push(&s.timers, timer{at: now + int64(d), seq: s.seq, r: r})
}

// fireTimer completes the earliest KV transfer: the decode leg runs, the
// prefill pod frees the leg's blocks.
func (s *sim) fireTimer() {
	tm := heap.Pop(&s.timers).(timer)
	r := tm.r
	s.pods[r.pod].kvLoaded(r, tm.at)
	s.pods[r.peer.pod].kvSent(r.peer, tm.at)
}

// timer is a KV transfer's completion.
type timer struct {
	at  int64
	seq int64
	r   *request
}

type timerHeap []timer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)   { *h = append(*h, x.(timer)) }
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}

// next is the earliest timer's time (MaxInt64: none).
func (h timerHeap) next() int64 {
	if len(h) == 0 {
		return maxTime
	}
	return h[0].at
}

const maxTime = int64(^uint64(0) >> 1)

// newEPPPD builds the EPP's P/D state: decode endpoints first, prefill after.
func newEPPPD(s *sim) *eppPD {
	x, sc := &s.x, s.sc
	pd := &eppPD{gateOnPrefill: x.PDGateProfile == PDProfilePrefill, threshold: int32(x.PDNonCachedTokens)}
	for ep := 0; ep < x.endpoints(sc); ep++ {
		if x.isPrefill(sc, x.podOf(ep)) {
			pd.prefill = append(pd.prefill, ep)
		} else {
			pd.decode = append(pd.decode, ep)
		}
	}
	pd.waiting = func(ep int) int64 {
		p := s.pods[ep]
		return int64(p.waiting.len()) + int64(p.deferred)
	}
	return pd
}
