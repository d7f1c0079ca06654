package live

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim/epp"
	"github.com/gatetuner/gatetuner/test/fleetsim/internal/fleettest"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func scrapeLive(t *testing.T, l *Fleet) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	l.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("/metrics: %d %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("content type %q", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

func sumCounter(f *dto.MetricFamily) float64 {
	var s float64
	for _, m := range f.GetMetric() {
		s += m.GetCounter().GetValue()
	}
	return s
}

func TestLiveAdvancesWithTheClockAndServesMetrics(t *testing.T) {
	sc := fleettest.Load(t, "steady")
	clk := &fakeClock{t: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	l, err := New(sc, Options{Seed: 1, TimeScale: 10, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	clk.Add(2 * time.Minute)
	fams := scrapeLive(t, l)
	for name := range fleettest.RequiredFamilies {
		exposed := name
		if fleettest.RequiredFamilies[name] == "counter" {
			exposed += "_total"
		}
		if fams[exposed] == nil {
			t.Errorf("/metrics lacks %s", exposed)
		}
	}
	running := fams["vllm:num_requests_running"].GetMetric()
	if len(running) != sc.Pods.Count {
		t.Fatalf("%d running gauges, want %d", len(running), sc.Pods.Count)
	}
	pods := map[string]bool{}
	for _, m := range running {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == "pod" {
				pods[lp.GetValue()] = true
			}
		}
	}
	if len(pods) != sc.Pods.Count {
		t.Errorf("pod labels %v", pods)
	}
	before := sumCounter(fams["vllm:prompt_tokens_total"])
	if before <= 0 {
		t.Fatal("no prompt tokens after two minutes")
	}
	if got := l.Now(); !got.Equal(clk.Now()) {
		t.Errorf("simulation at %v, clock at %v", got, clk.Now())
	}
	clk.Add(3 * time.Minute)
	after := sumCounter(scrapeLive(t, l)["vllm:prompt_tokens_total"])
	if after <= before {
		t.Errorf("prompt tokens did not grow: %v then %v", before, after)
	}
	// The scenario is compressed 10x: 5 minutes in, the 20-minute first
	// phase (2 minutes compressed) is over.
	if ph := l.Phase(); ph != "afternoon" {
		t.Errorf("phase %q after 5 minutes at 10x, want afternoon", ph)
	}
	tr := l.Truth()
	if len(tr.Phases) != 2 || tr.Phases[0].Requests == 0 || tr.End != 300 {
		t.Errorf("live truth: %d phases, end %v", len(tr.Phases), tr.End)
	}
	// The clock going backwards does nothing.
	clk.Add(-time.Minute)
	if err := l.Advance(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestLiveRestartLosesAffinityAndCrashLoopsOnInvalidSettings(t *testing.T) {
	sc := fleettest.Load(t, "hotspot")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "default-plugins.yaml")
	write := func(params string) {
		t.Helper()
		doc := "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: inflight-load-producer\n" +
			"- name: prefill-affinity\n  type: prefix-cache-affinity-filter\n  parameters:\n" + params
		if err := os.WriteFile(cfg, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("    maxTTFTPenaltyMs: 18000\n")
	prof, err := gate.LookupProfile(gate.ProfileRouter202608)
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	l, err := New(sc, Options{Seed: 1, Now: clk.Now, Settings: epp.ConfigFile{Path: cfg, Plugin: "prefill-affinity", Profile: prof},
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	clk.Add(5 * time.Minute)
	if err := l.Advance(ctx); err != nil {
		t.Fatal(err)
	}
	indexed := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.s.EPP().Index().Len()
	}
	if indexed() == 0 {
		t.Fatal("the EPP indexed nothing in five minutes")
	}
	old := l.Settings()

	// A key the build rejects: the new pods crash-loop, the old ones serve on.
	write("    maxTTFTPenaltyMs: 4000\n    penaltyMode: matchedTokens\n")
	err = l.Restart(ctx)
	if err == nil || !errors.Is(err, gate.ErrUnknownKey) {
		t.Fatalf("Restart with penaltyMode on %s = %v, want an unknown-key error", prof.Name, err)
	}
	if l.Healthy() || l.LastError() == nil {
		t.Error("EPP reported healthy after a failed rollout")
	}
	if l.Settings() != old || indexed() == 0 || l.Restarts() != 0 {
		st := l.Settings()
		t.Errorf("a failed rollout changed the serving EPP: settings %s, indexed %d, restarts %d", st.String(), indexed(), l.Restarts())
	}
	clk.Add(time.Minute)
	if err := l.Advance(ctx); err != nil {
		t.Fatal(err)
	}

	// A valid edit: the new pods start with the new bar and an empty index.
	write("    maxTTFTPenaltyMs: 4000\n")
	if err := l.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if !l.Healthy() || l.Settings().MaxTTFTPenaltyMs != 4000 || l.Restarts() != 1 {
		st := l.Settings()
		t.Errorf("after the rollout: healthy %v, settings %s, restarts %d", l.Healthy(), st.String(), l.Restarts())
	}
	if n := indexed(); n != 0 {
		t.Errorf("the new EPP starts with %d indexed entries", n)
	}
	fams := scrapeLive(t, l)
	var inflight float64
	for _, m := range fams["llm_d_epp_inflight_tokens"].GetMetric() {
		inflight += m.GetGauge().GetValue()
	}
	if inflight != 0 {
		t.Errorf("the new EPP starts with %v in-flight tokens", inflight)
	}
	// Affinity re-warms: later decisions are sticky again.
	clk.Add(2 * time.Minute)
	if err := l.Advance(ctx); err != nil {
		t.Fatal(err)
	}
	if indexed() == 0 {
		t.Error("the index did not re-warm")
	}
	// RestartWith bypasses the source.
	mt := fleettest.MatchedTokensNoCeiling()
	if err := l.RestartWith(ctx, mt); err != nil {
		t.Fatal(err)
	}
	if l.Settings() != mt || l.Restarts() != 2 {
		st := l.Settings()
		t.Errorf("RestartWith: settings %s restarts %d", st.String(), l.Restarts())
	}
}

func TestNewLiveFailsWhenTheEPPCannotStart(t *testing.T) {
	sc := fleettest.Load(t, "quiet")
	boom := errors.New("configmap unreadable")
	_, err := New(sc, Options{Settings: epp.SettingsFunc(func() (gate.Settings, error) { return gate.Settings{}, boom })})
	if !errors.Is(err, boom) {
		t.Errorf("NewLive = %v, want %v", err, boom)
	}
	if _, err := New(sc, Options{TimeScale: -1}); err == nil {
		t.Error("negative time scale accepted")
	}
	l, err := New(sc, Options{Settings: epp.StaticSettings(fleettest.MatchedTokensNoCeiling())})
	if err != nil {
		t.Fatal(err)
	}
	if l.Settings().Mode != gate.ModeMatchedTokens {
		st := l.Settings()
		t.Errorf("settings from the source not applied: %s", st.String())
	}
}

func TestLiveServesTheScenarioExportShape(t *testing.T) {
	sc := fleettest.Load(t, "steady")
	x, err := scenario.ExportShapeNamed(scenario.ShapeLLMD2026)
	if err != nil {
		t.Fatal(err)
	}
	sc.Exporters = &x
	clk := &fakeClock{t: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	l, err := New(sc, Options{Seed: 1, TimeScale: 10, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	clk.Add(2 * time.Minute)
	fams := scrapeLive(t, l)
	in := fams["llm_d_epp_inflight_tokens"]
	if in == nil || len(in.GetMetric()) != sc.Pods.Count {
		t.Fatalf("in-flight gauges: %v", in)
	}
	for _, m := range in.GetMetric() {
		got := map[string]string{}
		for _, lp := range m.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		if !strings.HasSuffix(got["endpoint_name"], "-rank-0") || got["exported_namespace"] != sc.Namespace {
			t.Errorf("in-flight labels %v", got)
		}
	}
	if fams["vllm:num_requests_waiting_by_reason"] == nil {
		t.Error("/metrics lacks vllm:num_requests_waiting_by_reason")
	}
}
