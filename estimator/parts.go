package estimator

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// distInputs are the raw results for the token distributions.
type distInputs struct {
	promptBuckets, promptSum model.Vector
	promptErr                errSlot
	cachedBuckets, cachedSum model.Vector
	hits, queries            model.Vector
	cachedErr                errSlot
}

func (e *Estimator) histSelector(t Target, name string) string {
	if strings.HasPrefix(name, "llm_d_epp_") {
		return t.EPPSelector
	}
	return t.VLLMSelector
}

// queueDistributions queues the prompt and cached-token queries.
func (e *Estimator) queueDistributions(r *runner, t Target, f Features, at time.Time, d *distInputs) {
	lb := promDur(e.cfg.Lookback)
	hist := func(name string, buckets, sum *model.Vector, slot *errSlot) {
		sel := e.histSelector(t, name)
		r.spawn(func() {
			v, err := r.instant("sum by (le) (increase("+vec(name+"_bucket", sel)+"["+lb+"]))", at)
			*buckets = v
			slot.set(err)
		})
		r.spawn(func() {
			v, err := r.instant("sum(increase("+vec(name+"_sum", sel)+"["+lb+"]))", at)
			*sum = v
			slot.set(err)
		})
	}
	if f.PromptHistogram != "" {
		hist(f.PromptHistogram, &d.promptBuckets, &d.promptSum, &d.promptErr)
	}
	switch f.CachedTokens {
	case "":
	case mEPPCachedTokens:
		hist(mEPPCachedTokens, &d.cachedBuckets, &d.cachedSum, &d.cachedErr)
	default:
		queries := mPrefixQueries
		if f.CachedTokens == mGPUPrefixHits {
			queries = mGPUPrefixQuery
		}
		r.spawn(func() {
			v, err := r.instant("sum(increase("+vec(f.CachedTokens, t.VLLMSelector)+"["+lb+"]))", at)
			d.hits = v
			d.cachedErr.set(err)
		})
		r.spawn(func() {
			v, err := r.instant("sum(increase("+vec(queries, t.VLLMSelector)+"["+lb+"]))", at)
			d.queries = v
			d.cachedErr.set(err)
		})
	}
}

func scalarOf(v model.Vector) (float64, bool) {
	if len(v) == 0 {
		return 0, false
	}
	return float64(v[0].Value), true
}

// histDistribution turns bucket and sum results into a Distribution.
func histDistribution(part, source string, buckets, sum model.Vector) Distribution {
	if len(buckets) == 0 {
		return Distribution{Status: StatusInconclusive, Source: source,
			Reasons: []Reason{{Code: ReasonNoSeries, Part: part, Detail: source + "_bucket has no series in the lookback"}}}
	}
	cum, err := cumBuckets(buckets)
	if err != nil {
		return Distribution{Status: StatusInconclusive, Source: source,
			Reasons: []Reason{{Code: ReasonNonFinite, Part: part, Detail: err.Error()}}}
	}
	s, ok := scalarOf(sum)
	if !ok {
		s = -1
	} else if !finite(s) {
		return Distribution{Status: StatusInconclusive, Source: source,
			Reasons: []Reason{{Code: ReasonNonFinite, Part: part, Detail: fmt.Sprintf("%s_sum increase is %v", source, s)}}}
	}
	return distributionFrom(part, source, cum, s)
}

// distResults fills the prompt and cached-token distributions and the request rate.
func (e *Estimator) distResults(t Target, f Features, d *distInputs, est *Estimates, stale *Reason) {
	vllmStale := func(name string) bool { return stale != nil && !strings.HasPrefix(name, "llm_d_epp_") }
	switch {
	case f.PromptHistogram == "":
		est.Prompt = Distribution{Status: StatusInconclusive, Reasons: []Reason{{Code: ReasonNoSeries, Part: partPrompt,
			Detail: "neither " + mPromptHist + " nor " + mEPPInputTokens + " exists"}}}
	case vllmStale(f.PromptHistogram):
		r := *stale
		r.Part = partPrompt
		est.Prompt = Distribution{Status: StatusInconclusive, Source: f.PromptHistogram, Reasons: []Reason{r}}
	case d.promptErr.get() != nil:
		est.Prompt = Distribution{Status: StatusInconclusive, Source: f.PromptHistogram, Reasons: []Reason{failReason(partPrompt, d.promptErr.get())}}
	default:
		est.Prompt = histDistribution(partPrompt, f.PromptHistogram, d.promptBuckets, d.promptSum)
	}
	if est.Prompt.Status == StatusOK {
		est.RequestRate = Scalar{Status: StatusOK, Value: ptr(est.Prompt.Count / e.cfg.Lookback.Seconds()), Source: f.PromptHistogram + "_count"}
	} else {
		est.RequestRate = Scalar{Status: StatusInconclusive, Source: f.PromptHistogram + "_count"}
		for _, r := range est.Prompt.Reasons {
			r.Part = partReqRate
			est.RequestRate.Reasons = append(est.RequestRate.Reasons, r)
		}
	}

	switch {
	case f.CachedTokens == "":
		est.Cached = Distribution{Status: StatusInconclusive, Reasons: []Reason{{Code: ReasonNoSeries, Part: partCached,
			Detail: "neither " + mEPPCachedTokens + " nor vLLM prefix-cache counters exist"}}}
	case vllmStale(f.CachedTokens):
		r := *stale
		r.Part = partCached
		est.Cached = Distribution{Status: StatusInconclusive, Source: f.CachedTokens, Reasons: []Reason{r}}
	case d.cachedErr.get() != nil:
		est.Cached = Distribution{Status: StatusInconclusive, Source: f.CachedTokens, Reasons: []Reason{failReason(partCached, d.cachedErr.get())}}
	case f.CachedTokens == mEPPCachedTokens:
		est.Cached = histDistribution(partCached, mEPPCachedTokens, d.cachedBuckets, d.cachedSum)
	default:
		est.Cached = counterCached(f.CachedTokens, d, est.Prompt)
	}
}

