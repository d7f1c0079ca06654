package estimator

import (
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
)

// bucketVector renders cumulative bucket counts as a `sum by (le)` result.
func bucketVector(les []string, cum []float64) model.Vector {
	v := make(model.Vector, len(les))
	for i, le := range les {
		v[i] = &model.Sample{Metric: model.Metric{model.BucketLabel: model.LabelValue(le)}, Value: model.SampleValue(cum[i])}
	}
	return v
}

func TestQuantileInterpolatesInLogSpaceInsideABucket(t *testing.T) {
	cases := []struct {
		name string
		les  []string
		cum  []float64
		q    float64
		want float64
	}{
		{"middle of a 1-2-5 bucket is the geometric mean", []string{"1000", "2000", "+Inf"}, []float64{0, 10, 10}, 0.5, math.Sqrt(1000 * 2000)},
		{"bucket edges are exact", []string{"1000", "2000", "5000", "+Inf"}, []float64{0, 10, 20, 20}, 0.5, 2000},
		{"first bucket starts at zero and is linear", []string{"1", "2", "+Inf"}, []float64{10, 10, 10}, 0.5, 0.5},
		{"le spellings that parse equal are merged", []string{"1000", "1000.0", "2000", "2000.0", "+Inf"}, []float64{0, 0, 4, 6, 10}, 0.5, math.Sqrt(1000 * 2000)},
		{"bounds are ordered as numbers, not strings", []string{"10000", "5000", "20000", "+Inf"}, []float64{20, 10, 40, 40}, 0.75, 10000 * math.Sqrt(2)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cum, err := cumBuckets(bucketVector(tc.les, tc.cum))
			if err != nil {
				t.Fatal(err)
			}
			bs, _, _ := bucketsOf(cum)
			got, _ := quantileOf(bs, tc.q)
			if math.Abs(got-tc.want) > 1e-9*tc.want {
				t.Fatalf("q%.2f = %v, want %v (buckets %+v)", tc.q, got, tc.want, bs)
			}
		})
	}
}

// TestLogInterpolationBeatsLinearOnLognormalPrompts bucketizes lognormal
// prompt lengths into vLLM's 1-2-5 buckets and checks the log-space
// quantiles land closer to the exact ones than Prometheus' linear rule.
func TestLogInterpolationBeatsLinearOnLognormalPrompts(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	bounds := []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000}
	xs := make([]float64, 200000)
	counts := make([]float64, len(bounds)+1)
	for i := range xs {
		x := math.Round(math.Exp(math.Log(3000) + 0.9*rng.NormFloat64()))
		xs[i] = x
		j := sort.SearchFloat64s(bounds, x)
		counts[j]++
	}
	sort.Float64s(xs)
	var les []string
	var cum []float64
	run := 0.0
	for i, b := range bounds {
		run += counts[i]
		les = append(les, strconv.FormatFloat(b, 'f', -1, 64))
		cum = append(cum, run)
	}
	les = append(les, "+Inf")
	cum = append(cum, run+counts[len(bounds)])
	c, err := cumBuckets(bucketVector(les, cum))
	if err != nil {
		t.Fatal(err)
	}
	bs, _, _ := bucketsOf(c)
	for _, q := range []float64{0.5, 0.9} {
		exact := xs[int(q*float64(len(xs)))]
		logQ, _ := quantileOf(bs, q)
		// Prometheus' histogram_quantile: linear inside the bucket.
		var linQ float64
		rank, acc := q*cum[len(cum)-1], 0.0
		for _, b := range bs {
			if acc+b.Count >= rank {
				linQ = b.Lower + (rank-acc)/b.Count*(b.Upper-b.Lower)
				break
			}
			acc += b.Count
		}
		errLog, errLin := math.Abs(logQ/exact-1), math.Abs(linQ/exact-1)
		t.Logf("q%.2f exact %.0f: log %.0f (%.1f%%), linear %.0f (%.1f%%)", q, exact, logQ, 100*errLog, linQ, 100*errLin)
		if errLog > 0.10 {
			t.Errorf("q%.2f: log-space estimate %.0f is %.1f%% off the exact %.0f", q, logQ, 100*errLog, exact)
		}
		if errLog >= errLin {
			t.Errorf("q%.2f: log-space error %.3f not below linear %.3f", q, errLog, errLin)
		}
	}
}

