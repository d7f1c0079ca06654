package estimator

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// inFlightLayout is the in-flight series laid out on the snapshot grid:
// flat [time][replica][endpoint] values, NaN marking "no value", and each
// replica's view at each time.
type inFlightLayout struct {
	eps, reps eppIndex
	n, ne, nr int
	tok, req  []float64
	views     []replicaView
	seen      []bool
	routed    map[string][]float64
	// join maps endpoint names to pods; unjoined collects the endpoints
	// left out of snapshots (no routed or vLLM pod of that name).
	join     *endpointJoin
	unjoined map[string]bool
	// alive is each pod's newest vLLM sample time per grid time (NaN: none);
	// departed collects the endpoints left out after their pod left.
	alive      map[string][]float64
	staleAfter time.Duration
	departed   map[string]DepartedEndpoint
}

// layoutInFlight places the token, request and freshness series on d's grid.
func (e *Estimator) layoutInFlight(d *eppInputs, j *endpointJoin) *inFlightLayout {
	l := &inFlightLayout{join: j, unjoined: map[string]bool{}, staleAfter: e.cfg.StaleAfter, departed: map[string]DepartedEndpoint{}}
	tokEp, tokRep := e.eppSeries(d.tokens, &l.eps, &l.reps)
	reqEp, reqRep := e.eppSeries(d.reqs, &l.eps, &l.reps)
	l.n, l.ne, l.nr = d.g.n, len(l.eps.list), len(l.reps.list)
	l.tok, l.req = nanSlice(l.n*l.nr*l.ne), nanSlice(l.n*l.nr*l.ne)
	l.views = make([]replicaView, l.n*l.nr)
	for i := range l.views {
		l.views[i].fresh = math.Inf(-1)
	}
	l.seen = make([]bool, l.n*l.nr)
	for si, ss := range d.tokens {
		if tokEp[si] < 0 {
			continue
		}
		for _, p := range ss.Values {
			k, ok := d.g.index(p.Timestamp)
			if !ok {
				continue
			}
			vi := k*l.nr + tokRep[si]
			v := &l.views[vi]
			l.seen[vi] = true
			x := float64(p.Value)
			if !finite(x) {
				v.nonFinite = true
				continue
			}
			l.tok[vi*l.ne+tokEp[si]] = x
			v.endpoints++
			v.total += x
		}
	}
	for si, ss := range d.reqs {
		if reqEp[si] < 0 {
			continue
		}
		for _, p := range ss.Values {
			k, ok := d.g.index(p.Timestamp)
			if !ok || !l.seen[k*l.nr+reqRep[si]] {
				continue
			}
			vi := k*l.nr + reqRep[si]
			if x := float64(p.Value); finite(x) {
				l.req[vi*l.ne+reqEp[si]] = x
			} else {
				l.views[vi].nonFinite = true
			}
		}
	}
	for _, ss := range d.freshest {
		ri, ok := l.reps.names[e.replicaOf(ss.Metric)]
		if !ok {
			continue
		}
		for _, p := range ss.Values {
			if k, ok := d.g.index(p.Timestamp); ok {
				l.views[k*l.nr+ri].fresh = float64(p.Value)
			}
		}
	}
	l.routed = routedPerSnapshot(d)
	l.alive = alivePerSnapshot(d)
	return l
}

// alivePerSnapshot is each pod's newest vLLM sample time per snapshot.
func alivePerSnapshot(d *eppInputs) map[string][]float64 {
	alive := map[string][]float64{}
	for _, ss := range d.alive {
		pod := string(ss.Metric["pod"])
		if pod == "" {
			continue
		}
		row := nanSlice(d.g.n)
		for _, p := range ss.Values {
			if k, ok := d.g.index(p.Timestamp); ok && finite(float64(p.Value)) {
				row[k] = float64(p.Value)
			}
		}
		alive[pod] = row
	}
	return alive
}

