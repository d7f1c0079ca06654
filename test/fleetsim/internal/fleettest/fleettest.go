// Package fleettest holds fixtures the simulator's package tests share:
// built-in scenarios loaded or the test fails, the metric families a
// deployment exposes, the seed's gate settings, Prometheus queries, and a
// Mooncake trace read independently of the simulator's reader.
package fleettest

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim/epp"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenarios"
	"github.com/gatetuner/gatetuner/test/promharness"
)

// Load loads a built-in scenario or fails t.
func Load(t testing.TB, name string) *scenario.Scenario {
	t.Helper()
	sc, err := scenarios.Load(name)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// RequiredFamilies are the metric families a deployment exposes that the
// simulator must emit, by type.
var RequiredFamilies = map[string]string{
	"vllm:num_requests_running":                        "gauge",
	"vllm:num_requests_waiting":                        "gauge",
	"vllm:kv_cache_usage_perc":                         "gauge",
	"vllm:cache_config_info":                           "gauge",
	"vllm:prompt_tokens":                               "counter",
	"vllm:prompt_tokens_by_source":                     "counter",
	"vllm:prompt_tokens_cached":                        "counter",
	"vllm:prefix_cache_queries":                        "counter",
	"vllm:prefix_cache_hits":                           "counter",
	"vllm:generation_tokens":                           "counter",
	"vllm:num_preemptions":                             "counter",
	"vllm:request_success":                             "counter",
	"vllm:request_prompt_tokens":                       "histogram",
	"vllm:request_prefill_kv_computed_tokens":          "histogram",
	"vllm:request_generation_tokens":                   "histogram",
	"vllm:request_prefill_time_seconds":                "histogram",
	"vllm:request_queue_time_seconds":                  "histogram",
	"vllm:request_decode_time_seconds":                 "histogram",
	"vllm:request_inference_time_seconds":              "histogram",
	"vllm:e2e_request_latency_seconds":                 "histogram",
	"vllm:time_to_first_token_seconds":                 "histogram",
	"vllm:inter_token_latency_seconds":                 "histogram",
	"vllm:iteration_tokens_total":                      "histogram",
	"llm_d_epp_inflight_tokens":                        "gauge",
	"llm_d_epp_inflight_requests":                      "gauge",
	"llm_d_epp_request_cached_tokens":                  "histogram",
	"llm_d_epp_request_input_tokens":                   "histogram",
	"llm_d_epp_request_ttft_seconds":                   "histogram",
	"llm_d_epp_scheduler_attempts":                     "counter",
	"llm_d_epp_prefix_cache_affinity_filter_decisions": "counter",
}

// MatchedTokensNoCeiling is the seed's penaltyMode: matchedTokens with
// maxTTFTPenaltyMs 0 (pure break-even).
func MatchedTokensNoCeiling() gate.Settings {
	s := epp.DefaultSettings()
	s.Mode = gate.ModeMatchedTokens
	s.MaxTTFTPenaltyMs = 0
	return s
}

// Scalar is the value of query q at time at, false when it has no sample.
func Scalar(t testing.TB, srv *promharness.Server, q string, at time.Time) (float64, bool) {
	t.Helper()
	v, _, err := srv.Query(context.Background(), q, at)
	if err != nil {
		t.Fatalf("query %s: %v", q, err)
	}
	vec, ok := v.(model.Vector)
	if !ok || len(vec) == 0 {
		return 0, false
	}
	if len(vec) != 1 {
		t.Fatalf("query %s returned %d series", q, len(vec))
	}
	return float64(vec[0].Value), true
}

// RawTrace is the trace as encoding/json reads it, for independent statistics.
type RawTrace struct {
	// TS are the arrivals (s) and In the prompt lengths.
	TS, In []float64
	// Repeated are the prompt tokens in blocks whose id was seen before.
	Repeated int64
	Prompt   int64
}

// ReadRawTrace reads a Mooncake trace file with encoding/json.
func ReadRawTrace(t testing.TB, file string) RawTrace {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out RawTrace
	seen := map[int64]bool{}
	dec := json.NewDecoder(zr)
	for dec.More() {
		var r struct {
			Timestamp   float64 `json:"timestamp"`
			InputLength int64   `json:"input_length"`
			HashIDs     []int64 `json:"hash_ids"`
		}
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		out.TS = append(out.TS, r.Timestamp/1000)
		out.In = append(out.In, float64(r.InputLength))
		out.Prompt += r.InputLength
		for k, id := range r.HashIDs {
			n := int64(512)
			if k == len(r.HashIDs)-1 {
				n = r.InputLength - int64(k)*512
			}
			if seen[id] {
				out.Repeated += n
			}
			seen[id] = true
		}
	}
	return out
}
