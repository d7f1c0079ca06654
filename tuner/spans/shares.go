package spans

import (
	"fmt"
	"math"
)

// ShareOptions set when span shares disagree with the counter's.
type ShareOptions struct {
	// Alpha is the significance level of the chi-square test (default 1e-3).
	Alpha float64
	// Tolerance is the largest absolute share difference accepted whatever
	// the test says (default 0.03): the windows never align exactly.
	Tolerance float64
	// MinSpans is the fewest spans compared (default 30).
	MinSpans uint64
	// SpansPerTrace divides the statistic (first-order Rao–Scott
	// correction for trace-clustered sampling; default 1).
	SpansPerTrace float64
}

func (o *ShareOptions) defaults() {
	if o.Alpha <= 0 {
		o.Alpha = 1e-3
	}
	if o.Tolerance <= 0 {
		o.Tolerance = 0.03
	}
	if o.MinSpans == 0 {
		o.MinSpans = 30
	}
	if o.SpansPerTrace < 1 {
		o.SpansPerTrace = 1
	}
}

// Shares is the comparison of span outcome shares with the counter's.
type Shares struct {
	// SpanShare and CounterShare per Tally label.
	SpanShare, CounterShare [NumLabels]float64
	// Chi2 is Pearson's statistic over the labels the counter or the spans
	// have (+Inf when spans have a label the counter never counted), DF its
	// degrees of freedom and P its p-value.
	Chi2 float64
	DF   int
	P    float64
	// MaxDiff is the largest |SpanShare − CounterShare|, at label Worst.
	MaxDiff float64
	Worst   int
	// Enough: at least MinSpans spans and some counted decisions.
	Enough bool
	// Disagree: Enough, P < Alpha and MaxDiff > Tolerance.
	Disagree bool
}

// String summarises the comparison.
func (s *Shares) String() string {
	return fmt.Sprintf("%s: spans %.3f vs counter %.3f (chi2 %.1f, df %d, p %.2g)",
		LabelName(s.Worst), s.SpanShare[s.Worst], s.CounterShare[s.Worst], s.Chi2, s.DF, s.P)
}

// CompareShares holds the spans' outcome shares against the counter's
// increase per outcome over the same window (indexed by Tally label; use
// LabelOfName for the counter's label values).
func CompareShares(t *Tally, counter *[NumLabels]float64, o ShareOptions) Shares {
	o.defaults()
	var s Shares
	var total float64
	for _, c := range counter {
		total += math.Max(c, 0)
	}
	s.Enough = t.Total >= o.MinSpans && total >= 0.5
	n := float64(t.Total)
	cells := 0
	for i := range NumLabels {
		if total > 0 {
			s.CounterShare[i] = math.Max(counter[i], 0) / total
		}
		if n > 0 {
			s.SpanShare[i] = float64(t.N[i]) / n
		}
		if d := math.Abs(s.SpanShare[i] - s.CounterShare[i]); d > s.MaxDiff {
			s.MaxDiff, s.Worst = d, i
		}
		if s.CounterShare[i] == 0 && t.N[i] == 0 {
			continue
		}
		cells++
		e := n * s.CounterShare[i]
		if e == 0 {
			s.Chi2 = math.Inf(1)
			continue
		}
		d := float64(t.N[i]) - e
		s.Chi2 += d * d / e
	}
	s.Chi2 /= o.SpansPerTrace
	s.DF = max(cells-1, 1)
	s.P = ChiSquareSF(s.Chi2, s.DF)
	s.Disagree = s.Enough && s.P < o.Alpha && s.MaxDiff > o.Tolerance
	return s
}

// ChiSquareSF is the survival function of the chi-square distribution with
// df degrees of freedom: P(X ≥ x).
func ChiSquareSF(x float64, df int) float64 {
	if math.IsInf(x, 1) {
		return 0
	}
	if x <= 0 || df <= 0 {
		return 1
	}
	return gammaQ(float64(df)/2, x/2)
}

// gammaQ is the regularized upper incomplete gamma function Q(a, x), by
// its series below a+1 and its continued fraction above (Numerical Recipes
// §6.2).
func gammaQ(a, x float64) float64 {
	lg, _ := math.Lgamma(a)
	if x < a+1 {
		sum, del := 1/a, 1/a
		for n := 1.0; n < 1000; n++ {
			del *= x / (a + n)
			sum += del
			if math.Abs(del) < math.Abs(sum)*1e-15 {
				break
			}
		}
		return 1 - sum*math.Exp(-x+a*math.Log(x)-lg)
	}
	const tiny = 1e-300
	b := x + 1 - a
	c, d := 1/tiny, 1/b
	h := d
	for i := 1.0; i < 1000; i++ {
		an := -i * (i - a)
		b += 2
		d = an*d + b
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = b + an/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		del := d * c
		h *= del
		if math.Abs(del-1) < 1e-15 {
			break
		}
	}
	return math.Exp(-x+a*math.Log(x)-lg) * h
}
