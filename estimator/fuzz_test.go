package estimator

import (
	"math"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
)

// FuzzParseCalibrationRecord feeds arbitrary bytes to the calibration
// record parser: it must never panic, and a record it accepts as a prior
// must carry a positive finite throughput.
func FuzzParseCalibrationRecord(f *testing.F) {
	f.Add([]byte(`{"schema_version":1,"status":"OK","fingerprint":"sha256:x","chunk_tokens":2048,"valid_samples":20,"median_ttft_seconds":0.128,"peak_prefill_tokens_per_second":16000,"applied":false}`))
	f.Add([]byte(`{"schema_version":1,"status":"NOT_RUN","valid_samples":0}`))
	f.Add([]byte(`{"schema_version":1,"status":"OK","peak_prefill`))
	f.Add([]byte(`{"schema_version":2,"status":"OK","chunk_tokens":-1,"peak_prefill_tokens_per_second":1e400}`))
	f.Add([]byte(`{"schema_version":1,"status":"OK","chunk_tokens":2048,"valid_samples":20,"median_ttft_seconds":0.1,"peak_prefill_tokens_per_second":NaN}`))
	f.Add([]byte(`{} {}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseCalibrationRecord(data)
		if err != nil {
			return
		}
		p, err := r.Prior("", "fuzz")
		if err != nil {
			return
		}
		if !(p.Value > 0) || math.IsInf(p.Value, 0) || p.validate() != nil {
			t.Fatalf("accepted prior %+v", p)
		}
	})
}

// FuzzBucketQuantiles feeds arbitrary le labels and counts (as a Prometheus
// `sum by (le)` answer would carry them) to the histogram code: no panic,
// and quantiles are ordered and inside the buckets' range.
func FuzzBucketQuantiles(f *testing.F) {
	f.Add("1,2,5,10,+Inf", "0,1,5,9,10")
	f.Add("1.0,1,2.0,+Inf", "1,1,3,3")
	f.Add("1e+06,5e5,+Inf", "4,2,8")
	f.Add("+Inf", "7")
	f.Add("NaN,1,+Inf", "1,2,3")
	f.Add("-5,0,5,+Inf", "1,-2,3,3")
	f.Fuzz(func(t *testing.T, les, counts string) {
		ls, cs := strings.Split(les, ","), strings.Split(counts, ",")
		var v model.Vector
		for i, le := range ls {
			c := 0.0
			if i < len(cs) {
				if x, err := parseLe(cs[i]); err == nil {
					c = x
				}
			}
			v = append(v, &model.Sample{Metric: model.Metric{model.BucketLabel: model.LabelValue(le)}, Value: model.SampleValue(c)})
		}
		cum, err := cumBuckets(v)
		if err != nil {
			return
		}
		bs, total, _ := bucketsOf(cum)
		if len(bs) == 0 || !(total > 0) {
			return
		}
		prev := math.Inf(-1)
		for _, q := range []float64{0, 0.1, 0.5, 0.9, 0.99, 1} {
			x, _ := quantileOf(bs, q)
			if math.IsNaN(x) {
				t.Fatalf("q%v is NaN for %+v", q, bs)
			}
			if x < prev-1e-9*math.Abs(prev) {
				t.Fatalf("q%v = %v below the previous quantile %v (%+v)", q, x, prev, bs)
			}
			prev = x
		}
		d := distributionFrom("p", "h", cum, -1)
		if d.Status == StatusOK && (d.P50 == nil || d.P99 == nil || *d.P50 > *d.P99+1e-9*math.Abs(*d.P99)) {
			t.Fatalf("p50 %v > p99 %v", d.P50, d.P99)
		}
	})
}
