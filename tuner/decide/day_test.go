package decide

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/shadow"
)

// dayCands are a current static bar and three alternatives.
func dayCands() []Candidate {
	mk := func(label string, bar float64) Candidate {
		return Candidate{Candidate: shadow.Candidate{Label: label, Settings: gate.Settings{Mode: gate.ModeStatic, MaxTTFTPenaltyMs: bar / 10, PeakPrefillThroughput: 10000}}, Bar: bar}
	}
	c := []Candidate{mk("current", 100000), mk("A", 50000), mk("B", 80000), mk("C", 200000)}
	c[0].Current = true
	return c
}

// dayReplay is a replay of two windows (of a 2-window day) with the given
// per-window excess costs ([window][candidate]), requests and decisions.
func dayReplay(costs [][]float64, reqs []float64, n []int64) *replayed {
	r := &replayed{clock: Clock{Length: 2 * time.Hour, Width: time.Hour}, windowCosts: costs, reqs: reqs, n: n, days: []int{1, 1},
		costs: make([]float64, len(costs[0]))}
	for k := range costs {
		for i := range costs[k] {
			r.costs[i] += costs[k][i]
		}
	}
	return r
}

func TestDayChoiceKeepsEveryWindowWithinTenPercent(t *testing.T) {
	obj := excessTokens{blockSize: 64}
	many := []int64{1000, 1000}
	for _, tc := range []struct {
		name  string
		costs [][]float64
		reqs  []float64
		n     []int64
		want  string
	}{
		{name: "the best day is chosen when no window is worse",
			costs: [][]float64{{1000, 500, 900, 1000}, {1000, 900, 950, 1000}}, reqs: []float64{1, 1}, n: many, want: "A"},
		{name: "a better day that is 10 % worse in one window is not chosen",
			// A: day 1 600 < 2000, but window 2 scores 1 200 > 1 000 × 1.1 + 6.4.
			costs: [][]float64{{1000, 400, 900, 1000}, {1000, 1200, 1000, 1000}}, reqs: []float64{1, 1}, n: many, want: "B"},
		{name: "exactly at the rule's limit passes",
			costs: [][]float64{{1000, 400, 900, 1000}, {1000, 1106.4, 1000, 1000}}, reqs: []float64{1, 1}, n: many, want: "A"},
		{name: "ties go to the current settings",
			costs: [][]float64{{1000, 1000, 1000, 1000}, {1000, 1000, 1000, 1000}}, reqs: []float64{1, 1}, n: many, want: "current"},
		{name: "a window where the current score is 0 allows only the absolute slack",
			// slack 0.1 block × 64 tokens × 100 requests = 640 tokens.
			costs: [][]float64{{0, 700, 600, 0}, {1000, 100, 200, 1000}}, reqs: []float64{100, 100}, n: many, want: "B"},
		{name: "a window with too few decisions to judge does not veto",
			costs: [][]float64{{1000, 400, 900, 1000}, {10, 100, 10, 10}}, reqs: []float64{1, 1}, n: []int64{1000, 5}, want: "A"},
		{name: "request weighting: the busy window's saving outweighs the quiet window's loss within the rule",
			// excess is a sum over requests: A saves 3 000 in the busy window and loses 90 in the quiet one.
			costs: [][]float64{{10000, 7000, 9000, 10000}, {900, 990, 900, 900}}, reqs: []float64{1000, 10}, n: many, want: "A"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cands := dayCands()
			r := dayReplay(tc.costs, tc.reqs, tc.n)
			ch := choose(cands, obj, r, 1, 200)
			if got := cands[ch.rec].Label; got != tc.want {
				t.Fatalf("chose %s (scores %v, allowed %v, eligible %v), want %s", got, ch.scores, ch.allowed, ch.eligible, tc.want)
			}
		})
	}
}

func TestFeedbackDayScoreIsRequestWeighted(t *testing.T) {
	r := &replayed{reqs: []float64{3, 1, 0}}
	if got := (feedbackTTFT{}).dayScore([]float64{1, 2, 50}, r); math.Abs(got-1.25) > 1e-12 {
		t.Errorf("day score %v, want (3×1 + 1×2) / 4 = 1.25 (a window without requests weighs nothing)", got)
	}
}

func TestTheStepClampFailingTheRuleKeepsTheCurrentSettings(t *testing.T) {
	// A (50k) is the best day; the step limit ÷1.5 clamps it to the bar
	// nearest 66.7k, B (80k), which is 50 % worse than the current
	// settings in window 0.
	cands := dayCands()
	r := dayReplay([][]float64{{1000, 100, 1500, 1000}, {1000, 100, 1000, 1000}}, []float64{1, 1}, []int64{1000, 1000})
	ch := choose(cands, excessTokens{blockSize: 64}, r, 1.5, 200)
	if ch.rec != 0 || !strings.Contains(ch.note, "current settings are kept") {
		t.Fatalf("rec %d note %q", ch.rec, ch.note)
	}
}

