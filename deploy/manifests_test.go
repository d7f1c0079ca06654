package deploy

import (
	"bytes"
	"encoding/json"
	"flag"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/gatetuner/gatetuner/deploy/internal/render"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/eppconfig"
	"github.com/gatetuner/gatetuner/tuner/sink"
)

var update = flag.Bool("update", false, "rewrite kustomize/base/rbac.yaml from tuner/sink.RenderRBAC")

// install is one rendered installation and what it was rendered for.
type install struct {
	name      string
	objs      []*unstructured.Unstructured
	namespace string // the daemon's
	fullname  string // name of the Deployment, Service, Roles …
	sa        string // ServiceAccount the pods run as
	saCreated bool
	monitored bool // ServiceMonitor and PrometheusRule rendered
	replicas  int32
	election  bool
	uid       *int64   // the pod's runAsUser (nil: the platform assigns it)
	extraArgs []string // after run --config …
	pdb       bool     // a PodDisruptionBudget rendered
	image     string   // the container image; "" for any registry path with a pinned tag or digest
}

func installs(t *testing.T) []install {
	t.Helper()
	uid := int64(65532)
	out := []install{
		// The base names no image, only the placeholder an overlay replaces.
		{name: "kustomize", objs: kustomizeObjects(t, kustomizeBase), namespace: "gatetuner", fullname: "gatetuner",
			sa: "gatetuner", saCreated: true, monitored: true, replicas: 2, election: true, uid: &uid, pdb: true,
			image: kustomizeImagePlaceholder},
		{name: "kustomize-overlay", objs: kustomizeObjects(t, kustomizeOverlay), namespace: "gatetuner", fullname: "gatetuner",
			sa: "gatetuner", saCreated: true, monitored: true, replicas: 2, election: true, uid: &uid, pdb: true,
			image: "registry.example.com/platform/gatetuner:v0.1.0"},
	}
	for _, c := range helmCases {
		in := install{name: "helm-" + c.name, objs: c.objects(t), namespace: c.namespace, fullname: "gatetuner",
			sa: "gatetuner", saCreated: true, monitored: true, replicas: 2, election: true, uid: &uid, pdb: true}
		switch c.name {
		case "multi":
			in.fullname, in.sa, in.replicas = "tuner-gatetuner", "tuner-gatetuner", 3
			in.extraArgs = []string{"--log-format", "json"}
		case "off":
			in.sa, in.saCreated, in.monitored, in.replicas, in.election, in.pdb = "platform-robot", false, false, 1, false, false
		case "openshift":
			in.uid = nil
		}
		out = append(out, in)
	}
	return out
}

// configOf returns the daemon's config text from the ConfigMap the Deployment mounts.
func configOf(t *testing.T, in install, dep *appsv1.Deployment) string {
	t.Helper()
	var cmName string
	for _, v := range dep.Spec.Template.Spec.Volumes {
		if v.Name == "config" && v.ConfigMap != nil {
			cmName = v.ConfigMap.Name
		}
	}
	cm := find(in.objs, "ConfigMap", in.namespace, cmName)
	if cm == nil {
		t.Fatalf("the Deployment mounts ConfigMap %q, which is not in the manifests", cmName)
	}
	text, ok, _ := unstructured.NestedString(cm.Object, "data", "config.yaml")
	if !ok {
		t.Fatalf("ConfigMap %s has no config.yaml key", cmName)
	}
	return text
}

