package estimator

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/gatetuner/gatetuner/estimator/prom"
)

// runner executes one estimation's queries with bounded concurrency and
// counts them.
type runner struct {
	ctx context.Context
	q   prom.Querier
	cfg Config
	sem chan struct{}
	wg  sync.WaitGroup

	mu    sync.Mutex
	stats QueryStats
}

func newRunner(ctx context.Context, q prom.Querier, cfg Config) *runner {
	return &runner{ctx: ctx, q: q, cfg: cfg, sem: make(chan struct{}, cfg.Concurrency)}
}

// spawn runs f in its own goroutine once a concurrency slot is free.
func (r *runner) spawn(f func()) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		select {
		case r.sem <- struct{}{}:
		case <-r.ctx.Done():
			f() // queries fail fast on the canceled context and record it
			return
		}
		defer func() { <-r.sem }()
		f()
	}()
}

func (r *runner) wait() { r.wg.Wait() }

func (r *runner) count(points int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stats.Queries++
	if err != nil {
		r.stats.Failed++
	}
	if points > r.stats.MaxPoints {
		r.stats.MaxPoints = points
	}
}

// instant evaluates q at ts.
func (r *runner) instant(q string, ts time.Time) (model.Vector, error) {
	v, _, err := r.q.Query(r.ctx, q, ts)
	r.count(1, err)
	return v, err
}

// points is the number of evaluation steps of a range query.
func points(start, end time.Time, step time.Duration) int {
	return int(end.Sub(start)/step) + 1
}

// rangeQuery evaluates q from start to end every step, splitting the range
// into pieces of at most MaxPointsPerSeries points and merging the series.
func (r *runner) rangeQuery(q string, start, end time.Time, step time.Duration) (model.Matrix, error) {
	maxPts := r.cfg.MaxPointsPerSeries
	merged := map[model.Fingerprint]*model.SampleStream{}
	var order []model.Fingerprint
	for s := start; !s.After(end); {
		e := s.Add(time.Duration(maxPts-1) * step)
		if e.After(end) {
			e = end
		}
		m, _, err := r.q.QueryRange(r.ctx, q, v1.Range{Start: s, End: e, Step: step})
		r.count(points(s, e, step), err)
		if err != nil {
			return nil, err
		}
		for _, ss := range m {
			fp := ss.Metric.Fingerprint()
			if prev, ok := merged[fp]; ok {
				prev.Values = append(prev.Values, ss.Values...)
				continue
			}
			merged[fp] = ss
			order = append(order, fp)
		}
		s = e.Add(step)
	}
	out := make(model.Matrix, 0, len(order))
	for _, fp := range order {
		out = append(out, merged[fp])
	}
	return out, nil
}

// reasonFor maps a query failure to a reason code.
func reasonFor(err error) ReasonCode {
	var ne errNonFinite
	if errors.As(err, &ne) {
		return ReasonNonFinite
	}
	switch prom.KindOf(err) {
	case prom.KindUnavailable:
		return ReasonPrometheusUnavailable
	case prom.KindTimeout:
		return ReasonPrometheusTimeout
	case prom.KindCanceled:
		return ReasonCanceled
	case prom.KindBadQuery:
		return ReasonBadQuery
	case prom.KindRejected:
		return ReasonPrometheusRejected
	case prom.KindBadResponse:
		return ReasonBadResponse
	}
	if errors.Is(err, context.Canceled) {
		return ReasonCanceled
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return ReasonPrometheusTimeout
	}
	return ReasonPrometheusUnavailable
}

func failReason(part string, err error) Reason {
	return Reason{Code: reasonFor(err), Part: part, Detail: failDetail(err)}
}

// failDetail describes a query failure with its cause first and the query
// shortened.
func failDetail(err error) string {
	var qe *prom.Error
	if !errors.As(err, &qe) {
		return err.Error()
	}
	s := qe.Kind.String()
	if qe.StatusCode != 0 {
		s += fmt.Sprintf(" (HTTP %d)", qe.StatusCode)
	}
	if qe.Attempts > 1 {
		s += fmt.Sprintf(" after %d attempts", qe.Attempts)
	}
	if qe.Err != nil {
		s += ": " + qe.Err.Error()
	}
	q := qe.Query
	if len(q) > 100 {
		q = q[:100] + "…"
	}
	return s + "; query " + q
}