// gone reports whether pod, alive at an earlier snapshot, has no fresh
// vLLM sample at snapshot k (ts): it left, and its endpoints' in-flight
// gauges (which the EPP never deletes) are stale.
func (l *inFlightLayout) gone(pod string, k int, ts time.Time) (bool, time.Time) {
	row, ok := l.alive[pod]
	if !ok {
		return false, time.Time{}
	}
	last := math.NaN()
	for i := k - 1; i >= 0; i-- {
		if !math.IsNaN(row[i]) {
			last = row[i]
			break
		}
	}
	if math.IsNaN(last) {
		return false, time.Time{}
	}
	x := row[k]
	if !math.IsNaN(x) && ts.Sub(time.Unix(0, int64(x*1e9))) <= l.staleAfter {
		return false, time.Time{}
	}
	if !math.IsNaN(x) {
		last = x
	}
	return true, time.Unix(0, int64(last*1e9)).UTC()
}

func nanSlice(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = math.NaN()
	}
	return s
}

// routedPerSnapshot is the scheduling attempts per endpoint in each
// snapshot's step, when the routed query answered.
func routedPerSnapshot(d *eppInputs) map[string][]float64 {
	routed := map[string][]float64{}
	for _, ss := range d.routed {
		ep := string(ss.Metric["endpoint_name"])
		if ep == "" {
			continue
		}
		row := nanSlice(d.g.n)
		for _, p := range ss.Values {
			if k, ok := d.g.index(p.Timestamp); ok && finite(float64(p.Value)) {
				row[k] = float64(p.Value)
			}
		}
		routed[ep] = row
	}
	return routed
}

// bestReplica is the replica whose view is chosen at time k (replicaRule), or -1.
func (l *inFlightLayout) bestReplica(k int) int {
	best := -1
	for ri := 0; ri < l.nr; ri++ {
		if !l.seen[k*l.nr+ri] {
			continue
		}
		if best < 0 || better(&l.views[k*l.nr+ri], l.reps.list[ri], &l.views[k*l.nr+best], l.reps.list[best]) {
			best = ri
		}
	}
	return best
}

// snapshot builds replica ri's snapshot at time k, endpoints in order.
func (l *inFlightLayout) snapshot(k, ri int, ts time.Time, order []int) Snapshot {
	bv := &l.views[k*l.nr+ri]
	base := (k*l.nr + ri) * l.ne
	snap := Snapshot{Time: ts, Replica: l.reps.list[ri], Endpoints: make([]EndpointLoad, 0, bv.endpoints)}
	var reqs []float64
	for _, ei := range order {
		x := l.tok[base+ei]
		if math.IsNaN(x) {
			continue
		}
		name := l.eps.list[ei]
		pod, share, joined := l.join.podOf(name)
		if !joined {
			l.unjoined[name] = true
			continue
		}
		if gone, last := l.gone(pod, k, ts); gone {
			if _, seen := l.departed[name]; !seen {
				l.departed[name] = DepartedEndpoint{Endpoint: name, Pod: pod, LastSeen: last}
			}
			continue
		}
		ld := EndpointLoad{Endpoint: name, Tokens: x}
		if pod != name {
			ld.Pod = pod
		}
		if row, ok := l.routed[pod]; ok && !math.IsNaN(row[k]) {
			v := row[k] / float64(share)
			ld.Routed = &v
		}
		if rq := l.req[base+ei]; !math.IsNaN(rq) {
			if reqs == nil {
				// One backing array for the request counts.
				reqs = make([]float64, 0, bv.endpoints)
			}
			reqs = append(reqs, rq)
			ld.Requests = &reqs[len(reqs)-1]
		}
		snap.Endpoints = append(snap.Endpoints, ld)
	}
	return snap
}