func TestDeploymentRunsTheDaemonSafely(t *testing.T) {
	for _, in := range installs(t) {
		t.Run(in.name, func(t *testing.T) {
			dep := deploymentOf(t, in.objs)
			if dep.Namespace != in.namespace || dep.Name != in.fullname {
				t.Errorf("Deployment %s/%s, want %s/%s", dep.Namespace, dep.Name, in.namespace, in.fullname)
			}
			if dep.Spec.Replicas == nil || *dep.Spec.Replicas != in.replicas {
				t.Errorf("replicas %v, want %d", dep.Spec.Replicas, in.replicas)
			}
			pod := dep.Spec.Template.Spec
			if pod.ServiceAccountName != in.sa {
				t.Errorf("serviceAccountName %q, want %q", pod.ServiceAccountName, in.sa)
			}
			if sa := find(in.objs, "ServiceAccount", in.namespace, in.sa); (sa != nil) != in.saCreated {
				t.Errorf("ServiceAccount %s rendered: %v, want %v", in.sa, sa != nil, in.saCreated)
			}
			if psc := pod.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot ||
				!reflect.DeepEqual(psc.RunAsUser, in.uid) || !reflect.DeepEqual(psc.RunAsGroup, in.uid) ||
				psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("pod securityContext %+v: want runAsNonRoot, runAsUser and runAsGroup %v, seccomp RuntimeDefault", psc, in.uid)
			}
			checkPDB(t, in, dep)
			if !labels.SelectorFromSet(dep.Spec.Selector.MatchLabels).Matches(labels.Set(dep.Spec.Template.Labels)) {
				t.Errorf("selector %v does not select the pod labels %v", dep.Spec.Selector.MatchLabels, dep.Spec.Template.Labels)
			}
			if len(pod.Containers) != 1 {
				t.Fatalf("want one container, got %d", len(pod.Containers))
			}
			c := pod.Containers[0]
			if in.image != "" {
				if c.Image != in.image {
					t.Errorf("image %q, want %q", c.Image, in.image)
				}
			} else if at := strings.LastIndex(c.Image, "/"); at < 0 || strings.HasSuffix(c.Image, ":latest") ||
				!strings.Contains(c.Image, "@sha256:") && strings.LastIndex(c.Image, ":") < at {
				t.Errorf("image %q: want a registry path with a pinned tag or digest", c.Image)
			}
			if want := append([]string{"run", "--config", "/etc/gatetuner/config.yaml"}, in.extraArgs...); !slices.Equal(c.Args, want) {
				t.Errorf("args %q, want %q", c.Args, want)
			}
			sc := c.SecurityContext
			if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
				sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
				sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
				t.Errorf("container securityContext %+v: want read-only root, no privilege escalation, non-root, drop ALL", sc)
			}
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
				if _, ok := c.Resources.Requests[r]; !ok {
					t.Errorf("no %s request", r)
				}
				if _, ok := c.Resources.Limits[r]; !ok {
					t.Errorf("no %s limit", r)
				}
			}
			env := map[string]string{}
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
					env[e.Name] = e.ValueFrom.FieldRef.FieldPath
				}
			}
			if env["POD_NAME"] != "metadata.name" || env["POD_NAMESPACE"] != "metadata.namespace" {
				t.Errorf("env from the downward API %v: want POD_NAME=metadata.name, POD_NAMESPACE=metadata.namespace", env)
			}

			// The probes and the Service reach the port the config makes the daemon serve on.
			cfg := loadConfig(t, configOf(t, in, dep))
			_, portText, err := net.SplitHostPort(cfg.Server.Address)
			if err != nil {
				t.Fatalf("server.address %q: %v", cfg.Server.Address, err)
			}
			port, _ := strconv.Atoi(portText)
			var metricsPort int32
			for _, p := range c.Ports {
				if p.Name == "metrics" {
					metricsPort = p.ContainerPort
				}
			}
			if int(metricsPort) != port {
				t.Errorf("container port metrics %d, config server.address %q", metricsPort, cfg.Server.Address)
			}
			for _, probe := range []struct {
				name string
				p    *corev1.Probe
				path string
			}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}, {"startup", c.StartupProbe, "/healthz"}} {
				if probe.p == nil || probe.p.HTTPGet == nil {
					t.Errorf("%s probe: want an HTTP GET", probe.name)
					continue
				}
				if probe.p.HTTPGet.Path != probe.path || probe.p.HTTPGet.Port.String() != "metrics" {
					t.Errorf("%s probe GET %s on %s, want %s on metrics", probe.name, probe.p.HTTPGet.Path, probe.p.HTTPGet.Port.String(), probe.path)
				}
			}
			if cfg.LeaderElection.Enabled != in.election {
				t.Errorf("leaderElection.enabled %v, want %v", cfg.LeaderElection.Enabled, in.election)
			}
			if in.election && cfg.LeaderElection.Namespace != in.namespace {
				t.Errorf("leaderElection.namespace %q, want the daemon's namespace %q", cfg.LeaderElection.Namespace, in.namespace)
			}

			// The config is mounted read-only where the args point, and /tmp is the only writable path.
			mounts := map[string]corev1.VolumeMount{}
			for _, m := range c.VolumeMounts {
				mounts[m.MountPath] = m
			}
			if m, ok := mounts["/etc/gatetuner"]; !ok || m.Name != "config" || !m.ReadOnly {
				t.Errorf("config mount %+v: want volume config read-only at /etc/gatetuner", m)
			}
			for _, v := range pod.Volumes {
				if v.Name == "tmp" && (v.EmptyDir == nil || mounts["/tmp"].Name != "tmp") {
					t.Errorf("tmp volume %+v: want an emptyDir mounted at /tmp", v)
				}
			}
			// A file target's EPP config must exist in the pod: under a mounted volume.
			for _, tg := range cfg.Targets {
				if tg.File == "" {
					continue
				}
				var under string
				for p := range mounts {
					if strings.HasPrefix(tg.File, strings.TrimSuffix(p, "/")+"/") {
						under = p
					}
				}
				if under == "" || under == "/tmp" {
					t.Errorf("target %s: file %s is under no mounted volume (extraVolumes/extraVolumeMounts)", tg.Name, tg.File)
				}
			}

			checkService(t, in, dep)
		})
	}
}

