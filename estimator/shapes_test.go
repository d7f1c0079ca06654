package estimator_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/estimator/prom"
	"github.com/gatetuner/gatetuner/test/fleetsim"
	"github.com/gatetuner/gatetuner/tuner"
)

// shapeCase is one export shape of the accuracy matrix (docs/estimator.md).
type shapeCase struct {
	name string
	// spec is the shape as --exporters takes it.
	spec string
	// target edits the fixture's target (selectors, settings).
	target func(*estimator.Target)
	// wantReason, when set, is the reason the estimate must be
	// Inconclusive with instead of accurate.
	wantReason estimator.ReasonCode
	// noModel: the shape has no in-flight gauges, the model cannot run.
	noModel bool
	// edit changes the scenario (data-parallel shapes halve the pods to
	// keep the engines saturated).
	edit func(*fleetsim.Scenario)
}

func shapeCases() []shapeCase {
	jobs := func(t *estimator.Target) {
		t.VLLMSelector, t.EPPSelector = `job="vllm"`, `job="inference-extension-epp"`
	}
	producer := func(t *estimator.Target) { t.InFlightProducer = "inflight-load-producer" }
	synced := func(t *estimator.Target) { t.SyncedEPPReplicas = true }
	halfPods := func(sc *fleetsim.Scenario) { sc.Pods.Count /= 2 }
	return []shapeCase{
		{name: "legacy-sim", spec: fleetsim.ShapeLegacySim},
		{name: "llm-d-2026", spec: fleetsim.ShapeLLMD2026},
		{name: "llm-d-mid-2026", spec: fleetsim.ShapeLLMDMid2026},
		{name: "llm-d-2025", spec: fleetsim.ShapeLLMD2025, noModel: true},
		{name: "two-producers-named", spec: fleetsim.ShapeLLMD2026 + ",producers=inflight-load-producer,shadow-producer", target: producer},
		{name: "two-producers-unnamed", spec: fleetsim.ShapeLLMD2026 + ",producers=inflight-load-producer,shadow-producer",
			wantReason: estimator.ReasonInFlightProducerAmbiguous},
		{name: "dp2-port-8000", spec: fleetsim.ShapeLLMD2026 + ",dpRanks=2", edit: halfPods},
		{name: "dp2-all-ranks", spec: fleetsim.ShapeLLMD2026 + ",dpRanks=2,scrapeAllRanks=true", edit: halfPods},
		{name: "dp2-internal-engines", spec: fleetsim.ShapeLLMD2026 + ",dpEngines=2", edit: halfPods},
		{name: "epp-replicas-synced", spec: fleetsim.ShapeLLMD2026 + ",eppReplicas=2,syncReplicas=true", target: synced},
		{name: "epp-replicas-unsynced", spec: fleetsim.ShapeLLMD2026 + ",eppReplicas=2,syncReplicas=false"},
		{name: "usage-half", spec: fleetsim.ShapeLLMD2026 + ",usageShare=0.5"},
		{name: "kubernetes-sd", spec: fleetsim.ShapeLLMD2026 + ",scrape=kubernetes-sd", target: jobs,
			wantReason: estimator.ReasonPodLabelMissing},
	}
}

// shapeResult is one row of the accuracy table.
type shapeResult struct {
	drain, nominal, perRequest float64 // relative errors (NaN: inconclusive)
	decisions                  int
}

