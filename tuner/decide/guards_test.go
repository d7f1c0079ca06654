package decide

import (
	"strings"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/shadow"
	"github.com/gatetuner/gatetuner/tuner/sink"
)

var guardNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// baseGuardContext passes every guard: a changed, confident, worthwhile
// recommendation on an idle, unpaused target.
func baseGuardContext() *guardContext {
	pol := config.DefaultPolicy()
	ratio := 0.5
	delay, drain, util := 1.0, 10.0, 0.5
	rate, prompt, cached := 10.0, 5000.0, 1000.0
	return &guardContext{
		now: guardNow, pol: pol, state: &sink.State{},
		params: gate.Params{PeakPrefillThroughput: 10000},
		cur:    gate.Settings{Mode: gate.ModeStatic, MaxTTFTPenaltyMs: 1000, PeakPrefillThroughput: 10000},
		rc:     Candidate{Candidate: shadow.Candidate{Settings: gate.Settings{Mode: gate.ModeStatic, MaxTTFTPenaltyMs: 2000, PeakPrefillThroughput: 10000}}, Bar: 20000},
		rec: &Recommendation{Confidence: 0.9, Evidence: Evidence{
			Window:      WindowView{Known: 1000},
			Confidence:  ConfidenceParts{Value: 0.9, Rate: 1, Source: 1, Sample: 1, Consistency: 0.9},
			Objective:   ObjectiveView{Name: ObjectiveFeedbackTTFTP90, Ratio: &ratio, SavingOverCooldownSeconds: 100, SavingOverCooldownTokens: 1e6},
			ExcessCost:  CostPair{Current: 1000, Recommended: 500, SavingPerSecond: 40000},
			RestartCost: RestartCost{Tokens: 1000, DelaySeconds: &delay, DrainSeconds: &drain, Utilization: &util},
		}},
		est:  &Estimate{Traffic: Traffic{RequestRate: &rate, PromptMean: &prompt, CachedMean: &cached}},
		diff: "-maxTTFTPenaltyMs: 1000\n+maxTTFTPenaltyMs: 2000\n",
	}
}

type guardCase struct {
	name   string
	edit   func(*guardContext)
	pass   bool
	skip   bool
	reason HoldReason
	detail string
}

func runGuardCases(t *testing.T, gf guardFunc, cases []guardCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := baseGuardContext()
			if tc.edit != nil {
				tc.edit(g)
			}
			v := gf(g)
			if v.skip != tc.skip {
				t.Fatalf("skip = %v, want %v (%+v)", v.skip, tc.skip, v)
			}
			if tc.skip {
				return
			}
			if v.pass != tc.pass {
				t.Fatalf("pass = %v, want %v: %s", v.pass, tc.pass, v.detail)
			}
			if !tc.pass && v.reason != tc.reason {
				t.Errorf("reason %q, want %q", v.reason, tc.reason)
			}
			if !strings.Contains(v.detail, tc.detail) {
				t.Errorf("detail %q does not say %q", v.detail, tc.detail)
			}
		})
	}
}

func TestPauseGuardHoldsAPausedTarget(t *testing.T) {
	runGuardCases(t, pauseGuard, []guardCase{
		{name: "not paused", pass: true, detail: "not paused"},
		{name: "paused", edit: func(g *guardContext) { g.state.Paused = true }, reason: HoldPaused, detail: "gatetuner.dev/paused"},
	})
}

func TestFailureHoldGuardKeepsTheSinksReason(t *testing.T) {
	runGuardCases(t, failureHoldGuard, []guardCase{
		{name: "none", pass: true, detail: "no failure hold"},
		{name: "rollout failed", edit: func(g *guardContext) {
			g.state.Hold = &sink.Hold{Reason: HoldRolloutFailed, Message: "EPP unavailable"}
		},
			reason: HoldRolloutFailed, detail: "remove the gatetuner.dev/hold annotation"},
		{name: "verification failed", edit: func(g *guardContext) { g.state.Hold = &sink.Hold{Reason: HoldVerificationFailed} },
			reason: HoldVerificationFailed, detail: "verification-failed"},
	})
}

