package epp

import (
	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim/hist"
)

// Bucket boundaries, exactly as the llm-d EPP declares them.
var (
	tokenBuckets = []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32778, 65536,
		131072, 262144, 524288, 1048576}
	ttftBuckets = []float64{0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10,
		15, 20, 30, 45, 60, 120}
	// The approximate prefix producer's lookup histograms.
	hitRatioBuckets = []float64{0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0}
	hitBytesBuckets = []float64{0, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536}
)

// Metrics are an EPP replica's counters and histograms.
type Metrics struct {
	Decisions [gate.NumOutcomes]int64
	Attempts  []int64
	// InputH, CachedH and TTFTH are the request histograms: prompt and
	// cached tokens (responses carrying usage only) and TTFT.
	InputH, CachedH, TTFTH hist.Hist
	// Disagg counts P/D decisions: [0] decode-only, [1] prefill-decode.
	Disagg [2]int64
	// SchedFail counts scheduling attempts that found no endpoint.
	SchedFail int64
	// HitRatio and HitBytes are the approximate prefix producer's lookups
	// for the primary pick (match over total, matched bytes at 4 per token).
	HitRatio, HitBytes hist.Hist
}

func (m *Metrics) init(pods int) {
	m.Attempts = make([]int64, pods)
	m.InputH, m.CachedH, m.TTFTH = hist.New(tokenBuckets), hist.New(tokenBuckets), hist.New(ttftBuckets)
	m.HitRatio, m.HitBytes = hist.New(hitRatioBuckets), hist.New(hitBytesBuckets)
}

// observeHit records a prefix-index lookup for the chosen endpoint
// (llm-d-router approximateprefix/plugin.go, PreRequest: recordPrefixCacheMatch).
func (m *Metrics) observeHit(matched, total, bs int32) {
	m.HitBytes.Observe(float64(matched) * float64(bs) * 4)
	if total > 0 {
		m.HitRatio.Observe(float64(matched) / float64(total))
	}
}
