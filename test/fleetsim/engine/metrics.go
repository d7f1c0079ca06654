package engine

import "github.com/gatetuner/gatetuner/test/fleetsim/hist"

// Bucket boundaries, exactly as vLLM declares them.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10,
		20, 40, 80, 160, 640, 2560}
	itlBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}
	// requestLatencyBuckets serve queue, prefill, decode, inference and e2e time.
	requestLatencyBuckets = []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480,
		960, 1920, 7680}
	iterationBuckets = []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}
)

// tokenBuckets is vLLM's 1-2-5 series up to maxModelLen.
func tokenBuckets(maxModelLen int) []float64 {
	var out []float64
	for m := 1; ; m *= 10 {
		for _, f := range []int{1, 2, 5} {
			v := f * m
			if v > maxModelLen {
				return out
			}
			out = append(out, float64(v))
		}
	}
}

// Metrics are one engine's counters and histograms, counted as vLLM counts
// them.
type Metrics struct {
	PromptTokens, LocalCompute, LocalCacheHit, CachedTokens int64
	PCQueries, PCHits, GenTokens, Preemptions, Success      int64
	ExtTransfer                                             int64

	PromptTokensH, KVComputedH, GenTokensH      hist.Hist
	TTFT, ITL                                   hist.Hist
	QueueH, PrefillH, DecodeH, InferenceH, E2EH hist.Hist
	Iter                                        hist.Hist
}

func (m *Metrics) init(maxModelLen int) {
	tb := tokenBuckets(maxModelLen)
	m.PromptTokensH, m.KVComputedH, m.GenTokensH = hist.New(tb), hist.New(tb), hist.New(tb)
	m.TTFT, m.ITL = hist.New(ttftBuckets), hist.New(itlBuckets)
	m.QueueH, m.PrefillH, m.DecodeH = hist.New(requestLatencyBuckets), hist.New(requestLatencyBuckets), hist.New(requestLatencyBuckets)
	m.InferenceH, m.E2EH = hist.New(requestLatencyBuckets), hist.New(requestLatencyBuckets)
	m.Iter = hist.New(iterationBuckets)
}
