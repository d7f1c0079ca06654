package decide

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/eppconfig"
	"github.com/gatetuner/gatetuner/tuner/policy"
	"github.com/gatetuner/gatetuner/tuner/sink/state"
)

// stageNow is the literal inputs' time.
var stageNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// recorded is an in-memory records stream: n decisions a second apart over
// two endpoints, the first holding a long cached prefix and loaded.
type recorded struct {
	from time.Time
	n    int
	err  error
}

func (r *recorded) Kind() string { return SourceKindRecords }

func (r *recorded) Replay(from, to time.Time, fn func(*Decision) error) error {
	if r.err != nil {
		return r.err
	}
	names := [][]byte{[]byte("pod-a"), []byte("pod-b")}
	for i := range r.n {
		ts := r.from.Add(time.Duration(i) * time.Second)
		if ts.Before(from) || !ts.Before(to) {
			continue
		}
		eps := []gate.Endpoint{
			{HasMatch: true, MatchBlocks: 90, TotalBlocks: 100, BlockSizeTokens: 64, HasLoad: true, InFlightTokens: int64(20000 + 1000*(i%20))},
			{HasMatch: true, MatchBlocks: 0, TotalBlocks: 100, BlockSizeTokens: 64, HasLoad: true, InFlightTokens: 1000},
		}
		if err := fn(&Decision{TS: ts, Endpoints: eps, Names: names, PromptTokens: 6400, Chosen: names[i%2]}); err != nil {
			return err
		}
	}
	return nil
}

// stageInput is a literal cycle input: a router-2026-08 target at the EPP
// defaults in mode off, an hour of history and the lookback's estimates
// for every window of it, no Prometheus.
func stageInput(t *testing.T, src Decisions) *Input {
	t.Helper()
	prof, err := gate.LookupProfile(gate.ProfileRouter202608)
	if err != nil {
		t.Fatal(err)
	}
	f := func(v float64) *float64 { return &v }
	pol := policy.Default()
	pol.Mode, pol.MinDecisions = policy.ModeOff, new(int)
	*pol.MinDecisions = 100
	params := gate.DefaultParams()
	lb := &Estimate{
		Traffic: Traffic{RequestRate: f(2), PromptMean: f(6400), CachedMean: f(4000), Endpoints: []string{"pod-a", "pod-b"}},
		Drain:   Rate{Value: f(8000), StatusOK: true, Confidence: 0.9, Method: "saturated-windows"},
		Nominal: Rate{Value: f(9000), StatusOK: true}, PromptP90: f(9000), PromptP99: f(12000),
	}
	w := WindowView{From: stageNow.Add(-time.Hour), To: stageNow}
	day := &Day{Clock: ClockOf(pol)}
	for _, s := range day.Clock.Spans(w.From, w.To) {
		s.Est = &lb.Traffic
		day.Spans = append(day.Spans, s)
	}
	return &Input{Now: stageNow, Lookback: lb, Window: w, Day: day, Source: src,
		Target: Target{Name: "t", Profile: prof, Policy: pol},
		Config: Config{Instance: eppconfig.Target{Plugin: "prefill-affinity"}, Params: params, Current: params.Settings(prof.MissingSignal),
			State: &state.State{},
			Preview: func([]eppconfig.Change) ([]byte, string, error) {
				return []byte("edited"), "-old\n+new\n", nil
			},
			ApproveCommand: func(hash string) string { return "approve " + hash }},
	}
}

