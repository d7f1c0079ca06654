package estimator

import (
	"math"
	"testing"
	"time"
)

// fakeBase is a base estimator returning a fixed estimate and counting calls.
type fakeBase struct {
	out   rateResult
	calls int
}

func (f *fakeBase) estimate(*evidence) rateResult { f.calls++; return f.out }

func okBase(v float64, windows, pods int, newest time.Time, hw float64) *fakeBase {
	n := newest
	return &fakeBase{out: rateResult{RateEstimate: RateEstimate{Status: StatusOK, Value: ptr(v), Method: "fake",
		Windows: windows, Pods: pods, NewestWindowEnd: &n, Interval: &Interval{Low: v * (1 - hw), High: v * (1 + hw)}}, relHalfWidth: hw}}
}

func inconclusiveBase(codes ...ReasonCode) *fakeBase {
	out := rateResult{RateEstimate: RateEstimate{Status: StatusInconclusive, Method: "fake"}}
	for _, c := range codes {
		out.Reasons = append(out.Reasons, Reason{Code: c, Part: partDrain})
	}
	return &fakeBase{out: out}
}

var evAt = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func testEvidence() *evidence {
	cs := &computedSource{id: "tokens", rank: 1}
	return &evidence{d: &drainInputs{cfg: Config{}.withDefaults(), cs: cs, at: evAt, coverageFrac: 1, covered: 4, expectedPods: 4,
		missing: map[podKey][]string{}, stale: map[podKey]bool{}, stepShare: math.NaN()}}
}

func codes(rs []Reason) []ReasonCode {
	out := make([]ReasonCode, len(rs))
	for i, r := range rs {
		out[i] = r.Code
	}
	return out
}

func sameCodes(a []ReasonCode, b ...ReasonCode) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestWithHoldsShortCircuitsTheBaseAndNamesThePart(t *testing.T) {
	base := okBase(100, 10, 4, evAt, 0.01)
	held := withHolds(partStep, func(*evidence) []Reason { return []Reason{{Code: ReasonBadQuery, Detail: "x"}} }, base)
	out := held.estimate(testEvidence())
	if base.calls != 0 || out.Status != StatusInconclusive || out.Method != "step-rate" {
		t.Fatalf("held: calls %d, %+v", base.calls, out)
	}
	if len(out.Reasons) != 1 || out.Reasons[0].Part != partStep || out.Reasons[0].Code != ReasonBadQuery {
		t.Fatalf("reasons %+v", out.Reasons)
	}
	free := withHolds(partStep, func(*evidence) []Reason { return nil }, base)
	if out := free.estimate(testEvidence()); base.calls != 1 || out.Status != StatusOK {
		t.Fatalf("not held: calls %d, %+v", base.calls, out)
	}
}

func TestWithCoverageHoldsBelowTheMinimumAndNotesExcludedPods(t *testing.T) {
	cases := []struct {
		name      string
		frac      float64
		stale     bool
		excluded  bool
		wantCalls int
		want      []ReasonCode
	}{
		{"full coverage passes through", 1, false, true, 1, nil},
		{"above the minimum notes the excluded pods", 0.75, false, true, 1, []ReasonCode{ReasonPodsExcluded}},
		{"above the minimum, not noted where not asked", 0.75, false, false, 1, nil},
		{"below the minimum holds", 0.5, false, true, 0, []ReasonCode{ReasonPartialPodCoverage}},
		{"below the minimum with only stale pods says so", 0.5, true, true, 0, []ReasonCode{ReasonStaleSeries, ReasonPartialPodCoverage}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ev := testEvidence()
			ev.d.coverageFrac = tc.frac
			if tc.stale {
				ev.d.stale[podKey{"ns", "p-3"}] = true
			} else if tc.frac < 1 {
				ev.d.missing[podKey{"ns", "p-3"}] = []string{mWaiting}
			}
			base := okBase(100, 10, 3, evAt, 0.01)
			out := withCoverage(partDrain, 0.7, tc.excluded, base).estimate(ev)
			if base.calls != tc.wantCalls || !sameCodes(codes(out.Reasons), tc.want...) {
				t.Fatalf("calls %d, reasons %v; want %d, %v", base.calls, codes(out.Reasons), tc.wantCalls, tc.want)
			}
		})
	}
	ev := testEvidence()
	ev.d.coverageFrac = 0.5
	ev.d.missing[podKey{"ns", "p-3"}] = []string{mWaiting}
	out := withCoverage(partDrain, 0.7, true, okBase(1, 1, 1, evAt, 0.01)).estimate(ev)
	if want := "4 of 4 expected pods covered (minimum 70%): ns/p-3 lacks " + mWaiting; out.Reasons[0].Detail != want {
		t.Fatalf("detail %q, want %q", out.Reasons[0].Detail, want)
	}
}

func TestWithConfidenceAppliesTheFormulaToConclusiveEstimatesOnly(t *testing.T) {
	half := 12 * time.Hour
	ev := testEvidence()
	out := withConfidence(half, okBase(100, 48, 4, evAt.Add(-half), 0.005)).estimate(ev)
	if want := confidence(48, 0.005, 4, 4, half, half); out.Confidence != want || want == 0 {
		t.Fatalf("confidence %v, want %v", out.Confidence, want)
	}
	if out := withConfidence(half, inconclusiveBase(ReasonNoSaturatedWindows)).estimate(ev); out.Confidence != 0 {
		t.Fatalf("inconclusive got confidence %v", out.Confidence)
	}
}

