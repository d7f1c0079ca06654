package tuner

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/sink"
)

// fixedEstimator returns the same estimates (or error) every cycle.
type fixedEstimator struct {
	est *estimator.Estimates
	err error
}

func (f fixedEstimator) Estimate(context.Context, estimator.Target, time.Time) (*estimator.Estimates, error) {
	return f.est, f.err
}

// decisions is an in-memory decision source: n decisions a second apart
// over two endpoints, the first holding a long cached prefix and loaded.
type decisions struct {
	from time.Time
	n    int
	err  error
	down error
}

func (d *decisions) Kind() string { return SourceKindRecords }
func (d *decisions) Err() error   { return d.down }

func (d *decisions) Replay(_ context.Context, from, to time.Time, fn func(*Decision) error) error {
	if d.err != nil {
		return d.err
	}
	names := [][]byte{[]byte("pod-a"), []byte("pod-b")}
	for i := range d.n {
		ts := d.from.Add(time.Duration(i) * time.Second)
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

func cycleEstimates(now time.Time) *estimator.Estimates {
	f := func(v float64) *float64 { return &v }
	return &estimator.Estimates{At: now, Status: estimator.StatusOK,
		DrainRate:   estimator.RateEstimate{Status: estimator.StatusOK, Value: f(8000), Confidence: 0.9, Method: "saturated-windows"},
		Nominal:     estimator.RateEstimate{Status: estimator.StatusOK, Value: f(9000)},
		RequestRate: estimator.Scalar{Status: estimator.StatusOK, Value: f(2)},
		Prompt:      estimator.Distribution{Status: estimator.StatusOK, Mean: f(6400), P50: f(6000), P90: f(9000), P99: f(12000)},
		Cached:      estimator.Distribution{Status: estimator.StatusOK, Mean: f(4000)},
		Routing:     estimator.Routing{Endpoints: []estimator.EndpointShare{{Endpoint: "pod-a", Share: 0.5}, {Endpoint: "pod-b", Share: 0.5}}},
	}
}

// cycleTarget is a file target on a copy of the production-style config.
func cycleTarget(t *testing.T, mode string, est Estimator, src DecisionSource) (*Target, string) {
	t.Helper()
	b, err := os.ReadFile("eppconfig/testdata/epp-config-production-commented.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "epp.yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	prof, err := gate.LookupProfile(gate.ProfileRouter202608)
	if err != nil {
		t.Fatal(err)
	}
	sk, err := sink.New(sink.Target{Name: "t", File: path, Profile: prof, Plugins: []string{"prefill-affinity"}}, sink.Options{ReadOnly: mode == config.ModeOff})
	if err != nil {
		t.Fatal(err)
	}
	pol := config.DefaultPolicy()
	pol.Mode, pol.MinDecisions, pol.Lookback = mode, new(int), time.Hour
	*pol.MinDecisions = 100
	return &Target{Config: config.Target{Name: "t", Plugin: "prefill-affinity", Policy: pol}, Profile: prof, Sink: sk, Estimator: est, Records: src}, path
}

func pause(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(sink.SidecarPath(path), []byte(`{"version":1,"paused":true,"history":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCycleStagesEndToEnd runs whole cycles against a file target without
// Prometheus, one per way a cycle ends before or at the guards.
func TestCycleStagesEndToEnd(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	thin := cycleEstimates(now)
	thin.Prompt = estimator.Distribution{Status: estimator.StatusInconclusive}
	thin.DrainRate = estimator.RateEstimate{Status: estimator.StatusInconclusive}
	for _, tc := range []struct {
		name   string
		est    Estimator
		src    func() DecisionSource
		paused bool
		mode   string
		result Result
		reason HoldReason
		detail string
		guards bool
	}{
		{name: "estimator error is a target error", est: fixedEstimator{err: errors.New("prometheus down")},
			result: ResultError, reason: HoldTargetError, detail: "estimate: prometheus down"},
		{name: "thin data holds inconclusive", est: fixedEstimator{est: thin},
			result: ResultHeld, reason: HoldInconclusive, detail: "no in-flight snapshots"},
		{name: "a paused target with thin data reports paused", est: fixedEstimator{est: thin}, paused: true,
			result: ResultHeld, reason: HoldPaused, detail: "gatetuner.dev/paused", guards: true},
		{name: "a records stream that is down holds", est: fixedEstimator{est: cycleEstimates(now)},
			src: func() DecisionSource {
				return &decisions{down: errors.New("records stream http://x: connection refused")}
			},
			result: ResultHeld, reason: HoldRecordsUnavailable, detail: "connection refused"},
		{name: "a paused target with a dead stream reports paused", est: fixedEstimator{est: cycleEstimates(now)}, paused: true,
			src:    func() DecisionSource { return &decisions{down: errors.New("down")} },
			result: ResultHeld, reason: HoldPaused, guards: true},
		{name: "a replay error is a target error", est: fixedEstimator{est: cycleEstimates(now)},
			src:    func() DecisionSource { return &decisions{err: errors.New("disk gone")} },
			result: ResultError, reason: HoldTargetError, detail: "shadow: disk gone"},
		{name: "too few decisions", est: fixedEstimator{est: cycleEstimates(now)},
			src:    func() DecisionSource { return &decisions{from: now.Add(-time.Minute), n: 50} },
			result: ResultHeld, reason: HoldNoDecisions, detail: "minimum 100", guards: true},
		{name: "a full replay reaches the guards", est: fixedEstimator{est: cycleEstimates(now)},
			src:    func() DecisionSource { return &decisions{from: now.Add(-50 * time.Minute), n: 2400} },
			guards: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var src DecisionSource
			if tc.src != nil {
				src = tc.src()
			}
			mode := tc.mode
			if mode == "" {
				mode = config.ModeOff
			}
			tg, path := cycleTarget(t, mode, tc.est, src)
			if tc.paused {
				pause(t, path)
			}
			tu := &Tuner{Clock: func() time.Time { return now }}
			rep, plan := tu.plan(context.Background(), tg, &Memory{})
			if plan != nil {
				t.Fatalf("mode off planned a write: %+v", plan)
			}
			if tc.result != "" && rep.Result != tc.result {
				t.Fatalf("result %s (%+v), want %s", rep.Result, rep.Hold, tc.result)
			}
			if tc.reason != "" && (rep.Hold == nil || rep.Hold.Reason != tc.reason) {
				t.Fatalf("hold %+v, want %s", rep.Hold, tc.reason)
			}
			if tc.detail != "" && !strings.Contains(rep.Hold.Detail, tc.detail) {
				t.Errorf("detail %q does not say %q", rep.Hold.Detail, tc.detail)
			}
			if tc.guards != (len(rep.Guards) > 0) {
				t.Errorf("guards listed: %+v, want listed %v", rep.Guards, tc.guards)
			}
			if tc.result == ResultError && rep.Error == "" {
				t.Errorf("error result without an error")
			}
		})
	}
}

// TestCycleRecommendsWithEvidence runs a full replay and checks the
// recommendation's evidence is filled from every stage.
func TestCycleRecommendsWithEvidence(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tg, _ := cycleTarget(t, config.ModeOff, fixedEstimator{est: cycleEstimates(now)}, &decisions{from: now.Add(-50 * time.Minute), n: 2400})
	tu := &Tuner{Clock: func() time.Time { return now }}
	rep := tu.Cycle(context.Background(), tg)
	rec := rep.Recommendation
	if rec == nil {
		t.Fatalf("no recommendation: %+v", rep)
	}
	ev := rec.Evidence
	if ev.Source != SourceKindRecords || ev.Window.Decisions != 2400 || ev.Candidates < 2 || ev.Objective.Name != ObjectiveFeedbackTTFTP90 {
		t.Errorf("evidence %+v", ev)
	}
	if len(ev.Objective.Candidates) != ev.Candidates {
		t.Errorf("%d candidate views for %d candidates", len(ev.Objective.Candidates), ev.Candidates)
	}
	if c := ev.Confidence; math.Abs(c.Value-c.Rate*c.Source*c.Sample*c.Consistency) > 1e-12 || rec.Confidence != c.Value {
		t.Errorf("confidence %+v vs %v", c, rec.Confidence)
	}
	if rep.Result != ResultRecommended && rep.Result != ResultHeld {
		t.Errorf("result %s", rep.Result)
	}
	if rep.Result == ResultHeld && rec.HoldReason != string(rep.Hold.Reason) {
		t.Errorf("recommendation hold %q vs %q", rec.HoldReason, rep.Hold.Reason)
	}
	// A second cycle counts only the decisions the first did not.
	rep2 := tu.Cycle(context.Background(), tg)
	if rep2.shadowCur == nil || rep2.shadowCur.Decisions() != 0 {
		t.Errorf("second cycle re-counted decisions: %+v", rep2.shadowCur)
	}
}
