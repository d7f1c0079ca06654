package fleetsim

import (
	"container/heap"
	"time"

	"github.com/gatetuner/gatetuner/test/fleetsim/engine"
	"github.com/gatetuner/gatetuner/test/fleetsim/epp"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
)

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

// arrivePD routes a request in a P/D pool: decode-only requests go to the
// decode pod; disaggregated ones start as a prefill leg on the prefill pod.
func (s *sim) arrivePD(r *engine.Request, measured bool) {
	dec := s.epp.RoutePD(r.ID, r.Leaf, r.Prompt, &r.Ticket)
	r.Ticket.Ep = int32(dec.Chosen)
	r.Pod = int32(dec.Chosen)
	if measured && s.rec != nil && dec.Gated {
		s.rec.WritePool(r, dec.Eps, &dec, dec.Pool)
	}
	s.acc.Decided(r, &dec, measured)
	s.pendingFirst++
	if dec.Prefill < 0 {
		s.pods[r.Pod].Enqueue(r, s.now)
		return
	}
	leg := engine.NewRequest(r.ID, r.Arrival, r.Phase, r.Leaf, -1, r.Prompt, 1)
	leg.Pod, leg.Ticket.Ep, leg.IsLeg, leg.Peer = int32(dec.Prefill), int32(dec.Prefill), true, r
	r.Peer, r.Remote = leg, true
	s.pods[dec.Prefill].Enqueue(leg, s.now)
}

// legFinished: the prefill leg returned its token; the routing sidecar
// sends the request on to the decode pod.
func (s *sim) legFinished(leg *engine.Request, now int64) {
	r := leg.Peer
	r.VArr = now
	s.pods[r.Pod].Enqueue(r, now)
}

// kvTransferLatency is the fixed part of a P/D KV transfer (the simulator's
// assumption, not an upstream fact).
const kvTransferLatency = 2 * time.Millisecond

// KVRequested is the engine hook that starts a decode leg's KV transfer
// from its prefill pod.
func (s *sim) KVRequested(_ *engine.Pod, r *engine.Request, now int64) {
	d := kvTransferLatency + time.Duration(float64(r.Ext)/s.x.KVTransferTokensPerSec*float64(time.Second))
	s.seq++
	heap.Push(&s.timers, timer{at: now + int64(d), seq: s.seq, r: r})
}

// fireTimer completes the earliest KV transfer: the decode leg runs, the
// prefill pod frees the leg's blocks.
func (s *sim) fireTimer() {
	tm := heap.Pop(&s.timers).(timer)
	r := tm.r
	s.pods[r.Pod].KVLoaded(r, tm.at)
	s.pods[r.Peer.Pod].KVSent(r.Peer, tm.at)
}

// timer is a KV transfer's completion.
type timer struct {
	at  int64
	seq int64
	r   *engine.Request
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
func newEPPPD(s *sim) *epp.PD {
	x, sc := &s.x, s.sc
	pd := &epp.PD{GateOnPrefill: x.PDGateProfile == scenario.PDProfilePrefill, Threshold: int32(x.PDNonCachedTokens)}
	for ep := 0; ep < x.Endpoints(sc); ep++ {
		if x.IsPrefill(sc, x.PodOf(ep)) {
			pd.Prefill = append(pd.Prefill, ep)
		} else {
			pd.Decode = append(pd.Decode, ep)
		}
	}
	pd.Waiting = func(ep int) int64 {
		p := s.pods[ep]
		return int64(p.Waiting()) + int64(p.Deferred())
	}
	return pd
}
