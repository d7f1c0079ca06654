package doctor

import (
	"context"
	"errors"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/eppconfig"
)

// TestDoctorDocListsEveryCheck: docs/doctor.md has a table row for every
// check doctor runs, and none for a check it does not.
func TestDoctorDocListsEveryCheck(t *testing.T) {
	doc, err := os.ReadFile("../../docs/doctor.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := regexp.MustCompile("(?m)^\\| `([a-z-]+)` \\|").FindAllStringSubmatch(string(doc), -1)
	var documented []string
	for _, m := range rows {
		documented = append(documented, m[1])
	}
	for _, name := range CheckNames() {
		if !slices.Contains(documented, name) {
			t.Errorf("docs/doctor.md has no row for check %s", name)
		}
	}
	for _, name := range documented {
		if !slices.Contains(CheckNames(), name) {
			t.Errorf("docs/doctor.md documents %s, which is no check", name)
		}
	}
}

// TestPDRolesAreTheEstimatorsProfiles: the roles eppconfig reports for the
// filter's profile are the values pdGateProfile takes, which pd-roles
// compares them with.
func TestPDRolesAreTheEstimatorsProfiles(t *testing.T) {
	if eppconfig.RolePrefill != estimator.PDGatePrefill || eppconfig.RoleDecode != estimator.PDGateDecode {
		t.Errorf("eppconfig roles %q, %q; estimator pdGateProfile values %q, %q",
			eppconfig.RolePrefill, eppconfig.RoleDecode, estimator.PDGatePrefill, estimator.PDGateDecode)
	}
}

// TestChecksWithoutEvidenceSayWhy: a check whose evidence is missing
// (Prometheus down, no estimate, no API server, no namespace) skips or
// warns naming what is missing, and a check that fails or warns names a fix.
func TestChecksWithoutEvidenceSayWhy(t *testing.T) {
	noKube := errors.New("no kubeconfig")
	prof, err := gate.LookupProfile("")
	if err != nil {
		t.Fatal(err)
	}
	ns := config.Target{Name: "pool", Namespace: "llm-d", Deployment: "epp"}
	bare := config.Target{Name: "pool", Selector: config.Selector{VLLM: `pod=~"vllm-.*"`}}
	cases := []struct {
		name  string
		check func(context.Context, *env) []Result
		env   env
		want  Result // name, status, reason; detail: a substring
		// fixless: the finding names no fix (the series check's estimate
		// error does not; adding one changes doctor's output).
		fixless bool
	}{
		{"series skip when Prometheus cannot be queried", seriesChecks, env{promErr: errors.New("connection refused")},
			Result{Name: checkSeries, Status: StatusSkip, Detail: "Prometheus cannot be queried"}, false},
		{"series fail when the estimate errs", seriesChecks, env{estErr: errors.New("bad selector")},
			Result{Name: checkSeries, Status: StatusFail, Detail: "estimate: bad selector"}, true},
		{"profile warns without API server access", asMany(profileCheck), env{target: ns, tuned: &tuner.Target{Profile: prof}, kubeErr: noKube},
			Result{Name: checkProfile, Status: StatusWarn, Reason: "not-checked", Detail: "no API server access: no kubeconfig"}, false},
		{"profile warns when the target names no Deployment", asMany(profileCheck), env{target: bare, tuned: &tuner.Target{Profile: prof}, kubeErr: noKube},
			Result{Name: checkProfile, Status: StatusWarn, Reason: "not-checked", Detail: "the target names no EPP Deployment"}, false},
		{"monitors warn when no namespace is known", monitorChecks, env{target: bare, kubeErr: noKube},
			Result{Name: checkMonitors, Status: StatusWarn, Reason: "not-checked", Detail: "no namespace known"}, false},
		{"monitors warn without API server access", monitorChecks, env{target: ns, kubeErr: noKube},
			Result{Name: checkMonitors, Status: StatusWarn, Reason: "not-checked", Detail: "no API server access"}, false},
		{"pd-roles warns without API server access and no other evidence", asMany(pdRolesCheck), env{target: ns, kubeErr: noKube, eppErr: noKube},
			Result{Name: checkPDRoles, Status: StatusWarn, Reason: "not-checked", Detail: "no API server access"}, false},
		{"rbac warns without API server access", asMany(rbacCheck), env{serviceAccount: "gatetuner/gatetuner", kubeErr: noKube},
			Result{Name: checkRBAC, Status: StatusWarn, Reason: "not-checked", Detail: "no API server access"}, false},
		{"epp-config fails naming why the config cannot be read", asMany(eppConfigCheck), env{eppErr: errors.New("epp.yaml: no plugin \"gate\"")},
			Result{Name: checkEPPConfig, Status: StatusFail, Detail: `no plugin "gate"`}, false},
		{"records fails naming an unreadable file", recordsCheck, env{target: config.Target{Records: config.Records{File: "/no/such/records.jsonl"}}},
			Result{Name: checkRecords, Status: StatusFail, Detail: "/no/such/records.jsonl"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.check(context.Background(), &tc.env)
			if len(got) != 1 {
				t.Fatalf("%d results %+v, want one", len(got), got)
			}
			g := got[0]
			if g.Name != tc.want.Name || g.Status != tc.want.Status || g.Reason != tc.want.Reason || !strings.Contains(g.Detail, tc.want.Detail) {
				t.Errorf("got %+v, want %s %s %q with detail holding %q", g, tc.want.Name, tc.want.Status, tc.want.Reason, tc.want.Detail)
			}
			if (g.Status == StatusFail || g.Status == StatusWarn) && g.Fix == "" && !tc.fixless {
				t.Errorf("%s %s without a fix", g.Name, g.Status)
			}
		})
	}
	if got := recordsCheck(context.Background(), &env{}); len(got) != 0 {
		t.Errorf("a target without records: %+v, want no records check", got)
	}
}

func asMany(fn func(context.Context, *env) Result) func(context.Context, *env) []Result {
	return func(ctx context.Context, e *env) []Result { return []Result{fn(ctx, e)} }
}

// TestPDGateCheckComparesTheSettingWithTheConfig: pd-roles on a P/D pool
// passes only when pdGateProfile names the profile the EPP config puts
// the filter in, and warns or fails naming the mismatch otherwise.
func TestPDGateCheckComparesTheSettingWithTheConfig(t *testing.T) {
	handler := func(gateRole string, profiles ...string) *eppconfig.PD {
		return &eppconfig.PD{Handler: "disagg-profile-handler", Prefill: "prefill", Decode: "decode", Gate: gateRole, Profiles: profiles}
	}
	cases := []struct {
		name, setting string
		pc            *eppconfig.PD
		status        string
		reason        string
	}{
		{"no handler", "", nil, StatusWarn, "pd-profile-handler-missing"},
		{"a config without a handler", "", &eppconfig.PD{Prefill: "prefill", Decode: "decode"}, StatusWarn, "pd-profile-handler-missing"},
		{"the filter in both profiles", "prefill", handler(eppconfig.RoleBoth, "prefill", "decode"), StatusWarn, "pd-gate-in-both-profiles"},
		{"the filter in neither profile", "prefill", handler("", "other"), StatusWarn, "pd-gate-profile-unknown"},
		{"the filter in the decode profile", "decode", handler(eppconfig.RoleDecode, "decode"), StatusWarn, string(estimator.ReasonPDGateOnDecodeProfile)},
		{"pdGateProfile unset", "", handler(eppconfig.RolePrefill, "prefill"), StatusWarn, "pd-gate-profile-unset"},
		{"pdGateProfile contradicts the config", "decode", handler(eppconfig.RolePrefill, "prefill"), StatusFail, string(estimator.ReasonPDGateProfileMismatch)},
		{"pdGateProfile names the filter's profile", "prefill", handler(eppconfig.RolePrefill, "prefill"), StatusPass, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := pdGateCheck(config.Target{PDGateProfile: tc.setting}, tc.pc, "a P/D pool (roles …)")
			if c.Name != checkPDRoles || c.Status != tc.status || c.Reason != tc.reason || !strings.HasPrefix(c.Detail, "a P/D pool (roles …)") {
				t.Errorf("got %+v, want status %s reason %q", c, tc.status, tc.reason)
			}
			if c.Status != StatusPass && c.Fix == "" {
				t.Errorf("no fix")
			}
		})
	}
}

