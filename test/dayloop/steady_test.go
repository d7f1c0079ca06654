package dayloop

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenarios"
	"github.com/gatetuner/gatetuner/tuner/config"
)

// runLoop runs one closed loop and returns its result.
func runLoop(ctx context.Context, t *testing.T, sc *scenario.Scenario, profile, src string, every time.Duration) *Result {
	t.Helper()
	prof, err := gate.LookupProfile(profile)
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(ctx, Options{Scenario: sc, Profile: prof, Source: src, Seed: 1, CycleEvery: every, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	res, err := l.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range res.Applies {
		t.Logf("apply: EPP restarted at %s (%s) onto %s", clockOf(a.Restart), a.Phase, a.Settings.String())
	}
	t.Logf("%s %s %s: %d cycles, %d applies, holds %v (%s)", sc.Name, profile, src, res.Cycles, len(res.Applies), res.Holds, res.Wall.Round(time.Second))
	return res
}

// TestSteadyHolds: on steady, where the EPP default is near-best, two days
// of the closed loop change nothing.
func TestSteadyHolds(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates two days")
	}
	sc := twoDays(t, "steady")
	for _, profile := range []string{gate.ProfileRouter202608, gate.ProfilePenaltyMode} {
		t.Run(profile, func(t *testing.T) {
			res := runLoop(context.Background(), t, sc, profile, config.SourceModel, 10*time.Minute)
			if len(res.Applies) != 0 {
				t.Errorf("%d applies on steady, want none", len(res.Applies))
			}
		})
	}
}

// noisyWeek is seven days of steady, each day's request rates scaled by
// its own factor drawn uniformly from [0.85, 1.15] (a stationary week: the
// same distribution every day, different draws).
func noisyWeek(t *testing.T) *scenario.Scenario {
	t.Helper()
	one, err := scenarios.Load("steady")
	if err != nil {
		t.Fatal(err)
	}
	sc, err := scenario.Days(one, 7)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 7))
	for d := range sc.DayCount() {
		f := 0.85 + 0.3*r.Float64()
		for i := d * sc.DayPhases; i < (d+1)*sc.DayPhases; i++ {
			sc.Phases[i].RequestRate *= f
		}
	}
	if err := sc.Validate(); err != nil {
		t.Fatal(err)
	}
	return sc
}

// TestNoisyWeekAppliesAtMostOnce: a stationary noisy week applies at most once.
func TestNoisyWeekAppliesAtMostOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates seven days")
	}
	res := runLoop(context.Background(), t, noisyWeek(t), gate.ProfileRouter202608, config.SourceModel, 10*time.Minute)
	if len(res.Applies) > 1 {
		t.Errorf("%d applies in a stationary week, want at most 1", len(res.Applies))
	}
}