// checkPDB: one PodDisruptionBudget selecting the Deployment's pods keeps
// one of the leader/standby pair up, where there are replicas to spare.
func checkPDB(t *testing.T, in install, dep *appsv1.Deployment) {
	t.Helper()
	pdbs := ofKind(in.objs, "PodDisruptionBudget")
	if !in.pdb {
		if len(pdbs) != 0 {
			t.Errorf("%d PodDisruptionBudgets with %d replica(s), want none", len(pdbs), in.replicas)
		}
		return
	}
	if len(pdbs) != 1 {
		t.Fatalf("%d PodDisruptionBudgets, want 1", len(pdbs))
	}
	pdb := convert[policyv1.PodDisruptionBudget](t, pdbs[0])
	if pdb.Namespace != in.namespace {
		t.Errorf("PodDisruptionBudget in %q, want %q", pdb.Namespace, in.namespace)
	}
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(dep.Spec.Template.Labels)) {
		t.Errorf("PodDisruptionBudget selector %v does not select the pods %v (%v)", pdb.Spec.Selector, dep.Spec.Template.Labels, err)
	}
	var kept int32
	switch {
	case pdb.Spec.MinAvailable != nil && pdb.Spec.MaxUnavailable == nil:
		kept = int32(pdb.Spec.MinAvailable.IntValue())
	case pdb.Spec.MaxUnavailable != nil && pdb.Spec.MinAvailable == nil:
		kept = in.replicas - int32(pdb.Spec.MaxUnavailable.IntValue())
	default:
		t.Fatalf("PodDisruptionBudget spec %+v: want exactly one of minAvailable, maxUnavailable", pdb.Spec)
	}
	if kept < 1 || kept >= in.replicas {
		t.Errorf("PodDisruptionBudget keeps %d of %d replicas: want at least 1 and one to drain", kept, in.replicas)
	}
}