// TestEstimateCheckNamesWhatTheEstimateConcludes: a query failure or a
// P/D setup reason fails the estimate check, reasons no other check covers
// warn with their fixes, covered ones are left to their checks.
func TestEstimateCheckNamesWhatTheEstimateConcludes(t *testing.T) {
	rate := 15000.0
	ok := estimator.RateEstimate{Status: estimator.StatusOK, Value: &rate, Confidence: 0.9}
	cases := []struct {
		name       string
		est        estimator.Estimates
		status     string
		reason     string
		detail     string
		fixHolding string
	}{
		{"a measured drain rate passes", estimator.Estimates{Status: estimator.StatusOK, DrainRate: ok}, StatusPass, "", "drain rate 15000 tok/s (confidence 0.90)", ""},
		{"a query failure fails", estimator.Estimates{Status: estimator.StatusInconclusive,
			Reasons: []estimator.Reason{{Code: estimator.ReasonPrometheusTimeout, Part: "drainRate", Detail: "query timed out"}}},
			StatusFail, string(estimator.ReasonPrometheusTimeout), "query timed out", "Prometheus failed a query"},
		{"a P/D setup reason fails with its fix", estimator.Estimates{Status: estimator.StatusInconclusive,
			Reasons: []estimator.Reason{{Code: estimator.ReasonPDPrefillPodsUnselected, Part: "drainRate", Detail: "prefill pods unselected"}}},
			StatusFail, string(estimator.ReasonPDPrefillPodsUnselected), "prefill pods unselected", "widen selector.vllm"},
		{"an uncovered reason warns with its fix", estimator.Estimates{Status: estimator.StatusOK, DrainRate: ok,
			Reasons: []estimator.Reason{{Code: estimator.ReasonMaxNumBatchedTokensUnknown, Part: "stepRate", Detail: "unset"}}},
			StatusWarn, string(estimator.ReasonMaxNumBatchedTokensUnknown), "drain rate 15000 tok/s (confidence 0.90); max-num-batched-tokens-unknown (stepRate): unset", "set maxNumBatchedTokens"},
		{"a reason without a fix points at the enum", estimator.Estimates{Status: estimator.StatusOK, DrainRate: ok,
			Reasons: []estimator.Reason{{Code: estimator.ReasonCounterReset, Part: "drainRate"}}},
			StatusWarn, string(estimator.ReasonCounterReset), "counter-reset", "see the reason enum"},
		{"covered reasons are left to their checks", estimator.Estimates{Status: estimator.StatusInconclusive,
			Reasons: []estimator.Reason{{Code: estimator.ReasonNoSeries, Part: "drainRate"}, {Code: estimator.ReasonSelectorMatchesNothing, Part: "inFlight"}}},
			StatusSkip, "", "inconclusive for the reasons failed above", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := estimateCheck(&tc.est)
			if c.Name != checkEstimate || c.Status != tc.status || c.Reason != tc.reason || !strings.Contains(c.Detail, tc.detail) || !strings.Contains(c.Fix, tc.fixHolding) {
				t.Errorf("got %+v, want status %s reason %q detail holding %q fix holding %q", c, tc.status, tc.reason, tc.detail, tc.fixHolding)
			}
		})
	}
}

