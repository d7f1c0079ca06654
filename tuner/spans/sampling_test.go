package spans_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gatetuner/gatetuner/tuner/spans"
)

func binomial(rng *rand.Rand, n int, p float64) uint64 {
	var k uint64
	for range n {
		if rng.Float64() < p {
			k++
		}
	}
	return k
}

func TestSamplingTellsASampledStreamFromAThinPool(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	cases := []struct {
		name      string
		spans     uint64
		decisions float64
		want      spans.SamplingVerdict
	}{
		{"busy pool sampled at 0.1", binomial(rng, 720000, 0.1), 720000, spans.Sampled},
		{"thin pool, every decision spanned", 12, 12, spans.Complete},
		{"thin pool sampled at 0.1", 1, 12, spans.Sampled},
		{"thin pool, no span came", 0, 12, spans.Sampled},
		{"quiet pool", 0, 0, spans.NoDecisions},
		{"spans but no counted decision", 40, 0, spans.SpansWithoutDecisions},
		{"twice the decisions (another pool's too)", 2000, 1000, spans.Excess},
		{"unsampled within the window slack", 10150, 10000, spans.Complete},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := spans.InferSampling(c.spans, c.decisions, spans.SamplingOptions{})
			if s.Verdict != c.want {
				t.Fatalf("verdict %s (rate %.4f ± %.4f), want %s", s.Verdict, s.Rate, s.StdErr, c.want)
			}
		})
	}
}

func TestSamplingErrorCoversTheTrueRate(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	const trials, n, p = 400, 20000, 0.1
	inside := 0
	for range trials {
		s := spans.InferSampling(binomial(rng, n, p), n, spans.SamplingOptions{})
		if math.Abs(s.Rate-p) <= 2*s.StdErr {
			inside++
		}
		if !s.MatchesRate(p, spans.SamplingOptions{}) {
			t.Fatalf("rate %.4f ± %.4f does not match %v", s.Rate, s.StdErr, p)
		}
	}
	// ±2 standard errors cover ~95.4 % of binomial draws.
	if frac := float64(inside) / trials; frac < 0.92 || frac > 0.99 {
		t.Fatalf("±2 SE covered %.3f of draws, want ≈ 0.954", frac)
	}
	s := spans.InferSampling(binomial(rng, n, 0.5), n, spans.SamplingOptions{})
	if s.MatchesRate(p, spans.SamplingOptions{}) {
		t.Fatalf("rate %.3f matches %v", s.Rate, p)
	}
}
