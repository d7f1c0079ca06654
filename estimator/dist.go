package estimator

import (
	"fmt"
	"math"
	"sort"
	"strconv"

	"github.com/prometheus/common/model"
)

// cumBucket is a classic-histogram bucket: upper bound and cumulative count.
type cumBucket struct {
	le  float64
	cum float64
}

// parseLe reads a bucket bound the way Prometheus does ("1", "1.0", "1e+06",
// "+Inf"); bounds are compared as floats, never as strings.
func parseLe(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("le %q is not a number", s)
	}
	if math.IsNaN(v) {
		return 0, fmt.Errorf("le %q is NaN", s)
	}
	return v, nil
}

// cumBuckets turns a `sum by (le)` result into cumulative buckets in
// ascending order: bounds that parse to the same float are merged (one pod
// may say le="1", another le="1.0"), and counts are made monotone (increase()
// extrapolates each bucket separately).
func cumBuckets(v model.Vector) ([]cumBucket, error) {
	byLe := map[float64]float64{}
	for _, s := range v {
		le, err := parseLe(string(s.Metric[model.BucketLabel]))
		if err != nil {
			return nil, err
		}
		x := float64(s.Value)
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, errNonFinite{fmt.Sprintf("bucket le=%s is %v", s.Metric[model.BucketLabel], x)}
		}
		byLe[le] += x
	}
	out := make([]cumBucket, 0, len(byLe))
	for le, c := range byLe {
		out = append(out, cumBucket{le, c})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].le < out[j].le })
	run := 0.0
	for i := range out {
		if out[i].cum < 0 {
			out[i].cum = 0
		}
		run = math.Max(run, out[i].cum)
		out[i].cum = run
	}
	return out, nil
}

// errNonFinite marks a NaN or ±Inf in the data.
type errNonFinite struct{ what string }

func (e errNonFinite) Error() string { return "non-finite value: " + e.what }

// is125 reports whether v is 1, 2 or 5 times a power of ten.
func is125(v float64) bool {
	if !(v > 0) || math.IsInf(v, 0) {
		return false
	}
	e := math.Floor(math.Log10(v))
	m := v / math.Pow(10, e)
	for _, f := range []float64{1, 2, 5, 10} {
		if math.Abs(m-f) < 1e-9*f {
			return true
		}
	}
	return false
}

// next125 is the next value of the 1-2-5 ladder above v.
func next125(v float64) float64 {
	e := math.Floor(math.Log10(v) + 1e-12)
	p := math.Pow(10, e)
	m := math.Round(v / p)
	switch {
	case m < 2:
		return 2 * p
	case m < 5:
		return 5 * p
	}
	return 10 * p
}

// inferTop is the upper edge assumed for the +Inf bucket: on a 1-2-5 ladder
// (vLLM's token histograms stop at the last value ≤ max_model_len) the next
// value of the ladder, which max_model_len is below; otherwise one more step
// of the ladder's last ratio.
func inferTop(bounds []float64) float64 {
	n := len(bounds)
	top := bounds[n-1]
	ladder := n >= 3
	for _, b := range bounds {
		ladder = ladder && is125(b)
	}
	if ladder {
		return next125(top)
	}
	if n >= 2 && bounds[n-2] > 0 && top > bounds[n-2] {
		return top * top / bounds[n-2]
	}
	return 2 * top
}

// bucketsOf converts cumulative buckets into non-cumulative ones with lower
// and upper edges; topInferred reports an inferred +Inf edge.
func bucketsOf(cum []cumBucket) (bs []Bucket, total float64, topInferred bool) {
	var finite []float64
	for _, c := range cum {
		if !math.IsInf(c.le, 1) {
			finite = append(finite, c.le)
		}
	}
	lower, prev := 0.0, 0.0
	for _, c := range cum {
		upper := c.le
		if math.IsInf(upper, 1) {
			if len(finite) == 0 {
				// Only a +Inf bucket: nothing to place the values on.
				return nil, c.cum, false
			}
			upper = inferTop(finite)
			topInferred = true
		}
		if upper < lower {
			upper = lower
		}
		bs = append(bs, Bucket{Lower: lower, Upper: upper, Count: c.cum - prev})
		lower, prev = upper, c.cum
	}
	if topInferred && bs[len(bs)-1].Count == 0 {
		topInferred = false
	}
	return bs, prev, topInferred
}

// quantileOf returns the q-quantile of bs, interpolating inside a bucket in
// log space (linearly in a bucket starting at 0), and whether it fell in the
// last bucket. It returns NaN when the buckets are empty.
func quantileOf(bs []Bucket, q float64) (float64, int) {
	var total float64
	for _, b := range bs {
		total += b.Count
	}
	if !(total > 0) || math.IsNaN(q) {
		return math.NaN(), -1
	}
	q = math.Min(math.Max(q, 0), 1)
	rank := q * total
	cum := 0.0
	for i, b := range bs {
		if b.Count <= 0 {
			continue
		}
		if cum+b.Count >= rank || i == len(bs)-1 {
			f := (rank - cum) / b.Count
			f = math.Min(math.Max(f, 0), 1)
			if b.Lower <= 0 || b.Upper <= b.Lower {
				return b.Lower + f*(b.Upper-b.Lower), i
			}
			return b.Lower * math.Pow(b.Upper/b.Lower, f), i
		}
		cum += b.Count
	}
	last := len(bs) - 1
	return bs[last].Upper, last
}

// Quantile returns the q-quantile of the distribution's buckets (log-space
// interpolation inside a bucket), NaN when it has none. Quantile(u) with u
// uniform in [0,1) draws a sample.
func (d *Distribution) Quantile(q float64) float64 {
	v, _ := quantileOf(d.Buckets, q)
	return v
}

// distributionFrom builds a Distribution from cumulative buckets and the
// histogram's summed values (sum < 0 means unknown).
func distributionFrom(part, source string, cum []cumBucket, sum float64) Distribution {
	d := Distribution{Status: StatusInconclusive, Source: source}
	bs, total, topInferred := bucketsOf(cum)
	d.Count = total
	if len(bs) == 0 || !(total > 0) {
		d.Reasons = append(d.Reasons, Reason{Code: ReasonNoRequests, Part: part, Detail: source + " did not increase in the lookback"})
		return d
	}
	d.Buckets, d.TopBucketInferred = bs, topInferred
	d.Status = StatusOK
	if sum >= 0 && !math.IsInf(sum, 0) && !math.IsNaN(sum) {
		d.Mean = ptr(sum / total)
	}
	inTop := false
	for _, q := range []struct {
		p   float64
		dst **float64
	}{{0.5, &d.P50}, {0.9, &d.P90}, {0.99, &d.P99}} {
		v, idx := quantileOf(bs, q.p)
		if idx == len(bs)-1 && topInferred {
			inTop = true
		}
		*q.dst = ptr(v)
	}
	if inTop {
		d.Reasons = append(d.Reasons, Reason{Code: ReasonTopBucket, Part: part,
			Detail: fmt.Sprintf("a quantile lies above the top finite bucket %g; edge inferred as %g", bs[len(bs)-1].Lower, bs[len(bs)-1].Upper)})
	}
	return d
}

func ptr(v float64) *float64 { return &v }
