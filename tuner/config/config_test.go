package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/viper"

	"github.com/gatetuner/gatetuner/gate"
)

func load(t *testing.T, yaml string, env map[string]string) (*Config, error) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "gatetuner.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	for k, val := range env {
		t.Setenv(k, val)
	}
	v := viper.New()
	v.SetEnvPrefix("GATETUNER")
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	v.SetConfigFile(p)
	return Load(v)
}

func TestExampleConfigLoads(t *testing.T) {
	docs, err := os.ReadFile("../../docs/config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("testdata/example.yaml")
	if string(docs) != string(data) {
		t.Fatal("docs/config.example.yaml and tuner/config/testdata/example.yaml differ; keep them equal")
	}
	if err != nil {
		t.Fatal(err)
	}
	c, err := load(t, string(data), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Targets) != 2 {
		t.Fatalf("targets = %d", len(c.Targets))
	}
	q := c.Targets[0]
	if q.Mode != ModeRollout || *q.MinConfidence != 0.7 || q.Cooldown != 6*time.Hour || *q.DailyBudget != 2 || q.ApplyWindow == nil || q.ApplyWindow.Duration != 4*time.Hour {
		t.Fatalf("target inherits defaults wrongly: %+v", q.Policy)
	}
	if g := c.Targets[1]; g.Mode != ModeOff || g.Profile != "fork-2026-10" || g.Lookback != 3*time.Hour {
		t.Fatalf("second target: %+v", g)
	}
	if p, err := c.ResolveProfile("fork-2026-10"); err != nil || !p.Accepts(8) {
		t.Fatalf("custom profile: %+v %v", p, err)
	}
}

func TestEnvironmentOverridesScalars(t *testing.T) {
	c, err := load(t, "targets:\n- name: a\n  file: /tmp/epp.yaml\n  selector: {vllm: 'pod=~\"a.*\"'}\n",
		map[string]string{"GATETUNER_PROMETHEUS_URL": "http://prom:9090", "GATETUNER_DEFAULTS_MODE": "configmap"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Prometheus.URL != "http://prom:9090" || c.Targets[0].Mode != ModeConfigMap {
		t.Fatalf("env not applied: %+v %+v", c.Prometheus, c.Targets[0].Policy)
	}
}

// TestSyncedEPPReplicasIsATargetKey: the setting is read per target and
// defaults to false (metrics cannot tell synced replicas apart).
func TestSyncedEPPReplicasIsATargetKey(t *testing.T) {
	c, err := load(t, "targets:\n- name: a\n  namespace: llm-d\n  configMap: epp\n  syncedEPPReplicas: true\n- name: b\n  namespace: llm-d\n  configMap: epp2\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Targets[0].SyncedEPPReplicas || c.Targets[1].SyncedEPPReplicas {
		t.Fatalf("syncedEPPReplicas = %v, %v; want true, false", c.Targets[0].SyncedEPPReplicas, c.Targets[1].SyncedEPPReplicas)
	}
}

func TestRejects(t *testing.T) {
	tgt := "targets:\n- name: a\n  namespace: llm-d\n  configMap: epp\n"
	tests := []struct{ name, yaml, want string }{
		{"unknown key", "prometheus:\n  urll: x\n" + tgt, "urll"},
		{"no targets", "prometheus:\n  url: http://p:9090\n", "at least one target"},
		{"bad url", "prometheus:\n  url: prom:9090\n" + tgt, "prometheus.url"},
		{"bad mode", tgt + "  mode: auto\n", "mode"},
		{"bad schedule", tgt + "  schedule: every minute\n", "schedule"},
		{"rollout without deployment", tgt + "  mode: rollout\n", "deployment"},
		{"unknown profile", tgt + "  profile: router-1999\n", "router-1999"},
		{"duplicate names", tgt + "- name: a\n  namespace: llm-d\n  configMap: epp2\n", "used twice"},
		{"file and configmap", tgt + "  file: /x\n", "not both"},
		{"bad confidence", tgt + "  minConfidence: 2\n", "minConfidence"},
		{"window without duration", tgt + "  applyWindow: {schedule: '0 2 * * *'}\n", "applyWindow.duration"},
		{"records without a source", tgt + "  decisionSource: records\n", "records.file"},
		{"short lookback", tgt + "  lookback: 1m\n", "lookback"},
		{"bad custom profile", "profiles:\n- name: p\n  keys: [base, nope]\n" + tgt, "nope"},
		{"custom profile outcomes without a counter", "profiles:\n- name: p\n  keys: [base]\n  outcomes: [sticky]\n" + tgt,
			"profiles[0]: custom profile \"p\": outcomes are declared but neither decisionCounter nor gateSpan"},
		{"custom profile with an unmodelled outcome", "profiles:\n- name: p\n  keys: [base]\n  decisionCounter: true\n  outcomes: [request_load_override]\n" + tgt,
			"request_load_override"},
		{"custom profile with an unknown apiVersion", "profiles:\n- name: p\n  keys: [base]\n  configAPIVersions: [llm-d.ai/v2]\n" + tgt,
			"registered by no EPP loader read"},
		{"decisionCounter not a bool", "profiles:\n- name: p\n  keys: [base]\n  decisionCounter: sometimes\n" + tgt, "decisionCounter"},
		{"syncedEPPReplicas not a bool", tgt + "  syncedEPPReplicas: maybe\n", "syncedEPPReplicas"},
		{"pdGateProfile neither prefill nor decode", tgt + "  pdGateProfile: both\n", "pdGateProfile"},
		{"no model endpoint budget", tgt + "  modelEndpointBudget: 0\n", "targets[0] (a): modelEndpointBudget: want > 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, tc.yaml, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want mention of %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
		})
	}
}

// TestCustomProfileDeclaresWhatItsBuildReports: the keys decisionCounter,
// gateSpan, outcomes and configAPIVersions reach the gate profile a target
// resolves.
func TestCustomProfileDeclaresWhatItsBuildReports(t *testing.T) {
	c, err := load(t, "profiles:\n- name: v1-build\n  keys: [base]\n  missingSignal: v2\n  thresholdRule: 0to1\n"+
		"  decisionCounter: true\n  gateSpan: true\n  configAPIVersions: [llm-d.ai/v1, llm-d.ai/v1alpha1]\n"+
		"targets:\n- name: a\n  namespace: llm-d\n  configMap: epp\n  profile: v1-build\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.ResolveProfile("v1-build")
	if err != nil {
		t.Fatal(err)
	}
	r := p.Reports
	if !r.DecisionCounter || !r.GateSpan || !r.Records(gate.OutcomeMissingSignal) || len(r.Outcomes) != 6 {
		t.Errorf("reports %s: want counter+span with the six v2 outcomes", r)
	}
	if p.LoadsConfigAPIVersion("llm-d.ai/v1") != nil || p.LoadsConfigAPIVersion("inference.networking.x-k8s.io/v1alpha1") == nil {
		t.Errorf("apiVersions %v: want llm-d.ai/v1 loaded and the deprecated group refused", p.ConfigAPIVersions)
	}
}