func checkService(t *testing.T, in install, dep *appsv1.Deployment) {
	t.Helper()
	svc := convert[corev1.Service](t, one(t, in.objs, "Service"))
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(dep.Spec.Template.Labels)) {
		t.Errorf("Service selector %v does not select the pods %v", svc.Spec.Selector, dep.Spec.Template.Labels)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "metrics" || svc.Spec.Ports[0].TargetPort.String() != "metrics" {
		t.Errorf("Service ports %+v: want one port metrics → metrics", svc.Spec.Ports)
	}
	sms := ofKind(in.objs, "ServiceMonitor")
	if !in.monitored {
		if len(sms) != 0 || len(ofKind(in.objs, "PrometheusRule")) != 0 {
			t.Errorf("monitoring disabled but rendered %d ServiceMonitors and %d PrometheusRules", len(sms), len(ofKind(in.objs, "PrometheusRule")))
		}
		return
	}
	if len(sms) != 1 || len(ofKind(in.objs, "PrometheusRule")) != 1 {
		t.Fatalf("want one ServiceMonitor and one PrometheusRule, got %d and %d", len(sms), len(ofKind(in.objs, "PrometheusRule")))
	}
	sm := sms[0]
	sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	if !labels.SelectorFromSet(sel).Matches(labels.Set(svc.Labels)) {
		t.Errorf("ServiceMonitor selector %v does not select the Service labels %v", sel, svc.Labels)
	}
	// Pods of the Deployment must not be selected by another Service's metrics port: one Service.
	jobLabel, _, _ := unstructured.NestedString(sm.Object, "spec", "jobLabel")
	if svc.Labels[jobLabel] != "gatetuner" {
		t.Errorf("ServiceMonitor jobLabel %q gives job=%q; the alerts select job=\"gatetuner\"", jobLabel, svc.Labels[jobLabel])
	}
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(eps) != 1 || eps[0].(map[string]any)["port"] != "metrics" || eps[0].(map[string]any)["path"] != "/metrics" {
		t.Errorf("ServiceMonitor endpoints %v: want port metrics, path /metrics", eps)
	}
	if sm.GetNamespace() != in.namespace || svc.Namespace != in.namespace {
		t.Errorf("ServiceMonitor in %q and Service in %q, want both in %q", sm.GetNamespace(), svc.Namespace, in.namespace)
	}
}

// TestRBACIsExactlyThePushWork proves each installation's Roles grant what
// tuner/sink.RenderRBAC renders for its config's targets — per target
// namespace and for the Lease — plus Events in the daemon's namespace, and
// nothing cluster-wide.
func TestRBACIsExactlyThePushWork(t *testing.T) {
	for _, in := range installs(t) {
		t.Run(in.name, func(t *testing.T) {
			for _, k := range []string{"ClusterRole", "ClusterRoleBinding"} {
				if n := len(ofKind(in.objs, k)); n != 0 {
					t.Errorf("%d %s rendered: nothing may be cluster-wide", n, k)
				}
			}
			dep := deploymentOf(t, in.objs)
			cfg := loadConfig(t, configOf(t, in, dep))
			var targets []sink.Target
			for _, tg := range cfg.Targets {
				targets = append(targets, sink.Target{Namespace: tg.Namespace, ConfigMap: tg.ConfigMap, Deployment: tg.Deployment, File: tg.File})
			}
			want, err := sink.RenderRBAC(sink.RBACConfig{ServiceAccount: in.sa, ServiceAccountNamespace: in.namespace,
				LeaseName: cfg.LeaderElection.Name, LeaseNamespace: in.namespace, Targets: sink.RBACTargets(targets...)})
			if err != nil {
				t.Fatal(err)
			}
			wantObjs := decode(t, want)

			// Expected Roles by namespace/name in the installation's naming.
			type roleKey struct{ ns, name string }
			expected := map[roleKey][]string{}
			for _, r := range ofKind(wantObjs, "Role") {
				name := in.fullname
				if r.GetName() == sink.LeaderElectionRoleName {
					if !in.election {
						continue
					}
					name = in.fullname + "-leader-election"
				}
				expected[roleKey{r.GetNamespace(), name}] = normRules(convert[rbacv1.Role](t, r).Rules)
			}
			expected[roleKey{in.namespace, in.fullname + "-events"}] = normRules([]rbacv1.PolicyRule{
				{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}}})

			got := map[roleKey][]string{}
			for _, r := range ofKind(in.objs, "Role") {
				got[roleKey{r.GetNamespace(), r.GetName()}] = normRules(convert[rbacv1.Role](t, r).Rules)
			}
			if !reflect.DeepEqual(got, expected) {
				t.Errorf("Roles differ from tuner/sink.RenderRBAC for the config's targets:\n got: %v\nwant: %v", got, expected)
			}

			// Every Role is bound to the daemon's ServiceAccount, and nothing else is bound.
			bindings := ofKind(in.objs, "RoleBinding")
			if len(bindings) != len(expected) {
				t.Errorf("%d RoleBindings for %d Roles", len(bindings), len(expected))
			}
			for _, u := range bindings {
				b := convert[rbacv1.RoleBinding](t, u)
				if _, ok := expected[roleKey{b.Namespace, b.RoleRef.Name}]; !ok || b.RoleRef.Kind != "Role" {
					t.Errorf("RoleBinding %s/%s refers to %s %s, not one of the Roles", b.Namespace, b.Name, b.RoleRef.Kind, b.RoleRef.Name)
				}
				want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: in.sa, Namespace: in.namespace}}
				if !reflect.DeepEqual(b.Subjects, want) {
					t.Errorf("RoleBinding %s/%s subjects %+v, want %+v", b.Namespace, b.Name, b.Subjects, want)
				}
			}
		})
	}
}