func TestPendingRestartGuardWaitsForTheEPP(t *testing.T) {
	runGuardCases(t, pendingRestartGuard, []guardCase{
		{name: "running", pass: true, detail: "the EPP runs the config"},
		{name: "pending", edit: func(g *guardContext) { g.state.Pending = &sink.Pending{Since: guardNow.Add(-time.Minute)} },
			reason: HoldPendingRestart, detail: "restart the EPP"},
	})
}

func TestDataGuardNeedsMinDecisions(t *testing.T) {
	runGuardCases(t, dataGuard, []guardCase{
		{name: "enough", pass: true, detail: "1000 decisions"},
		{name: "exactly the minimum", edit: func(g *guardContext) { g.rec.Evidence.Window.Known = 200 }, pass: true, detail: "minimum 200"},
		{name: "one short", edit: func(g *guardContext) { g.rec.Evidence.Window.Known = 199 }, reason: HoldNoDecisions, detail: "199 decisions"},
		{name: "nothing decided says so", edit: func(g *guardContext) { g.rec.Evidence.Window.Known, g.rec.Evidence.Window.Decisions = 0, 0 },
			reason: HoldNoDecisions, detail: "the source yielded no decision at all"},
		{name: "the model's draws without a sticky endpoint name the threshold", edit: func(g *guardContext) {
			g.rec.Evidence.Source, g.rec.Evidence.Window.Known, g.rec.Evidence.Window.Decisions = SourceKindModel, 3, 4000
			g.rec.Evidence.Shadow.Current.Outcomes[gate.OutcomeNoMatch] = 3990
			g.params.AffinityThreshold = 0.8
		}, reason: HoldNoDecisions, detail: "3990 found no sticky endpoint (no_match)"},
		{name: "the model's blindness is named", edit: func(g *guardContext) {
			g.rec.Evidence.Source, g.rec.Evidence.Window.Known, g.rec.Evidence.Window.Decisions = SourceKindModel, 3, 4000
			g.rec.Evidence.Shadow.Current.Outcomes[gate.OutcomeNoMatch] = 3990
			g.params.AffinityThreshold = 0.8
		}, reason: HoldNoDecisions, detail: "reaches affinityThreshold 0.80"},
	})
}

func TestConfidenceGuardNeedsMinConfidence(t *testing.T) {
	runGuardCases(t, confidenceGuard, []guardCase{
		{name: "confident", pass: true, detail: "confidence 0.90"},
		{name: "at the minimum", edit: func(g *guardContext) { g.rec.Confidence = 0.7 }, pass: true, detail: "minimum 0.70"},
		{name: "below", edit: func(g *guardContext) { g.rec.Confidence = 0.69 }, reason: HoldLowConfidence, detail: "consistency 0.90"},
	})
}

func TestChangeGuardHoldsTheCurrentSettings(t *testing.T) {
	runGuardCases(t, changeGuard, []guardCase{
		{name: "differs", pass: true, detail: "differs"},
		{name: "current is best", edit: func(g *guardContext) { g.rc.Current = true }, reason: HoldNoGain, detail: "the current settings are the best"},
		{name: "no diff", edit: func(g *guardContext) { g.diff = "" }, reason: HoldNoGain, detail: "best candidate"},
	})
}

func TestDeadbandGuardHoldsSmallMoves(t *testing.T) {
	runGuardCases(t, deadbandGuard, []guardCase{
		{name: "doubling", pass: true, detail: "beyond the deadband"},
		{name: "10 % move", edit: func(g *guardContext) { g.rc.Bar = 11000 }, reason: HoldDeadband, detail: "10000 → 11000 tokens (10.0 %)"},
		{name: "mode change", edit: func(g *guardContext) { g.rc.Settings.Mode, g.rc.Bar = gate.ModeMatchedTokens, 10500 }, pass: true},
		{name: "no bar before or after", edit: func(g *guardContext) {
			g.cur.MaxTTFTPenaltyMs = 0
			g.rc.Bar = CurrentBar(g.cur)
		}, reason: HoldDeadband, detail: "no bar before or after"},
	})
}

