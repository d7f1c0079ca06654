package estimator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
)

// lifecycleRun is calibration-15928 under llm-d-2026 with the departure
// fields of spec, estimated at its end over the whole run.
func lifecycleRun(t *testing.T, key, spec string) (*simRun, *estimator.Estimates, time.Time, time.Duration) {
	t.Helper()
	x, err := scenario.ParseExportShape(scenario.ShapeLLMD2026 + "," + spec)
	if err != nil {
		t.Fatal(err)
	}
	run := fixture(t, variant{key: key, scenario: "calibration-15928", seed: 1, exporters: &x})
	at := run.end()
	lookback := time.Duration(run.truth.End-run.truth.Start) * time.Second
	est, err := estimator.New(run.q, fixedClock(at), estimator.Config{Lookback: lookback})
	if err != nil {
		t.Fatal(err)
	}
	e, err := est.Estimate(context.Background(), run.target(), at)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("status %s, reasons %v, warnings %v", e.Status, codes(e.Reasons), codes(e.Warnings))
	return run, e, at, lookback
}

// TestDepartedPodsStaleInFlightSeriesAreLeftOut: a pod crashes in the
// saturated phase; the EPP keeps its in-flight series (at 0) forever. The
// estimate leaves the endpoint out of every snapshot after its pod's vLLM
// series ended, says so (endpoints-departed, with the pod and when it was
// last seen), and still measures the drain rate and nominal within the
// matrix's tolerances; the model still draws.
func TestDepartedPodsStaleInFlightSeriesAreLeftOut(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real Prometheus; skipped under -short")
	}
	run, e, at, lookback := lifecycleRun(t, "depart-1", "departPods=1,departAt=22m")
	departed := run.sc.PodName(run.sc.Pods.Count - 1)
	departAt := run.base.Add(22 * time.Minute)
	if e.Status != estimator.StatusOK {
		t.Fatalf("status %s: %v", e.Status, codes(e.Reasons))
	}
	var warned bool
	for _, r := range e.Warnings {
		warned = warned || r.Code == estimator.ReasonEndpointsDeparted && strings.Contains(r.Detail, departed+"-rank-0") && strings.Contains(r.Detail, "pod "+departed)
	}
	if !warned {
		t.Errorf("no endpoints-departed warning naming %s: %v", departed, e.Warnings)
	}
	if len(e.Shape.Departed) != 1 || e.Shape.Departed[0].Pod != departed || e.Shape.Departed[0].LastSeen.After(departAt) ||
		e.Shape.Departed[0].LastSeen.Before(departAt.Add(-time.Minute)) {
		t.Errorf("shape.departed %+v, want %s last seen just before %s", e.Shape.Departed, departed, departAt)
	}
	before, after := 0, 0
	for _, s := range e.InFlight.Snapshots {
		for _, ep := range s.Endpoints {
			if ep.Pod != departed && ep.Endpoint != departed {
				continue
			}
			if s.Time.After(departAt.Add(3 * time.Minute)) {
				after++
			} else {
				before++
			}
		}
	}
	if before == 0 || after != 0 {
		t.Errorf("the departed endpoint is in %d snapshots before and %d after its pod left, want some and none", before, after)
	}
	res := checkShapeAccuracy(t, run, e, at, lookback, 1, nil)
	if n := modelDecisions(t, e, at, lookback); n == 0 {
		t.Error("the model drew no decisions")
	}
	t.Logf("departed pod: drain %+.2f%%, nominal %+.2f%%", 100*res.drain, 100*res.nominal)
}

