package decide

import (
	"math"
	"testing"
)

// TestExcessObjectiveExcludesBarsBelowTheFloor pins the Prometheus model's
// objective: scores are the scaled excess, +Inf below the release-chain floor.
func TestExcessObjectiveExcludesBarsBelowTheFloor(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	est := &Estimate{PromptP90: f(9000), PromptP99: f(12000)}
	obj := objectiveFor(SourceKindModel, est, 64)
	if obj.name() != ObjectiveExcessTokens || obj.floor() != 12000 {
		t.Fatalf("objective %s floor %v", obj.name(), obj.floor())
	}
	cands := []Candidate{{Bar: 5000}, {Bar: 12000}, {Bar: math.Inf(1)}}
	s := obj.windowScores(cands, &replayed{windowCosts: [][]float64{{1, 2, 3}}})[0]
	if !math.IsInf(s[0], 1) || s[1] != 2 || s[2] != 3 {
		t.Errorf("scores %v", s)
	}
	if objectiveFor(SourceKindRecords, est, 64).name() != ObjectiveFeedbackTTFTP90 {
		t.Errorf("records objective")
	}
	est.PromptP99 = nil
	if f := objectiveFor(SourceKindModel, est, 64).floor(); f != 9000 {
		t.Errorf("floor without a p99 = %v, want the p90", f)
	}
}