func TestTopBucketEdgeIsInferred(t *testing.T) {
	cases := []struct {
		name   string
		bounds []float64
		want   float64
	}{
		{"1-2-5 ladder goes to the next value", []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000}, 50000},
		{"1-2-5 ladder ending on a 5", []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000}, 10000},
		{"powers of two take one more step", []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32778, 65536, 131072, 262144, 524288, 1048576}, 2097152},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := inferTop(tc.bounds); math.Abs(got-tc.want) > 1e-6 {
				t.Fatalf("inferTop = %v, want %v", got, tc.want)
			}
		})
	}
	cum, err := cumBuckets(bucketVector([]string{"10000", "20000", "+Inf"}, []float64{0, 1, 10}))
	if err != nil {
		t.Fatal(err)
	}
	d := distributionFrom("promptTokens", "h", cum, -1)
	if !d.TopBucketInferred || d.P50 == nil || *d.P50 <= 20000 || *d.P50 > 50000 {
		t.Fatalf("p50 %v, inferred %v: want a value in (20000, 50000] with the edge flagged", d.P50, d.TopBucketInferred)
	}
	if len(d.Reasons) != 1 || d.Reasons[0].Code != ReasonTopBucket || d.Reasons[0].Code.fatal() {
		t.Fatalf("reasons %+v: want one %s warning", d.Reasons, ReasonTopBucket)
	}
}

func TestNonFiniteBucketsAreRejected(t *testing.T) {
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		_, err := cumBuckets(bucketVector([]string{"1", "+Inf"}, []float64{v, 1}))
		if err == nil || reasonFor(err) != ReasonNonFinite {
			t.Errorf("bucket value %v: err %v, want a non-finite error", v, err)
		}
	}
	if _, err := cumBuckets(bucketVector([]string{"one", "+Inf"}, []float64{1, 1})); err == nil {
		t.Error("le \"one\" parsed")
	}
}

func TestStepCostFitRecoversTheModelAndRefusesCollinearWindows(t *testing.T) {
	const o, tp, td, budget = 0.02, 5e-5, 8e-5, 2048.0
	rng := rand.New(rand.NewPCG(3, 4))
	var rows []stepRow
	for range 40 {
		// Busy windows: steps partly filled with prefill and decode tokens.
		s := 5 + 3*rng.Float64()
		g := s * (100 + 300*rng.Float64())
		d := (1 - s*o - g*td) / tp
		rows = append(rows, stepRow{s: s, d: d * (1 + 0.002*rng.NormFloat64()), g: g})
	}
	fit, ok := fitStepCost(rows)
	if !ok {
		t.Fatal("the fit failed on separable windows")
	}
	n, sd := fit.nominal(budget)
	want := budget / (o + budget*tp)
	if math.Abs(n/want-1) > 0.02 || sd <= 0 {
		t.Fatalf("nominal %v ± %v, want %v", n, sd, want)
	}
	// Only full-budget steps with one decode mix: S·B = D + G, no way to
	// tell the three costs apart.
	var full []stepRow
	for range 40 {
		s := 1 / (o + (budget-300)*tp + 300*td)
		full = append(full, stepRow{s: s, d: s * (budget - 300), g: s * 300})
	}
	if _, ok := fitStepCost(full); ok {
		t.Fatal("the fit claimed to separate collinear windows")
	}
}

func TestConfidenceFormula(t *testing.T) {
	h := 12 * time.Hour
	cases := []struct {
		name              string
		n                 int
		hw                float64
		pods, covered     int
		age               time.Duration
		wantLow, wantHigh float64
	}{
		{"no windows", 0, 0.01, 0, 4, 0, 0, 0},
		{"many tight fresh windows", 48, 0.005, 4, 4, 0, 0.94, 0.96},
		{"few windows", 6, 0.005, 4, 4, 0, 0.5, 0.53},
		{"wide interval", 48, 0.08, 4, 4, 0, 0.19, 0.21},
		{"a quarter of the pods", 48, 0.005, 16, 64, 0, 0.47, 0.48},
		{"one half-life old", 48, 0.005, 4, 4, h, 0.47, 0.48},
		{"interval beyond 10%", 48, 0.2, 4, 4, 0, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := confidence(tc.n, tc.hw, tc.pods, tc.covered, tc.age, h)
			if c < tc.wantLow || c > tc.wantHigh || c < 0 || c > 1 {
				t.Fatalf("confidence = %v, want [%v, %v]", c, tc.wantLow, tc.wantHigh)
			}
		})
	}
}