func TestGainShareGuardJudgesOnlyTheExcessObjective(t *testing.T) {
	excess := func(g *guardContext) { g.rec.Evidence.Objective.Name = ObjectiveExcessTokens }
	runGuardCases(t, gainShareGuard, []guardCase{
		{name: "feedback objective: not judged", skip: true},
		{name: "felt by the pool", edit: excess, pass: true, detail: "must be ≥ 25 %"},
		{name: "too small a share", edit: func(g *guardContext) { excess(g); g.rec.Evidence.ExcessCost.SavingPerSecond = 100 }, reason: HoldNoGain, detail: "excess saved 100"},
		{name: "computed prefill unknown", edit: func(g *guardContext) { excess(g); g.est = &Estimate{} }, reason: HoldNoGain, detail: "computed prefill rate is unknown"},
	})
}

func TestGainGuardComparesTheObjective(t *testing.T) {
	ratio := func(r float64) func(*guardContext) {
		return func(g *guardContext) { g.rec.Evidence.Objective.Ratio = &r }
	}
	runGuardCases(t, gainGuard, []guardCase{
		{name: "half the TTFT", pass: true, detail: "estimated TTFT p90"},
		{name: "at the ratio", edit: ratio(0.8), pass: true},
		{name: "not enough better", edit: ratio(0.81), reason: HoldNoGain, detail: "ratio 0.81, must be ≤ 0.80"},
		{name: "current costs nothing", edit: func(g *guardContext) { g.rec.Evidence.Objective.Ratio = nil }, reason: HoldNoGain, detail: "ratio +Inf"},
		{name: "excess objective speaks tokens", edit: func(g *guardContext) {
			g.rec.Evidence.Objective.Name = ObjectiveExcessTokens
		}, pass: true, detail: "recommended excess cost 500 tokens vs current 1000"},
	})
}

func TestRestartCostGuardPricesTheRestart(t *testing.T) {
	runGuardCases(t, restartCostGuard, []guardCase{
		{name: "saving beats the delay", pass: true, detail: "100 request-seconds vs restart cost 1 request-seconds"},
		{name: "delay beats the saving", edit: func(g *guardContext) { g.rec.Evidence.Objective.SavingOverCooldownSeconds = 0.5 }, reason: HoldRestartCost},
		{name: "unpriced: tokens", edit: func(g *guardContext) { g.rec.Evidence.RestartCost.DelaySeconds = nil }, pass: true, detail: "utilization unknown"},
		{name: "unknown cost", edit: func(g *guardContext) { g.rec.Evidence.RestartCost.Unknown = "request rate unknown" }, reason: HoldRestartCost, detail: "cannot be estimated (request rate unknown)"},
	})
}

func TestCalibrationGuardProtectsACalibratedThroughput(t *testing.T) {
	calibrated := func(g *guardContext) {
		g.params.PrefillCalibrationFile = "/etc/cal.json"
	}
	runGuardCases(t, calibrationGuard, []guardCase{
		{name: "configured", pass: true, detail: "no calibrated throughput"},
		{name: "calibrated", edit: calibrated, reason: HoldCalibrated, detail: "/etc/cal.json"},
		{name: "override allowed", edit: func(g *guardContext) { calibrated(g); g.allowCalib = true }, pass: true},
	})
}

func TestCooldownGuardWaitsAfterAChange(t *testing.T) {
	runGuardCases(t, cooldownGuard, []guardCase{
		{name: "never changed", pass: true, detail: "no change within the cooldown"},
		{name: "an hour ago", edit: func(g *guardContext) { g.state.EffectiveAt = guardNow.Add(-time.Hour) }, reason: HoldCooldown, detail: "1h0m0s ago (cooldown 6h0m0s)"},
		{name: "a pending write counts from its write", edit: func(g *guardContext) { g.state.Pending = &sink.Pending{Since: guardNow.Add(-time.Minute)} }, reason: HoldCooldown, detail: "1m0s ago"},
		{name: "seven hours ago", edit: func(g *guardContext) { g.state.EffectiveAt = guardNow.Add(-7 * time.Hour) }, pass: true},
	})
}

