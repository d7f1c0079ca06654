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
	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/truth"
	"github.com/gatetuner/gatetuner/tuner"
	"github.com/gatetuner/gatetuner/tuner/shadow"
)

// shapeCase is one export shape of the accuracy matrix (docs/estimator.md).
type shapeCase struct {
	name string
	// spec is the shape as --exporters takes it.
	spec string
	// fixture names the simulator run (default: the case's name); cases
	// with the same fixture share one run.
	fixture string
	// target edits the fixture's target (selectors, settings).
	target func(*estimator.Target)
	// wantReason, when set, is the reason the estimate must be
	// Inconclusive with instead of accurate.
	wantReason estimator.ReasonCode
	// noModel: the shape has no in-flight gauges, the model cannot run.
	noModel bool
	// modelReason: the estimate is accurate but the model must refuse to
	// draw, naming this reason.
	modelReason estimator.ReasonCode
	// edit changes the scenario (data-parallel shapes halve the pods to
	// keep the engines saturated).
	edit func(*scenario.Scenario)
	// pd: a P/D pool; the truth is the gate pool's (the prefill pods).
	pd bool
}

func shapeCases() []shapeCase {
	jobs := func(t *estimator.Target) {
		t.VLLMSelector, t.EPPSelector = `job="vllm"`, `job="inference-extension-epp"`
	}
	producer := func(t *estimator.Target) { t.InFlightProducer = "inflight-load-producer" }
	synced := func(t *estimator.Target) { t.SyncedEPPReplicas = true }
	halfPods := func(sc *scenario.Scenario) { sc.Pods.Count /= 2 }
	// P/D: two decode pods and two prefill pods keep the prefill pool
	// saturated in the saturated phase.
	pd := scenario.ShapeLLMD2026 + ",prefillPods=2"
	pdPods := func(sc *scenario.Scenario) { sc.Pods.Count = 2 }
	pdSel := func(t *estimator.Target) {
		t.VLLMSelector = `namespace="llm-d",pod=~"qwen3-32b-(decode|prefill)-[0-9]+"`
	}
	pdGate := func(profile string) func(*estimator.Target) {
		return func(t *estimator.Target) { pdSel(t); t.PDGateProfile = profile }
	}
	return []shapeCase{
		{name: "legacy-sim", spec: scenario.ShapeLegacySim},
		{name: "llm-d-2026", spec: scenario.ShapeLLMD2026},
		{name: "llm-d-mid-2026", spec: scenario.ShapeLLMDMid2026},
		{name: "llm-d-2025", spec: scenario.ShapeLLMD2025, noModel: true},
		{name: "two-producers-named", spec: scenario.ShapeLLMD2026 + ",producers=inflight-load-producer,shadow-producer", target: producer},
		{name: "two-producers-unnamed", spec: scenario.ShapeLLMD2026 + ",producers=inflight-load-producer,shadow-producer",
			fixture: "two-producers-named", wantReason: estimator.ReasonInFlightProducerAmbiguous},
		// Only rank 0 is scraped: the load runs 8 % higher so that the
		// scraped ranks alone saturate in enough windows.
		{name: "dp2-port-8000", spec: scenario.ShapeLLMD2026 + ",dpRanks=2", edit: func(sc *scenario.Scenario) {
			halfPods(sc)
			for i := range sc.Phases {
				sc.Phases[i].RequestRate *= 1.08
			}
		}},
		{name: "dp2-all-ranks", spec: scenario.ShapeLLMD2026 + ",dpRanks=2,scrapeAllRanks=true", edit: halfPods},
		{name: "dp2-internal-engines", spec: scenario.ShapeLLMD2026 + ",dpEngines=2", edit: halfPods},
		{name: "epp-replicas-synced", spec: scenario.ShapeLLMD2026 + ",eppReplicas=2,syncReplicas=true", target: synced},
		{name: "epp-replicas-unsynced", spec: scenario.ShapeLLMD2026 + ",eppReplicas=2,syncReplicas=false"},
		{name: "usage-half", spec: scenario.ShapeLLMD2026 + ",usageShare=0.5"},
		{name: "kubernetes-sd", spec: scenario.ShapeLLMD2026 + ",scrape=kubernetes-sd", target: jobs,
			wantReason: estimator.ReasonPodLabelMissing},
		{name: "pd-gate-in-prefill-profile", spec: pd, fixture: "pd", edit: pdPods, target: pdGate(estimator.PDGatePrefill), pd: true},
		{name: "pd-gate-profile-unset", spec: pd, fixture: "pd", edit: pdPods, target: pdSel, wantReason: estimator.ReasonPDGateProfileUnknown},
		{name: "pd-prefill-pods-unselected", spec: pd, fixture: "pd", edit: pdPods,
			target: func(t *estimator.Target) { t.PDGateProfile = estimator.PDGatePrefill }, wantReason: estimator.ReasonPDPrefillPodsUnselected},
		{name: "pd-gate-in-decode-profile", spec: pd + ",pdGateProfile=decode", edit: pdPods, target: pdGate(estimator.PDGateDecode),
			wantReason: estimator.ReasonPDGateOnDecodeProfile},
		{name: "pd-sidecar-before-pr-916", spec: pd + ",pdUsageCached=decode", edit: pdPods, target: pdGate(estimator.PDGatePrefill), pd: true,
			modelReason: estimator.ReasonPDCachedFromDecode},
	}
}

