package shadow

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gatetuner/gatetuner/gate"
)

// TestSketchMergeEqualsAddingEveryValue: a merge adds bucket counts — the
// result is the sketch that saw every value, whatever the ranges.
func TestSketchMergeEqualsAddingEveryValue(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		name string
		a, b func() float64
	}{
		{"overlapping", func() float64 { return r.ExpFloat64() * 100 }, func() float64 { return r.ExpFloat64() * 100 }},
		{"other above", func() float64 { return 1 + r.Float64() }, func() float64 { return 1e6 * (1 + r.Float64()) }},
		{"other below, signs and zeros", func() float64 { return 1e6 * (1 + r.Float64()) }, func() float64 { return r.NormFloat64() * float64(r.IntN(2)) }},
		{"into empty", nil, func() float64 { return r.Float64() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a, b, all Sketch
			for range 5000 {
				if tc.a != nil {
					v := tc.a()
					a.Add(v)
					all.Add(v)
				}
				v := tc.b()
				b.Add(v)
				all.Add(v)
			}
			a.Merge(&b)
			if a.Count() != all.Count() {
				t.Fatalf("count %d, want %d", a.Count(), all.Count())
			}
			for q := 0.0; q <= 1; q += 0.01 {
				if got, want := a.Quantile(q), all.Quantile(q); got != want {
					t.Fatalf("q%.2f = %v, want %v", q, got, want)
				}
			}
		})
	}
}

func TestAccumulatorMergeEqualsOneAccumulator(t *testing.T) {
	ds := loadFeedbackBench(t)
	settings := []gate.Settings{defaultSettings(), staticBar(50000), staticBar(10000)}
	one, a, b := NewAccumulator(settings, 13000), NewAccumulator(settings, 13000), NewAccumulator(settings, 13000)
	outcomes := [][]byte{nil, []byte("sticky"), []byte("load_override"), []byte("nonsense")}
	for i := range ds {
		half := a
		if i%3 == 0 {
			half = b
		}
		for _, acc := range []*Accumulator{one, half} {
			d := acc.Add(ds[i].Endpoints)
			acc.Observe(&d[0], outcomes[i%len(outcomes)])
		}
	}
	a.Merge(b)
	for i := range settings {
		if *a.Counts(i) != *one.Counts(i) {
			t.Errorf("settings %d: merged %+v, one %+v", i, *a.Counts(i), *one.Counts(i))
		}
	}
	if a.Agreement() != one.Agreement() || QuantilesOf(a.PenaltyMs()).Count != QuantilesOf(one.PenaltyMs()).Count ||
		*QuantilesOf(a.GapMinusMatched()).P90 != *QuantilesOf(one.GapMinusMatched()).P90 {
		t.Errorf("merged agreement %+v / sketches differ from one accumulator's %+v", a.Agreement(), one.Agreement())
	}
}

// TestFeedbackForkContinuesTheTrajectory: decisions replayed into a fork
// tally exactly what they tally in the original continued; the original
// is left as it was.
func TestFeedbackForkContinuesTheTrajectory(t *testing.T) {
	ds := loadFeedbackBench(t)
	settings := []gate.Settings{defaultSettings(), staticBar(50000), staticBar(10000), staticBar(3000)}
	opt := FeedbackOptions{Rate: 13000, PrefixReplicas: true, Parts: 2}
	whole, f := NewFeedback(settings, opt), NewFeedback(settings, opt)
	for i := range ds {
		d := ds[i]
		d.Part = i * 2 / len(ds)
		whole.Add(&d)
		if d.Part == 0 {
			f.Add(&d)
		}
	}
	fork := f.Fork()
	for i := len(ds) / 2; i < len(ds); i++ {
		d := ds[i]
		d.Part = 1
		fork.Add(&d)
	}
	for k := range settings {
		if got, want := fork.PartOutcome(1, k), whole.PartOutcome(1, k); got != want {
			t.Errorf("settings %d: fork %+v, continued %+v", k, got, want)
		}
		if got := f.PartOutcome(1, k); got.Decisions != 0 {
			t.Errorf("settings %d: the original tallied the fork's decisions: %+v", k, got)
		}
		if got := fork.PartOutcome(0, k); got.Decisions != 0 {
			t.Errorf("settings %d: the fork carries tallies: %+v", k, got)
		}
	}
	// The original continues unchanged by the fork: the same decisions give the same tallies.
	for i := len(ds) / 2; i < len(ds); i++ {
		d := ds[i]
		d.Part = 1
		f.Add(&d)
	}
	merged := NewFeedback(settings, opt)
	merged.MergePart(0, f, 0)
	merged.MergePart(0, f, 1)
	for k := range settings {
		if got, want := f.PartOutcome(1, k), whole.PartOutcome(1, k); got != want {
			t.Errorf("settings %d: original after the fork %+v, want %+v", k, got, want)
		}
		if got, want := merged.PartOutcome(0, k), whole.Outcome(k); math.Abs(got.MeanTTFTSeconds-want.MeanTTFTSeconds) > 1e-12*want.MeanTTFTSeconds || got.P90TTFTSeconds != want.P90TTFTSeconds {
			t.Errorf("settings %d: parts merged %+v, whole %+v", k, got, want)
		}
	}
}