func TestDayEvidenceTableAnswersWhyNotX(t *testing.T) {
	cands := dayCands()
	r := dayReplay([][]float64{{1000, 400, 900, 1000}, {1000, 1200, 1000, 1000}}, []float64{10, 1}, []int64{1000, 1000})
	obj := excessTokens{blockSize: 64}
	ch := choose(cands, obj, r, 1, 200)
	pol := config.DefaultPolicy()
	v := dayView(pol, cands, r, obj, ch, &Day{Clock: r.clock})
	if len(v.Windows) != 2 || !strings.Contains(v.Rule, "10 %") || !strings.Contains(v.Rule, "0.1 block") {
		t.Fatalf("day view %+v", v)
	}
	w0, w1 := v.Windows[0], v.Windows[1]
	check := func(what string, got *float64, want float64) {
		t.Helper()
		if got == nil || math.Abs(*got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	if w0.Label != "+00:00–+01:00" || w0.Requests != 10 || w0.Days != 1 || w0.Best != "A" || !w0.Pass || !w0.Judged {
		t.Errorf("window 0 %+v", w0)
	}
	check("window 0 current", w0.Current, 1000)
	check("window 0 recommended (B)", w0.Recommended, 900)
	check("window 0 best (A)", w0.BestScore, 400)
	// Why not A? Its window-1 score is above what the rule allows there.
	check("window 1 allowed", w1.Allowed, 1000*1.1+0.1*64*1)
	if w1.Best != "current" || !w1.Pass {
		t.Errorf("window 1 %+v", w1)
	}
	if cv := cands[1]; ch.eligible[1] || cv.Label != "A" {
		t.Errorf("A eligible %v", ch.eligible[1])
	}
	check("day current", v.CurrentScore, 2000)
	check("day recommended", v.RecommendedScore, 1900)
}

func TestAutoApplyWindowIsTheCheapestRestart(t *testing.T) {
	pol := config.DefaultPolicy()
	pol.DayLength, pol.WindowWidth, pol.History = 4*time.Hour, time.Hour, 4*time.Hour
	now := time.Date(2026, 12, 1, 6, 30, 0, 0, time.UTC)
	r := &replayed{fbRate: 10000}
	costOf := func(e *Traffic) RestartCost { return restartCost(e, time.Minute, r.fbRate, nil) }
	at7 := time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		history time.Duration
		want    string
		open    bool
		rate    float64 // the rate of the span the write's restart is priced at
		unknown string
	}{
		// Rates are 1 + the hour and the cost grows with the rate: from 03:00,
		// 03:00–04:00 (window 3 of the 4-hour day, rate 4) beats 04:00 (window
		// 0, rate 5), 05:00 (window 1, rate 6) and window 2, which only the
		// open span 06:00–06:30 (rate 7) has seen.
		{name: "the window of least restart cost over the history", history: 3*time.Hour + 30*time.Minute, want: "+03:00–+04:00", rate: 4},
		// From 02:30 window 2 was also seen closed, 02:30–03:00 (rate 3): the
		// open span (the window's first half hour, rate 7) does not price it.
		{name: "the open span does not price a window seen closed", history: 4 * time.Hour, want: "+02:00–+03:00", open: true, rate: 3},
		{name: "too little history names the windows it lacks", history: 90 * time.Minute, unknown: "2 of 4 windows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := spanDay(pol, WindowView{From: now.Add(-tc.history), To: now})
			v := &DayView{Windows: make([]DayWindow, 4)}
			p := planApply(pol, now, v, d, costOf)
			if tc.unknown != "" {
				if !strings.Contains(p.view.Unknown, tc.unknown) {
					t.Fatalf("unknown %q, want %q", p.view.Unknown, tc.unknown)
				}
				return
			}
			av := p.view
			if av.Label != tc.want || av.Open != tc.open || !strings.Contains(av.Detail, "day's mean") || (tc.open != (av.Opens == nil)) ||
				(!tc.open && !av.Opens.Equal(at7)) {
				t.Fatalf("auto window %+v", av)
			}
			if v.Windows[3].RestartCost == nil || v.Windows[1].RestartCost == nil || *v.Windows[3].RestartCost >= *v.Windows[1].RestartCost {
				t.Errorf("window costs %v %v", v.Windows[3].RestartCost, v.Windows[1].RestartCost)
			}
			// The restart is priced at the window the write happens in (its
			// closed span), not now's traffic (rate 7).
			rc := restartAt(p, d, now, RestartCost{}, costOf)
			if !strings.Contains(rc.PricedAt, "window "+tc.want) || rc.Tokens != tc.rate*1000*60*0.5 {
				t.Errorf("restart priced %+v", rc)
			}
		})
	}
}

// spanDay is the history's day with each span's own estimates, as an
// estimator whose request rate is the span's hour (so windows differ)
// gives them: 1 + the hour requests/s, 1000 cached and 2000 prompt tokens
// on average, two endpoints.
func spanDay(pol config.Policy, w WindowView) *Day {
	d := &Day{Clock: ClockOf(pol), PerWindow: true}
	for _, s := range d.Clock.Spans(w.From, w.To) {
		rate, cached, prompt := float64(1+s.From.Hour()), 1000.0, 2000.0
		s.Est = &Traffic{RequestRate: &rate, CachedMean: &cached, PromptMean: &prompt, Endpoints: []string{"a", "b"}}
		d.Spans = append(d.Spans, s)
	}
	return d
}