// TestEveryExportShapeIsAccurateOrNamesItsReason runs calibration-15928
// under each export shape through a real Prometheus and checks the drain
// rate within ±2 % and the nominal within ±5 % of the simulator's truth and
// that the Prometheus model draws decisions — or that the estimate is
// Inconclusive with the shape's named reason.
func TestEveryExportShapeIsAccurateOrNamesItsReason(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real Prometheus; skipped under -short")
	}
	var rows []string
	for _, tc := range shapeCases() {
		t.Run(tc.name, func(t *testing.T) {
			x, err := fleetsim.ParseExportShape(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			run := fixture(t, variant{key: "shape-" + tc.name, scenario: "calibration-15928", seed: 1, exporters: &x, edit: tc.edit})
			at := run.end()
			lookback := time.Duration(run.truth.End-run.truth.Start) * time.Second
			target := run.target()
			target.EPPSelector = fmt.Sprintf(`pod=~%q`, strings.TrimSuffix(run.sc.EPP.Pod, "-0")+"(-[0-9]+)?")
			if tc.target != nil {
				tc.target(&target)
			}
			est, err := estimator.New(run.q, fixedClock(at), estimator.Config{Lookback: lookback})
			if err != nil {
				t.Fatal(err)
			}
			e, err := est.Estimate(context.Background(), target, at)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("shape %s: status %s, reasons %v, shape %+v", x.String(), e.Status, codes(e.Reasons), e.Shape)
			if tc.wantReason != "" {
				if e.Status != estimator.StatusInconclusive || !e.HasReason(tc.wantReason) {
					t.Fatalf("status %s, reasons %v; want inconclusive with %s", e.Status, codes(e.Reasons), tc.wantReason)
				}
				rows = append(rows, fmt.Sprintf("| %s | Inconclusive: `%s` | | | | |", tc.name, tc.wantReason))
				return
			}
			res := checkShapeAccuracy(t, run, e, at, lookback, x.DPEngines)
			if tc.noModel {
				if e.InFlight.Status != estimator.StatusInconclusive || len(e.InFlight.Reasons) == 0 {
					t.Errorf("in-flight %s without a reason on a shape without in-flight gauges", e.InFlight.Status)
				}
			} else {
				res.decisions = modelDecisions(t, e, at, lookback)
				if res.decisions == 0 {
					t.Errorf("the Prometheus model drew no decisions; in-flight %s %v, routing %v", e.InFlight.Status, e.InFlight.Reasons, e.Routing.Endpoints)
				}
			}
			rows = append(rows, fmt.Sprintf("| %s | %+.2f%% | %+.2f%% | %.2f × | %d |", tc.name, 100*res.drain, 100*res.nominal, res.perRequest, res.decisions))
		})
	}
	t.Logf("accuracy table:\n%s", strings.Join(rows, "\n"))
}

// checkShapeAccuracy checks the drain rate (±2 %) and the nominal (±5 %)
// against the truth and returns the relative errors and A / truth.
func checkShapeAccuracy(t *testing.T, run *simRun, e *estimator.Estimates, at time.Time, lookback time.Duration, engines int) shapeResult {
	t.Helper()
	res := shapeResult{drain: math.NaN(), nominal: math.NaN(), perRequest: math.NaN()}
	truth, n := endpointDrainTruth(run.truth, run.base, at.Add(-lookback), at, engines)
	if n == 0 {
		t.Fatal("the simulator reports no saturated window")
	}
	if b := e.DrainRate; b.Status != estimator.StatusOK {
		t.Errorf("drain rate %s: %v", b.Status, codes(e.Reasons))
	} else {
		res.drain = *b.Value/truth - 1
		if math.Abs(res.drain) > 0.02 {
			t.Errorf("drain rate %.0f is %+.2f%% from the truth %.0f; want within 2%%", *b.Value, 100*res.drain, truth)
		}
	}
	nominal := run.sc.Pods.Engine.NominalRate * float64(engines)
	if nm := e.Nominal; nm.Status != estimator.StatusOK {
		t.Errorf("nominal %s: %v", nm.Status, nm.Reasons)
	} else {
		res.nominal = *nm.Value/nominal - 1
		if math.Abs(res.nominal) > 0.05 {
			t.Errorf("nominal %.0f is %+.2f%% from the truth %.0f; want within 5%%", *nm.Value, 100*res.nominal, nominal)
		}
	}
	if a := e.PerRequestRate; a.Status == estimator.StatusOK {
		res.perRequest = *a.Value / truth
	}
	return res
}

// modelDecisions counts the decisions the tuner's Prometheus model draws
// from the estimates over the lookback.
func modelDecisions(t *testing.T, e *estimator.Estimates, at time.Time, lookback time.Duration) int {
	t.Helper()
	m := &tuner.Model{Est: e, BlockSizeTokens: 64, Seed: 1}
	if err := m.Usable(); err != nil {
		t.Errorf("model unusable: %v", err)
		return 0
	}
	n := 0
	err := m.Replay(context.Background(), at.Add(-lookback), at.Add(time.Second), func(d *tuner.Decision) error {
		n++
		return nil
	})
	if err != nil {
		t.Errorf("model replay: %v", err)
	}
	return n
}