// multiTurn makes the matrix's traffic sessions of about three turns whose
// later prompts extend the previous one by a short message, so that about
// half of the gate's decisions are sticky and its wrongly-held rate can be
// measured; the request rate ×1.25 keeps the saturated phase saturated.
func multiTurn(sc *scenario.Scenario) {
	c := &sc.Classes[0]
	first := c.UserTokens
	c.FirstUserTokens = &first
	c.UserTokens = scenario.LognormalDist(150, 0.5, 20, 2000)
	c.Turns = scenario.LognormalDist(3, 0.5, 1, 8)
	c.ThinkSeconds = scenario.LognormalDist(8, 1, 0.5, 120)
	for i := range sc.Phases {
		sc.Phases[i].RequestRate *= 1.25
	}
}

// shapeResult is one row of the accuracy table.
type shapeResult struct {
	drain, nominal, perRequest float64 // relative errors (NaN: inconclusive)
	decisions                  int
	// modelHeld and recordsHeld are the wrongly-held rates of the model's
	// and the records' decisions over the lookback (NaN: none known).
	modelHeld, recordsHeld   float64
	modelKnown, recordsKnown int64
}

// TestEveryExportShapeIsAccurateOrNamesItsReason runs calibration-15928
// under each export shape through a real Prometheus and checks the drain
// rate within ±2 % and the nominal within ±5 % of the simulator's truth and
// that the Prometheus model draws decisions — or that the estimate is
// Inconclusive with the shape's named reason — and measures the model's
// wrongly-held rate against the gate records' over the same window.
func TestEveryExportShapeIsAccurateOrNamesItsReason(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real Prometheus; skipped under -short")
	}
	var rows []string
	for _, tc := range shapeCases() {
		t.Run(tc.name, func(t *testing.T) {
			if row := shapeRow(t, tc); row != "" {
				rows = append(rows, row)
			}
		})
	}
	t.Logf("accuracy table:\n%s", strings.Join(rows, "\n"))
}

// shapeRow checks one case and renders its table row.
func shapeRow(t *testing.T, tc shapeCase) string {
	x, err := scenario.ParseExportShape(tc.spec)
	if err != nil {
		t.Fatal(err)
	}
	key := tc.fixture
	if key == "" {
		key = tc.name
	}
	edit := func(sc *scenario.Scenario) {
		multiTurn(sc)
		if tc.edit != nil {
			tc.edit(sc)
		}
	}
	run := fixture(t, variant{key: "shape-" + key, scenario: "calibration-15928", seed: 1, exporters: &x, edit: edit, records: true})
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
	t.Logf("shape %s: status %s, reasons %v, warnings %v, shape %+v, pd %+v", x.String(), e.Status, codes(e.Reasons), codes(e.Warnings), e.Shape, e.Shape.PD)
	if tc.wantReason != "" {
		if e.Status != estimator.StatusInconclusive || !e.HasReason(tc.wantReason) {
			t.Fatalf("status %s, reasons %v; want inconclusive with %s", e.Status, codes(e.Reasons), tc.wantReason)
		}
		for _, part := range []string{"inFlight", "routing", "promptTokens", "cachedTokens"} {
			if hasPartReason(e, part, tc.wantReason) {
				// The model reads this part: it must refuse, naming it.
				checkModelRefuses(t, e, tc.wantReason)
				break
			}
		}
		return fmt.Sprintf("| %s | Inconclusive: `%s` | | | | |", tc.name, tc.wantReason)
	}
	var pool map[string]bool
	if tc.pd {
		pool = map[string]bool{}
		for _, p := range run.truth.Exporters.PD.PrefillPods {
			pool[p] = true
		}
	}
	res := checkShapeAccuracy(t, run, e, at, lookback, x.DPEngines, pool)
	switch {
	case tc.noModel:
		if e.InFlight.Status != estimator.StatusInconclusive || len(e.InFlight.Reasons) == 0 {
			t.Errorf("in-flight %s without a reason on a shape without in-flight gauges", e.InFlight.Status)
		}
		return fmt.Sprintf("| %s | %+.2f%% | %+.2f%% | %.2f × | — (no in-flight gauges) | |", tc.name, 100*res.drain, 100*res.nominal, res.perRequest)
	case tc.modelReason != "":
		checkModelRefuses(t, e, tc.modelReason)
		return fmt.Sprintf("| %s | %+.2f%% | %+.2f%% | %.2f × | holds: `%s` | |", tc.name, 100*res.drain, 100*res.nominal, res.perRequest, tc.modelReason)
	}
	res.decisions = modelDecisions(t, e, at, lookback)
	if res.decisions == 0 {
		t.Errorf("the Prometheus model drew no decisions; in-flight %s %v, routing %v", e.InFlight.Status, e.InFlight.Reasons, e.Routing.Endpoints)
	}
	wronglyHeld(t, run, e, at, lookback, &res)
	return fmt.Sprintf("| %s | %+.2f%% | %+.2f%% | %.2f × | %d | %s |", tc.name, 100*res.drain, 100*res.nominal, res.perRequest, res.decisions, heldCell(res))
}

