package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gatetuner/gatetuner/test/fleetsim"
	"github.com/gatetuner/gatetuner/test/fleetsim/epp"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenarios"
	"github.com/gatetuner/gatetuner/test/kubeharness"
	"github.com/gatetuner/gatetuner/test/promharness"
	"github.com/gatetuner/gatetuner/test/simenv"
	"github.com/gatetuner/gatetuner/tuner/doctor"
	"github.com/gatetuner/gatetuner/tuner/sink"
)

// simulatedPrometheus runs calibration-1970 under an export shape into a
// real Prometheus (promtool backfill) and returns its URL and the time
// just after the run's end.
func simulatedPrometheus(t *testing.T, sc *scenario.Scenario, shape string) (string, time.Time) {
	t.Helper()
	x, err := scenario.ParseExportShape(shape)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Now().Add(-sc.Duration() - time.Hour).Truncate(time.Minute)
	var om bytes.Buffer
	tr, err := fleetsim.Run(context.Background(), sc, fleetsim.Options{Seed: 1, Metrics: &om, BaseTime: base, Exporters: &x})
	if err != nil {
		t.Fatal(err)
	}
	srv := promharness.Start(t, promharness.Options{DataDir: promharness.Backfill(t, &om)})
	return srv.URL(), base.Add(time.Duration(tr.End*float64(time.Second)) + 7*time.Second)
}

// A minimal PodMonitor CRD: the API server serves monitoring.coreos.com/v1
// podmonitors as the Prometheus Operator's CRD does (schema not enforced).
const podMonitorCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: podmonitors.monitoring.coreos.com
spec:
  group: monitoring.coreos.com
  names: {kind: PodMonitor, listKind: PodMonitorList, plural: podmonitors, singular: podmonitor}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: servicemonitors.monitoring.coreos.com
spec:
  group: monitoring.coreos.com
  names: {kind: ServiceMonitor, listKind: ServiceMonitorList, plural: servicemonitors, singular: servicemonitor}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

// serviceMonitor is an EPP ServiceMonitor with the given port.
func serviceMonitor(ns, port string) string {
	return fmt.Sprintf(`apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: epp, namespace: %s}
spec:
  selector: {matchLabels: {app: epp}}
  endpoints:
  - port: %q
`, ns, port)
}

// podMonitor is llm-d's vLLM PodMonitor shape with the given port.
func podMonitor(ns, port string) string {
	return fmt.Sprintf(`apiVersion: monitoring.coreos.com/v1
kind: PodMonitor
metadata: {name: vllm-decode, namespace: %s}
spec:
  selector: {matchLabels: {llm-d.ai/role: decode}}
  podMetricsEndpoints:
  - port: %q
    path: /metrics
`, ns, port)
}

// eppNamespace creates a namespace holding the EPP (its config in a
// ConfigMap, its Deployment running image), a vLLM pod whose metrics port
// is named podPort, a vLLM PodMonitor scraping monitorPort, an EPP Service
// whose metrics port is named svcPort and an EPP ServiceMonitor scraping
// eppMonitorPort.
func eppNamespace(t *testing.T, env *kubeharness.Env, sc *scenario.Scenario, ns, image, podPort, monitorPort, svcPort, eppMonitorPort string) {
	t.Helper()
	ctx := context.Background()
	if err := env.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}}
	if _, err := env.Client.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "vllm-decode-0", Namespace: ns, Labels: map[string]string{"llm-d.ai/role": "decode"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm/vllm-openai:latest",
			Ports: []corev1.ContainerPort{{Name: podPort, ContainerPort: 8000}}}}}}
	if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "epp", Namespace: ns, Labels: map[string]string{"app": "epp"}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "epp"}, Ports: []corev1.ServicePort{{Name: svcPort, Port: 9090}}}}
	if _, err := env.Client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := env.ApplyManifests(ctx, []byte(serviceMonitor(ns, eppMonitorPort))); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "epp-config", Namespace: ns},
		Data: map[string]string{"config.yaml": string(simenv.EPPConfig(sc, epp.DefaultSettings(), false))}}
	if _, err := env.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	one := int32(1)
	labels := map[string]string{"app": "epp"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "epp", Namespace: ns}, Spec: appsv1.DeploymentSpec{
		Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "epp", Image: image}}}}}}
	if _, err := env.Client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := env.ApplyManifests(ctx, []byte(podMonitor(ns, monitorPort))); err != nil {
		t.Fatal(err)
	}
}