// counterCached derives the cached-token mean from vLLM's prefix-cache
// counters: hit rate × the prompt mean (no per-request distribution).
func counterCached(source string, d *distInputs, prompt Distribution) Distribution {
	out := Distribution{Status: StatusInconclusive, Source: source}
	h, okH := scalarOf(d.hits)
	q, okQ := scalarOf(d.queries)
	switch {
	case !okH || !okQ:
		out.Reasons = []Reason{{Code: ReasonNoSeries, Part: partCached, Detail: "prefix-cache counters have no series in the lookback"}}
	case !finite(h) || !finite(q):
		out.Reasons = []Reason{{Code: ReasonNonFinite, Part: partCached, Detail: fmt.Sprintf("hits %v, queries %v", h, q)}}
	case !(q > 0):
		out.Reasons = []Reason{{Code: ReasonNoRequests, Part: partCached, Detail: "no prefix-cache queries in the lookback"}}
	default:
		out.Status = StatusOK
		out.HitRate = ptr(math.Min(math.Max(h/q, 0), 1))
		out.Count = prompt.Count
		if prompt.Mean != nil {
			out.Mean = ptr(*out.HitRate * *prompt.Mean)
		}
	}
	return out
}

// eppInputs are the raw results for in-flight snapshots and routing.
type eppInputs struct {
	g                      grid
	tokens, reqs, freshest model.Matrix
	// routed are the scheduling attempts per endpoint in each snapshot's step.
	routed      model.Matrix
	inflightErr errSlot
	routing     model.Vector
	routingErr  errSlot
}

// replicaRule documents how one EPP replica is chosen per snapshot.
const replicaRule = "per snapshot, the EPP replica whose in-flight samples are freshest; ties go to the replica reporting more endpoints, then more in-flight tokens, then the smaller name; replicas are never added up"

// queueEPP queues the in-flight and routing queries.
func (e *Estimator) queueEPP(r *runner, t Target, f Features, at time.Time, d *eppInputs) {
	cfg := e.cfg
	lb := promDur(cfg.Lookback)
	step := cfg.SnapshotStep
	if min := cfg.Lookback / time.Duration(cfg.MaxPointsPerSeries-1); step < min {
		step = min.Truncate(time.Second) + time.Second
	}
	n := int(cfg.Lookback / step)
	if n < 1 {
		n = 1
	}
	d.g = grid{start: at.Add(-time.Duration(n-1) * step), step: step, n: n}
	repl := strings.Join(cfg.ReplicaLabels, ", ")
	sel := t.EPPSelector
	if f.InFlightTokens != "" {
		r.spawn(func() {
			m, err := r.rangeQuery("sum by (endpoint_name, "+repl+") ("+vec(mEPPInflightTokens, sel)+")", d.g.start, at, step)
			d.tokens = m
			d.inflightErr.set(err)
		})
		if f.InFlightRequests != "" {
			r.spawn(func() {
				m, err := r.rangeQuery("sum by (endpoint_name, "+repl+") ("+vec(mEPPInflightReqs, sel)+")", d.g.start, at, step)
				d.reqs = m
				d.inflightErr.set(err)
			})
		}
	}
	if f.Routing != "" {
		r.spawn(func() {
			v, err := r.instant("sum by (endpoint_name) (increase("+vec(mEPPAttempts, sel)+"["+lb+"]))", at)
			d.routing = v
			d.routingErr.set(err)
		})
		if f.InFlightTokens != "" {
			// Where requests went around each snapshot: the endpoints a
			// request is pinned to at that moment (summed over EPP replicas,
			// which route different requests).
			r.spawn(func() {
				m, err := r.rangeQuery("sum by (endpoint_name) (increase("+vec(mEPPAttempts, sel)+"["+promDur(step)+"]))", d.g.start, at, step)
				if err == nil {
					d.routed = m
				}
			})
		}
	}
}

