package fleetsim

import (
	"math"

	"github.com/gatetuner/gatetuner/test/fleetsim/engine"
)

// Pod departures (scenario.ExportShape.DepartPods): at DepartAt the last DepartPods
// pods crash — their requests are aborted, the EPP drops their endpoints
// from its datastore, their vLLM series end — and RejoinAfter later as many
// pods join: the same pods restarted (same names, counters from zero, an
// empty cache) or new ones. The EPP keeps every endpoint's in-flight series
// (llm-d-router inflightload/producer.go: DeleteEndpoint deletes the
// trackers, never the gauges); with no endpoint left a scheduling attempt
// fails (status "failure", no endpoint).

// lifecycle is the departure's pending events.
type lifecycle struct {
	at   []int64 // event times: departure, then the rejoin (if any)
	next int
}

// initLifecycle marks the pods that join later as down and plans the events.
func (s *sim) initLifecycle() {
	x := &s.x
	if x.DepartPods == 0 {
		return
	}
	s.epp.Active = make([]bool, len(s.epp.Tokens))
	for i := range s.epp.Active {
		s.epp.Active[i] = true
	}
	s.lc.at = []int64{int64(x.DepartAt)}
	if x.RejoinAfter > 0 {
		s.lc.at = append(s.lc.at, int64(x.DepartAt+x.RejoinAfter))
		if !x.RejoinSameName {
			for _, pod := range s.joiners() {
				s.setPod(pod, false)
			}
		}
	}
}

// leavers are the pods that depart; joiners the pods that join after.
func (s *sim) leavers() []int {
	var out []int
	for p := s.sc.Pods.Count - s.x.DepartPods; p < s.sc.Pods.Count; p++ {
		out = append(out, p)
	}
	return out
}

func (s *sim) joiners() []int {
	if s.x.RejoinSameName {
		return s.leavers()
	}
	var out []int
	for p := s.sc.Pods.Count; p < s.sc.Pods.Count+s.x.DepartPods; p++ {
		out = append(out, p)
	}
	return out
}

// setPod marks every endpoint and engine of pod index pod up or down.
func (s *sim) setPod(pod int, up bool) {
	x := &s.x
	for ep := pod * x.DPRanks; ep < (pod+1)*x.DPRanks; ep++ {
		s.epp.Active[ep] = up
		for e := ep * x.DPEngines; e < (ep+1)*x.DPEngines; e++ {
			s.pods[e].SetUp(up)
		}
	}
}

// nextLifecycle is the next event's time (MaxInt64: none left).
func (s *sim) nextLifecycle() int64 {
	if s.lc.next >= len(s.lc.at) {
		return math.MaxInt64
	}
	return max(s.lc.at[s.lc.next], s.now)
}

// fireLifecycle applies the next event.
func (s *sim) fireLifecycle() {
	x := &s.x
	k := s.lc.next
	s.lc.next++
	if k == 0 {
		for _, pod := range s.leavers() {
			s.setPod(pod, false)
			for e := pod * x.DPRanks * x.DPEngines; e < (pod+1)*x.DPRanks*x.DPEngines; e++ {
				s.pods[e].AbortAll(s.now)
			}
		}
		return
	}
	for _, pod := range s.joiners() {
		s.setPod(pod, true)
		if x.RejoinSameName {
			for e := pod * x.DPRanks * x.DPEngines; e < (pod+1)*x.DPRanks*x.DPEngines; e++ {
				s.pods[e].Restart(s.sc.Pods.Engine.MaxModelLen)
			}
		}
	}
}

// Aborted is the engine hook that ends a request its engine dropped: the
// EPP sees the stream end (its in-flight charges are released), no first
// token follows.
func (s *sim) Aborted(_ *engine.Pod, r *engine.Request, _ int64) {
	if r.FirstToken < 0 {
		s.pendingFirst--
	}
	s.epp.FirstToken(&r.Ticket)
	s.epp.Finished(&r.Ticket)
	s.tree.Release(r.Out)
}
