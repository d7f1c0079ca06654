package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/gatetuner/gatetuner/test/kubeharness"
)

// dryRunFieldManager names this test's server-side-apply field manager.
const dryRunFieldManager = "gatetuner-deploy-test"

// dryRunner sends objects to the API server with dryRun=All.
type dryRunner struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func newDryRunner(t *testing.T, env *kubeharness.Env) *dryRunner {
	t.Helper()
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &dryRunner{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))}
}

// resource maps obj to its REST resource, refreshing discovery while a kind
// (a CRD just established) is not served yet.
func (d *dryRunner) resource(ctx context.Context, obj *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := obj.GroupVersionKind()
	deadline := time.Now().Add(30 * time.Second)
	for {
		m, err := d.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err == nil {
			if m.Scope.Name() == meta.RESTScopeNameNamespace {
				if obj.GetNamespace() == "" {
					return nil, fmt.Errorf("%s %s: namespaced but carries no namespace", gvk.Kind, obj.GetName())
				}
				return d.dyn.Resource(m.Resource).Namespace(obj.GetNamespace()), nil
			}
			return d.dyn.Resource(m.Resource), nil
		}
		if !meta.IsNoMatchError(err) || time.Now().After(deadline) {
			return nil, fmt.Errorf("map %s: %w", gvk, err)
		}
		d.mapper.Reset()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// dryRun sends obj as a create and as a server-side apply, both with
// dryRun=All and strict field validation (an unknown field is an error, not
// a warning). exists says the object is already on the server (a namespace
// the test created), where only the apply applies.
func (d *dryRunner) dryRun(ctx context.Context, obj *unstructured.Unstructured, exists bool) error {
	ri, err := d.resource(ctx, obj)
	if err != nil {
		return err
	}
	if !exists {
		if _, err := ri.Create(ctx, obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict", FieldManager: dryRunFieldManager}); err != nil {
			return fmt.Errorf("dry-run create: %w", err)
		}
	}
	body, err := json.Marshal(obj.Object)
	if err != nil {
		return err
	}
	force := true
	if _, err := ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{
		DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict", FieldManager: dryRunFieldManager, Force: &force}); err != nil {
		return fmt.Errorf("dry-run server-side apply: %w", err)
	}
	return nil
}

// TestManifestsPassServerSideDryRun sends every object of the kustomize base,
// the dashboard kustomization and the chart (rendered for each values file)
// to a real kube-apiserver with the prometheus-operator CRDs installed, as a
// dry-run create and a dry-run server-side apply with strict field
// validation. Then it installs the example chart's RBAC for real and asks
// the API server's RBAC authorizer what the daemon's ServiceAccount may do.
func TestManifestsPassServerSideDryRun(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real kube-apiserver; skipped under -short")
	}
	env := kubeharness.Start(t)
	ctx := t.Context()

	crds, err := filepath.Glob(filepath.Join(crdDir, "*.yaml"))
	if err != nil || len(crds) != 2 {
		t.Fatalf("want the ServiceMonitor and PrometheusRule CRDs in %s (deploy/hack/gen-monitoring-crds.sh), got %v %v", crdDir, crds, err)
	}
	for _, f := range crds {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := env.ApplyManifests(ctx, b); err != nil {
			t.Fatalf("install %s: %v", f, err)
		}
	}

	// The chart's bare defaults do not render (no targets): TestHelmRefusesUnsafeValues.
	sets := map[string][]*unstructured.Unstructured{
		"kustomize base":    kustomizeObjects(t, kustomizeBase),
		"kustomize overlay": kustomizeObjects(t, kustomizeOverlay),
		"deploy/grafana":    kustomizeObjects(t, grafanaDir),
	}
	for _, c := range helmCases {
		sets["helm "+c.name] = c.objects(t)
	}

	// Namespaces the objects live in exist on a cluster before the install (the daemon's own
	// namespace is created by the base's Namespace object; here it must exist for the dry run of
	// what goes into it).
	created := map[string]bool{}
	for _, objs := range sets {
		for _, o := range objs {
			ns := o.GetNamespace()
			if o.GetKind() == "Namespace" {
				ns = o.GetName()
			}
			if ns == "" || created[ns] {
				continue
			}
			if err := env.CreateNamespace(ctx, ns); err != nil {
				t.Fatalf("create namespace %s: %v", ns, err)
			}
			created[ns] = true
		}
	}

	d := newDryRunner(t, env)
	for name, objs := range sets {
		t.Run(name, func(t *testing.T) {
			if len(objs) == 0 {
				t.Fatal("nothing rendered")
			}
			passed := map[string]int{}
			for _, o := range objs {
				exists := o.GetKind() == "Namespace" && created[o.GetName()]
				if err := d.dryRun(ctx, o, exists); err != nil {
					t.Errorf("%s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
					continue
				}
				passed[o.GetKind()]++
			}
			t.Logf("%d objects, passed: %v", len(objs), passed)
		})
	}

	t.Run("rbac authorizes the push work only", func(t *testing.T) {
		checkAuthorization(t, env, helmCases[0].render(t))
	})
}

// checkAuthorization installs the RBAC objects of manifests and asks the API
// server (SubjectAccessReview) what gatetuner/gatetuner may do.
func checkAuthorization(t *testing.T, env *kubeharness.Env, manifests []byte) {
	ctx := t.Context()
	var rbac []*unstructured.Unstructured
	for _, o := range decode(t, manifests) {
		switch o.GetKind() {
		case "ServiceAccount", "Role", "RoleBinding":
			rbac = append(rbac, o)
		}
	}
	for _, o := range rbac {
		b, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		if err := env.ApplyManifests(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	user := "system:serviceaccount:gatetuner:gatetuner"
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:gatetuner", "system:authenticated"}
	for _, tc := range []struct {
		group, resource, ns, name, verb string
		allowed                         bool
	}{
		{"", "configmaps", "llm-d", "qwen3-32b-epp", "get", true},
		{"", "configmaps", "llm-d", "qwen3-32b-epp", "update", true},
		{"", "configmaps", "llm-d", "qwen3-32b-epp", "patch", true},
		{"apps", "deployments", "llm-d", "qwen3-32b-epp", "get", true},
		{"apps", "deployments", "llm-d", "qwen3-32b-epp", "patch", true},
		{"events.k8s.io", "events", "llm-d", "", "create", true},
		{"coordination.k8s.io", "leases", "gatetuner", "gatetuner", "get", true},
		{"coordination.k8s.io", "leases", "gatetuner", "gatetuner", "update", true},
		{"coordination.k8s.io", "leases", "gatetuner", "", "create", true},
		{"", "events", "gatetuner", "", "create", true},
		{"", "configmaps", "llm-d", "another-epp", "get", false},
		{"", "configmaps", "llm-d", "", "list", false},
		{"", "configmaps", "llm-d", "", "watch", false},
		{"", "configmaps", "llm-d", "qwen3-32b-epp", "delete", false},
		{"", "configmaps", "llm-d", "", "create", false},
		{"apps", "deployments", "llm-d", "qwen3-32b-epp", "delete", false},
		{"apps", "deployments", "llm-d", "another", "patch", false},
		{"", "secrets", "llm-d", "", "get", false},
		{"", "pods", "llm-d", "", "list", false},
		{"coordination.k8s.io", "leases", "gatetuner", "someone-else", "update", false},
		{"", "configmaps", "kube-system", "qwen3-32b-epp", "get", false},
		{"", "namespaces", "", "", "list", false},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Group: tc.group, Resource: tc.resource, Namespace: tc.ns, Name: tc.name, Verb: tc.verb},
		}}
		got, err := env.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != tc.allowed {
			t.Errorf("%s %s.%s %s/%s: allowed=%v, want %v (%s)", tc.verb, tc.resource, tc.group, tc.ns, tc.name, got.Status.Allowed, tc.allowed, got.Status.Reason)
		}
	}
}