func TestWithLowerBoundCarriesThePerRequestRateOnlyWhenInconclusive(t *testing.T) {
	ev := testEvidence()
	ev.perRequest = RateEstimate{Status: StatusOK, Value: ptr(42)}
	out := withLowerBound(inconclusiveBase(ReasonNoSaturatedWindows)).estimate(ev)
	if out.LowerBound == nil || *out.LowerBound != 42 {
		t.Fatalf("lower bound %v, want 42", out.LowerBound)
	}
	if out := withLowerBound(okBase(100, 10, 4, evAt, 0.01)).estimate(ev); out.LowerBound != nil {
		t.Fatalf("conclusive estimate got a lower bound %v", *out.LowerBound)
	}
	ev.perRequest = RateEstimate{Status: StatusInconclusive}
	if out := withLowerBound(inconclusiveBase(ReasonNoSaturatedWindows)).estimate(ev); out.LowerBound != nil {
		t.Fatalf("lower bound from an inconclusive per-request rate: %v", *out.LowerBound)
	}
}

func TestWithPriorStandsInOnlyForMissingEvidence(t *testing.T) {
	cases := []struct {
		name      string
		base      *fakeBase
		wantPrior bool
	}{
		{"no saturated windows", inconclusiveBase(ReasonNoSaturatedWindows), true},
		{"too few, with warnings", inconclusiveBase(ReasonKVUsageUnknown, ReasonTooFewSaturatedWindows), true},
		{"a counter reset", inconclusiveBase(ReasonCounterReset), true},
		{"broken data", inconclusiveBase(ReasonNoSaturatedWindows, ReasonNonFinite), false},
		{"Prometheus failed", inconclusiveBase(ReasonPrometheusUnavailable), false},
		{"only warnings", inconclusiveBase(ReasonKVUsageUnknown), false},
		{"conclusive", okBase(100, 10, 4, evAt, 0.01), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ev := testEvidence()
			ev.d.t.Prior = &Prior{Value: 9000, Origin: PriorConfigured}
			out := withPrior(tc.base).estimate(ev)
			if got := out.Status == StatusPrior; got != tc.wantPrior {
				t.Fatalf("prior used %v, want %v: %+v", got, tc.wantPrior, out)
			}
			if tc.wantPrior && (*out.Value != 9000 || !out.Prior || out.Confidence != DefaultPriorConfidence ||
				out.Reasons[len(out.Reasons)-1].Code != ReasonPriorInUse) {
				t.Fatalf("prior estimate %+v", out)
			}
		})
	}
	ev := testEvidence()
	if out := withPrior(inconclusiveBase(ReasonNoSaturatedWindows)).estimate(ev); out.Status != StatusInconclusive {
		t.Fatalf("no prior configured, got %s", out.Status)
	}
}

func TestWithFallbackUsesTheFallbackOnlyWhenThePrimaryIsInconclusive(t *testing.T) {
	primary, fallback := okBase(1, 1, 1, evAt, 0.01), okBase(2, 1, 1, evAt, 0.01)
	if out := withFallback(primary, fallback).estimate(testEvidence()); *out.Value != 1 || fallback.calls != 0 {
		t.Fatalf("value %v, fallback calls %d", *out.Value, fallback.calls)
	}
	if out := withFallback(inconclusiveBase(), fallback).estimate(testEvidence()); *out.Value != 2 {
		t.Fatalf("value %v, want the fallback's", *out.Value)
	}
}

func TestWithStepInputsHoldsWithoutTheBudgetOrAStepMetric(t *testing.T) {
	ev := testEvidence()
	base := okBase(1, 1, 1, evAt, 0.01)
	if out := withStepInputs(partNominal, base).estimate(ev); !sameCodes(codes(out.Reasons), ReasonMaxNumBatchedTokensUnknown) || out.Method != "step-time" {
		t.Fatalf("no budget: %+v", out)
	}
	ev.d.t.MaxNumBatchedTokens = 2048
	if out := withStepInputs(partNominal, base).estimate(ev); !sameCodes(codes(out.Reasons), ReasonNoStepMetrics) {
		t.Fatalf("no step metric: %+v", out)
	}
	ev.d.f.StepCount = mIterationTokens + "_count"
	if out := withStepInputs(partNominal, base).estimate(ev); out.Status != StatusOK || base.calls != 1 || len(out.Reasons) != 0 {
		t.Fatalf("inputs known: %+v", out)
	}
	ev.d.stepShare = 0.5
	if out := withStepInputs(partNominal, base).estimate(ev); !sameCodes(codes(out.Reasons), ReasonNoStepMetrics) {
		t.Fatalf("steps unobserved, no ITL: %+v", out)
	}
	ev.d.f.InterTokenLatency = mITL
	if out := withStepInputs(partNominal, base).estimate(ev); out.Status != StatusOK || !sameCodes(codes(out.Reasons), ReasonIterationStepsUnobserved) {
		t.Fatalf("steps unobserved, ITL known: %+v", out)
	}
}

func TestWithCaveatsPutsTheRuleWarningsFirst(t *testing.T) {
	ev := testEvidence()
	ev.caveats = []Reason{{Code: ReasonKVUsageUnknown, Part: partDrain}}
	out := withCaveats(inconclusiveBase(ReasonNoSaturatedWindows)).estimate(ev)
	if !sameCodes(codes(out.Reasons), ReasonKVUsageUnknown, ReasonNoSaturatedWindows) {
		t.Fatalf("reasons %v", codes(out.Reasons))
	}
}
