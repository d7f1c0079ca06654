package prom_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// promptBuckets is the 1-2-5 bucket ladder vLLM uses for a 32768-token model.
var promptBuckets = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000}

// fleetText renders OpenMetrics text for pods scraped every 15 s from start
// for n scrapes: a prompt-token counter (pod-b's resets once, as on an engine
// restart), a waiting-queue gauge, and a vllm:request_prompt_tokens classic
// histogram. Values come from a seeded generator, so the text is the same
// on every run.
func fleetText(start time.Time, n int, pods []string, seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, 1))
	type podState struct {
		tokens  float64
		waiting int
		buckets []float64
		sum     float64
		count   float64
	}
	states := make([]*podState, len(pods))
	for i := range states {
		states[i] = &podState{buckets: make([]float64, len(promptBuckets))}
	}
	tokens := make([][]float64, len(pods))
	waiting := make([][]int, len(pods))
	type histSnap struct {
		buckets    []float64
		sum, count float64
	}
	hist := make([][]histSnap, len(pods))
	for step := 0; step < n; step++ {
		for p, st := range states {
			reqs := rng.IntN(6)
			for range reqs {
				// Log-uniform prompt lengths between 3 and 15000 tokens.
				l := math.Floor(3 * math.Pow(5000, rng.Float64()))
				st.tokens += l
				st.sum += l
				st.count++
				for b, le := range promptBuckets {
					if l <= le {
						st.buckets[b]++
					}
				}
			}
			if p == 1 && step == n/2 {
				st.tokens = 0 // engine restart: counter reset
			}
			st.waiting = max(0, st.waiting+rng.IntN(5)-2)
			tokens[p] = append(tokens[p], st.tokens)
			waiting[p] = append(waiting[p], st.waiting)
			hist[p] = append(hist[p], histSnap{append([]float64(nil), st.buckets...), st.sum, st.count})
		}
	}
	var b strings.Builder
	ts := func(step int) string {
		return strconv.FormatInt(start.Add(time.Duration(step)*15*time.Second).Unix(), 10)
	}
	lbl := func(pod string) string {
		return fmt.Sprintf(`namespace="llm",pod=%q,model_name="qwen",engine="0"`, pod)
	}
	b.WriteString("# TYPE vllm:prompt_tokens counter\n# HELP vllm:prompt_tokens Number of prefill tokens processed.\n")
	for p, pod := range pods {
		for s := range n {
			fmt.Fprintf(&b, "vllm:prompt_tokens_total{%s} %s %s\n", lbl(pod), fmtFloat(tokens[p][s]), ts(s))
		}
	}
	b.WriteString("# TYPE vllm:num_requests_waiting gauge\n")
	for p, pod := range pods {
		for s := range n {
			fmt.Fprintf(&b, "vllm:num_requests_waiting{%s} %d %s\n", lbl(pod), waiting[p][s], ts(s))
		}
	}
	b.WriteString("# TYPE vllm:request_prompt_tokens histogram\n")
	for p, pod := range pods {
		for s := range n {
			h := hist[p][s]
			for i, le := range promptBuckets {
				fmt.Fprintf(&b, "vllm:request_prompt_tokens_bucket{%s,le=%q} %s %s\n", lbl(pod), fmtLe(le), fmtFloat(h.buckets[i]), ts(s))
			}
			fmt.Fprintf(&b, "vllm:request_prompt_tokens_bucket{%s,le=\"+Inf\"} %s %s\n", lbl(pod), fmtFloat(h.count), ts(s))
			fmt.Fprintf(&b, "vllm:request_prompt_tokens_sum{%s} %s %s\n", lbl(pod), fmtFloat(h.sum), ts(s))
			fmt.Fprintf(&b, "vllm:request_prompt_tokens_count{%s} %s %s\n", lbl(pod), fmtFloat(h.count), ts(s))
		}
	}
	b.WriteString("# EOF\n")
	return b.String()
}

func fmtFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// fmtLe writes bucket bounds the OpenMetrics way ("1.0"), which Prometheus
// 2.x keeps verbatim and 3.x normalises to, so both servers agree on labels.
func fmtLe(v float64) string {
	s := strconv.FormatFloat(v, 'f', -1, 64)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return s
}