// TestKustomizeRBACIsRenderRBACOutput keeps the base's rbac.yaml byte-equal to
// tuner/sink.RenderRBAC for the base config's targets.
func TestKustomizeRBACIsRenderRBACOutput(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(kustomizeBase, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := loadConfig(t, string(text))
	var targets []sink.Target
	for _, tg := range cfg.Targets {
		targets = append(targets, sink.Target{Namespace: tg.Namespace, ConfigMap: tg.ConfigMap, Deployment: tg.Deployment, File: tg.File})
	}
	got, err := sink.RenderRBAC(sink.RBACConfig{ServiceAccount: "gatetuner", ServiceAccountNamespace: cfg.LeaderElection.Namespace,
		LeaseName: cfg.LeaderElection.Name, Targets: sink.RBACTargets(targets...)})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(kustomizeBase, "rbac.yaml")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from tuner/sink.RenderRBAC for config.yaml's targets (regenerate: go test ./deploy -run TestKustomizeRBACIsRenderRBACOutput -update):\n%s",
			path, eppconfig.Diff(path, "RenderRBAC", want, got))
	}
}

// TestHelmMatchesKustomize: the chart rendered like the base (release and
// namespace gatetuner, the base's target) configures the daemon the same.
func TestHelmMatchesKustomize(t *testing.T) {
	kus := install{name: "kustomize", objs: kustomizeObjects(t, kustomizeBase), namespace: "gatetuner"}
	helm := install{name: "helm", objs: helmCases[0].objects(t), namespace: "gatetuner"}
	kcfg := loadConfig(t, configOf(t, kus, deploymentOf(t, kus.objs)))
	hcfg := loadConfig(t, configOf(t, helm, deploymentOf(t, helm.objs)))
	if !reflect.DeepEqual(kcfg.Targets, hcfg.Targets) || !reflect.DeepEqual(kcfg.LeaderElection, hcfg.LeaderElection) ||
		kcfg.Server != hcfg.Server || kcfg.Prometheus.URL != hcfg.Prometheus.URL || !reflect.DeepEqual(kcfg.Defaults, hcfg.Defaults) {
		t.Errorf("the daemon's config differs:\nkustomize %+v\n     helm %+v", kcfg, hcfg)
	}
	kdep, hdep := deploymentOf(t, kus.objs).Spec.Template.Spec, deploymentOf(t, helm.objs).Spec.Template.Spec
	kc, hc := kdep.Containers[0], hdep.Containers[0]
	for _, d := range []struct {
		what string
		a, b any
	}{
		{"pod securityContext", kdep.SecurityContext, hdep.SecurityContext},
		{"container securityContext", kc.SecurityContext, hc.SecurityContext},
		{"resources", kc.Resources, hc.Resources},
		{"probes", []any{kc.LivenessProbe, kc.ReadinessProbe, kc.StartupProbe}, []any{hc.LivenessProbe, hc.ReadinessProbe, hc.StartupProbe}},
		{"env", kc.Env, hc.Env},
		{"args", kc.Args, hc.Args},
		{"volume mounts", kc.VolumeMounts, hc.VolumeMounts},
		{"affinity", kdep.Affinity, hdep.Affinity},
	} {
		if !reflect.DeepEqual(d.a, d.b) {
			t.Errorf("%s differs:\nkustomize %+v\n     helm %+v", d.what, d.a, d.b)
		}
	}
	kspec, _, _ := unstructured.NestedMap(one(t, kus.objs, "PrometheusRule").Object, "spec")
	hspec, _, _ := unstructured.NestedMap(one(t, helm.objs, "PrometheusRule").Object, "spec")
	if !reflect.DeepEqual(kspec, hspec) {
		t.Errorf("PrometheusRule specs differ between kustomize and helm")
	}
}

