package spans_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/spans"
)

func TestChiSquareSFMatchesTables(t *testing.T) {
	cases := []struct {
		x    float64
		df   int
		want float64
	}{
		{3.841459, 1, 0.05}, {6.634897, 1, 0.01}, {11.0705, 5, 0.05}, {20.51501, 5, 0.001},
		{0, 3, 1}, {math.Inf(1), 3, 0}, {1, 2, math.Exp(-0.5)}, {100, 2, math.Exp(-50)},
	}
	for _, c := range cases {
		if got := spans.ChiSquareSF(c.x, c.df); math.Abs(got-c.want) > 1e-5*math.Max(c.want, 1e-10) && math.Abs(got-c.want) > 1e-12 {
			t.Errorf("SF(%v, %d) = %v want %v", c.x, c.df, got, c.want)
		}
	}
}

// draw samples n spans with the counter's shares.
func draw(rng *rand.Rand, n int, shares []float64) spans.Tally {
	var t spans.Tally
	for range n {
		u := rng.Float64()
		i := 0
		for ; i < len(shares)-1 && u >= shares[i]; i++ {
			u -= shares[i]
		}
		t.N[i]++
		t.Total++
	}
	return t
}

func TestSharesAgreeWithTheCounterTheySampleAndDisagreeWithAnother(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	counter := [spans.NumLabels]float64{gate.OutcomeNotApplicable: 500, gate.OutcomeNoMatch: 3000,
		gate.OutcomeSticky: 5500, gate.OutcomeLoadOverride: 1000}
	var shares []float64
	for _, c := range counter {
		shares = append(shares, c/10000)
	}
	falseAlarms := 0
	for range 300 {
		tl := draw(rng, 1000, shares)
		if s := spans.CompareShares(&tl, &counter, spans.ShareOptions{}); s.Disagree {
			falseAlarms++
		}
	}
	if falseAlarms > 1 {
		t.Fatalf("%d of 300 samples of the counter's own shares disagreed", falseAlarms)
	}
	// Another pool's stream: half the releases moved to sticky.
	other := append([]float64(nil), shares...)
	other[gate.OutcomeLoadOverride] -= 0.05
	other[gate.OutcomeSticky] += 0.05
	tl := draw(rng, 5000, other)
	s := spans.CompareShares(&tl, &counter, spans.ShareOptions{})
	if !s.Disagree {
		t.Fatalf("a 5-point shift passed: %s", s.String())
	}
	// A span outcome the counter never counted.
	tl = draw(rng, 1000, shares)
	tl.N[gate.OutcomeMissingSignal] += 100
	tl.Total += 100
	if s := spans.CompareShares(&tl, &counter, spans.ShareOptions{}); !s.Disagree || !math.IsInf(s.Chi2, 1) || s.Worst != int(gate.OutcomeMissingSignal) {
		t.Fatalf("uncounted outcome: %+v", s)
	}
	// Too few spans decide nothing.
	tl = spans.Tally{}
	tl.N[gate.OutcomeLoadOverride], tl.Total = 10, 10
	if s := spans.CompareShares(&tl, &counter, spans.ShareOptions{}); s.Enough || s.Disagree {
		t.Fatalf("10 spans: %+v", s)
	}
}
