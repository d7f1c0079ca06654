package sink

import (
	"context"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/gatetuner/gatetuner/estimator/prom"
	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/deployactor"
)

// ttftBuckets are vLLM's TTFT histogram buckets (the EPP's are written the same here).
var ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}

// ttftSeries writes a TTFT histogram into an embedded Prometheus: every 15 s
// from `from` to `to`, 10 requests whose TTFT is ttft(t) seconds.
func ttftSeries(t testing.TB, db *prom.Embedded, metric string, labels map[string]string, from, to time.Time, ttft func(time.Time) float64) {
	t.Helper()
	counts := make([]float64, len(ttftBuckets)+1)
	var sum, n float64
	app := db.Appender(context.Background())
	for ts := from; !ts.After(to); ts = ts.Add(15 * time.Second) {
		x := ttft(ts)
		for i, le := range ttftBuckets {
			if x <= le {
				counts[i] += 10
			}
		}
		counts[len(ttftBuckets)] += 10
		sum += 10 * x
		n += 10
		add := func(name string, extra map[string]string, v float64) {
			ls := map[string]string{}
			for k, v := range labels {
				ls[k] = v
			}
			for k, v := range extra {
				ls[k] = v
			}
			if err := app.Add(prom.Sample{Name: name, Labels: ls, Value: v, Time: ts}); err != nil {
				t.Fatal(err)
			}
		}
		for i, le := range ttftBuckets {
			add(metric+"_bucket", map[string]string{"le": strconv.FormatFloat(le, 'f', -1, 64)}, counts[i])
		}
		add(metric+"_bucket", map[string]string{"le": "+Inf"}, counts[len(ttftBuckets)])
		add(metric+"_sum", nil, sum)
		add(metric+"_count", nil, n)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
}

func newEmbedded(t testing.TB) *prom.Embedded {
	t.Helper()
	db, err := prom.NewEmbedded(prom.EmbeddedConfig{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestKubeVerification(t *testing.T) {
	cases := []struct {
		name       string
		metric     string  // histogram written; "" writes none
		after      float64 // TTFT after the apply (before: 0.2 s)
		querier    func(*prom.Embedded) prom.Querier
		outcome    Outcome
		hold       HoldReason
		wantMetric string
	}{
		{name: "unchanged TTFT passes", metric: MetricEPPTTFT, after: 0.2, outcome: OutcomeApplied, wantMetric: MetricEPPTTFT},
		{name: "TTFT regression rolls back", metric: MetricEPPTTFT, after: 2, outcome: OutcomeRolledBack, hold: HoldVerificationFailed, wantMetric: MetricEPPTTFT},
		{name: "vLLM histogram when the EPP has none", metric: MetricVLLMTTFT, after: 0.2, outcome: OutcomeApplied, wantMetric: MetricVLLMTTFT},
		{name: "no TTFT data holds before writing", metric: "", outcome: OutcomeHeld, hold: HoldVerificationUnavailable},
		{name: "Prometheus unreachable holds before writing", metric: MetricEPPTTFT, after: 0.2,
			querier: func(*prom.Embedded) prom.Querier { return failingQuerier{err: errUnreachable} }, outcome: OutcomeHeld, hold: HoldVerificationUnavailable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env, ns := needEnv(t)
			c := env.Client
			orig := createConfigMap(t, c, sampleConfigMap(t, ns))
			createDeployment(t, c, ns)
			startActor(t, c, ns, deployactor.Options{RolloutDelay: 20 * time.Millisecond})

			t0 := time.Now().UTC().Truncate(time.Minute)
			db := newEmbedded(t)
			if tc.metric != "" {
				ttftSeries(t, db, tc.metric, map[string]string{"namespace": ns}, t0.Add(-40*time.Minute), t0.Add(90*time.Minute), func(ts time.Time) float64 {
					if ts.After(t0) {
						return tc.after
					}
					return 0.2
				})
			}
			// Another deployment's series must not leak in.
			ttftSeries(t, db, MetricEPPTTFT, map[string]string{"namespace": "other"}, t0.Add(-40*time.Minute), t0.Add(90*time.Minute), func(time.Time) float64 { return 30 })
			var q prom.Querier = db
			if tc.querier != nil {
				q = tc.querier(db)
			}
			fc := testingclock.NewFakeClock(t0)
			stepper(t, fc, time.Second)
			s := newKubeSink(t, c, kubeTarget(ns, ModeRollout, gate.ProfileRouter202608), Options{
				Clock: fc, PollInterval: time.Second, RolloutTimeout: time.Hour,
				Verify: &Verify{Querier: q, Selector: `namespace="` + ns + `"`, Margin: 0.25, Window: 10 * time.Minute, Warmup: 2 * time.Minute, Interval: 30 * time.Second},
			})
			res := mustApply(t, s, mustRead(t, s), Meta{}, set(filter, gate.KeyMaxTTFTPenaltyMs, 5000))
			if res.Outcome != tc.outcome || (tc.hold != "") != (res.Hold != nil) || (res.Hold != nil && res.Hold.Reason != tc.hold) {
				t.Fatalf("result %+v, hold %+v", res, res.Hold)
			}
			cm := getConfigMap(t, c, ns, cmName)
			if res.Outcome == OutcomeHeld {
				t.Logf("hold: %s", res.Hold)
				if cm.ResourceVersion != orig.ResourceVersion {
					t.Fatal("written although held")
				}
				return
			}
			st, err := decodeAnnotations(cm.Annotations)
			if err != nil {
				t.Fatal(err)
			}
			v := st.History[0].Verification
			if v == nil || v.Metric != tc.wantMetric || math.Abs(v.Before-0.235) > 1e-9 || v.Quantile != 0.9 {
				t.Fatalf("verification %+v", v)
			}
			t.Logf("verification %+v", *v)
			switch tc.outcome {
			case OutcomeApplied:
				if v.Result != "passed" || st.History[0].Status != StatusEffective || st.Hold != nil || !strings.Contains(cm.Data[cmKey], "maxTTFTPenaltyMs: 5000 ") {
					t.Fatalf("state %+v", st)
				}
			case OutcomeRolledBack:
				if v.Result != "failed" || math.Abs(v.After-2.35) > 1e-9 || st.History[0].Status != StatusRolledBack ||
					st.Hold == nil || st.Hold.Reason != HoldVerificationFailed || cm.Data[cmKey] != orig.Data[cmKey] ||
					len(st.History) != 2 || st.History[1].Kind != KindAutoRollback {
					t.Fatalf("state %+v", st)
				}
				t.Logf("hold: %s", st.Hold)
			}
		})
	}
}
