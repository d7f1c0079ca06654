package decide

import (
	"strings"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/tuner/config"
)

// TestRestartNowTakesItsBacklogFromTheLastMinutes pins the split price: the
// backlog from one traffic (the sessions that come back), the queueing from
// another (the window's arrivals).
func TestRestartNowTakesItsBacklogFromTheLastMinutes(t *testing.T) {
	heavy := restartEstimates(30, 80000, 75000, 4) // long-context sessions ending
	light := restartEstimates(200, 6000, 5600, 4)  // the window's chat traffic
	rc := PriceRestart(heavy, light, 5*time.Second, 20000, nil)
	wantB := 30 * 75000 * 5 * 0.75
	if rc.Tokens != wantB {
		t.Fatalf("backlog %v, want %v (the heavy traffic's)", rc.Tokens, wantB)
	}
	rho := 200 * 400 / 80000.0
	if rc.Utilization == nil || *rc.Utilization != rho {
		t.Fatalf("utilization %v, want %v (the window's arrivals)", rc.Utilization, rho)
	}
	wantDelay := 200 * wantB * wantB / (2 * 80000 * 80000 * (1 - rho))
	if rc.DelaySeconds == nil || (*rc.DelaySeconds-wantDelay)/wantDelay > 1e-12 {
		t.Fatalf("delay %v, want %v", rc.DelaySeconds, wantDelay)
	}
}

// TestAnOpenAutoWindowWaitsWhileARestartNowCostsFarMore pins priceNow: the
// larger of the window's usual price and now's stands, and an auto window
// whose restart now costs more than settleFactor × usual waits.
func TestAnOpenAutoWindowWaitsWhileARestartNowCostsFarMore(t *testing.T) {
	priced := func(d float64) RestartCost { return RestartCost{DelaySeconds: &d, PricedAt: "window"} }
	recent := &Recent{From: time.Unix(0, 0), To: time.Unix(300, 0)}
	for _, tc := range []struct {
		name       string
		usual, now float64
		kind       string
		want       float64
		settling   bool
	}{
		{name: "now is cheaper: the window's usual price stands", usual: 100, now: 50, kind: config.ApplyWindowAuto, want: 100},
		{name: "now costs a little more: now's price, no wait", usual: 100, now: 150, kind: config.ApplyWindowAuto, want: 150},
		{name: "now costs more than twice the usual: the auto window waits", usual: 100, now: 250, kind: config.ApplyWindowAuto, want: 250, settling: true},
		{name: "always windows never wait, but pay now's price", usual: 100, now: 250, kind: config.ApplyWindowAlways, want: 250},
	} {
		t.Run(tc.name, func(t *testing.T) {
			av := &ApplyWindowView{Kind: tc.kind, Open: true, Detail: "auto: window"}
			rc := priceNow(priced(tc.usual), priced(tc.now), recent, av)
			if *rc.DelaySeconds != tc.want {
				t.Fatalf("priced %v, want %v", *rc.DelaySeconds, tc.want)
			}
			if (av.Settling != "") != tc.settling {
				t.Fatalf("settling %q, want %v", av.Settling, tc.settling)
			}
			v := windowGuard(&guardContext{pol: config.Policy{ApplyWindow: &config.ApplyWindow{Auto: tc.kind == config.ApplyWindowAuto, Always: tc.kind == config.ApplyWindowAlways}}, apply: av})
			if v.pass == tc.settling {
				t.Fatalf("window guard pass=%v (%s) with settling %v", v.pass, v.detail, tc.settling)
			}
			if tc.settling && (v.reason != HoldOutsideWindow || !strings.Contains(v.detail, "waiting inside the window")) {
				t.Fatalf("hold %s %q: want outside-apply-window saying it waits", v.reason, v.detail)
			}
		})
	}
}