func TestBudgetGuardCountsApplies(t *testing.T) {
	applies := func(n int) func(*guardContext) {
		return func(g *guardContext) {
			for i := range n {
				at := guardNow.Add(-time.Duration(i+1) * time.Hour)
				g.state.History = append(g.state.History, sink.Entry{Seq: i + 1, Kind: sink.KindApply, At: at, EffectiveAt: &at, Status: sink.StatusEffective})
			}
		}
	}
	budget2 := func(n int) func(*guardContext) {
		return func(g *guardContext) { two := 2; g.pol.DailyBudget = &two; applies(n)(g) }
	}
	runGuardCases(t, budgetGuard, []guardCase{
		{name: "none", edit: budget2(0), pass: true, detail: "0 applies in the last 24h0m0s (budget 2)"},
		{name: "one", edit: budget2(1), pass: true},
		{name: "budget spent", edit: budget2(2), reason: HoldBudget, detail: "2 applies"},
		{name: "the default budget allows one apply a day", pass: true, detail: "0 applies in the last 24h0m0s (budget 1)"},
		{name: "the default budget is spent by one apply", edit: applies(1), reason: HoldBudget, detail: "1 applies in the last 24h0m0s (budget 1)"},
	})
}

func TestWindowGuardLeavesAClosedWindowPending(t *testing.T) {
	opens := guardNow.Add(15 * time.Hour)
	runGuardCases(t, windowGuard, []guardCase{
		{name: "no window", edit: func(g *guardContext) { g.pol.ApplyWindow = nil }, pass: true, detail: "no apply window"},
		{name: "always", edit: func(g *guardContext) { g.pol.ApplyWindow = &config.ApplyWindow{Always: true} }, pass: true, detail: "no apply window"},
		{name: "auto without day evidence holds, naming it", reason: HoldApplyWindowUnknown, detail: "no day evidence"},
		{name: "auto with a window of the day unpriced holds", edit: func(g *guardContext) {
			g.apply = &ApplyWindowView{Kind: config.ApplyWindowAuto, Unknown: "2 of 24 windows of the day have no priced restart cost"}
		}, reason: HoldApplyWindowUnknown, detail: "2 of 24 windows"},
		{name: "auto outside the chosen window is pending, saying when and why", edit: func(g *guardContext) {
			g.apply = &ApplyWindowView{Kind: config.ApplyWindowAuto, Window: 3, Label: "03:00–04:00", Opens: &opens, Detail: "auto: window 03:00–04:00 has the least restart cost"}
		}, reason: HoldOutsideWindow, detail: "opens at 2026-12-02T03:00:00Z; auto: window 03:00–04:00 has the least restart cost"},
		{name: "auto inside the chosen window passes", edit: func(g *guardContext) {
			g.apply = &ApplyWindowView{Kind: config.ApplyWindowAuto, Window: 12, Open: true, Detail: "auto: window 12:00–13:00"}
		}, pass: true, detail: "open; auto: window 12:00–13:00"},
		{name: "open", edit: func(g *guardContext) {
			g.pol.ApplyWindow = &config.ApplyWindow{Schedule: "0 12 * * *", Duration: time.Hour}
		}, pass: true, detail: "open"},
		{name: "closed", edit: func(g *guardContext) {
			g.pol.ApplyWindow = &config.ApplyWindow{Schedule: "0 2 * * *", Duration: time.Hour}
		},
			reason: HoldOutsideWindow, detail: "opens at 2026-12-02T02:00:00Z"},
	})
}