// TestUnjoinableDataHoldsWithANamedReason puts a fault proxy in front of a
// real Prometheus holding calibration-15928 exported as llm-d-2026 and
// checks each unjoinable or empty input makes the estimate Inconclusive
// with a reason naming what did not match, and that the Prometheus model's
// refusal (what the tuner holds with) carries it.
func TestUnjoinableDataHoldsWithANamedReason(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real Prometheus; skipped under -short")
	}
	x, err := fleetsim.ParseExportShape(fleetsim.ShapeLLMD2026)
	if err != nil {
		t.Fatal(err)
	}
	run := fixture(t, variant{key: "shape-llm-d-2026", scenario: "calibration-15928", seed: 1, exporters: &x})
	at := run.end()
	lookback := time.Duration(run.truth.End-run.truth.Start) * time.Second
	inflight := func(q string) bool { return strings.Contains(q, "llm_d_epp_inflight") }
	cases := []struct {
		name   string
		f      fault
		target func(*estimator.Target)
		want   estimator.ReasonCode
		// detail are substrings the reason's detail must hold.
		detail []string
	}{
		{name: "in-flight endpoints named unlike the routed pods", f: fault{series: func(q string, s map[string]any) bool {
			if m, ok := s["metric"].(map[string]any); ok && inflight(q) && m["endpoint_name"] != nil {
				m["endpoint_name"] = "vllm-" + m["endpoint_name"].(string)
			}
			return true
		}}, want: estimator.ReasonEndpointNamesUnmatched,
			detail: []string{`in-flight "vllm-` + run.sc.PodName(0) + `-rank-0"`, `routing "` + run.sc.PodName(0) + `"`}},
		{name: "EPP selector matches nothing", target: func(t *estimator.Target) { t.EPPSelector = `pod="no-such-epp"` },
			want: estimator.ReasonSelectorMatchesNothing, detail: []string{`{pod="no-such-epp"}`, run.sc.EPP.Pod}},
		{name: "in-flight producer not found", target: func(t *estimator.Target) { t.InFlightProducer = "no-such-producer" },
			want: estimator.ReasonInFlightProducerNotFound, detail: []string{`"no-such-producer"`, `"inflight-load-producer"`}},
		{name: "in-flight series present but empty", f: fault{series: func(q string, s map[string]any) bool {
			return !(inflight(q) && strings.HasPrefix(q, "sum by (endpoint_name"))
		}}, want: estimator.ReasonSeriesEmpty, detail: []string{mInFlightTokens}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q, err := prom.NewHTTP(prom.HTTPConfig{Address: faultProxy(t, run.srv.URL(), tc.f), Timeout: 30 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			est, err := estimator.New(q, fixedClock(at), estimator.Config{Lookback: lookback})
			if err != nil {
				t.Fatal(err)
			}
			target := run.target()
			if tc.target != nil {
				tc.target(&target)
			}
			e, err := est.Estimate(context.Background(), target, at)
			if err != nil {
				t.Fatal(err)
			}
			if e.Status != estimator.StatusInconclusive || !hasPartReason(e, "inFlight", tc.want) {
				t.Fatalf("status %s, reasons %v; want inconclusive with inFlight:%s", e.Status, codes(e.Reasons), tc.want)
			}
			var detail string
			for _, r := range e.Reasons {
				if r.Code == tc.want {
					detail = r.Detail
				}
			}
			for _, want := range tc.detail {
				if !strings.Contains(detail, want) {
					t.Errorf("detail %q lacks %q", detail, want)
				}
			}
			m := &tuner.Model{Est: e, BlockSizeTokens: 64}
			if err := m.Usable(); err == nil || !strings.Contains(err.Error(), string(tc.want)) || !strings.Contains(err.Error(), detail) {
				t.Errorf("the model's refusal %v does not carry %s: %s", err, tc.want, detail)
			}
			t.Logf("%s: %s", tc.want, detail)
		})
	}
}

const mInFlightTokens = "llm_d_epp_inflight_tokens"

// endpointDrainTruth is the simulator's pooled drain-rate truth per EPP
// endpoint (a pod's rank; its internal engines summed, in windows where
// every engine is saturated): per endpoint the time-weighted mean, then the
// median over endpoints.
func endpointDrainTruth(tr *fleetsim.Truth, base, from, to time.Time, engines int) (float64, int) {
	type win struct {
		pod        string
		rank       int
		start, end float64
	}
	sum, count := map[win]float64{}, map[win]int{}
	for _, w := range tr.Windows {
		ws := base.Add(time.Duration(w.Start * float64(time.Second)))
		we := base.Add(time.Duration(w.End * float64(time.Second)))
		if ws.Before(from) || we.After(to) {
			continue
		}
		k := win{w.Pod, w.Rank, w.Start, w.End}
		sum[k] += w.DrainRate
		count[k]++
	}
	type acc struct{ work, sec float64 }
	per := map[string]*acc{}
	n := 0
	for k, v := range sum {
		if count[k] < engines {
			continue
		}
		id := fmt.Sprintf("%s/%d", k.pod, k.rank)
		a := per[id]
		if a == nil {
			a = &acc{}
			per[id] = a
		}
		a.work += v * (k.end - k.start)
		a.sec += k.end - k.start
		n++
	}
	var vs []float64
	for _, a := range per {
		vs = append(vs, a.work/a.sec)
	}
	return medianOf(vs), n
}
