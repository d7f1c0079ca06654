package fleetsim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gatetuner/gatetuner/test/fleetsim/internal/fleettest"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/truth"
)

// runPD runs calibration-1970's warm and saturated phases with two decode
// and two prefill pods under the P/D shape spec, with gate records.
func runPD(t *testing.T, spec string) (*omFile, *truth.Truth, []gateRecord) {
	t.Helper()
	sc := fleettest.Load(t, "calibration-1970")
	var om, rec bytes.Buffer
	tr, err := Run(context.Background(), sc, Options{Seed: 1, Last: "saturated", Metrics: &om, Records: &rec, Exporters: shapeOf(t, spec)})
	if err != nil {
		t.Fatal(err)
	}
	return parseOM(t, om.Bytes()), tr, parseRecords(t, &rec)
}

// parseRecords decodes gate records.
func parseRecords(t *testing.T, rec *bytes.Buffer) []gateRecord {
	t.Helper()
	var recs []gateRecord
	sc := bufio.NewScanner(rec)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r gateRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	return recs
}

type gateRecord struct {
	Endpoints []struct {
		Name string `json:"name"`
	} `json:"endpoints"`
	Observed struct {
		Chosen string `json:"chosen"`
	} `json:"observed"`
}

// last is the last value of the single series of name matching match.
func (f *omFile) last(t *testing.T, name string, match map[string]string) float64 {
	t.Helper()
	ss := f.find(name, match)
	if len(ss) != 1 {
		t.Fatalf("%s%v: %d series, want 1", name, match, len(ss))
	}
	return ss[0].vals[len(ss[0].vals)-1]
}

func pdRequests(tr *truth.Truth) (decodeOnly, disagg int64) {
	for _, ph := range tr.Phases {
		decodeOnly += ph.DecodeOnly
		disagg += ph.Disaggregated
	}
	return decodeOnly, disagg
}

func TestPDDecodePodsCountTransferredKVAsVLLMDoes(t *testing.T) {
	f, tr, _ := runPD(t, scenario.ShapeLLMD2026+",prefillPods=2")
	_, disagg := pdRequests(tr)
	if disagg == 0 {
		t.Fatal("no request was disaggregated")
	}
	for _, pod := range []string{"llama-3-2-3b-cpu-decode-0", "llama-3-2-3b-cpu-decode-1"} {
		m := map[string]string{"pod": pod}
		src := func(s string) float64 {
			return f.last(t, "vllm:prompt_tokens_by_source_total", map[string]string{"pod": pod, "source": s})
		}
		prompt := f.last(t, "vllm:prompt_tokens_total", m)
		cached := f.last(t, "vllm:prompt_tokens_cached_total", m)
		n := f.last(t, "vllm:request_success_total", m)
		local, hit, ext := src("local_compute"), src("local_cache_hit"), src("external_kv_transfer")
		// Every request is disaggregated (nonCachedTokens 16): the decode
		// pod computes the last token only, and "cached" is the rest.
		if running := f.last(t, "vllm:num_requests_running", m); ext <= 0 || local < n || local > n+running {
			t.Errorf("%s: local_compute %.0f for %.0f finished requests, external %.0f", pod, local, n, ext)
		}
		// vLLM's invariant: computed + local hit + external − recomputed = total.
		if got := local + hit + ext - local; got != prompt {
			t.Errorf("%s: local hit %.0f + external %.0f = %.0f, want the prompt tokens %.0f", pod, hit, ext, got, prompt)
		}
		if cached != prompt-local {
			t.Errorf("%s: cached %.0f, want prompt − computed = %.0f", pod, cached, prompt-local)
		}
		if gen, reqs := f.last(t, "vllm:generation_tokens_total", m), n; gen <= 1.5*reqs {
			t.Errorf("%s: %.0f generation tokens for %.0f requests: the decode pod should decode", pod, gen, reqs)
		}
	}
	for _, pod := range []string{"llama-3-2-3b-cpu-prefill-0", "llama-3-2-3b-cpu-prefill-1"} {
		m := map[string]string{"pod": pod}
		n := f.last(t, "vllm:request_success_total", map[string]string{"pod": pod, "finished_reason": "length"})
		if gen := f.last(t, "vllm:generation_tokens_total", m); n == 0 || gen != n {
			t.Errorf("%s: %.0f generation tokens for %.0f requests, want one each", pod, gen, n)
		}
		if ext := f.last(t, "vllm:prompt_tokens_by_source_total", map[string]string{"pod": pod, "source": "external_kv_transfer"}); ext != 0 {
			t.Errorf("%s: %.0f tokens transferred into a prefill pod", pod, ext)
		}
		if f.last(t, "vllm:prompt_tokens_by_source_total", map[string]string{"pod": pod, "source": "local_compute"}) == 0 {
			t.Errorf("%s computed nothing", pod)
		}
	}
}

