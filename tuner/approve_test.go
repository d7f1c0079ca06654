package tuner

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/sink"
)

// TestRecommendationHashIgnoresTheEvidence runs two cycles whose evidence
// differs (the drain rate's confidence, so the confidence and the report's
// numbers) but which would write the same values: one hash.
func TestRecommendationHashIgnoresTheEvidence(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	hashAt := func(conf float64) (string, float64) {
		est := cycleEstimates(now)
		est.DrainRate.Confidence = conf
		tg, _ := cycleTarget(t, config.ModeApprove, fixedEstimator{est: est}, &decisions{from: now.Add(-50 * time.Minute), n: 2400})
		rep, _ := (&Tuner{Clock: func() time.Time { return now }}).plan(context.Background(), tg, &Memory{})
		if rep.Recommendation == nil {
			t.Fatalf("no recommendation: %+v", rep.Hold)
		}
		return rep.Recommendation.Hash, rep.Recommendation.Confidence
	}
	h1, c1 := hashAt(0.9)
	h2, c2 := hashAt(0.8)
	if c1 == c2 {
		t.Fatalf("confidence %v both times: the evidence did not differ", c1)
	}
	if h1 == "" || h1 != h2 {
		t.Errorf("hash %q with confidence %.2f, %q with %.2f: want one non-empty hash", h1, c1, h2, c2)
	}
}

// TestApproveModeFileTargetApprovesInTheStateFile: a file target has no
// annotations; its state file's "approve" carries the approval, is kept on
// the write, and the written hash is not written again.
func TestApproveModeFileTargetApprovesInTheStateFile(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tg, path := cycleTarget(t, config.ModeApprove, fixedEstimator{est: cycleEstimates(now)}, &decisions{from: now.Add(-50 * time.Minute), n: 2400})
	// The test is about the approval, not the apply window: auto (the
	// default) needs per-window estimates this fixed estimator has not.
	tg.Config.Policy.ApplyWindow = &config.ApplyWindow{Always: true}
	tu := &Tuner{Clock: func() time.Time { return now }}
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rep := tu.Cycle(context.Background(), tg)
	if rep.Result != ResultPending || rep.Hold == nil || rep.Hold.Reason != HoldAwaitingApproval {
		t.Fatalf("result %s hold %+v, want pending awaiting-approval", rep.Result, rep.Hold)
	}
	hash := rep.Recommendation.Hash
	if want := `set "approve": "` + hash + `" in the state file ` + sink.SidecarPath(path); !strings.Contains(rep.Hold.Detail, want) {
		t.Errorf("detail %q does not say %q", rep.Hold.Detail, want)
	}
	if err := os.WriteFile(sink.SidecarPath(path), []byte(`{"version":1,"paused":false,"approve":"`+hash+`","history":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	rep = tu.Cycle(context.Background(), tg)
	if rep.Result != ResultApplied {
		t.Fatalf("approved in the state file: result %s hold %+v error %q", rep.Result, rep.Hold, rep.Error)
	}
	if b, _ := os.ReadFile(path); string(b) == string(orig) {
		t.Fatalf("applied but the file is unchanged")
	}
	snap, err := tg.Sink.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if snap.State.Approve != hash {
		t.Errorf("the write dropped the approval: %q", snap.State.Approve)
	}
	if e, ok := snap.State.WrittenHash(hash); !ok || e.Kind != sink.KindApply {
		t.Errorf("history does not record hash %s: %+v", hash, snap.State.History)
	}
}