// queueFreshness queues, when the in-flight series come from more than one
// EPP replica, the query dating each replica's newest sample per snapshot
// (the replica choice needs it; with one replica, Prometheus' staleness
// handling and the target's staleness check bound the age).
func (e *Estimator) queueFreshness(r *runner, t Target, at time.Time, d *eppInputs) {
	if d.inflightErr.get() != nil {
		return
	}
	reps := map[string]bool{}
	for _, ss := range d.tokens {
		reps[e.replicaOf(ss.Metric)] = true
	}
	if len(reps) < 2 {
		return
	}
	repl := strings.Join(e.cfg.ReplicaLabels, ", ")
	r.spawn(func() {
		m, err := r.rangeQuery("max by ("+repl+") (timestamp("+vec(mEPPInflightTokens, t.EPPSelector)+"))", d.g.start, at, d.g.step)
		d.freshest = m
		d.inflightErr.set(err)
	})
}

func (e *Estimator) replicaOf(m model.Metric) string {
	var parts []string
	for _, l := range e.cfg.ReplicaLabels {
		if v := string(m[model.LabelName(l)]); v != "" {
			parts = append(parts, v)
		}
	}
	return strings.Join(parts, "/")
}

// replicaView is one replica's view at one snapshot time.
type replicaView struct {
	fresh     float64 // newest sample time, seconds; -Inf when unknown
	endpoints int
	total     float64
	nonFinite bool
}

// eppIndex numbers endpoints and replicas so snapshot values live in flat slices.
type eppIndex struct {
	names map[string]int
	list  []string
}

func (x *eppIndex) id(name string) int {
	if i, ok := x.names[name]; ok {
		return i
	}
	if x.names == nil {
		x.names = map[string]int{}
	}
	x.names[name] = len(x.list)
	x.list = append(x.list, name)
	return len(x.list) - 1
}

// eppSeries returns each series' endpoint and replica ids, skipping
// series without an endpoint name.
func (e *Estimator) eppSeries(m model.Matrix, eps, reps *eppIndex) (ep, rep []int) {
	ep, rep = make([]int, len(m)), make([]int, len(m))
	for i, ss := range m {
		name := string(ss.Metric["endpoint_name"])
		if name == "" {
			ep[i] = -1
			continue
		}
		ep[i], rep[i] = eps.id(name), reps.id(e.replicaOf(ss.Metric))
	}
	return ep, rep
}

// eppResults fills the in-flight snapshots and the routing shares.
func (e *Estimator) eppResults(f Features, d *eppInputs, est *Estimates) {
	est.InFlight = e.inFlight(f, d)
	est.Routing = routing(f, d)
}

func routing(f Features, d *eppInputs) Routing {
	out := Routing{Status: StatusInconclusive, Source: mEPPAttempts, Endpoints: []EndpointShare{}}
	if f.Routing == "" {
		out.Reasons = []Reason{{Code: ReasonNoSeries, Part: partRouting, Detail: mEPPAttempts + " has no series in the lookback"}}
		return out
	}
	if err := d.routingErr.get(); err != nil {
		out.Reasons = []Reason{failReason(partRouting, err)}
		return out
	}
	var total float64
	for _, s := range d.routing {
		ep, x := string(s.Metric["endpoint_name"]), float64(s.Value)
		if ep == "" {
			continue
		}
		if !finite(x) {
			out.Reasons = []Reason{{Code: ReasonNonFinite, Part: partRouting, Detail: fmt.Sprintf("attempts for %s are %v", ep, x)}}
			return out
		}
		out.Endpoints = append(out.Endpoints, EndpointShare{Endpoint: ep, Attempts: x})
		total += x
	}
	if !(total > 0) {
		out.Reasons = []Reason{{Code: ReasonNoRequests, Part: partRouting, Detail: "no scheduling attempts in the lookback"}}
		out.Endpoints = []EndpointShare{}
		return out
	}
	sort.Slice(out.Endpoints, func(i, j int) bool { return out.Endpoints[i].Endpoint < out.Endpoints[j].Endpoint })
	for i := range out.Endpoints {
		out.Endpoints[i].Share = out.Endpoints[i].Attempts / total
	}
	out.Status = StatusOK
	return out
}
