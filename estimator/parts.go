package estimator

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
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
	// counterErr: the prefix-cache counters read as a fallback failed.
	counterErr errSlot
	// eppRequests is the EPP's input-token histogram count over the
	// lookback (NaN: not read): the requests the EPP saw with usage.
	eppRequests float64
	// pd, when set, is the P/D pool's gate pool the vLLM selector reads.
	pd *pdView
}

func (e *Estimator) histSelector(t Target, name string) string {
	if isEPPName(name) {
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
	d.eppRequests = math.NaN()
	if in := eppInputHistogram(f); in != "" && in != f.PromptHistogram && t.EPPSelector != "" && (d.pd == nil || !d.pd.gateOnPrefill) {
		// (In a P/D pool with the gate in the prefill profile, the gate
		// decides the prefill pods' requests only; the EPP counts them all.)
		// vLLM counts the requests of the engines scraped (llm-d's
		// PodMonitor scrapes rank 0 only); the EPP those with usage.
		r.spawn(func() {
			if v, err := r.instant("sum(increase("+vec(in+"_count", t.EPPSelector)+"["+lb+"]))", at); err == nil && len(v) > 0 {
				d.eppRequests = float64(v[0].Value)
			}
		})
	}
	if f.CachedTokens == mEPPCachedTokens || f.CachedTokens == mGIECachedTokens {
		hist(f.CachedTokens, &d.cachedBuckets, &d.cachedSum, &d.cachedErr)
	}
	if hits := f.PrefixCacheHits; hits != "" && f.CachedTokens != "" {
		// The counters are the source, or the fallback of a partial EPP histogram.
		queries := mPrefixQueries
		if hits == mGPUPrefixHits {
			queries = mGPUPrefixQuery
		}
		slot := &d.cachedErr
		if f.CachedTokens != hits {
			slot = &d.counterErr
		}
		r.spawn(func() {
			v, err := r.instant("sum(increase("+vec(hits, t.VLLMSelector)+"["+lb+"]))", at)
			d.hits = v
			slot.set(err)
		})
		r.spawn(func() {
			v, err := r.instant("sum(increase("+vec(queries, t.VLLMSelector)+"["+lb+"]))", at)
			d.queries = v
			slot.set(err)
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
	vllmStale := func(name string) bool { return stale != nil && !isEPPName(name) }
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
		count, src := est.Prompt.Count, f.PromptHistogram+"_count"
		if finite(d.eppRequests) && d.eppRequests > 1.02*count {
			// Both count a subset; the larger is the better lower bound
			// (within 2 % they differ by requests finishing across the edges).
			count, src = d.eppRequests, eppInputHistogram(f)+"_count (above "+src+")"
		}
		est.RequestRate = Scalar{Status: StatusOK, Value: ptr(count / e.cfg.Lookback.Seconds()), Source: src}
		est.Shape.Requests = count
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
	case f.CachedTokens == mEPPCachedTokens || f.CachedTokens == mGIECachedTokens:
		est.Cached = histDistribution(partCached, f.CachedTokens, d.cachedBuckets, d.cachedSum)
		e.cachedByCoverage(t, f, d, est)
	default:
		est.Cached = counterCached(f.CachedTokens, d, est.Prompt)
	}
}

// eppInputHistogram is the EPP's input-token histogram, "" when none.
func eppInputHistogram(f Features) string { return f.EPPInputTokens }

// minCachedCoverage is the share of requests the EPP's cached-token
// histogram must observe to be the cached-token source when vLLM's
// prefix-cache counters (which count every request) exist.
const minCachedCoverage = 0.5

// cachedByCoverage measures the EPP cached-token histogram's coverage (its
// count against the requests counted) and, below minCachedCoverage, uses
// vLLM's prefix-cache counters when they exist: the EPP observes only
// responses carrying usage (streaming needs include_usage).
func (e *Estimator) cachedByCoverage(_ Target, f Features, d *distInputs, est *Estimates) {
	req := est.Shape.Requests
	if est.Cached.Status != StatusOK || !(req > 0) {
		return
	}
	cov := math.Min(est.Cached.Count/req, 1)
	est.Shape.CachedCoverage = ptr(cov)
	if cov >= 0.9 {
		return
	}
	detail := fmt.Sprintf("%s observed %.0f of %.0f requests (%.0f%%): the EPP observes only responses carrying usage",
		f.CachedTokens, est.Cached.Count, req, 100*cov)
	if cov < minCachedCoverage && f.PrefixCacheHits != "" && d.counterErr.get() == nil {
		est.Cached = counterCached(f.PrefixCacheHits, d, est.Prompt)
		detail += "; vLLM's prefix-cache counters count every request and are used (mean only)"
	}
	est.Cached.Reasons = append(est.Cached.Reasons, Reason{Code: ReasonCachedHistogramPartial, Part: partCached, Detail: detail})
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
	// producers are the in-flight series' producer_name values (phase 1);
	// producer the one read, "" when the series carry none.
	producers []string
	producer  string
	// producerReason holds the in-flight part when the producer is ambiguous or absent.
	producerReason *Reason
	// nsLabel is the label carrying the EPP's own namespace label.
	nsLabel string
	// pd, when set, is the P/D pool's gate pool; vllmSel the vLLM selector
	// restricted to it (its routing comes from vLLM's request counts).
	pd      *pdView
	vllmSel string
	// departSel selects the vLLM series whose end marks a departed pod;
	// alive is each pod's newest vLLM sample per snapshot.
	departSel string
	alive     model.Matrix
}

// queueProducers queues the query naming the in-flight producers and the
// namespace label of the EPP's series (phase 1).
func (e *Estimator) queueProducers(r *runner, t Target, at time.Time, d *eppInputs) {
	r.spawn(func() {
		v, err := r.instant("count by (producer_name, exported_namespace) (last_over_time("+vec(mEPPInflightTokens, t.EPPSelector)+"["+promDur(e.cfg.Lookback)+"]))", at)
		if err != nil {
			return // the in-flight queries fail too and carry the error
		}
		seen := map[string]bool{}
		for _, s := range v {
			seen[string(s.Metric["producer_name"])] = true
			if s.Metric["exported_namespace"] != "" {
				d.nsLabel = "exported_namespace"
			}
		}
		for p := range seen {
			d.producers = append(d.producers, p)
		}
		sort.Strings(d.producers)
		if len(v) > 0 && d.nsLabel == "" {
			d.nsLabel = "namespace"
		}
	})
}

// chooseProducer picks the in-flight producer the gate reads: the target's
// setting (the gate's inFlightLoadProducerName), else the only one.
func (d *eppInputs) chooseProducer(t Target) {
	named := make([]string, 0, len(d.producers))
	for _, p := range d.producers {
		if p != "" {
			named = append(named, p)
		}
	}
	quoted := func() string {
		q := make([]string, len(named))
		for i, p := range named {
			q[i] = strconv.Quote(p)
		}
		return strings.Join(q, ", ")
	}
	switch {
	case t.InFlightProducer != "":
		d.producer = t.InFlightProducer
		if len(d.producers) > 0 && !slices.Contains(d.producers, t.InFlightProducer) {
			d.producerReason = &Reason{Code: ReasonInFlightProducerNotFound, Part: partInFlight,
				Detail: fmt.Sprintf("the target's inFlightProducer %q is not among the in-flight series' producer_name values %s", t.InFlightProducer, quoted())}
		}
	case len(named) == 1:
		d.producer = named[0]
	case len(named) > 1:
		d.producerReason = &Reason{Code: ReasonInFlightProducerAmbiguous, Part: partInFlight,
			Detail: fmt.Sprintf("%s has producer_name %s: set the target's inFlightProducer to the gate's inFlightLoadProducerName (each producer counts the same requests)", mEPPInflightTokens, quoted())}
	}
}

// producerMatcher selects the chosen producer's series.
func (d *eppInputs) producerMatcher() string {
	if d.producer == "" {
		return ""
	}
	return "producer_name=" + strconv.Quote(d.producer)
}

// replicaRule documents how one EPP replica is chosen per snapshot.
const replicaRule = "per snapshot, the EPP replica whose in-flight samples are freshest; ties go to the replica reporting more endpoints, then more in-flight tokens, then the smaller name; replicas are never added up"

// syncedRule documents the snapshots of replicas that share their in-flight load.
const syncedRule = "the target's EPP replicas sync in-flight load (each gauge holds its own share, the gate sees the sum): per snapshot, the sum over replicas"

// replicaLabels are the labels the in-flight queries keep: none when the
// replicas are synced (their gauges add up), else the replica labels.
func (e *Estimator) replicaLabels(t Target) string {
	if t.SyncedEPPReplicas {
		return ""
	}
	return ", " + strings.Join(e.cfg.ReplicaLabels, ", ")
}

// queueEPP queues the in-flight and routing queries.
func (e *Estimator) queueEPP(r *runner, t Target, f Features, at time.Time, d *eppInputs) {
	cfg := e.cfg
	lb := promDur(cfg.Lookback)
	step := cfg.SnapshotStep
	if least := cfg.Lookback / time.Duration(cfg.MaxPointsPerSeries-1); step < least {
		step = least.Truncate(time.Second) + time.Second
	}
	n := int(cfg.Lookback / step)
	if n < 1 {
		n = 1
	}
	d.g = grid{start: at.Add(-time.Duration(n-1) * step), step: step, n: n}
	repl := e.replicaLabels(t)
	sel := t.EPPSelector
	if f.InFlightTokens != "" && d.producerReason == nil {
		r.spawn(func() {
			m, err := r.rangeQuery("sum by (endpoint_name"+repl+") ("+vec(mEPPInflightTokens, sel, d.producerMatcher())+")", d.g.start, at, step)
			d.tokens = m
			d.inflightErr.set(err)
		})
		if f.InFlightRequests != "" {
			r.spawn(func() {
				m, err := r.rangeQuery("sum by (endpoint_name"+repl+") ("+vec(mEPPInflightReqs, sel, d.producerMatcher())+")", d.g.start, at, step)
				d.reqs = m
				d.inflightErr.set(err)
			})
		}
	}
	routeQ := func(rng string) string { return attempts(f, sel, rng) }
	if d.pd != nil && d.pd.gateOnPrefill {
		routeQ = func(rng string) string { return d.pd.poolRouting(d.vllmSel, rng) }
	}
	if f.Routing != "" || (d.pd != nil && d.pd.gateOnPrefill) {
		r.spawn(func() {
			v, err := r.instant(routeQ(lb), at)
			d.routing = v
			d.routingErr.set(err)
		})
		if f.InFlightTokens != "" {
			// Where requests went around each snapshot: the endpoints a
			// request is pinned to at that moment (summed over EPP replicas,
			// which route different requests).
			r.spawn(func() {
				m, err := r.rangeQuery(routeQ(promDur(step)), d.g.start, at, step)
				if err == nil {
					d.routed = m
				}
			})
		}
	}
	if f.InFlightTokens != "" && d.departSel != "" {
		// Each pod's newest vLLM sample per snapshot: an endpoint whose
		// pod's series ended is left out of later snapshots.
		r.spawn(func() {
			m, err := r.rangeQuery("max by (pod) (timestamp("+vec(mWaiting, d.departSel)+"))", d.g.start, at, step)
			if err == nil {
				d.alive = m
			}
		})
	}
}

// queueFreshness queues, when the in-flight series come from more than one
// EPP replica, the query dating each replica's newest sample per snapshot
// (the replica choice needs it; with one replica, Prometheus' staleness
// handling and the target's staleness check bound the age).
func (e *Estimator) queueFreshness(r *runner, t Target, at time.Time, d *eppInputs) {
	if d.inflightErr.get() != nil || t.SyncedEPPReplicas {
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
		m, err := r.rangeQuery("max by ("+repl+") (timestamp("+vec(mEPPInflightTokens, t.EPPSelector, d.producerMatcher())+"))", d.g.start, at, d.g.step)
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

// eppResults fills the routing shares, joins the in-flight endpoints to
// the routed and vLLM pods, and fills the in-flight snapshots in the
// in-flight endpoints' names.
func (e *Estimator) eppResults(t Target, f Features, d *eppInputs, est *Estimates, vllmPods []string) {
	if d.pd != nil {
		// Only the gate pool's endpoints: the other profile's picks are
		// charged in-flight load the gate never compares.
		d.tokens, d.reqs = d.pd.filterEndpoints(d.tokens), d.pd.filterEndpoints(d.reqs)
		if d.pd.gateOnPrefill {
			f.Routing = mRequestSuccess
		}
	}
	est.Routing = routing(f, d)
	var routed []string
	for _, s := range est.Routing.Endpoints {
		if s.Attempts > 0 {
			routed = append(routed, s.Endpoint)
		}
	}
	seen := map[string]bool{}
	var names []string
	for _, ss := range d.tokens {
		if n := string(ss.Metric["endpoint_name"]); n != "" && !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	sort.Strings(names)
	j := joinEndpoints(names, routed, vllmPods)
	if f.Routing == mRequestSuccess && len(routed) > 0 {
		j.join.Right = mRequestSuccess + "{pod}" // a P/D pool's prefill pods, by their requests
	}
	sh := &est.Shape
	sh.Producers, sh.Producer, sh.Synced, sh.EndpointNamespaceLabel = d.producers, d.producer, t.SyncedEPPReplicas, d.nsLabel
	sh.EndpointNaming, sh.RanksPerPod, sh.Endpoints = j.naming(), j.ranksPerPod(), j.rows
	if len(names) > 0 {
		sh.Joins = append(sh.Joins, j.join)
	}
	est.InFlight = e.inFlight(f, d, j)
	if t.SyncedEPPReplicas {
		est.InFlight.ReplicaRule = syncedRule
	}
	sh.Replicas, sh.Departed = est.InFlight.Replicas, est.InFlight.Departed
	switch {
	case d.producerReason != nil:
		est.InFlight = InFlight{Status: StatusInconclusive, Source: mEPPInflightTokens, ReplicaRule: est.InFlight.ReplicaRule,
			Snapshots: []Snapshot{}, Reasons: []Reason{*d.producerReason}}
	case j.unmatchedReason(e.cfg.MinPodCoverage) != nil:
		// Snapshots that cannot be joined to the routing would draw every
		// decision's home endpoint from names no snapshot holds.
		est.InFlight.Status, est.InFlight.Snapshots = StatusInconclusive, []Snapshot{}
		est.InFlight.Reasons = []Reason{*j.unmatchedReason(e.cfg.MinPodCoverage)}
	}
	if j.renamed() {
		est.Routing.Endpoints = j.routingByEndpoint(est.Routing.Endpoints)
	}
}

func routing(f Features, d *eppInputs) Routing {
	out := Routing{Status: StatusInconclusive, Source: mEPPAttempts, Endpoints: []EndpointShare{}}
	if f.Routing != "" {
		out.Source = f.Routing
	}
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