// inFlight builds one snapshot per grid time from the chosen replica,
// skipping times whose replica is stale or holds non-finite values.
func (e *Estimator) inFlight(f Features, d *eppInputs, j *endpointJoin) InFlight {
	out := InFlight{Status: StatusInconclusive, Source: mEPPInflightTokens, StepSeconds: d.g.step.Seconds(), ReplicaRule: replicaRule, Snapshots: []Snapshot{}}
	if f.InFlightTokens == "" {
		detail := mEPPInflightTokens + " has no series in the lookback"
		if f.Routing == mGIEAttempts {
			detail += " (llm-d-router before 0.10 has no in-flight gauges: upgrade the EPP, or feed the tuner gate records)"
		}
		out.Reasons = []Reason{{Code: ReasonNoSeries, Part: partInFlight, Detail: detail}}
		return out
	}
	if err := d.inflightErr.get(); err != nil {
		out.Reasons = []Reason{failReason(partInFlight, err)}
		return out
	}
	l := e.layoutInFlight(d, j)
	out.Replicas = append([]string(nil), l.reps.list...)
	sort.Strings(out.Replicas)
	order := make([]int, l.ne)
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return l.eps.list[order[a]] < l.eps.list[order[b]] })
	stale, bad := 0, 0
	for k := 0; k < l.n; k++ {
		best := l.bestReplica(k)
		if best < 0 {
			continue
		}
		bv := &l.views[k*l.nr+best]
		ts := d.g.time(k)
		if !math.IsInf(bv.fresh, -1) && ts.Sub(time.Unix(0, int64(bv.fresh*1e9))) > e.cfg.StaleAfter {
			stale++
			continue
		}
		if bv.nonFinite {
			bad++
			continue
		}
		out.Snapshots = append(out.Snapshots, l.snapshot(k, best, ts, order))
	}
	if len(out.Snapshots) == 0 {
		code, detail := ReasonNoSeries, mEPPInflightTokens+" has no values in the lookback"
		switch {
		case len(d.tokens) == 0:
			code = ReasonSeriesEmpty
			detail = mEPPInflightTokens + " exists in the lookback, but reading it per endpoint"
			if m := d.producerMatcher(); m != "" {
				detail += " with " + m
			}
			detail += " returned no series"
		case bad > 0:
			code, detail = ReasonNonFinite, fmt.Sprintf("%d snapshots held NaN or Inf", bad)
		case stale > 0:
			code, detail = ReasonStaleSeries, fmt.Sprintf("%d snapshots had only stale replicas", stale)
		}
		out.Reasons = []Reason{{Code: code, Part: partInFlight, Detail: detail}}
		return out
	}
	out.Status = StatusOK
	if stale+bad > 0 {
		out.Reasons = []Reason{{Code: ReasonSnapshotsSkipped, Part: partInFlight,
			Detail: fmt.Sprintf("%d snapshots skipped: %d stale, %d with NaN or Inf", stale+bad, stale, bad)}}
	}
	if len(l.departed) > 0 {
		names := make([]string, 0, len(l.departed))
		for n := range l.departed {
			names = append(names, n)
		}
		sort.Strings(names)
		var ex []string
		for _, n := range names {
			dep := l.departed[n]
			out.Departed = append(out.Departed, dep)
			if len(ex) < 3 {
				ex = append(ex, fmt.Sprintf("%q (pod %s, last vLLM sample %s)", n, dep.Pod, dep.LastSeen.Format(time.RFC3339)))
			}
		}
		out.Reasons = append(out.Reasons, Reason{Code: ReasonEndpointsDeparted, Part: partInFlight,
			Detail: fmt.Sprintf("%d in-flight endpoints left out of the snapshots after their pod's vLLM series ended (the EPP keeps a departed endpoint's gauge at its last value): %s",
				len(names), strings.Join(ex, ", "))})
	}
	if len(l.unjoined) > 0 {
		names := make([]string, 0, len(l.unjoined))
		for n := range l.unjoined {
			names = append(names, strconv.Quote(n))
		}
		sort.Strings(names)
		out.Reasons = append(out.Reasons, Reason{Code: ReasonEndpointsUnjoined, Part: partInFlight,
			Detail: fmt.Sprintf("%d in-flight endpoints left out of the snapshots: no routed or vLLM pod is named like them (departed pods keep their gauges): %s",
				len(names), strings.Join(names[:min(len(names), 3)], ", "))})
	}
	return out
}

// better reports whether replica a (named an) beats b (named bn).
func better(a *replicaView, an string, b *replicaView, bn string) bool {
	if math.Abs(a.fresh-b.fresh) > 1e-3 && !(math.IsInf(a.fresh, -1) && math.IsInf(b.fresh, -1)) {
		return a.fresh > b.fresh
	}
	if a.endpoints != b.endpoints {
		return a.endpoints > b.endpoints
	}
	if a.total != b.total {
		return a.total > b.total
	}
	return an < bn
}