// TestHelmRuleCopyIsTheBaseRules keeps the chart's rules file equal to the
// base's PrometheusRule spec, and proves the chart moves every selector to
// its release.
func TestHelmRuleCopyIsTheBaseRules(t *testing.T) {
	base := one(t, decodeFile(t, filepath.Join(kustomizeBase, "prometheusrule.yaml")), "PrometheusRule")
	want, _, _ := unstructured.NestedMap(base.Object, "spec")
	text, err := os.ReadFile(chartRuleSpec)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := yaml.Unmarshal(text, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s is not the spec of %s/prometheusrule.yaml: copy the spec over", chartRuleSpec, kustomizeBase)
	}
	baseSel := strings.Count(string(text), `job="gatetuner",namespace="gatetuner"`)
	if baseSel == 0 {
		t.Fatal(`the rules select no job="gatetuner",namespace="gatetuner" series`)
	}
	multi := helmCases[1]
	rule := one(t, multi.objects(t), "PrometheusRule")
	out, err := json.Marshal(rule.Object["spec"])
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	if n := strings.Count(s, `namespace=\"gatetuner\"`); n != 0 {
		t.Errorf("release in namespace %s: %d selectors still name namespace gatetuner", multi.namespace, n)
	}
	if n := strings.Count(s, `job=\"gatetuner\",namespace=\"platform\"`); n != baseSel {
		t.Errorf("release in namespace platform: %d selectors moved, want %d", n, baseSel)
	}
}

func decodeFile(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, b)
}

// TestHelmValuesReachTheObjects checks the options of multi-values.yaml land
// where they should.
func TestHelmValuesReachTheObjects(t *testing.T) {
	c := helmCases[1]
	objs := c.objects(t)
	dep := deploymentOf(t, objs)
	pod := dep.Spec.Template.Spec
	ctr := pod.Containers[0]
	checks := []struct {
		what string
		ok   bool
	}{
		{"image by digest", ctr.Image == "registry.example.com/platform/gatetuner@sha256:0000000000000000000000000000000000000000000000000000000000000000"},
		{"imagePullSecrets", len(pod.ImagePullSecrets) == 1 && pod.ImagePullSecrets[0].Name == "registry-credentials"},
		{"pod label", dep.Spec.Template.Labels["team"] == "platform"},
		{"pod annotation", dep.Spec.Template.Annotations["example.com/scrape"] == "false"},
		{"config checksum annotation", len(dep.Spec.Template.Annotations["checksum/config"]) == 64},
		{"nodeSelector", pod.NodeSelector["kubernetes.io/os"] == "linux"},
		{"tolerations", len(pod.Tolerations) == 1 && pod.Tolerations[0].Key == "dedicated"},
		{"priorityClassName", pod.PriorityClassName == "platform-high"},
		{"memory limit", ctr.Resources.Limits.Memory().String() == "1Gi"},
		{"metrics port", ctr.Ports[0].ContainerPort == 9200},
		{"ServiceAccount annotation", find(objs, "ServiceAccount", "platform", "tuner-gatetuner").GetAnnotations()["example.com/owner"] == "platform"},
		{"ServiceMonitor label", one(t, objs, "ServiceMonitor").GetLabels()["release"] == "kube-prometheus-stack"},
		{"PrometheusRule label", one(t, objs, "PrometheusRule").GetLabels()["release"] == "kube-prometheus-stack"},
		{"dashboard namespace", find(objs, "ConfigMap", "monitoring", "tuner-gatetuner-dashboard") != nil},
		{"extraEnv", slices.ContainsFunc(ctr.Env, func(e corev1.EnvVar) bool { return e.Name == "OTEL_EXPORTER_OTLP_ENDPOINT" })},
		{"extraVolumes and extraVolumeMounts", slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.ConfigMap != nil && v.ConfigMap.Name == "lab-epp" }) &&
			slices.ContainsFunc(ctr.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "lab-epp" && m.MountPath == "/etc/epp" })},
		{"tmpSizeLimit", slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool {
			return v.Name == "tmp" && v.EmptyDir != nil && v.EmptyDir.SizeLimit != nil && v.EmptyDir.SizeLimit.String() == "1Gi"
		})},
		{"NetworkPolicy from the monitoring namespace to the metrics port", networkPolicyAdmitsMetrics(t, find(objs, "NetworkPolicy", "platform", "tuner-gatetuner"), "monitoring")},
	}
	for _, ch := range checks {
		if !ch.ok {
			t.Errorf("multi-values.yaml: %s not rendered", ch.what)
		}
	}
	cfg := loadConfig(t, configOf(t, install{objs: objs, namespace: "platform"}, dep))
	if cfg.LeaderElection.Name != "gatetuner-platform" || cfg.Prometheus.Headers["x-scope-orgid"] == "" && cfg.Prometheus.Headers["X-Scope-OrgID"] == "" ||
		len(cfg.Profiles) != 1 || cfg.Targets[0].MaxNumBatchedTokens != 1048576 || cfg.Defaults.ApplyWindow == nil {
		t.Errorf("config from multi-values.yaml lost settings: %+v", cfg)
	}
}

