package fleetsim

import (
	"context"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenarios"
)

// TestTruthPoolsEachDay: Truth.Days pools each day's phases; the days are
// new draws (day 2 is not a replay of day 1).
func TestTruthPoolsEachDay(t *testing.T) {
	one, err := scenarios.Load("steady")
	if err != nil {
		t.Fatal(err)
	}
	one.Pods.Count = 2
	for i := range one.Phases {
		one.Phases[i].Duration = 2 * time.Minute
		one.Phases[i].RequestRate = 8
	}
	sc, err := scenario.Days(one, 2)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := Run(context.Background(), sc, Options{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Days) != 2 {
		t.Fatalf("%d days in the truth, want 2", len(tr.Days))
	}
	for d := range tr.Days {
		n := tr.Phases[2*d].Requests + tr.Phases[2*d+1].Requests
		if tr.Days[d].Requests != n || n == 0 {
			t.Errorf("day %d: %d requests, its phases have %d", d+1, tr.Days[d].Requests, n)
		}
	}
	if tr.Days[0].Requests+tr.Days[1].Requests != tr.Overall.Requests {
		t.Errorf("days %d + %d requests, overall %d", tr.Days[0].Requests, tr.Days[1].Requests, tr.Overall.Requests)
	}
	if tr.Days[0].TTFT == tr.Days[1].TTFT {
		t.Errorf("day 2's TTFT quantiles equal day 1's (%+v): a replay, not new draws", tr.Days[0].TTFT)
	}
	// A run measuring day 2 only reports day 2 and leaves day 1 empty.
	d2, err := Run(context.Background(), sc, Options{Seed: 3, First: "d2-morning", Last: "d2-afternoon", Warmup: WarmupAll})
	if err != nil {
		t.Fatal(err)
	}
	a, b := d2.Days[1], tr.Days[1]
	if d2.Days[0].Requests != 0 || a.Requests != b.Requests || a.TTFT != b.TTFT || a.WronglyHeldRate == nil || *a.WronglyHeldRate != *b.WronglyHeldRate {
		t.Errorf("day 2 alone after every earlier phase: days %+v, %+v; want nothing, %+v", d2.Days[0], d2.Days[1], tr.Days[1])
	}
}
