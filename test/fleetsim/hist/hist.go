// Package hist is a classic Prometheus histogram: fixed upper bounds, a
// count per bucket (the last one +Inf), a sum and a count.
package hist

import "sort"

// Hist is a classic histogram: Counts per bucket of Bounds (the last one
// +Inf), the Sum of the observations and their Count.
type Hist struct {
	Bounds []float64
	Counts []int64
	Sum    float64
	Count  int64
}

// New returns an empty histogram with the given upper bounds.
func New(bounds []float64) Hist {
	return Hist{Bounds: bounds, Counts: make([]int64, len(bounds)+1)}
}

// Observe adds one observation of v.
func (h *Hist) Observe(v float64) { h.ObserveN(v, 1) }

// ObserveN adds n observations of v.
func (h *Hist) ObserveN(v float64, n int64) {
	i := sort.SearchFloat64s(h.Bounds, v)
	h.Counts[i] += n
	h.Sum += v * float64(n)
	h.Count += n
}
