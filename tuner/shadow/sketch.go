package shadow

import (
	"math"
)

// Sketch is a log-bucketed histogram whose quantiles carry at most 1 %
// relative error, in memory that grows with the value range, not the count.
// It holds positive and negative values and zeros.
type Sketch struct {
	pos, neg store
	zero     int64
	count    int64
}

const (
	sketchAlpha = 0.01
	// minIndexable is the smallest magnitude kept apart from zero.
	minIndexable = 1e-9
)

var (
	sketchGamma    = (1 + sketchAlpha) / (1 - sketchAlpha)
	sketchLogGamma = math.Log(sketchGamma)
)

type store struct {
	offset int // index of counts[0]
	counts []int64
}

func (s *store) add(i int) { s.addN(i, 1) }

// addN adds n to bucket i.
func (s *store) addN(i int, n int64) {
	if len(s.counts) == 0 {
		s.offset = i
		s.counts = make([]int64, 1, 64)
	}
	if i < s.offset {
		grow := s.offset - i
		c := make([]int64, len(s.counts)+grow, len(s.counts)+grow+64)
		copy(c[grow:], s.counts)
		s.counts, s.offset = c, i
	}
	for i-s.offset >= len(s.counts) {
		s.counts = append(s.counts, 0)
	}
	s.counts[i-s.offset] += n
}

func (s *store) clone() store {
	if s.counts == nil {
		return store{}
	}
	return store{offset: s.offset, counts: append([]int64(nil), s.counts...)}
}

func index(v float64) int { return int(math.Ceil(math.Log(v) / sketchLogGamma)) }

func value(i int) float64 { return 2 * math.Pow(sketchGamma, float64(i)) / (sketchGamma + 1) }

// Add records one value; NaN is ignored and infinities are clamped.
func (s *Sketch) Add(v float64) {
	switch {
	case math.IsNaN(v):
		return
	case math.IsInf(v, 1):
		v = math.MaxFloat64
	case math.IsInf(v, -1):
		v = -math.MaxFloat64
	}
	s.count++
	switch {
	case v > minIndexable:
		s.pos.add(index(v))
	case v < -minIndexable:
		s.neg.add(index(-v))
	default:
		s.zero++
	}
}

// Count is the number of values recorded.
func (s *Sketch) Count() int64 { return s.count }

// Quantile returns the q-quantile (0 ≤ q ≤ 1), or NaN when empty.
func (s *Sketch) Quantile(q float64) float64 {
	if s.count == 0 {
		return math.NaN()
	}
	rank := int64(q * float64(s.count-1))
	// Negative values, most negative first.
	for j := len(s.neg.counts) - 1; j >= 0; j-- {
		if rank < s.neg.counts[j] {
			return -value(j + s.neg.offset)
		}
		rank -= s.neg.counts[j]
	}
	if rank < s.zero {
		return 0
	}
	rank -= s.zero
	for j, c := range s.pos.counts {
		if rank < c {
			return value(j + s.pos.offset)
		}
		rank -= c
	}
	return value(len(s.pos.counts) - 1 + s.pos.offset)
}

// Merge adds o's values to s: bucket by bucket, so a merge costs the
// buckets, not the values.
func (s *Sketch) Merge(o *Sketch) {
	s.pos.merge(&o.pos)
	s.neg.merge(&o.neg)
	s.zero += o.zero
	s.count += o.count
}

// merge adds o's buckets to s, growing s once to cover them.
func (s *store) merge(o *store) {
	first, last := -1, -1
	for j, c := range o.counts {
		if c != 0 {
			if first < 0 {
				first = j
			}
			last = j
		}
	}
	if first < 0 {
		return
	}
	// Touch the ends first so the store grows at most twice.
	s.addN(first+o.offset, o.counts[first])
	if last != first {
		s.addN(last+o.offset, o.counts[last])
	}
	for j := first + 1; j < last; j++ {
		if c := o.counts[j]; c != 0 {
			s.counts[j+o.offset-s.offset] += c
		}
	}
}

// Clone returns an independent copy of s.
func (s *Sketch) Clone() Sketch {
	return Sketch{pos: s.pos.clone(), neg: s.neg.clone(), zero: s.zero, count: s.count}
}