// TestHelmRefusesUnsafeValues: the chart fails rendering, saying why, on
// values that would deploy a daemon that cannot work or would double-write.
func TestHelmRefusesUnsafeValues(t *testing.T) {
	target := map[string]any{"name": "a", "namespace": "llm-d", "configMap": "a-epp"}
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"no targets", map[string]any{}, "targets: list at least one target"},
		{"targets under config", map[string]any{"targets": []any{target}, "config": map[string]any{"targets": []any{target}}}, "config.targets"},
		{"replicas without election", map[string]any{"targets": []any{target}, "leaderElection": map[string]any{"enabled": false}}, "replicas > 1 needs leaderElection.enabled"},
		{"configMap target without namespace", map[string]any{"targets": []any{map[string]any{"name": "a", "configMap": "a-epp"}}}, "needs its namespace"},
		{"no image repository", map[string]any{"targets": []any{target}, "image": map[string]any{"repository": ""}}, "image.repository: set the image you built"},
		{"PDB that blocks drains", map[string]any{"targets": []any{target}, "replicas": 1, "leaderElection": map[string]any{"enabled": false}}, "podDisruptionBudget.minAvailable 1 with replicas 1 would block every node drain"},
		{"PDB with both bounds", map[string]any{"targets": []any{target}, "podDisruptionBudget": map[string]any{"maxUnavailable": 1}}, "set minAvailable or maxUnavailable, not both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, ok := tc.values["image"]; !ok {
				tc.values["image"] = map[string]any{"repository": "registry.example.com/platform/gatetuner"}
			}
			_, err := render.Helm(chartDir, render.HelmRelease{Name: "gatetuner", Namespace: "gatetuner", Values: tc.values})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// TestShippedConfigsAreValid loads every shipped daemon config with the