func TestPDDeciderDisaggregatesByTheDecodePodsNonCachedPart(t *testing.T) {
	for _, tc := range []struct {
		threshold        string
		wantDisaggregate bool
	}{{"16", true}, {"0", false}, {"1000000", false}} {
		t.Run(tc.threshold, func(t *testing.T) {
			f, tr, recs := runPD(t, scenario.ShapeLLMD2026+",prefillPods=2,pdNonCachedTokens="+tc.threshold)
			decodeOnly, disagg := pdRequests(tr)
			if (disagg > 0) != tc.wantDisaggregate || (decodeOnly > 0) == tc.wantDisaggregate {
				t.Fatalf("decode only %d, disaggregated %d", decodeOnly, disagg)
			}
			// The gate sits in the prefill profile: it decides the
			// disaggregated requests only.
			if int64(len(recs)) != disagg {
				t.Errorf("%d gate records for %d disaggregated requests", len(recs), disagg)
			}
			pf := f.find("vllm:prompt_tokens_by_source_total", map[string]string{"pod": "llama-3-2-3b-cpu-prefill-0", "source": "local_compute"})
			if work := pf[0].vals[len(pf[0].vals)-1]; (work > 0) != tc.wantDisaggregate {
				t.Errorf("prefill pod computed %.0f tokens", work)
			}
			dt := "decode-only"
			if tc.wantDisaggregate {
				dt = "prefill-decode"
			}
			if n := f.last(t, "llm_d_epp_disagg_decision_total", map[string]string{"decision_type": dt}); n == 0 {
				t.Errorf("llm_d_epp_disagg_decision_total{decision_type=%q} is 0", dt)
			}
			if n := f.last(t, "llm_d_inference_scheduler_disagg_decision_total", map[string]string{"decision_type": dt}); n == 0 {
				t.Errorf("deprecated llm_d_inference_scheduler_disagg_decision_total{decision_type=%q} is 0", dt)
			}
		})
	}
}

func TestPDGateRunsInTheProfileThatCarriesIt(t *testing.T) {
	for _, profile := range []string{scenario.PDProfilePrefill, scenario.PDProfileDecode} {
		t.Run(profile, func(t *testing.T) {
			f, tr, recs := runPD(t, scenario.ShapeLLMD2026+",prefillPods=2,pdGateProfile="+profile)
			decodeOnly, disagg := pdRequests(tr)
			want := disagg
			if profile == scenario.PDProfileDecode {
				want = decodeOnly + disagg
			}
			if int64(len(recs)) != want || want == 0 {
				t.Fatalf("%d records, want %d", len(recs), want)
			}
			for _, r := range recs[:100] {
				if len(r.Endpoints) != 2 {
					t.Fatalf("record over %d endpoints, want the 2 %s pods", len(r.Endpoints), profile)
				}
				for _, e := range append([]string{r.Observed.Chosen}, r.Endpoints[0].Name, r.Endpoints[1].Name) {
					if !strings.Contains(e, "-"+profile+"-") {
						t.Fatalf("record names %s outside the %s profile", e, profile)
					}
				}
			}
			var dec float64
			for _, s := range f.find("llm_d_epp_prefix_cache_affinity_filter_decisions_total", nil) {
				dec += s.vals[len(s.vals)-1]
			}
			if int64(dec) < want { // the metrics cover the warm-up too
				t.Errorf("%.0f gate decisions counted, want at least %d", dec, want)
			}
		})
	}
}

func TestPDEPPChargesBothPicksAndCountsAttemptsOnTheDecodePod(t *testing.T) {
	f, _, _ := runPD(t, scenario.ShapeLLMD2026+",prefillPods=2")
	for _, pod := range []string{"llama-3-2-3b-cpu-decode-0", "llama-3-2-3b-cpu-prefill-0"} {
		if len(f.find("llm_d_epp_inflight_tokens", map[string]string{"endpoint_name": pod + "-rank-0"})) != 1 {
			t.Errorf("no in-flight series for %s", pod)
		}
	}
	for _, s := range f.find("llm_d_epp_scheduler_attempts_total", nil) {
		if ep := s.labels.Get("endpoint_name"); !strings.Contains(ep, "-decode-") {
			t.Errorf("scheduler attempts name %s: only the primary (decode) profile's pick is counted", ep)
		}
	}
}

func TestPDUsageCachedTokensFollowTheSidecar(t *testing.T) {
	cachedShare := func(spec string) float64 {
		f, _, _ := runPD(t, spec)
		return f.last(t, "llm_d_epp_request_cached_tokens_sum", nil) / f.last(t, "llm_d_epp_request_input_tokens_sum", nil)
	}
	rewritten := cachedShare(scenario.ShapeLLMD2026 + ",prefillPods=2")
	decode := cachedShare(scenario.ShapeLLMD2026 + ",prefillPods=2,pdUsageCached=decode")
	if decode < 0.99 || rewritten > 0.8 {
		t.Errorf("EPP cached/input: %.3f with the decode pod's usage (want ≈ 1), %.3f rewritten to the prefill pod's", decode, rewritten)
	}
}

func TestPDRejectsUnsimulatedCombinations(t *testing.T) {
	for _, spec := range []string{
		scenario.ShapeLLMD2025 + ",prefillPods=1", scenario.ShapeLLMD2026 + ",prefillPods=1,dpRanks=2", scenario.ShapeLLMD2026 + ",prefillPods=1,pdGateProfile=both",
		scenario.ShapeLLMD2026 + ",prefillPods=1,pdUsageCached=x", scenario.ShapeLLMD2026 + ",prefillPods=-1", scenario.ShapeLegacySim + ",prefillPods=1",
	} {
		if _, err := scenario.ParseExportShape(spec); err == nil {
			t.Errorf("%s: accepted", spec)
		}
	}
}
