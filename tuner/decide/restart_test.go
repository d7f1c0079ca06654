package decide

import (
	"math"
	"strings"
	"testing"
	"time"
)

func restartEstimates(rate, promptMean, cachedMean float64, endpoints int) *Traffic {
	e := &Traffic{RequestRate: &rate}
	if promptMean > 0 {
		e.PromptMean = &promptMean
	}
	if cachedMean > 0 {
		e.CachedMean = &cachedMean
	}
	for i := 0; i < endpoints; i++ {
		e.Endpoints = append(e.Endpoints, string(rune('a'+i)))
	}
	return e
}

// TestRestartCostPricesTheQueueingBehindTheBacklog pins the restart cost's
// formula: a backlog B = λ × cached × warm-up × (N−1)/N drained on the spare
// capacity, costing λ·B²/(2·C²·(1−ρ)) request-seconds.
func TestRestartCostPricesTheQueueingBehindTheBacklog(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		rate, prompt, cached float64
		n                    int
		perEndpoint          float64
		rates                map[string]float64
		wantB, wantRho       float64
		wantDrain, wantDelay float64
		unpriced             bool
		unknown              string
	}{
		{name: "half-loaded pool", rate: 10, prompt: 5000, cached: 4000, n: 4, perEndpoint: 10000,
			// B = 10 × 4000 × 60 × 3/4 = 1.8e6; C = 40000; ρ = 10 × 1000 / 40000 = 0.25
			wantB: 1.8e6, wantRho: 0.25, wantDrain: 1.8e6 / 30000, wantDelay: 10 * 1.8e6 * 1.8e6 / (2 * 40000 * 30000)},
		{name: "per-endpoint rates replace the common rate", rate: 10, prompt: 5000, cached: 4000, n: 4, perEndpoint: 10000,
			rates: map[string]float64{"a": 20000, "b": 20000, "c": 20000, "d": 20000},
			wantB: 1.8e6, wantRho: 0.125, wantDrain: 1.8e6 / 70000, wantDelay: 10 * 1.8e6 * 1.8e6 / (2 * 80000 * 70000)},
		{name: "a saturated pool is capped at 95 % utilization", rate: 100, prompt: 5000, cached: 4000, n: 4, perEndpoint: 10000,
			wantB: 1.8e7, wantRho: 2.5, wantDrain: 1.8e7 / 2000, wantDelay: 100 * 1.8e7 * 1.8e7 / (2 * 40000 * 2000)},
		{name: "unknown prompt mean: the queueing is not priced", rate: 10, cached: 4000, n: 4, perEndpoint: 10000,
			wantB: 1.8e6, unpriced: true},
		{name: "unknown cached mean: the cost is unknown", rate: 10, prompt: 5000, n: 4, perEndpoint: 10000, unknown: "mean cached tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := restartCost(restartEstimates(tc.rate, tc.prompt, tc.cached, tc.n), time.Minute, tc.perEndpoint, tc.rates)
			if tc.unknown != "" {
				if !strings.Contains(rc.Unknown, tc.unknown) || rc.DelaySeconds != nil {
					t.Fatalf("unknown %q delay %v: want it to name %q and price nothing", rc.Unknown, rc.DelaySeconds, tc.unknown)
				}
				return
			}
			near := func(what string, got, want float64) {
				if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
					t.Errorf("%s = %v, want %v", what, got, want)
				}
			}
			near("backlog", rc.Tokens, tc.wantB)
			if tc.unpriced {
				if rc.DelaySeconds != nil || !strings.Contains(rc.Formula, "not priced") {
					t.Fatalf("delay %v, formula %q: want unpriced and said so", rc.DelaySeconds, rc.Formula)
				}
				return
			}
			if rc.DelaySeconds == nil || rc.Utilization == nil || rc.DrainSeconds == nil {
				t.Fatalf("restart cost not priced: %+v", rc)
			}
			near("utilization", *rc.Utilization, tc.wantRho)
			near("drain", *rc.DrainSeconds, tc.wantDrain)
			near("delay", *rc.DelaySeconds, tc.wantDelay)
		})
	}
}

// TestRestartGuardComparesLikeUnits: request-seconds when the delay is
// priced, tokens (and a note) when it is not.
func TestRestartGuardComparesLikeUnits(t *testing.T) {
	delay, drain, rho := 5000.0, 60.0, 0.5
	priced := RestartCost{Tokens: 1e9, DelaySeconds: &delay, DrainSeconds: &drain, Utilization: &rho}
	unpriced := RestartCost{Tokens: 1e6}
	for _, tc := range []struct {
		name     string
		obj      ObjectiveView
		rc       RestartCost
		pass     bool
		mentions string
	}{
		{"priced: a saving above the delay passes, whatever the tokens", ObjectiveView{SavingOverCooldownSeconds: 6000, SavingOverCooldownTokens: 1}, priced, true, "request-seconds"},
		{"priced: a saving below the delay holds", ObjectiveView{SavingOverCooldownSeconds: 4000, SavingOverCooldownTokens: 1e12}, priced, false, "request-seconds"},
		{"unpriced: tokens against the backlog", ObjectiveView{SavingOverCooldownTokens: 2e6}, unpriced, true, "not priced"},
		{"unpriced: too few tokens hold", ObjectiveView{SavingOverCooldownTokens: 5e5}, unpriced, false, "not priced"},
		{"unknown cost: held whatever the saving", ObjectiveView{SavingOverCooldownSeconds: 1e12, SavingOverCooldownTokens: 1e12}, RestartCost{Unknown: "request rate unknown"}, false, "cannot be estimated (request rate unknown)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name, pass, reason, detail := restartGuard(&tc.obj, &tc.rc, time.Hour)
			if name != "restart-cost" || reason != HoldRestartCost || pass != tc.pass || !strings.Contains(detail, tc.mentions) {
				t.Fatalf("got %s %v %s %q", name, pass, reason, detail)
			}
		})
	}
}
