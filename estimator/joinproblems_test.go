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

// TestEndpointRatesReachRankNamedEndpoints: per-pod rates are found under
// the in-flight endpoint names (<pod>-rank-<i>) the tuner looks them up by,
// not only under the pod.
func TestEndpointRatesReachRankNamedEndpoints(t *testing.T) {
	rank := func(ep, pod string, r int) estimator.EndpointJoin {
		return estimator.EndpointJoin{Endpoint: ep, Pod: pod, Rank: r}
	}
	for _, tc := range []struct {
		name string
		per  []estimator.PodRate
		eps  []estimator.EndpointJoin
		want map[string]float64
	}{
		{"a pod measured once gives its rate to each rank endpoint",
			[]estimator.PodRate{{Pod: "a", Value: 100}, {Pod: "b", Value: 200}},
			[]estimator.EndpointJoin{rank("a-rank-0", "a", 0), rank("a-rank-1", "a", 1), rank("b-rank-0", "b", 0)},
			map[string]float64{"a": 100, "b": 200, "a-rank-0": 100, "a-rank-1": 100, "b-rank-0": 200}},
		{"a pod measured per port gives its units to its ranks in port order",
			[]estimator.PodRate{{Pod: "a@10.0.0.1:8001", Value: 110}, {Pod: "a@10.0.0.1:8000", Value: 100}},
			[]estimator.EndpointJoin{rank("a-rank-0", "a", 0), rank("a-rank-1", "a", 1)},
			map[string]float64{"a@10.0.0.1:8000": 100, "a@10.0.0.1:8001": 110, "a-rank-0": 100, "a-rank-1": 110}},
		{"bare endpoint names keep the pod's rate",
			[]estimator.PodRate{{Pod: "a", Value: 100}}, []estimator.EndpointJoin{rank("a", "a", -1)}, map[string]float64{"a": 100}},
		{"unjoined endpoints and unmeasured rates are left out",
			[]estimator.PodRate{{Pod: "a", Value: 0}, {Pod: "b", Value: 50}},
			[]estimator.EndpointJoin{rank("a-rank-0", "a", 0), rank("gone-rank-0", "", 0), rank("b-rank-0", "b", 0)},
			map[string]float64{"b": 50, "b-rank-0": 50}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := estimator.Estimates{DrainRate: estimator.RateEstimate{PerPod: tc.per}, Shape: estimator.Shape{Endpoints: tc.eps}}
			got := e.EndpointRates(&e.DrainRate)
			if len(got) != len(tc.want) {
				t.Fatalf("EndpointRates = %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Fatalf("EndpointRates = %v, want %v", got, tc.want)
				}
			}
		})
	}
}