// TestReplicasAndModelOnly: several unsynced replicas, or synced ones with
// one reporting, warn; with decisionSource records an in-flight failure
// only warns.
func TestReplicasAndModelOnly(t *testing.T) {
	two := &estimator.Estimates{Shape: estimator.Shape{Replicas: []string{"epp-0", "epp-1"}}}
	one := &estimator.Estimates{Shape: estimator.Shape{Replicas: []string{"epp-0"}}}
	for _, tc := range []struct {
		name   string
		synced bool
		est    *estimator.Estimates
		status string
		reason string
	}{
		{"two unsynced replicas", false, two, StatusWarn, "replicas-unsynced"},
		{"two synced replicas", true, two, StatusPass, ""},
		{"one replica said synced", true, one, StatusWarn, "replicas-synced-single"},
		{"one replica", false, one, StatusPass, ""},
	} {
		if c := replicasCheck(config.Target{SyncedEPPReplicas: tc.synced}, tc.est); c.Status != tc.status || c.Reason != tc.reason {
			t.Errorf("%s: %+v, want %s %q", tc.name, c, tc.status, tc.reason)
		}
	}
	cs := []Result{{Name: checkProducer, Status: StatusFail, Detail: "ambiguous"}, {Name: checkSeriesEmpty, Status: StatusPass, Detail: "ok"}}
	modelOnly(cs)
	if cs[0].Status != StatusWarn || !strings.HasPrefix(cs[0].Detail, "decisionSource is records") || cs[1].Status != StatusPass || cs[1].Detail != "ok" {
		t.Errorf("modelOnly: %+v", cs)
	}
}