// TestReleaseChainBypass pins the one wrapper the release-chain hazard
// acts through: below the floor gain and restart-cost pass saying why,
// gain-share is not judged, and cooldown and budget wait only for a raise
// out of the hazard.
func TestReleaseChainBypass(t *testing.T) {
	hazard := func(g *guardContext) {
		g.belowFloor = true
		g.rec.Evidence.ReleaseChainFloorTokens = 15000
		g.rec.Evidence.Objective.Name = ObjectiveExcessTokens
		r := 2.0
		g.rec.Evidence.Objective.Ratio = &r                     // worse by the shadow
		g.rec.Evidence.Objective.SavingOverCooldownSeconds = -1 // and not worth a restart
		g.state.EffectiveAt = guardNow.Add(-time.Minute)        // and cooling down
		at := guardNow.Add(-2 * time.Hour)
		for i := range 3 {
			g.state.History = append(g.state.History, sink.Entry{Seq: i + 1, Kind: sink.KindApply, At: at, EffectiveAt: &at, Status: sink.StatusEffective})
		}
	}
	for _, tc := range []struct {
		name  string
		bar   float64
		want  map[string]bool // guard → pass; absent: not judged
		first HoldReason
	}{
		{name: "raise out of the hazard", bar: 20000, want: map[string]bool{"gain": true, "restart-cost": true, "cooldown": true, "budget": true}},
		{name: "a move that stays below the floor still waits", bar: 13000,
			want: map[string]bool{"gain": true, "restart-cost": true, "cooldown": false, "budget": false}, first: HoldCooldown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := baseGuardContext()
			hazard(g)
			g.rc.Bar = tc.bar
			rep := &Outcome{}
			first := runGuards(rep, g, recommendationGuards)
			got := map[string]bool{}
			for _, v := range rep.Guards {
				got[v.Name] = v.Pass
			}
			if _, ok := got["gain-share"]; ok {
				t.Errorf("gain-share judged below the floor: %+v", rep.Guards)
			}
			for name, pass := range tc.want {
				if p, ok := got[name]; !ok || p != pass {
					t.Errorf("%s: pass %v (listed %v), want %v", name, p, ok, pass)
				}
			}
			if tc.first == "" && first != nil && (first.Reason == HoldNoGain || first.Reason == HoldRestartCost || first.Reason == HoldCooldown || first.Reason == HoldBudget) {
				t.Errorf("held %s inside the hazard: %s", first.Reason, first.Detail)
			}
			if tc.first != "" && (first == nil || first.Reason != tc.first) {
				t.Errorf("first hold %+v, want %s", first, tc.first)
			}
		})
	}
}

// TestGuardsRunInTheDocumentedOrder pins the check order the report lists.
func TestGuardsRunInTheDocumentedOrder(t *testing.T) {
	g := baseGuardContext()
	g.rec.Evidence.Objective.Name = ObjectiveExcessTokens
	rep := &Outcome{}
	if h := runGuards(rep, g, append(append([]guardFunc(nil), stateGuards...), recommendationGuards...)); h != nil {
		t.Fatalf("held %+v", h)
	}
	var names []string
	for _, v := range rep.Guards {
		names = append(names, v.Name)
	}
	want := "pause failure-hold pending-restart data confidence change deadband gain-share gain restart-cost calibration cooldown budget"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("guards\n  %s\nwant\n  %s", got, want)
	}
}

// TestFirstFailingGuardIsTheReason pins that every guard is listed and the
// first failure is the hold.
func TestFirstFailingGuardIsTheReason(t *testing.T) {
	g := baseGuardContext()
	g.state.Pending = &sink.Pending{Since: guardNow}
	g.rec.Confidence = 0
	rep := &Outcome{}
	h := runGuards(rep, g, append(append([]guardFunc(nil), stateGuards...), recommendationGuards...))
	if h == nil || h.Reason != HoldPendingRestart {
		t.Fatalf("hold %+v, want pending-restart", h)
	}
	if len(rep.Guards) != 12 {
		t.Errorf("%d guards listed, want all 12: %+v", len(rep.Guards), rep.Guards)
	}
}