// TestTheStagesDecideOnLiteralValues runs Weigh and Settle on literal
// inputs, one case per way a decision ends before or at the guards.
func TestTheStagesDecideOnLiteralValues(t *testing.T) {
	for _, tc := range []struct {
		name   string
		src    Decisions
		down   string
		paused bool
		result Result
		reason HoldReason
		detail string
		guards bool
	}{
		{name: "a records stream that is down holds", src: &recorded{}, down: "records stream http://x: connection refused",
			result: ResultHeld, reason: HoldRecordsUnavailable, detail: "connection refused"},
		{name: "a paused target with a dead stream reports paused", src: &recorded{}, down: "down", paused: true,
			result: ResultHeld, reason: HoldPaused, guards: true},
		{name: "a replay error is a target error", src: &recorded{err: errors.New("disk gone")},
			result: ResultError, reason: HoldTargetError, detail: "shadow: disk gone"},
		{name: "too few decisions", src: &recorded{from: stageNow.Add(-time.Minute), n: 50},
			result: ResultHeld, reason: HoldNoDecisions, detail: "minimum 100", guards: true},
		{name: "a full replay reaches the guards", src: &recorded{from: stageNow.Add(-50 * time.Minute), n: 2400}, guards: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := stageInput(t, tc.src)
			in.SourceDown = tc.down
			in.Config.State.Paused = tc.paused
			var c Carry
			w := Weigh(in, &c)
			if _, _, ok := w.RecentSpan(); ok {
				t.Errorf("a restart now priced without per-window estimates (the auto window cannot choose)")
			}
			out := Settle(w, nil)
			if out.Write != nil {
				t.Fatalf("mode off planned a write: %+v", out.Write)
			}
			if tc.result != "" && (out.Halt == nil || out.Halt.Result != tc.result || out.Halt.Reason != tc.reason) {
				t.Fatalf("halt %+v, want %s %s", out.Halt, tc.result, tc.reason)
			}
			if tc.detail != "" && !strings.Contains(out.Halt.Detail, tc.detail) {
				t.Errorf("detail %q does not say %q", out.Halt.Detail, tc.detail)
			}
			if tc.guards != (len(out.Guards) > 0) {
				t.Errorf("guards listed: %+v, want listed %v", out.Guards, tc.guards)
			}
			if tc.result == "" {
				rec := out.Recommendation
				if rec == nil || out.Source != SourceKindRecords || rec.Evidence.Window.Decisions != 2400 || out.Shadow == nil || out.Shadow.Replayed != 2400 {
					t.Fatalf("outcome %+v", out)
				}
				if c.counted != stageNow {
					t.Errorf("counted up to %s, want the window's end", c.counted)
				}
			}
		})
	}
}

// TestSettleWritesWhatTheGuardsPass: mode configmap with every guard
// passing writes the edit the preview made; the apply window always is
// open now, so the restart is priced on the last minutes' traffic too.
func TestSettleWritesWhatTheGuardsPass(t *testing.T) {
	in := stageInput(t, &recorded{from: stageNow.Add(-50 * time.Minute), n: 2400})
	in.Target.Policy.Mode = policy.ModeConfigMap
	in.Target.Policy.ApplyWindow = &policy.ApplyWindow{Always: true}
	var c Carry
	w := Weigh(in, &c)
	from, to, ok := w.RecentSpan()
	if !ok || !to.Equal(stageNow) || to.Sub(from) != RecentSpan(in.Target.Policy) {
		t.Fatalf("recent span %s–%s (%v), want the last %s", from, to, ok, RecentSpan(in.Target.Policy))
	}
	// The last minutes carried longer cached prefixes than the window does:
	// a restart now costs more, and that price stands.
	heavy := in.Lookback.Traffic
	cached := 6000.0
	heavy.CachedMean = &cached
	out := Settle(w, &Recent{From: from, To: to, Est: &heavy})
	if out.Halt != nil {
		t.Fatalf("halt %+v (guards %+v)", out.Halt, out.Guards)
	}
	if out.Write == nil || string(out.NewConfig) != "edited" || out.Diff == "" || out.Write.Hash == "" || out.Write.Hash != out.Recommendation.Hash {
		t.Fatalf("outcome %+v write %+v", out, out.Write)
	}
	if rc := out.Recommendation.Evidence.RestartCost; !strings.HasPrefix(rc.PricedAt, "now: the backlog of the last 15m0s") || rc.UsualDelaySeconds == nil {
		t.Errorf("restart cost %+v, want priced on the last minutes' traffic", rc)
	}
}

// TestAdmitHoldsALatencyPredictorGate: a gate on predicted milliseconds is
// reported only.
func TestAdmitHoldsALatencyPredictorGate(t *testing.T) {
	prof, err := gate.LookupProfile(gate.ProfilePenaltyMode)
	if err != nil {
		t.Fatal(err)
	}
	params := gate.DefaultParams()
	cur := params.Settings(prof.MissingSignal)
	if h := Admit(prof, cur); h != nil {
		t.Fatalf("prefillThroughput gate held: %+v", h)
	}
	cur.Source = gate.SourceLatencyPredictor
	if h := Admit(prof, cur); h == nil || h.Reason != HoldUnsupportedTTFTSource {
		t.Fatalf("latencyPredictor gate: %+v", h)
	}
}