// heldCell renders the model's wrongly-held rate against the records'.
func heldCell(r shapeResult) string {
	pct := func(v float64, known int64) string {
		if math.IsNaN(v) {
			return "— (0 known)"
		}
		return fmt.Sprintf("%.1f %% (%d known)", 100*v, known)
	}
	return pct(r.modelHeld, r.modelKnown) + " vs " + pct(r.recordsHeld, r.recordsKnown)
}

// checkModelRefuses checks the tuner's Prometheus model refuses the
// estimates, naming the reason.
func checkModelRefuses(t *testing.T, e *estimator.Estimates, want estimator.ReasonCode) {
	t.Helper()
	m := &tuner.Model{Est: e, BlockSizeTokens: 64}
	if err := m.Usable(); err == nil || !strings.Contains(err.Error(), string(want)) {
		t.Errorf("the model's refusal %v does not name %s", err, want)
	}
}

// checkShapeAccuracy checks the drain rate (±2 %) and the nominal (±5 %)
// against the truth and returns the relative errors and A / truth; pool,
// when set, names the pods the truth is taken over.
func checkShapeAccuracy(t *testing.T, run *simRun, e *estimator.Estimates, at time.Time, lookback time.Duration, engines int, pool map[string]bool) shapeResult {
	t.Helper()
	res := shapeResult{drain: math.NaN(), nominal: math.NaN(), perRequest: math.NaN(), modelHeld: math.NaN(), recordsHeld: math.NaN()}
	truth, n := endpointDrainTruth(run.truth, run.base, at.Add(-lookback), at, engines, pool)
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

// wronglyHeld measures, under the run's gate settings, the wrongly-held
// rate of the Prometheus model's decisions and of the gate records' (the
// exact decisions the simulated EPP made) over the same window — what the
// tuner computes from either source (TestModelTracksRecords in tuner/).
func wronglyHeld(t *testing.T, run *simRun, e *estimator.Estimates, at time.Time, lookback time.Duration, res *shapeResult) {
	t.Helper()
	settings := run.sc.Phases[0].Settings
	for _, ph := range run.sc.Phases[1:] {
		if ph.Settings != settings {
			t.Fatalf("phase %s has other gate settings: the window mixes two", ph.Name)
		}
	}
	from, to := at.Add(-lookback), at.Add(time.Second)
	count := func(src tuner.DecisionSource) (float64, int64) {
		acc := shadow.NewAccumulator([]gate.Settings{settings}, 0)
		if err := src.Replay(context.Background(), from, to, func(d *tuner.Decision) error {
			acc.Add(d.Endpoints)
			return nil
		}); err != nil {
			t.Fatalf("%s replay: %v", src.Kind(), err)
		}
		c := acc.Counts(0)
		r, ok := c.WronglyHeldRate()
		if !ok {
			return math.NaN(), 0
		}
		return r, c.Known()
	}
	res.modelHeld, res.modelKnown = count(&tuner.Model{Est: e, BlockSizeTokens: run.sc.EPP.PrefixIndex.BlockSizeTokens, Seed: 1})
	res.recordsHeld, res.recordsKnown = count(&tuner.RecordsFile{Path: run.records, Target: run.sc.Target, Plugin: run.sc.EPP.Plugin})
	t.Logf("wrongly held over the lookback: model %s", heldCell(*res))
	if res.modelKnown == 0 || res.recordsKnown == 0 {
		t.Errorf("the wrongly-held rates are not both measured: %s", heldCell(*res))
	}
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
	x, err := scenario.ParseExportShape(scenario.ShapeLLMD2026)
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
func endpointDrainTruth(tr *truth.Truth, base, from, to time.Time, engines int, pool map[string]bool) (float64, int) {
	type win struct {
		pod        string
		rank       int
		start, end float64
	}
	sum, count := map[win]float64{}, map[win]int{}
	for _, w := range tr.Windows {
		ws := base.Add(time.Duration(w.Start * float64(time.Second)))
		we := base.Add(time.Duration(w.End * float64(time.Second)))
		if ws.Before(from) || we.After(to) || (pool != nil && !pool[w.Pod]) {
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
