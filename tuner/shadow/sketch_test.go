package shadow

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestSketchQuantilesWithinOnePercent(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, dist := range []struct {
		name string
		draw func() float64
	}{
		{"lognormal", func() float64 { return math.Exp(r.NormFloat64()*2 + 5) }},
		{"mixed sign", func() float64 { return r.NormFloat64() * 1e5 }},
		{"with zeros", func() float64 {
			if r.IntN(3) == 0 {
				return 0
			}
			return r.ExpFloat64() * 300
		}},
	} {
		t.Run(dist.name, func(t *testing.T) {
			var s Sketch
			vals := make([]float64, 20001)
			for i := range vals {
				vals[i] = dist.draw()
				s.Add(vals[i])
			}
			slices.Sort(vals)
			for _, q := range []float64{0, 0.1, 0.5, 0.9, 0.99, 1} {
				want := vals[int(q*float64(len(vals)-1))]
				got := s.Quantile(q)
				if math.Abs(got-want) > 0.01*math.Abs(want)+1e-9 {
					t.Errorf("q%v = %v, want %v ±1%%", q, got, want)
				}
			}
		})
	}
}

func TestSketchEmptyIsNaN(t *testing.T) {
	var s Sketch
	if !math.IsNaN(s.Quantile(0.5)) {
		t.Fatal("empty sketch quantile is not NaN")
	}
	s.Add(math.NaN())
	if s.Count() != 0 {
		t.Fatal("NaN counted")
	}
}

func TestSketchMerge(t *testing.T) {
	var a, b, all Sketch
	for i := 1; i <= 1000; i++ {
		v := float64(i*i) - 5000
		all.Add(v)
		if i%2 == 0 {
			a.Add(v)
		} else {
			b.Add(v)
		}
	}
	a.Merge(&b)
	for _, q := range []float64{0.01, 0.5, 0.99} {
		if a.Quantile(q) != all.Quantile(q) {
			t.Fatalf("merged q%v = %v, want %v", q, a.Quantile(q), all.Quantile(q))
		}
	}
}
