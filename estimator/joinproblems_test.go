package estimator_test

import (
	"testing"

	"github.com/gatetuner/gatetuner/estimator"
)

// TestJoinProblemsCountWhatFailedToJoin pins the values of
// gatetuner_estimator_join_problems: the routed pods without an in-flight
// endpoint, the in-flight endpoints without a pod, 1 for other join
// reasons, nothing for reasons that are not about joins.
func TestJoinProblemsCountWhatFailedToJoin(t *testing.T) {
	inflightJoin := estimator.Join{Left: "llm_d_epp_inflight_tokens{endpoint_name}", Right: "llm_d_epp_scheduler_attempts_total{endpoint_name}",
		LeftNames: 4, RightNames: 4, Matched: 1}
	for _, tc := range []struct {
		name string
		e    estimator.Estimates
		want map[estimator.ReasonCode]float64
	}{
		{"a clean join has no problems", estimator.Estimates{Reasons: []estimator.Reason{{Code: estimator.ReasonNoSaturatedWindows}}}, map[estimator.ReasonCode]float64{}},
		{"unmatched names count the routed pods without an endpoint", estimator.Estimates{
			Reasons: []estimator.Reason{{Code: estimator.ReasonEndpointNamesUnmatched}}, Shape: estimator.Shape{Joins: []estimator.Join{inflightJoin}}},
			map[estimator.ReasonCode]float64{estimator.ReasonEndpointNamesUnmatched: 3}},
		{"unjoined endpoints (a warning) count the endpoints without a pod", estimator.Estimates{
			Warnings: []estimator.Reason{{Code: estimator.ReasonEndpointsUnjoined}},
			Shape:    estimator.Shape{Endpoints: []estimator.EndpointJoin{{Endpoint: "a-rank-0", Pod: "a"}, {Endpoint: "gone-rank-0"}, {Endpoint: "gone-rank-1"}}}},
			map[estimator.ReasonCode]float64{estimator.ReasonEndpointsUnjoined: 2}},
		{"other join reasons count 1", estimator.Estimates{Reasons: []estimator.Reason{{Code: estimator.ReasonPodLabelMissing}, {Code: estimator.ReasonInFlightProducerAmbiguous}}},
			map[estimator.ReasonCode]float64{estimator.ReasonPodLabelMissing: 1, estimator.ReasonInFlightProducerAmbiguous: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.e.JoinProblems()
			if len(got) != len(tc.want) {
				t.Fatalf("JoinProblems() = %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Fatalf("JoinProblems() = %v, want %v", got, tc.want)
				}
			}
		})
	}
}
