package tuner

import (
	"testing"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/tuner/decide"
)

// TestFeedbackRatesFindRankNamedEndpoints: with in-flight endpoints named
// <pod>-rank-<i>, the restart cost's capacity sums the measured per-pod
// rates, not the pooled rate the lookup fell back to before.
func TestFeedbackRatesFindRankNamedEndpoints(t *testing.T) {
	v, n, rate, cached := 1000.0, 2.0, 10.0, 500.0
	est := &estimator.Estimates{
		DrainRate:   estimator.RateEstimate{Status: estimator.StatusOK, Value: &v, PerPod: []estimator.PodRate{{Pod: "a", Value: 800}, {Pod: "b", Value: 1200}}},
		RequestRate: estimator.Scalar{Value: &rate}, Cached: estimator.Distribution{Mean: &cached},
		Routing: estimator.Routing{Endpoints: []estimator.EndpointShare{{Endpoint: "a-rank-0", Pod: "a", Share: 1 / n}, {Endpoint: "b-rank-0", Pod: "b", Share: 1 / n}}},
		Shape:   estimator.Shape{Endpoints: []estimator.EndpointJoin{{Endpoint: "a-rank-0", Pod: "a", Rank: 0}, {Endpoint: "b-rank-0", Pod: "b", Rank: 0}}},
	}
	lb := estimateOf(est) // the drain-rate estimate is the feedback replay's rate
	pooled, rates := *lb.Drain.Value, lb.Drain.PerEndpoint
	if rates["a-rank-0"] != 800 || rates["b-rank-0"] != 1200 {
		t.Fatalf("rates %v: the rank endpoints do not carry their pods' rates", rates)
	}
	rc := decide.PriceRestart(&lb.Traffic, &lb.Traffic, 0, pooled, rates)
	if rc.CapacityTokensPerSecond != 2000 {
		t.Fatalf("capacity %v, want 800+1200", rc.CapacityTokensPerSecond)
	}
}