// daemon's loader and checks the base config is the one the kustomize
// ConfigMap carries.
func TestShippedConfigsAreValid(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(kustomizeBase, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := loadConfig(t, string(text))
	if len(cfg.Targets) == 0 || cfg.Targets[0].Mode != config.ModeOff {
		t.Errorf("the base's example target must recommend only (mode off), got %+v", cfg.Targets)
	}
	objs := kustomizeObjects(t, kustomizeBase)
	var cms []*unstructured.Unstructured
	for _, cm := range ofKind(objs, "ConfigMap") {
		if strings.HasPrefix(cm.GetName(), "gatetuner-config-") {
			cms = append(cms, cm)
		}
	}
	if len(cms) != 1 {
		t.Fatalf("want one hashed gatetuner-config-* ConfigMap, got %d", len(cms))
	}
	if got, _, _ := unstructured.NestedString(cms[0].Object, "data", "config.yaml"); got != string(text) {
		t.Errorf("the ConfigMap's config.yaml is not kustomize/base/config.yaml")
	}
}

// TestDashboardShippedEverywhere: the Helm chart and deploy/grafana ship the
// same dashboard, labelled for the Grafana sidecar.
func TestDashboardShippedEverywhere(t *testing.T) {
	want, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(chartDashboard); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%s is not a copy of %s (cp %s %s): %v", chartDashboard, dashboardPath, dashboardPath, chartDashboard, err)
	}
	sources := map[string][]*unstructured.Unstructured{
		"deploy/grafana": kustomizeObjects(t, grafanaDir),
		"helm":           helmCases[0].objects(t),
	}
	for name, objs := range sources {
		var found int
		for _, cm := range ofKind(objs, "ConfigMap") {
			body, ok, _ := unstructured.NestedString(cm.Object, "data", "gatetuner.json")
			if !ok {
				continue
			}
			found++
			if cm.GetLabels()["grafana_dashboard"] != "1" {
				t.Errorf("%s: dashboard ConfigMap %s lacks label grafana_dashboard=1", name, cm.GetName())
			}
			var a, b any
			if err := json.Unmarshal([]byte(body), &a); err != nil {
				t.Fatalf("%s: dashboard JSON: %v", name, err)
			}
			_ = json.Unmarshal(want, &b)
			if !reflect.DeepEqual(a, b) {
				t.Errorf("%s: the dashboard ConfigMap does not carry %s", name, dashboardPath)
			}
		}
		if found != 1 {
			t.Errorf("%s: %d dashboard ConfigMaps, want 1", name, found)
		}
	}
	if n := len(ofKind(helmCases[2].objects(t), "ConfigMap")); n != 1 {
		t.Errorf("dashboard.enabled=false: %d ConfigMaps rendered, want only the config", n)
	}
}

// TestObjectsCarryTheRecommendedLabels: every object of the kustomize base,
// the overlay and the chart carries the app.kubernetes.io label set
// (name, instance, version, managed-by, part-of).
func TestObjectsCarryTheRecommendedLabels(t *testing.T) {
	for _, in := range installs(t) {
		t.Run(in.name, func(t *testing.T) {
			for _, o := range in.objs {
				l := o.GetLabels()
				for _, k := range []string{"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
					"app.kubernetes.io/managed-by", "app.kubernetes.io/part-of"} {
					if l[k] == "" {
						t.Errorf("%s %s/%s: no label %s (labels %v)", o.GetKind(), o.GetNamespace(), o.GetName(), k, l)
					}
				}
				if want := map[bool]string{true: "kustomize", false: "Helm"}[strings.HasPrefix(in.name, "kustomize")]; l["app.kubernetes.io/managed-by"] != want {
					t.Errorf("%s %s: managed-by %q, want %q", o.GetKind(), o.GetName(), l["app.kubernetes.io/managed-by"], want)
				}
			}
		})
	}
}

// networkPolicyAdmitsMetrics: np restricts ingress only, to the metrics
// port, from namespace ns; egress it leaves open (no Egress policy type, or
// one rule allowing all).
func networkPolicyAdmitsMetrics(t *testing.T, np *unstructured.Unstructured, ns string) bool {
	t.Helper()
	if np == nil {
		return false
	}
	p := convert[networkingv1.NetworkPolicy](t, np)
	if len(p.Spec.Ingress) != 1 || len(p.Spec.Ingress[0].Ports) != 1 || p.Spec.Ingress[0].Ports[0].Port.String() != "metrics" {
		return false
	}
	from := p.Spec.Ingress[0].From
	egressOpen := slices.Equal(p.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) ||
		slices.Equal(p.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) &&
			len(p.Spec.Egress) == 1 && reflect.DeepEqual(p.Spec.Egress[0], networkingv1.NetworkPolicyEgressRule{})
	return len(from) == 1 && from[0].NamespaceSelector != nil && from[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] == ns && egressOpen
}
