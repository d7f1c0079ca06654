package epp

import "github.com/gatetuner/gatetuner/gate"

// P/D disaggregation (docs/exporters.md, "P/D pools"). The EPP runs
// llm-d-router's disagg-profile-handler in decode-first order: the decode
// profile picks a decode pod, the prefix-based decider looks at how much of
// the prompt that pod's prefix-index entry lacks, and only when that is at
// least nonCachedTokens the prefill profile picks a prefill pod. The tuned
// prefix-cache-affinity filter sits in one of the two profiles
// (scenario.ExportShape.PDGateProfile); the other profile scores like llm-d-router's
// sample P/D config: prefix-cache-scorer (weight 2) + queue-scorer (weight
// 1) + max-score-picker. A disaggregated request runs as a prefill leg on
// the prefill pod (one output token; its KV held until pulled), then as a
// decode leg on the decode pod, which pulls the KV it lacks and computes
// the last prompt token itself.

// PD is the EPP's P/D routing state.
type PD struct {
	Decode, Prefill []int // endpoint indices of each role
	GateOnPrefill   bool
	Threshold       int32
	// Waiting is the vLLM waiting queue the queue-scorer reads (the EPP
	// scrapes vllm:num_requests_waiting; the simulator reads it exactly).
	Waiting func(ep int) int64
}

// RoutePD routes request id (its prompt of prompt tokens ending at leaf)
// through the decode profile, the decider and (when it disaggregates) the
// prefill profile, charges the in-flight load of every profile's pick on t
// (llm-d-router's in-flight producer charges each profile result's first
// endpoint) and records the prompt in the prefix index for both picks (the
// approximate prefix producer records the primary and the "prefill"
// profile's endpoint).
func (e *EPP) RoutePD(id int64, leaf, prompt int32, t *Ticket) Decision {
	k := e.ReplicaOf(id)
	rp := &e.Replicas[k]
	total, beyond := e.match(rp.Index, leaf, prompt)
	tokens, reqs := e.Tokens, e.Reqs
	if !e.synced {
		tokens, reqs = rp.Tokens, rp.Reqs
	}
	pd := e.PD
	dec := Decision{Total: total, Prefill: -1}
	if pd.GateOnPrefill {
		dec.Chosen = e.scorePick(pd.Decode, total, tokens)
	} else {
		dec.Chosen = e.gatePick(pd.Decode, &dec, rp, tokens, reqs, total)
	}
	bs := e.bs
	if pd.Threshold > 0 && prompt >= pd.Threshold && prompt-e.matched[dec.Chosen]*bs >= pd.Threshold {
		if pd.GateOnPrefill {
			dec.Prefill = e.gatePick(pd.Prefill, &dec, rp, tokens, reqs, total)
		} else {
			dec.Prefill = e.scorePick(pd.Prefill, total, tokens)
		}
	}
	uncached := func(ep int) int64 { return int64(total-e.matched[ep])*int64(bs) + beyond }
	best := dec.Chosen
	e.hold(t, k, best, uncached(best))
	e.charge(rp, best, t.Tokens)
	if dec.Prefill >= 0 {
		t.PfEp, t.PfTokens, t.PfHeld, t.PfReqHeld = int32(dec.Prefill), uncached(dec.Prefill), true, true
		e.charge(rp, dec.Prefill, t.PfTokens)
	}
	e.record(rp.Index, int32(best), leaf)
	if dec.Prefill >= 0 {
		e.record(rp.Index, int32(dec.Prefill), leaf)
		rp.Metrics.Disagg[1]++
	} else {
		rp.Metrics.Disagg[0]++
	}
	rp.Metrics.Attempts[best]++
	rp.Metrics.observeHit(e.matched[best], total, bs)
	return dec
}

// gatePick runs the gate over pool (the candidates, or the P/D profile
// carrying the gate) and picks the
// fewest in-flight tokens among the endpoints it kept; it returns the
// endpoint index and fills dec's gate fields.
func (e *EPP) gatePick(pool []int, dec *Decision, rp *Replica, tokens, reqs []int64, total int32) int {
	eps := e.poolEps[:0]
	for _, i := range pool {
		eps = append(eps, gate.Endpoint{HasMatch: true, MatchBlocks: int(e.matched[i]), TotalBlocks: int(total), BlockSizeTokens: int(e.bs),
			HasLoad: true, InFlightTokens: tokens[i], InFlightRequests: reqs[i]})
	}
	e.poolEps = eps
	dec.D = gate.Decide(&e.Settings, eps)
	dec.Outcome = dec.D.Outcome
	if dec.D.ExplorationPossible && rp.explore.Float64() < e.Settings.ExplorationProbability {
		dec.Outcome = gate.OutcomeExploration
	}
	e.kept = e.kept[:0]
	if dec.Outcome == gate.OutcomeSticky {
		e.kept = gate.AppendKept(e.kept, &e.Settings, eps, &dec.D)
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
	dec.Gated, dec.Pool, dec.Eps, dec.GateChosen = true, pool, eps, best
	rp.Metrics.Decisions[dec.Outcome]++
	return pool[best]
}

// scorePick is the profile without the gate: prefix-cache-scorer (match /
// total, weight 2) plus queue-scorer (the waiting queue min-max normalised,
// 1 when all equal; weight 1), the highest score winning, ties to the fewest
// in-flight tokens, then the first.
func (e *EPP) scorePick(pool []int, total int32, tokens []int64) int {
	pd := e.PD
	lo, hi := int64(-1), int64(-1)
	for _, i := range pool {
		w := pd.Waiting(i)
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
			score += float64(hi-pd.Waiting(i)) / float64(hi-lo)
		}
		if best < 0 || score > bestScore || (score == bestScore && tokens[i] < tokens[best]) {
			best, bestScore = i, score
		}
	}
	return best
}

// firstTokenPD releases, at the EPP's first response chunk, the prefill
// pick's tokens and request (its entry is released in full then).
func (e *EPP) firstTokenPD(t *Ticket) {
	if !t.PfHeld {
		return
	}
	if t.Epoch == e.epoch {
		e.Tokens[t.PfEp] -= t.PfTokens
		e.Reqs[t.PfEp]--
		if len(e.Replicas) > 1 {
			e.Replicas[t.Rep].Tokens[t.PfEp] -= t.PfTokens
			e.Replicas[t.Rep].Reqs[t.PfEp]--
		}
	}
	t.PfHeld, t.PfReqHeld = false, false
}
