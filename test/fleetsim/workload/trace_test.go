package workload

import (
	"math"
	"testing"
)

// Day-to-day variation is seeded: the same seed gives the same days, another
// seed other days, and the multipliers average to the envelope.
func TestTraceEnvelopeDayToDayIsSeeded(t *testing.T) {
	hours := make([]float64, 24)
	for i := range hours {
		hours[i] = 1
	}
	mk := func(seed uint64) *envelope { return &envelope{hours: hours, cv: 0.2, seed: seed, scale: 1} }
	a, b, c := mk(7), mk(7), mk(8)
	var sum float64
	differ := false
	for h := int64(0); h < 24*200; h++ {
		ma, mb, mc := a.multiplier(h), b.multiplier(h), c.multiplier(h)
		if ma != mb {
			t.Fatalf("hour %d: same seed, multipliers %v and %v", h, ma, mb)
		}
		differ = differ || ma != mc
		sum += ma
	}
	if !differ {
		t.Error("seeds 7 and 8 gave the same days")
	}
	if mean := sum / (24 * 200); math.Abs(mean-1) > 0.02 {
		t.Errorf("mean multiplier %v, want 1", mean)
	}
}