func TestTrackerKeepsTheLastGoodAndAgesIt(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	tr := NewTracker(func() time.Time { return now }, 6*time.Hour)
	bad := &Estimates{Status: StatusInconclusive, At: now}
	tr.Observe(bad)
	if bad.LastGood != nil {
		t.Fatal("a last good estimate appeared from nowhere")
	}
	good := &Estimates{Status: StatusOK, At: now, DrainRate: RateEstimate{Status: StatusOK, Value: ptr(12000), Confidence: 0.9},
		InFlight: InFlight{Snapshots: []Snapshot{{}}}}
	tr.Observe(good)
	now = now.Add(12 * time.Hour)
	later := &Estimates{Status: StatusInconclusive, At: now}
	tr.Observe(later)
	lg := later.LastGood
	if lg == nil || *lg.DrainRate.Value != 12000 || lg.AgeSeconds != 12*3600 || math.Abs(lg.AgedConfidence-0.225) > 1e-9 {
		t.Fatalf("last good %+v, want 12000 aged 12h to confidence 0.225", lg)
	}
	prior := &Estimates{Status: StatusPrior, At: now}
	tr.Observe(prior)
	if prior.LastGood == nil {
		t.Fatal("a prior-only estimate did not get the last good one")
	}
}

func TestTargetValidation(t *testing.T) {
	cases := []struct {
		name string
		t    Target
		ok   bool
	}{
		{"selectors parse", Target{Name: "a", VLLMSelector: `namespace="x",pod=~"a-.*"`, EPPSelector: `app="epp"`}, true},
		{"name is required", Target{VLLMSelector: `a="b"`}, false},
		{"vLLM selector is required", Target{Name: "a"}, false},
		{"broken matcher", Target{Name: "a", VLLMSelector: `namespace=x`}, false},
		{"__name__ is the estimator's", Target{Name: "a", VLLMSelector: `__name__="vllm:x"`}, false},
		{"prior must be positive", Target{Name: "a", VLLMSelector: `a="b"`, Prior: &Prior{Value: 0, Origin: PriorConfigured}}, false},
		{"prior origin is an enum", Target{Name: "a", VLLMSelector: `a="b"`, Prior: &Prior{Value: 1, Origin: "guess"}}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.t.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// TestEveryQueryParses renders each computed-token source's expressions
// and the fixed queries and parses them with the PromQL parser.
func TestEveryQueryParses(t *testing.T) {
	sel := `namespace="ns",pod=~"p-.*"`
	all := map[string]bool{}
	for _, names := range [][]string{
		{mBySource},
		{mPromptTokens, mPromptCached},
		{mKVComputed + "_count"},
		{mPromptTokens, mPrefixHits, mExternalHits},
		{mPromptTokens, mGPUPrefixHits},
	} {
		set := map[string]bool{}
		for _, n := range names {
			set[n] = true
		}
		cs := chooseComputed(func(n string) bool { return set[n] })
		if cs == nil {
			t.Fatalf("no source from %v", names)
		}
		all[cs.expr(sel, "rate", "2m", byEngine)] = true
		all[cs.expr(sel, "increase", "6h", byEngine)] = true
		all[cs.resets(sel, "2m", byEngine)] = true
	}
	p := parser.NewParser(parser.Options{})
	for q := range all {
		if _, err := p.ParseExpr(q); err != nil {
			t.Errorf("%s: %v", q, err)
		}
	}
	if len(all) < 10 {
		t.Fatalf("only %d queries rendered", len(all))
	}
}

func TestComputedTokenSourceOrder(t *testing.T) {
	cases := []struct {
		have []string
		rank int
	}{
		{[]string{mBySource, mPromptTokens, mPromptCached, mKVComputed + "_count", mPrefixHits}, 1},
		{[]string{mPromptTokens, mPromptCached, mKVComputed + "_count", mPrefixHits}, 2},
		{[]string{mPromptTokens, mKVComputed + "_count", mPrefixHits}, 3},
		{[]string{mPromptTokens, mPrefixHits}, 4},
		{[]string{mPromptTokens, mGPUPrefixHits}, 4},
		{[]string{mPromptTokens}, 0},
	}
	for _, tc := range cases {
		set := map[string]bool{}
		for _, n := range tc.have {
			set[n] = true
		}
		cs := chooseComputed(func(n string) bool { return set[n] })
		rank := 0
		if cs != nil {
			rank = cs.rank
		}
		if rank != tc.rank {
			t.Errorf("with %v: rank %d, want %d", tc.have, rank, tc.rank)
		}
	}
}
