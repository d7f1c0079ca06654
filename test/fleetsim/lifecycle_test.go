package fleetsim

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/test/fleetsim/internal/fleettest"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/truth"
)

// runLifecycle runs calibration-1970's warm and saturated phases (2 pods)
// under the llm-d-2026 shape with the departure fields of spec, with gate
// records, and returns the metrics, the truth and the records.
func runLifecycle(t *testing.T, spec string) (*omFile, *truth.Truth, []gateRecord, time.Time) {
	t.Helper()
	sc := fleettest.Load(t, "calibration-1970")
	var om, rec bytes.Buffer
	tr, err := Run(context.Background(), sc, Options{Seed: 1, Last: "saturated", Warmup: WarmupAll, Metrics: &om, Records: &rec,
		Exporters: shapeOf(t, scenario.ShapeLLMD2026+","+spec)})
	if err != nil {
		t.Fatal(err)
	}
	return parseOM(t, om.Bytes()), tr, parseRecords(t, &rec), DefaultBaseTime()
}

func TestDepartedPodKeepsItsInFlightSeriesAndLosesItsVLLMSeries(t *testing.T) {
	f, tr, recs, base := runLifecycle(t, "departPods=1,departAt=12m")
	departed := "llama-3-2-3b-cpu-decode-1"
	at := base.Add(12 * time.Minute).UnixMilli()
	for _, s := range f.find("vllm:num_requests_waiting", map[string]string{"pod": departed}) {
		if last := s.ts[len(s.ts)-1]; last > at {
			t.Errorf("the departed pod's vLLM series has a sample at %d, after its departure at %d", last, at)
		}
	}
	inflight := f.find("llm_d_epp_inflight_tokens", map[string]string{"endpoint_name": departed + "-rank-0"})
	if len(inflight) != 1 {
		t.Fatalf("%d in-flight series for the departed endpoint", len(inflight))
	}
	s := inflight[0]
	if s.ts[len(s.ts)-1] <= at || s.vals[len(s.vals)-1] != 0 {
		t.Errorf("the departed endpoint's in-flight series ends at %d with %v, want it kept to the end at 0 (its requests aborted)", s.ts[len(s.ts)-1], s.vals[len(s.vals)-1])
	}
	n := 0
	for _, r := range recs {
		for _, e := range r.Endpoints {
			if e.Name == departed {
				n++
			}
		}
	}
	if n == 0 || n == len(recs) {
		t.Errorf("the departed pod is a candidate in %d of %d records, want only those before it left", n, len(recs))
	}
	var failed int
	for _, ph := range tr.Phases {
		failed += ph.SchedulingFailures
	}
	if failed != 0 {
		t.Errorf("%d scheduling failures with a pod left", failed)
	}
}

func TestNoEndpointLeftFailsSchedulingWithEmptyEndpointLabels(t *testing.T) {
	f, tr, _, _ := runLifecycle(t, "departPods=2,departAt=12m,rejoinAfter=1m")
	var failed int
	for _, ph := range tr.Phases {
		failed += ph.SchedulingFailures
	}
	if failed == 0 {
		t.Fatal("no scheduling failed while every pod was gone")
	}
	ss := f.find("llm_d_epp_scheduler_attempts_total", map[string]string{"status": "failure"})
	if len(ss) != 1 {
		t.Fatalf("%d failure series, want 1", len(ss))
	}
	for _, l := range []string{"endpoint_name", "port", "exported_namespace"} {
		if v := ss[0].labels.Get(l); v != "" {
			t.Errorf("failure series carries %s=%q; Prometheus stores no empty label", l, v)
		}
	}
	if got := ss[0].vals[len(ss[0].vals)-1]; int(got) != failed {
		t.Errorf("failure counter %v, truth %d failed requests", got, failed)
	}
	if len(f.find("inference_extension_scheduler_attempts_total", map[string]string{"status": "failure"})) != 1 {
		t.Error("no deprecated failure series")
	}
	// The new pods' series start when they join.
	for _, pod := range []string{"llama-3-2-3b-cpu-decode-2", "llama-3-2-3b-cpu-decode-3"} {
		if len(f.find("vllm:num_requests_waiting", map[string]string{"pod": pod})) != 1 ||
			len(f.find("llm_d_epp_inflight_tokens", map[string]string{"endpoint_name": pod + "-rank-0"})) != 1 {
			t.Errorf("the new pod %s has no vLLM or in-flight series", pod)
		}
	}
}

func TestRestartedPodCountersStartFromZero(t *testing.T) {
	f, _, _, base := runLifecycle(t, "departPods=1,departAt=12m,rejoinAfter=1m,rejoinSameName=true")
	ss := f.find("vllm:prompt_tokens_total", map[string]string{"pod": "llama-3-2-3b-cpu-decode-1"})
	if len(ss) != 1 {
		t.Fatalf("%d series", len(ss))
	}
	s := ss[0]
	gap, reset := false, false
	for i := 1; i < len(s.ts); i++ {
		if s.ts[i]-s.ts[i-1] > 15000 {
			gap = true
		}
		if s.vals[i] < s.vals[i-1] {
			reset = true
		}
	}
	if !gap || !reset {
		t.Errorf("restarted pod's counter: gap %t, went backwards %t; want both", gap, reset)
	}
	if s.ts[len(s.ts)-1] < base.Add(25*time.Minute).UnixMilli() {
		t.Error("the restarted pod's series did not resume")
	}
}

func TestPrefixIndexerHitRatioIsObservedPerScheduledRequest(t *testing.T) {
	f, tr, _, _ := runLifecycle(t, "departPods=1,departAt=12m")
	_ = tr
	ss := f.find("llm_d_epp_prefix_indexer_hit_ratio_count", map[string]string{"plugin_name": "approx-prefix-cache-producer", "plugin_type": "approx-prefix-cache-producer"})
	if len(ss) != 1 {
		t.Fatalf("%d hit-ratio series", len(ss))
	}
	var attempts float64
	for _, a := range f.find("llm_d_epp_scheduler_attempts_total", map[string]string{"status": "success"}) {
		attempts += a.vals[len(a.vals)-1]
	}
	if got := ss[0].vals[len(ss[0].vals)-1]; got != attempts {
		t.Errorf("%v hit-ratio observations for %v scheduled requests", got, attempts)
	}
	if len(f.find("inference_extension_prefix_indexer_hit_ratio_count", nil)) != 1 {
		t.Error("no deprecated unlabelled hit-ratio series")
	}
}