// TestFeedbackReusesTheAccumulatorsDecisions: given the accumulator's
// decisions, the replay reuses them where a settings' trajectory has not
// diverged — and its outcomes are those it computes deciding itself.
func TestFeedbackReusesTheAccumulatorsDecisions(t *testing.T) {
	ds := loadFeedbackBench(t)
	settings := []gate.Settings{defaultSettings(), staticBar(200000), staticBar(50000), staticBar(10000), staticBar(3000)}
	for _, replicas := range []bool{false, true} {
		opt := FeedbackOptions{Rate: 13000, PrefixReplicas: replicas}
		own, reused := NewFeedback(settings, opt), NewFeedback(settings, opt)
		acc := NewAccumulator(settings, 13000)
		for i := range ds {
			d := ds[i]
			own.Add(&d)
			d.Decided = acc.Add(d.Endpoints)
			reused.Add(&d)
		}
		for k := range settings {
			if got, want := reused.Outcome(k), own.Outcome(k); got != want {
				t.Errorf("replicas %v, settings %d: reusing %+v, deciding %+v", replicas, k, got, want)
			}
		}
	}
}

// TestShardedFeedbackIsOneFeedback: the settings split over shards replay
// in parallel to exactly one Feedback's tallies, across forks and parts.
func TestShardedFeedbackIsOneFeedback(t *testing.T) {
	ds := loadFeedbackBench(t)
	settings := []gate.Settings{defaultSettings()}
	for k := range 9 {
		settings = append(settings, staticBar(2000*math.Pow(2, float64(k)/2)))
	}
	for _, shards := range []int{1, 2, 3} {
		opt := FeedbackOptions{Rate: 13000, Rates: map[string]float64{"glm-5-2-decode-3": 9000}, PrefixReplicas: true, Parts: 2}
		one, sh := NewFeedback(settings, opt), NewSharded(settings, opt, shards)
		acc := NewAccumulator(settings, 13000)
		half := len(ds) / 2
		for i := range ds[:half] {
			d := ds[i]
			d.Decided = acc.Add(d.Endpoints)
			if i%7 == 0 {
				d.Names[3] = nil // an unnamed endpoint
			}
			one.Add(&d)
			sh.Add(&d)
		}
		fork := sh.Fork()
		p := fork.AddPart()
		for i := half; i < len(ds); i++ {
			d := ds[i]
			d.Part = 1
			one.Add(&d)
			d.Part = p
			fork.Add(&d)
		}
		got := NewFeedback(settings, FeedbackOptions{Parts: 2})
		sh.MergeInto(got, 0, 0)
		fork.MergeInto(got, 1, p)
		for k := range settings {
			for part := range 2 {
				if g, w := got.PartOutcome(part, k), one.PartOutcome(part, k); g != w {
					t.Errorf("%d shards, settings %d, part %d: %+v, one Feedback %+v", shards, k, part, g, w)
				}
			}
		}
	}
}
