package scenario

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// DistKind names a distribution family.
type DistKind string

// Distribution families a scenario may use.
const (
	DistConst       DistKind = "const"
	DistUniform     DistKind = "uniform"
	DistExponential DistKind = "exponential"
	DistLognormal   DistKind = "lognormal"
)

// Dist is a one-dimensional distribution: a constant, uniform on [Min, Max],
// exponential with Mean, or lognormal with Mean and coefficient of variation
// CV. For every kind but uniform, Min and Max (when > 0) clamp the samples.
type Dist struct {
	Kind  DistKind `yaml:"dist" required:"true"`
	Value float64  `yaml:"value"` // const
	Mean  float64  `yaml:"mean"`  // exponential, lognormal
	CV    float64  `yaml:"cv"`    // lognormal
	Min   float64  `yaml:"min"`
	Max   float64  `yaml:"max"` // 0 = unbounded (except uniform)

	mu, sigma float64
}

// ConstDist returns the constant distribution v.
func ConstDist(v float64) Dist { return Dist{Kind: DistConst, Value: v} }

// LognormalDist returns a lognormal distribution with the given mean and
// coefficient of variation, clamped to [lo, hi] (hi 0 = unbounded).
func LognormalDist(mean, cv, lo, hi float64) Dist {
	d := Dist{Kind: DistLognormal, Mean: mean, CV: cv, Min: lo, Max: hi}
	d.prepare()
	return d
}

// validate checks the parameters and precomputes the lognormal's.
func (d *Dist) validate() error {
	bad := func(f string, a ...any) error { return fmt.Errorf(f, a...) }
	for _, v := range []float64{d.Value, d.Mean, d.CV, d.Min, d.Max} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return bad("parameters must be finite")
		}
	}
	if d.Min < 0 || d.Max < 0 {
		return bad("min and max must be >= 0")
	}
	if d.Max > 0 && d.Min > d.Max {
		return bad("min %v is above max %v", d.Min, d.Max)
	}
	switch d.Kind {
	case DistConst:
		if d.Value < 0 {
			return bad("value must be >= 0, got %v", d.Value)
		}
	case DistUniform:
		if d.Max <= 0 || d.Max < d.Min {
			return bad("uniform needs 0 <= min <= max and max > 0")
		}
	case DistExponential:
		if d.Mean <= 0 {
			return bad("exponential needs mean > 0, got %v", d.Mean)
		}
	case DistLognormal:
		if d.Mean <= 0 {
			return bad("lognormal needs mean > 0, got %v", d.Mean)
		}
		if d.CV <= 0 {
			return bad("lognormal needs cv > 0, got %v", d.CV)
		}
	default:
		return bad("unknown dist %q (const, uniform, exponential, lognormal)", d.Kind)
	}
	d.prepare()
	return nil
}

func (d *Dist) prepare() {
	if d.Kind == DistLognormal {
		s2 := math.Log1p(d.CV * d.CV)
		d.sigma = math.Sqrt(s2)
		d.mu = math.Log(d.Mean) - s2/2
	}
}

// Sample draws one value.
func (d *Dist) Sample(r *rand.Rand) float64 {
	var v float64
	switch d.Kind {
	case DistConst:
		return d.Value
	case DistUniform:
		return d.Min + r.Float64()*(d.Max-d.Min)
	case DistExponential:
		v = r.ExpFloat64() * d.Mean
	case DistLognormal:
		v = math.Exp(d.mu + d.sigma*r.NormFloat64())
	}
	if v < d.Min {
		v = d.Min
	}
	if d.Max > 0 && v > d.Max {
		v = d.Max
	}
	return v
}

// SampleInt draws one value rounded to an integer of at least lo.
func (d *Dist) SampleInt(r *rand.Rand, lo int) int {
	v := int(math.Round(d.Sample(r)))
	if v < lo {
		v = lo
	}
	return v
}

// empiricalMeanInt is the mean of SampleInt(·, lo) estimated from a fixed
// stream, so it is the same on every run.
func (d *Dist) empiricalMeanInt(lo int) float64 {
	if d.Kind == DistConst {
		return float64(max(lo, int(math.Round(d.Value))))
	}
	r := rand.New(rand.NewPCG(0x5eed, 0xd157))
	const n = 20000
	var sum float64
	for range n {
		sum += float64(d.SampleInt(r, lo))
	}
	return sum / n
}

// String renders the distribution compactly.
func (d Dist) String() string {
	switch d.Kind {
	case DistConst:
		return fmt.Sprintf("%g", d.Value)
	case DistUniform:
		return fmt.Sprintf("uniform[%g,%g]", d.Min, d.Max)
	case DistExponential:
		return fmt.Sprintf("exponential(mean=%g)", d.Mean)
	}
	return fmt.Sprintf("lognormal(mean=%g,cv=%g)", d.Mean, d.CV)
}