// TestMonitorSelectsByNamespaceSelector: prometheus-operator's rule — any
// selects every namespace, matchNames those named, else the monitor's own.
func TestMonitorSelectsByNamespaceSelector(t *testing.T) {
	mon := func(ns string, sel map[string]any) unstructured.Unstructured {
		m := unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{}}}
		m.SetNamespace(ns)
		if sel != nil {
			m.Object["spec"].(map[string]any)["namespaceSelector"] = sel
		}
		return m
	}
	for _, tc := range []struct {
		name string
		m    unstructured.Unstructured
		want bool
	}{
		{"own namespace", mon("llm-d", nil), true},
		{"another namespace", mon("monitoring", nil), false},
		{"any", mon("monitoring", map[string]any{"any": true}), true},
		{"matchNames naming it", mon("monitoring", map[string]any{"matchNames": []any{"other", "llm-d"}}), true},
		{"matchNames not naming it, in it", mon("llm-d", map[string]any{"matchNames": []any{"other"}}), false},
	} {
		if got := monitorSelects(tc.m, "llm-d"); got != tc.want {
			t.Errorf("%s: monitorSelects = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestRequiredAccessIsWhatTheDaemonDoes: a file target needs no
// permission; a ConfigMap target its ConfigMap, Deployment and events;
// leader election the Lease.
func TestRequiredAccessIsWhatTheDaemonDoes(t *testing.T) {
	files := &config.Config{Targets: []config.Target{{Name: "f", File: "/etc/epp.yaml"}}}
	if got := requiredAccess(files, false); len(got) != 0 {
		t.Errorf("file targets: %v, want nothing", got)
	}
	cm := &config.Config{Targets: []config.Target{{Name: "p", Namespace: "llm-d", ConfigMap: "epp-config", Deployment: "epp"}},
		LeaderElection: config.LeaderElection{Namespace: "gatetuner", Name: "gatetuner"}}
	var got []string
	for _, a := range requiredAccess(cm, true) {
		got = append(got, a.String())
	}
	want := []string{"get configmaps epp-config in llm-d", "update configmaps epp-config in llm-d", "patch configmaps epp-config in llm-d",
		"get deployments.apps epp in llm-d", "patch deployments.apps epp in llm-d",
		"create events.events.k8s.io in llm-d", "patch events.events.k8s.io in llm-d",
		"get leases.coordination.k8s.io gatetuner in gatetuner", "update leases.coordination.k8s.io gatetuner in gatetuner",
		"create leases.coordination.k8s.io in gatetuner"}
	if !slices.Equal(got, want) {
		t.Errorf("requiredAccess:\n got %q\nwant %q", got, want)
	}
}

// TestDefaultServiceAccountIsTheRenderedOne: gatetuner in the leader
// election's namespace, else in gatetuner (deploy/, sink.RenderRBAC).
func TestDefaultServiceAccountIsTheRenderedOne(t *testing.T) {
	for _, tc := range []struct{ ns, want string }{{"", "gatetuner/gatetuner"}, {"llm-d", "llm-d/gatetuner"}} {
		if got := DefaultServiceAccount(&config.Config{LeaderElection: config.LeaderElection{Namespace: tc.ns}}); got != tc.want {
			t.Errorf("leader election namespace %q: %s, want %s", tc.ns, got, tc.want)
		}
	}
}
