package estimator

import (
	"strings"
)

// Metric names probed by feature detection.
const (
	mWaiting         = "vllm:num_requests_waiting"
	mRunning         = "vllm:num_requests_running"
	mKVUsage         = "vllm:kv_cache_usage_perc"
	mGPUCacheUsage   = "vllm:gpu_cache_usage_perc"
	mPreemptions     = "vllm:num_preemptions_total"
	mBySource        = "vllm:prompt_tokens_by_source_total"
	mPromptTokens    = "vllm:prompt_tokens_total"
	mPromptCached    = "vllm:prompt_tokens_cached_total"
	mKVComputed      = "vllm:request_prefill_kv_computed_tokens"
	mPrefixHits      = "vllm:prefix_cache_hits_total"
	mPrefixQueries   = "vllm:prefix_cache_queries_total"
	mGPUPrefixHits   = "vllm:gpu_prefix_cache_hits_total"
	mGPUPrefixQuery  = "vllm:gpu_prefix_cache_queries_total"
	mExternalHits    = "vllm:external_prefix_cache_hits_total"
	mIterationTokens = "vllm:iteration_tokens_total"
	mITL             = "vllm:inter_token_latency_seconds"
	mTPOT            = "vllm:time_per_output_token_seconds"
	mPrefillTime     = "vllm:request_prefill_time_seconds"
	mPromptHist      = "vllm:request_prompt_tokens"

	mEPPInflightTokens = "llm_d_epp_inflight_tokens"
	mEPPInflightReqs   = "llm_d_epp_inflight_requests"
	mEPPCachedTokens   = "llm_d_epp_request_cached_tokens"
	mEPPInputTokens    = "llm_d_epp_request_input_tokens"
	mEPPAttempts       = "llm_d_epp_scheduler_attempts_total"

	// vLLM since PR #38435 (2026-03): the waiting gauge split by reason.
	mWaitingByReason = "vllm:num_requests_waiting_by_reason"

	// llm-d-router before 0.10 (GIE v1.5 names; release-0.8).
	mGIEAttempts     = "inference_extension_scheduler_attempts_total"
	mGIEInputTokens  = "inference_objective_input_tokens"
	mGIECachedTokens = "inference_objective_prompt_cached_tokens"
)

// vllmProbe lists the vLLM series whose presence is detected (histograms by
// their _count series).
var vllmProbe = []string{
	mWaiting, mRunning, mKVUsage, mGPUCacheUsage, mPreemptions,
	mBySource, mPromptTokens, mPromptCached, mKVComputed + "_count",
	mPrefixHits, mPrefixQueries, mGPUPrefixHits, mGPUPrefixQuery, mExternalHits,
	mIterationTokens + "_count", mITL + "_count", mTPOT + "_count", mPrefillTime + "_count",
	mPromptHist + "_count", mWaitingByReason,
}

// eppProbe lists the EPP series whose presence is detected.
var eppProbe = []string{
	mEPPInflightTokens, mEPPInflightReqs, mEPPCachedTokens + "_count", mEPPInputTokens + "_count", mEPPAttempts,
	mGIEAttempts, mGIEInputTokens + "_count", mGIECachedTokens + "_count",
}

// isEPPName reports whether name is an EPP series (read with the EPP selector).
func isEPPName(name string) bool {
	return strings.HasPrefix(name, "llm_d_epp_") || strings.HasPrefix(name, "inference_")
}

// attempts renders the scheduling attempts' increase over rng summed per
// endpoint, the pre-0.10 pod_name label renamed endpoint_name.
func attempts(f Features, sel, rng string) string {
	inc := "increase(" + vec(f.Routing, sel) + "[" + rng + "])"
	if f.Routing == mGIEAttempts {
		inc = `label_replace(` + inc + `, "endpoint_name", "$1", "pod_name", "(.*)")`
	}
	return "sum by (endpoint_name) (" + inc + ")"
}

