package tuner

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/exporter"
)

// TestJoinProblemsAreSetEachCycle: a cycle whose estimate carries a join
// reason sets gatetuner_estimator_join_problems for it; the next clean
// cycle removes the series.
func TestJoinProblemsAreSetEachCycle(t *testing.T) {
	tu := &Tuner{Metrics: exporter.New("test", "test")}
	bad := &estimator.Estimates{Reasons: []estimator.Reason{{Code: estimator.ReasonEndpointNamesUnmatched}},
		Shape: estimator.Shape{Joins: []estimator.Join{{Left: "llm_d_epp_inflight_tokens{endpoint_name}", RightNames: 4, Matched: 0}}}}
	tu.recordEstimates("a", bad)
	if got := testutil.ToFloat64(tu.Metrics.JoinProblems.WithLabelValues("a", "endpoint-names-unmatched")); got != 4 {
		t.Fatalf("join problems = %v, want 4 (routed pods without an in-flight endpoint)", got)
	}
	tu.recordEstimates("a", &estimator.Estimates{})
	if n := testutil.CollectAndCount(tu.Metrics.JoinProblems); n != 0 {
		t.Fatalf("%d join-problem series after a clean cycle, want 0", n)
	}
}