// pdConfigMap replaces ns's EPP config with a P/D one: llm-d-router's
// sample disagg-profile-handler setup with the filter in the prefill profile.
func pdConfigMap(t *testing.T, env *kubeharness.Env, sc *scenario.Scenario, ns string) {
	t.Helper()
	base := string(simenv.EPPConfig(sc, epp.DefaultSettings(), false))
	i := strings.Index(base, "schedulingProfiles:")
	text := base[:i] + `- type: prefill-filter
- type: decode-filter
- type: prefix-cache-scorer
- type: prefix-based-pd-decider
  parameters:
    nonCachedTokens: 16
- type: disagg-profile-handler
  parameters:
    deciders:
      prefill: prefix-based-pd-decider
schedulingProfiles:
- name: prefill
  plugins:
  - pluginRef: prefill-filter
  - pluginRef: ` + sc.EPP.Plugin + `
  - pluginRef: max-score-picker
- name: decode
  plugins:
  - pluginRef: decode-filter
  - pluginRef: prefix-cache-scorer
  - pluginRef: max-score-picker
`
	cm, err := env.Client.CoreV1().ConfigMaps(ns).Get(context.Background(), "epp-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["config.yaml"] = text
	if _, err := env.Client.CoreV1().ConfigMaps(ns).Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// daemonRBAC applies the RBAC gatetuner renders for ConfigMap targets in
// namespaces (ConfigMap epp-config, Deployment epp) to the ServiceAccount
// gatetuner/gatetuner.
func daemonRBAC(t *testing.T, env *kubeharness.Env, namespaces ...string) {
	t.Helper()
	ctx := context.Background()
	if err := env.CreateNamespace(ctx, "gatetuner"); err != nil {
		t.Fatal(err)
	}
	var targets []sink.Target
	for _, ns := range namespaces {
		targets = append(targets, sink.Target{Namespace: ns, ConfigMap: "epp-config", Deployment: "epp"})
	}
	rbac, err := sink.RenderRBAC(sink.RBACConfig{Targets: sink.RBACTargets(targets...)})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.ApplyManifests(ctx, rbac); err != nil {
		t.Fatal(err)
	}
}

// findCheck returns the named check, or nil.
func findCheck(cs []doctor.Result, name string) *doctor.Result {
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	return nil
}

// doctorConfig is a daemon config with one ConfigMap target; extra lines
// are appended to the target.
func doctorConfig(t *testing.T, promURL, kubeconfig, ns, vllmSel, eppSel, extra string) string {
	t.Helper()
	return writeFile(t, t.TempDir(), "gatetuner.yaml", fmt.Sprintf(`prometheus:
  url: %s
  timeout: 10s
kubernetes:
  kubeconfig: %s
targets:
- name: pool
  namespace: %s
  configMap: epp-config
  key: config.yaml
  deployment: epp
  plugin: %s
  maxNumBatchedTokens: 2048
  selector:
    vllm: '%s'
    epp: '%s'
%s`, promURL, kubeconfig, ns, "prefill-affinity", vllmSel, eppSel, extra))
}

// withoutLine removes a line from the file at path and returns the path.
func withoutLine(t *testing.T, path, line string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(b), line) {
		t.Fatalf("%s: %v, or no line %q", path, err, line)
	}
	return writeFile(t, filepath.Dir(path), "edited-"+filepath.Base(path), strings.Replace(string(b), line, "", 1))
}

// TestDoctorOnARealClusterAndPrometheus runs doctor against a real API
// server and real Prometheus servers filled by the simulator with the real
// llm-d shapes: a healthy setup passes; each broken one fails (or warns)
// the check that names it, under the estimator's reason, with exit 1 on a
// failure.
func TestDoctorOnARealClusterAndPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real Prometheus and API server")
	}
	sc, err := scenarios.Load("calibration-1970")
	if err != nil {
		t.Fatal(err)
	}
	sc.EPP.Plugin = "prefill-affinity"
	healthy, at := simulatedPrometheus(t, sc, scenario.ShapeLLMD2026)
	rawSD, atSD := simulatedPrometheus(t, sc, scenario.ShapeLLMD2026+",scrape=kubernetes-sd")
	twoProducers, atTwo := simulatedPrometheus(t, sc, scenario.ShapeLLMD2026+",producers=inflight-load-producer,shadow-producer")
	dp := sc.Clone()
	dp.Pods.Count /= 2 // two ranks per pod: as many engines, as saturated
	dpRanks, atDP := simulatedPrometheus(t, dp, scenario.ShapeLLMD2026+",dpRanks=2")
	pd, atPD := simulatedPrometheus(t, sc, scenario.ShapeLLMD2026+",prefillPods=2")
	pdSel := `namespace="llm-d",pod=~"` + sc.Pods.NamePrefix + `-[0-9]+|` + sc.PrefillNamePrefix() + `-[0-9]+"`
	env := kubeharness.Start(t)
	if err := env.ApplyManifests(context.Background(), []byte(podMonitorCRD)); err != nil {
		t.Fatal(err)
	}
	const image = "ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.10.0"
	eppNamespace(t, env, sc, "pool-a", image, "metrics", "metrics", "http-metrics", "http-metrics")
	eppNamespace(t, env, sc, "pool-port", image, "metrics", "8000", "http-metrics", "9090")
	eppNamespace(t, env, sc, "pool-named", image, "http", "metrics", "metrics", "http-metrics")
	eppNamespace(t, env, sc, "pool-pd", image, "metrics", "metrics", "http-metrics", "http-metrics")
	pdConfigMap(t, env, sc, "pool-pd")
	daemonRBAC(t, env, "pool-a", "pool-port", "pool-named", "pool-pd")
	for _, name := range []string{"vllm-prefill-1", "vllm-prefill-0"} { // beside the decode pod: a P/D pool
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "pool-pd", Labels: map[string]string{"llm-d.ai/role": "prefill"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm/vllm-openai:latest",
				Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 8000}}}}}}
		if _, err := env.Client.CoreV1().Pods("pool-pd").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	vllm, epp := `namespace="llm-d",pod=~"`+sc.Pods.NamePrefix+`-[0-9]+"`, `namespace="llm-d",pod="`+sc.EPP.Pod+`"`
	jobs := []string{`job="vllm"`, `job="inference-extension-epp"`}
	down := "http://" + closedPort(t)
	stream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer stream.Close()
	kc := env.Kubeconfig()

	type want struct{ status, reason, detail string }
	cases := []struct {
		name   string
		config string
		at     time.Time
		code   int
		checks map[string]want
	}{
		{"a healthy llm-d-2026 setup passes", doctorConfig(t, healthy, kc, "pool-a", vllm, epp, ""), at, 0, map[string]want{
			"prometheus": {doctor.StatusPass, "", healthy}, "backend": {doctor.StatusPass, "", "prometheus"}, "epp-config": {doctor.StatusPass, "", "prefill-affinity"},
			"profile": {doctor.StatusPass, "", "router-2026-08"}, "vllm-series": {doctor.StatusPass, "", "2 pods"}, "pod-label": {doctor.StatusPass, "", ""},
			"epp-series": {doctor.StatusPass, "", ">=0.10"}, "in-flight-series": {doctor.StatusPass, "", ""}, "in-flight-producer": {doctor.StatusPass, "", "inflight-load-producer"},
			"series-empty": {doctor.StatusPass, "", ""}, "endpoint-join": {doctor.StatusPass, "", "pod-rank"}, "epp-replicas": {doctor.StatusPass, "", ""},
			"estimate": {doctor.StatusPass, "", "drain rate"}, "monitors": {doctor.StatusPass, "", "1 PodMonitor(s) and 1 ServiceMonitor(s)"},
			"pd-roles": {doctor.StatusPass, "", "not disaggregated (no pool of both prefill-only and decode-only pods) in pool-a; roles decode: vllm-decode-0"}}},
		{"a P/D pool (prefill-only and decode-only pods, a disagg-profile-handler) without pdGateProfile warns naming its pods and the profile to set",
			doctorConfig(t, healthy, kc, "pool-pd", vllm, epp, ""), at, 0, map[string]want{
				"pd-roles": {doctor.StatusWarn, "pd-gate-profile-unset", "a P/D pool (roles decode: vllm-decode-0; prefill: vllm-prefill-0, vllm-prefill-1; the EPP config's disagg-profile-handler); the filter is in the prefill profile"}}},
		{"a P/D pool whose pdGateProfile names the filter's profile passes",
			doctorConfig(t, healthy, kc, "pool-pd", vllm, epp, "  pdGateProfile: prefill\n"), at, 0, map[string]want{
				"pd-roles": {doctor.StatusPass, "", "pdGateProfile says so"}}},
		{"a P/D pool whose pdGateProfile contradicts the EPP config fails",
			doctorConfig(t, healthy, kc, "pool-pd", vllm, epp, "  pdGateProfile: decode\n"), at, 1, map[string]want{
				"pd-roles": {doctor.StatusFail, "pd-gate-profile-mismatch", "the target's pdGateProfile is decode but the EPP config puts the filter in the prefill profile"}}},
		{"a P/D pool's metrics with a vLLM selector missing the prefill pods fail the estimate naming them",
			doctorConfig(t, pd, kc, "pool-pd", vllm, epp, "  pdGateProfile: prefill\n"), atPD, 1, map[string]want{
				"estimate": {doctor.StatusFail, "pd-prefill-pods-unselected", sc.PrefillNamePrefix() + "-0-rank-0"},
				"pd-roles": {doctor.StatusPass, "", "the EPP disaggregated"}}},
		{"a P/D pool's metrics without pdGateProfile fail the estimate when the metrics cannot tell the profile",
			doctorConfig(t, pd, kc, "pool-pd", pdSel, epp, ""), atPD, 1, map[string]want{
				"estimate": {doctor.StatusFail, "pd-gate-profile-unknown", "set the target's pdGateProfile"},
				"pd-roles": {doctor.StatusWarn, "pd-gate-profile-unset", "sets no pdGateProfile"}}},
		{"the daemon's ServiceAccount holding the rendered RBAC passes",
			doctorConfig(t, healthy, kc, "pool-a", vllm, epp, ""), at, 0, map[string]want{
				"rbac": {doctor.StatusPass, "", "ServiceAccount gatetuner/gatetuner may do all 7 things the daemon does"}}},
		{"data parallelism across ports is inferred and joins (two rank endpoints per pod, only port 8000 scraped)",
			doctorConfig(t, dpRanks, kc, "pool-a", vllm, epp, ""), atDP, 0, map[string]want{
				"endpoint-join": {doctor.StatusPass, "", "2 in-flight endpoints joined to 1 pods (naming pod-rank, up to 2 ranks per pod)"},
				"vllm-series":   {doctor.StatusPass, "", "1 pods"}, "estimate": {doctor.StatusPass, "", "drain rate"}}},
		{"selectors of llm-d-router's example Prometheus (job=...) on an operator-scraped cluster fail naming where the series are",
			doctorConfig(t, healthy, kc, "pool-a", jobs[0], jobs[1], ""), at, 1, map[string]want{
				"vllm-series": {doctor.StatusFail, "no-series", `vLLM series exist as {instance=`}}},
		{"an EPP selector that matches nothing fails with selector-matches-nothing",
			doctorConfig(t, healthy, kc, "pool-a", vllm, `pod="no-such-epp"`, ""), at, 1, map[string]want{
				"epp-series": {doctor.StatusFail, "selector-matches-nothing", sc.EPP.Pod}, "vllm-series": {doctor.StatusPass, "", ""}}},
		{"a raw kubernetes_sd scrape fails with pod-label-missing", doctorConfig(t, rawSD, kc, "pool-a", jobs[0], jobs[1], ""), atSD, 1, map[string]want{
			"pod-label": {doctor.StatusFail, "pod-label-missing", ""}}},
		{"two in-flight producers and no inFlightLoadProducerName fail with in-flight-producer-ambiguous",
			doctorConfig(t, twoProducers, kc, "pool-a", vllm, epp, ""), atTwo, 1, map[string]want{
				"in-flight-producer": {doctor.StatusFail, "in-flight-producer-ambiguous", "shadow-producer"}}},
		{"a profile that does not match the image tag fails naming both", doctorConfig(t, healthy, kc, "pool-a", vllm, epp, "  profile: penalty-mode\n"), at, 1, map[string]want{
			"profile": {doctor.StatusFail, "profile-mismatch", "the build of profile router-2026-08, but the target's profile is penalty-mode"}}},
		{"a PodMonitor with port \"8000\" warns that it matches no port name", doctorConfig(t, healthy, kc, "pool-port", vllm, epp, ""), at, 0, map[string]want{
			"monitors": {doctor.StatusWarn, "monitor-port-number", `PodMonitor pool-port/vllm-decode podMetricsEndpoints[0].port "8000" is no port name`}}},
		{"a ServiceMonitor with port \"9090\" warns that it matches no Service port name", doctorConfig(t, healthy, kc, "pool-port", vllm, epp, ""), at, 0, map[string]want{
			"monitors": {doctor.StatusWarn, "monitor-port-number", `ServiceMonitor pool-port/epp endpoints[0].port "9090" is no port name`}}},
		{"a PodMonitor port no selected pod names warns with their port names", doctorConfig(t, healthy, kc, "pool-named", vllm, epp, ""), at, 0, map[string]want{
			"monitors": {doctor.StatusWarn, "monitor-port-unmatched", `PodMonitor pool-named/vllm-decode podMetricsEndpoints[0].port "metrics": none of the 1 pods it selects has a port named "metrics" (their port names: http)`}}},
		{"a ServiceMonitor port no selected Service names warns with their port names", doctorConfig(t, healthy, kc, "pool-named", vllm, epp, ""), at, 0, map[string]want{
			"monitors": {doctor.StatusWarn, "monitor-port-unmatched", `ServiceMonitor pool-named/epp endpoints[0].port "http-metrics": none of the 1 services it selects has a port named "http-metrics" (their port names: metrics)`}}},
		{"syncedEPPReplicas with one replica reporting warns", doctorConfig(t, healthy, kc, "pool-a", vllm, epp, "  syncedEPPReplicas: true\n"), at, 0, map[string]want{
			"epp-replicas": {doctor.StatusWarn, "replicas-synced-single", "1 EPP replica"}}},
		{"a target without maxNumBatchedTokens warns naming the setting", withoutLine(t, doctorConfig(t, healthy, kc, "pool-a", vllm, epp, ""), "  maxNumBatchedTokens: 2048\n"), at, 0, map[string]want{
			"estimate": {doctor.StatusWarn, "max-num-batched-tokens-unknown", "drain rate"}}},
		{"a records stream that answers passes",
			doctorConfig(t, healthy, kc, "pool-a", vllm, epp, "  decisionSource: records\n  records: {url: '"+stream.URL+"/records'}\n"), at, 0, map[string]want{
				"records": {doctor.StatusPass, "", stream.URL + "/records answers 200"}}},
		{"with decisionSource records an in-flight failure only warns (the Prometheus model does not run)",
			doctorConfig(t, twoProducers, kc, "pool-a", vllm, epp, "  decisionSource: records\n  records: {url: '"+stream.URL+"/records'}\n"), atTwo, 0, map[string]want{
				"in-flight-producer": {doctor.StatusWarn, "in-flight-producer-ambiguous", "decisionSource is records"}}},
		{"an unreachable records stream fails naming its URL",
			doctorConfig(t, healthy, kc, "pool-a", vllm, epp, "  decisionSource: records\n  records: {url: '"+down+"/records'}\n"), at, 1, map[string]want{
				"records": {doctor.StatusFail, "", down + "/records"}}},
		{"an unreachable Prometheus fails naming its URL", doctorConfig(t, down, kc, "pool-a", vllm, epp, ""), at, 1, map[string]want{
			"prometheus": {doctor.StatusFail, "prometheus-unavailable", down}, "series": {doctor.StatusSkip, "", ""}, "epp-config": {doctor.StatusPass, "", ""}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := gt(t, "", "doctor", "--config", tc.config, "--at", tc.at.UTC().Format(time.RFC3339), "-o", "json")
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %q\n%s", code, tc.code, errs, out)
			}
			var rep doctor.Report
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("JSON: %v\n%s", err, out)
			}
			got := map[string][]doctor.Result{}
			for _, c := range append(append([]doctor.Result(nil), rep.Checks...), rep.Targets[0].Checks...) {
				got[c.Name] = append(got[c.Name], c)
				if (c.Status == doctor.StatusFail || c.Status == doctor.StatusWarn) && c.Fix == "" {
					t.Errorf("check %s %s without a fix", c.Name, c.Status)
				}
			}
			for name, w := range tc.checks {
				found := false
				for _, c := range got[name] {
					found = found || c.Status == w.status && c.Reason == w.reason && strings.Contains(c.Detail, w.detail)
				}
				if !found {
					t.Errorf("checks %s = %+v, want one with status %s, reason %q, detail holding %q", name, got[name], w.status, w.reason, w.detail)
				}
			}
			if tc.code == 1 && !strings.Contains(errs, "check(s) failed") {
				t.Errorf("stderr %q does not name the failed checks", errs)
			}
			if t.Failed() {
				t.Logf("report:\n%s", out)
			}
		})
	}
	t.Run("a ServiceAccount without the RBAC fails the rbac check naming what it may not do", func(t *testing.T) {
		code, out, _ := gt(t, "", "doctor", "--config", doctorConfig(t, healthy, kc, "pool-a", vllm, epp, ""), "--at", at.UTC().Format(time.RFC3339),
			"--service-account", "elsewhere/nobody", "-o", "json")
		var rep doctor.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 1 {
			t.Fatalf("exit %d, %v\n%s", code, err, out)
		}
		c := findCheck(rep.Checks, "rbac")
		if c == nil || c.Status != doctor.StatusFail || c.Reason != "rbac-denied" ||
			!strings.Contains(c.Detail, "ServiceAccount elsewhere/nobody may not: get configmaps epp-config in pool-a (read and write the EPP config)") ||
			!strings.Contains(c.Detail, "create events.events.k8s.io in pool-a") {
			t.Fatalf("rbac check %+v", c)
		}
	})
	t.Run("monitors in another namespace are read when their namespaceSelector selects the target's", func(t *testing.T) {
		ctx := context.Background()
		if err := env.CreateNamespace(ctx, "monitoring"); err != nil {
			t.Fatal(err)
		}
		remote := `apiVersion: monitoring.coreos.com/v1
kind: PodMonitor
metadata: {name: vllm-remote, namespace: monitoring}
spec:
  namespaceSelector: {matchNames: [pool-a]}
  selector: {matchLabels: {llm-d.ai/role: decode}}
  podMetricsEndpoints:
  - port: "8000"
---
apiVersion: monitoring.coreos.com/v1
kind: PodMonitor
metadata: {name: vllm-any, namespace: monitoring}
spec:
  namespaceSelector: {any: true}
  selector: {matchLabels: {llm-d.ai/role: prefill}}
  podMetricsEndpoints:
  - port: prefill-metrics
`
		if err := env.ApplyManifests(ctx, []byte(remote)); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct{ ns, reason, detail string }{
			{"pool-a", "monitor-port-number", `PodMonitor monitoring/vllm-remote podMetricsEndpoints[0].port "8000" is no port name`},
			{"pool-pd", "monitor-port-unmatched", `PodMonitor monitoring/vllm-any podMetricsEndpoints[0].port "prefill-metrics": none of the 2 pods it selects has a port named "prefill-metrics" (their port names: metrics)`},
		} {
			_, out, _ := gt(t, "", "doctor", "--config", doctorConfig(t, healthy, kc, tc.ns, vllm, epp, ""), "--at", at.UTC().Format(time.RFC3339), "-o", "json")
			var rep doctor.Report
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatal(err)
			}
			found := false
			for _, c := range rep.Targets[0].Checks {
				found = found || c.Name == "monitors" && c.Status == doctor.StatusWarn && c.Reason == tc.reason && strings.Contains(c.Detail, tc.detail)
			}
			if !found {
				t.Errorf("%s: no monitors warning %s %q in\n%s", tc.ns, tc.reason, tc.detail, out)
			}
		}
	})
	t.Run("the text output is a table with the fix under a failed check", func(t *testing.T) {
		mismatch := doctorConfig(t, healthy, kc, "pool-a", vllm, epp, "  profile: penalty-mode\n")
		code, out, _ := gt(t, "", "doctor", "--config", mismatch, "--at", at.UTC().Format(time.RFC3339))
		if code != 1 || !strings.Contains(out, "  PASS  vllm-series") || !strings.Contains(out, "  FAIL  profile") ||
			!strings.Contains(out, "fix: set profile: router-2026-08") || !strings.Contains(out, "result: fail") {
			t.Fatalf("exit %d, text:\n%s", code, out)
		}
		t.Logf("doctor's text output:\n%s", out)
	})
}