// grid is the evaluation times of a range query: start + k·step, k < n.
type grid struct {
	start time.Time
	step  time.Duration
	n     int
}

func (g grid) time(k int) time.Time { return g.start.Add(time.Duration(k) * g.step) }

func (g grid) index(ts model.Time) (int, bool) {
	d := ts.Time().Sub(g.start)
	if d < 0 {
		return 0, false
	}
	k := int((d + g.step/2) / g.step)
	if k >= g.n {
		return 0, false
	}
	return k, true
}

// column is one series' values on a grid; ok marks the steps that had a value.
type column struct {
	v  []float64
	ok []bool
}

func (c column) at(k int) (float64, bool) {
	if c.v == nil {
		return 0, false
	}
	return c.v[k], c.ok[k]
}

// engineKey identifies one vLLM engine.
type engineKey struct{ ns, pod, engine string }

// endpointKeys name each engine's unit, one EPP endpoint: the pod, or,
// for a pod scraped on several ports (one per data-parallel rank, each an
// EPP endpoint), the pod and port as pod@instance.
type endpointKeys struct{ multi map[podKey]bool }

// newEndpointKeys finds the pods with several instances in m.
func newEndpointKeys(m model.Matrix) endpointKeys {
	inst := map[podKey]map[model.LabelValue]bool{}
	for _, ss := range m {
		k := podKey{string(ss.Metric["namespace"]), string(ss.Metric["pod"])}
		if inst[k] == nil {
			inst[k] = map[model.LabelValue]bool{}
		}
		inst[k][ss.Metric["instance"]] = true
	}
	u := endpointKeys{multi: map[podKey]bool{}}
	for k, is := range inst {
		if len(is) > 1 {
			u.multi[k] = true
		}
	}
	return u
}

// of is the engine of series m.
func (u endpointKeys) of(m model.Metric) engineKey {
	k := engineKey{string(m["namespace"]), string(m["pod"]), string(m["engine"])}
	if u.multi[podKey{k.ns, k.pod}] {
		k.pod += "@" + string(m["instance"])
	}
	return k
}

// podKey identifies one pod (an EPP endpoint; see endpointKeys).
type podKey struct{ ns, pod string }

func (k engineKey) podKey() podKey { return podKey{k.ns, k.pod} }

// columns lays a matrix out on g, one column per engine.
func columns(m model.Matrix, g grid, u endpointKeys) map[engineKey]column {
	out := make(map[engineKey]column, len(m))
	for _, ss := range m {
		k := u.of(ss.Metric)
		c, ok := out[k]
		if !ok {
			c = column{v: make([]float64, g.n), ok: make([]bool, g.n)}
			out[k] = c
		}
		for _, p := range ss.Values {
			if i, ok := g.index(p.Timestamp); ok {
				c.v[i], c.ok[i] = float64(p.Value), true
			}
		}
	}
	return out
}

func sortedPods(set map[podKey]bool) []podKey {
	out := make([]podKey, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].ns != out[j].ns {
			return out[i].ns < out[j].ns
		}
		return out[i].pod < out[j].pod
	})
	return out
}

// podNames renders pods as names, prefixed by the namespace when the set
// spans several.
func podNames(pods []podKey) []string {
	nss := map[string]bool{}
	for _, p := range pods {
		nss[p.ns] = true
	}
	out := make([]string, len(pods))
	for i, p := range pods {
		if len(nss) > 1 && p.ns != "" {
			out[i] = p.ns + "/" + p.pod
		} else {
			out[i] = p.pod
		}
	}
	return out
}

func (k podKey) String() string {
	if k.ns == "" {
		return k.pod
	}
	return fmt.Sprintf("%s/%s", k.ns, k.pod)
}