// byEngine groups vLLM series per engine: Prometheus adds namespace, pod
// and instance (a data-parallel rank on its own port is its own instance),
// vLLM labels each internal data-parallel engine with engine.
const byEngine = "namespace, pod, instance, engine"

// vec renders name{matchers...}, skipping empty matcher lists.
func vec(name string, matchers ...string) string {
	var parts []string
	for _, m := range matchers {
		if m = strings.TrimSpace(m); m != "" {
			parts = append(parts, strings.TrimSuffix(m, ","))
		}
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}

// nameRegex renders a __name__ matcher for names (metric names hold no
// regex metacharacters).
func nameRegex(names []string) string {
	return `__name__=~"` + strings.Join(names, "|") + `"`
}

// computedSource is one way of reading computed (uncached) prompt tokens,
// in the order of the metrics reference.
type computedSource struct {
	// id is reported in Features.ComputedTokens.
	id   string
	rank int
	// counters are the counters it reads (resets are checked on each); the
	// first ones are added, those in minus are subtracted.
	plus, minus []string
	// extra matchers on plus[0] (the by-source label).
	extra string
}

// expr renders the per-group computed-token expression with fn ("rate" or
// "increase") over rng, grouped by by.
func (c *computedSource) expr(sel, fn, rng, by string) string {
	term := func(name, extra string) string {
		return "sum by (" + by + ") (" + fn + "(" + vec(name, sel, extra) + "[" + rng + "]))"
	}
	var b strings.Builder
	for i, n := range c.plus {
		if i > 0 {
			b.WriteString(" + ")
		}
		extra := ""
		if i == 0 {
			extra = c.extra
		}
		b.WriteString(term(n, extra))
	}
	for _, n := range c.minus {
		b.WriteString(" - ")
		b.WriteString(term(n, ""))
	}
	return b.String()
}

// resets renders the number of counter resets per group in each window.
func (c *computedSource) resets(sel, rng, by string) string {
	var terms []string
	for i, n := range append(append([]string(nil), c.plus...), c.minus...) {
		extra := ""
		if i == 0 {
			extra = c.extra
		}
		terms = append(terms, "sum by ("+by+") (resets("+vec(n, sel, extra)+"["+rng+"]))")
	}
	return strings.Join(terms, " + ")
}

// chooseComputed picks the first computed-token source whose series exist.
func chooseComputed(has func(string) bool) *computedSource {
	if has(mBySource) {
		return &computedSource{id: mBySource + `{source="local_compute"}`, rank: 1, plus: []string{mBySource}, extra: `source="local_compute"`}
	}
	if has(mPromptTokens) && has(mPromptCached) {
		return &computedSource{id: mPromptTokens + " - " + mPromptCached, rank: 2, plus: []string{mPromptTokens}, minus: []string{mPromptCached}}
	}
	if has(mKVComputed + "_count") {
		return &computedSource{id: mKVComputed + "_sum", rank: 3, plus: []string{mKVComputed + "_sum"}}
	}
	hits := ""
	switch {
	case has(mPrefixHits):
		hits = mPrefixHits
	case has(mGPUPrefixHits):
		hits = mGPUPrefixHits
	}
	if has(mPromptTokens) && hits != "" {
		c := &computedSource{id: mPromptTokens + " - " + hits, rank: 4, plus: []string{mPromptTokens}, minus: []string{hits}}
		if has(mExternalHits) {
			c.minus = append(c.minus, mExternalHits)
			c.id += " - " + mExternalHits
		}
		return c
	}
	return nil
}

// fitSource is the computed-token source the step-cost fit reads: it needs
// tokens counted when their prefill completes, which
// vllm:request_prefill_kv_computed_tokens (observed when the request
// finishes, a decode later) is not; for it the fit falls back to prompt
// tokens minus prefix-cache hits when those exist.
func fitSource(cs *computedSource, has func(string) bool) *computedSource {
	if cs == nil || cs.rank != 3 {
		return cs
	}
	fs := chooseComputed(func(n string) bool { return n != mKVComputed+"_count" && has(n) })
	if fs == nil {
		return cs
	}
	return fs
}