// TestRestartedPodsCounterResetIsHandledAsPrometheusDoes: a pod restarts
// under the same name (its counters start from zero). Every counter read
// over the lookback goes through rate/increase, which count the drop as a
// reset; the saturated windows holding it are dropped and named
// (windows-dropped: counter reset), and the estimate stays within the
// matrix's tolerances.
func TestRestartedPodsCounterResetIsHandledAsPrometheusDoes(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real Prometheus; skipped under -short")
	}
	run, e, at, lookback := lifecycleRun(t, "restart-1", "departPods=1,departAt=20m,rejoinAfter=1m,rejoinSameName=true")
	if e.Status != estimator.StatusOK {
		t.Fatalf("status %s: %v", e.Status, codes(e.Reasons))
	}
	// The run does hold a counter going backwards.
	pod := run.sc.PodName(run.sc.Pods.Count - 1)
	v, _, err := run.q.Query(context.Background(), `sum(resets(vllm:prompt_tokens_by_source_total{pod="`+pod+`",source="local_compute"}[`+lookback.String()+`]))`, at)
	if err != nil || len(v) != 1 || v[0].Value < 1 {
		t.Fatalf("no counter reset in the restarted pod's series: %v %v", v, err)
	}
	for _, r := range e.Warnings {
		if r.Code == estimator.ReasonWindowsDropped && !strings.Contains(r.Detail, "reset") {
			t.Errorf("windows dropped, but not for the reset: %s", r.Detail)
		}
	}
	res := checkShapeAccuracy(t, run, e, at, lookback, 1, nil)
	if a := e.PerRequestRate; a.Status != estimator.StatusOK || *a.Value <= 0 {
		t.Errorf("per-request rate %s over a counter reset", a.Status)
	}
	if n := modelDecisions(t, e, at, lookback); n == 0 {
		t.Error("the model drew no decisions")
	}
	t.Logf("restarted pod: drain %+.2f%%, nominal %+.2f%%, A/truth %.2f", 100*res.drain, 100*res.nominal, res.perRequest)
}

// TestSchedulingFailuresJoinNothing: every pod crashes and new pods join
// two minutes later; in between the EPP's scheduling attempts fail, counted
// with no endpoint label. Routing, joins and snapshots name no empty
// endpoint, the old pods are departed, and the estimate stands.
func TestSchedulingFailuresJoinNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real Prometheus; skipped under -short")
	}
	run, e, at, lookback := lifecycleRun(t, "depart-all", "departPods=4,departAt=22m,rejoinAfter=2m")
	v, _, err := run.q.Query(context.Background(), `sum(llm_d_epp_scheduler_attempts_total{status="failure"})`, at)
	if err != nil || len(v) != 1 || v[0].Value < 1 {
		t.Fatalf("no failed scheduling attempt in Prometheus: %v %v", v, err)
	}
	if e.Status != estimator.StatusOK {
		t.Fatalf("status %s: %v", e.Status, codes(e.Reasons))
	}
	for _, s := range e.Routing.Endpoints {
		if s.Endpoint == "" || s.Pod == "" && strings.HasSuffix(s.Endpoint, "-rank-") {
			t.Errorf("routing share %+v", s)
		}
	}
	for _, j := range e.Shape.Joins {
		for _, n := range append(append([]string(nil), j.LeftUnmatched...), j.RightUnmatched...) {
			if n == "" {
				t.Errorf("join %s/%s holds an empty name", j.Left, j.Right)
			}
		}
	}
	for _, sn := range e.InFlight.Snapshots {
		for _, ep := range sn.Endpoints {
			if ep.Endpoint == "" {
				t.Fatalf("snapshot at %s holds an unnamed endpoint", sn.Time)
			}
		}
	}
	if len(e.Shape.Departed) != 4 {
		t.Errorf("%d departed endpoints, want the 4 old pods': %+v", len(e.Shape.Departed), e.Shape.Departed)
	}
	res := checkShapeAccuracy(t, run, e, at, lookback, 1, nil)
	if n := modelDecisions(t, e, at, lookback); n == 0 {
		t.Error("the model drew no decisions")
	}
	t.Logf("every pod replaced: %v failed attempts, drain %+.2f%%, nominal %+.2f%%, routing %+v", v[0].Value, 100*res.drain, 100*res.nominal, e.Routing.Endpoints)
}
