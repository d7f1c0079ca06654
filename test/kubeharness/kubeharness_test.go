package kubeharness_test

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gatetuner/gatetuner/test/kubeharness"
)

// eppConfig is an EPP plugin config as users write it: comments, blank lines, odd spacing,
// a flow mapping, quoting, tabs inside a block scalar, trailing spaces and non-ASCII text.
const eppConfig = `# EPP config — edited by hand, keep the comments!
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig

plugins:
  - type: prefix-cache-scorer   # trailing comment
    parameters:
      hashBlockSize: 64     # tokens per block
      maxPrefixBlocksToMatch:   256
  - type: slo-gate
    parameters: { maxTTFTPenaltyMs: 250, mode: "static" }
  - type: notes
    parameters:
      text: |
		tab-indented line	with a tab
        trailing spaces here   
        ünïcødé ✓
---
# second document
kind: Other
`

func TestAPIServer(t *testing.T) {
	env := kubeharness.Start(t, kubeharness.WithUser("alice", "viewers"))
	ctx := t.Context()

	t.Run("serves the pinned version", func(t *testing.T) {
		v, err := env.Client.Discovery().ServerVersion()
		if err != nil {
			t.Fatalf("server version: %v", err)
		}
		if v.GitVersion != kubeharness.KubeVersion {
			t.Fatalf("server version %q, want %q", v.GitVersion, kubeharness.KubeVersion)
		}
	})

	t.Run("configmap data round-trips byte-identical", func(t *testing.T) {
		const ns = "roundtrip"
		if err := env.CreateNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "epp-config"},
			Data:       map[string]string{"config.yaml": eppConfig, "empty": ""},
		}
		if _, err := env.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create configmap: %v", err)
		}
		got, err := env.Client.CoreV1().ConfigMaps(ns).Get(ctx, "epp-config", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get configmap: %v", err)
		}
		if got.Data["config.yaml"] != eppConfig {
			t.Fatalf("config.yaml changed in the round trip:\n got %q\nwant %q", got.Data["config.yaml"], eppConfig)
		}
		if v, ok := got.Data["empty"]; !ok || v != "" {
			t.Fatalf("empty key: got %q present=%v", v, ok)
		}
	})

	t.Run("rbac limits a serviceaccount to its named configmap", func(t *testing.T) {
		testRBACResourceNames(ctx, t, env)
	})

	t.Run("static users authenticate and are authorized by rbac", func(t *testing.T) {
		testStaticUser(ctx, t, env)
	})

	t.Run("apply manifests creates a crd and its custom resource then updates it", func(t *testing.T) {
		testApplyCRD(ctx, t, env)
	})

	t.Run("kubeconfig reaches the server as admin", func(t *testing.T) {
		cfg, err := clientcmd.BuildConfigFromFlags("", env.Kubeconfig())
		if err != nil {
			t.Fatalf("load kubeconfig %s: %v", env.Kubeconfig(), err)
		}
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatalf("list namespaces through kubeconfig: %v", err)
		}
	})
}

const eppRBAC = `apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: gatetuner-epp-config
  namespace: epp
rules:
  - apiGroups: [""]
    resources: [configmaps]
    resourceNames: [epp-config]
    verbs: [get, update, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: gatetuner-epp-config
  namespace: epp
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: gatetuner-epp-config
subjects:
  - kind: ServiceAccount
    name: gatetuner
    namespace: epp
`

func testRBACResourceNames(ctx context.Context, t *testing.T, env *kubeharness.Env) {
	for _, ns := range []string{"epp", "elsewhere"} {
		if err := env.CreateNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"epp-config", "other-config"} {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"k": "v"}}
			if _, err := env.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create configmap %s/%s: %v", ns, name, err)
			}
		}
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "epp", Name: "creds"}, StringData: map[string]string{"k": "v"}}
	if _, err := env.Client.CoreV1().Secrets("epp").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create secret: %v", err)
	}
	if err := env.ApplyManifests(ctx, []byte(eppRBAC)); err != nil {
		t.Fatalf("apply RBAC: %v", err)
	}
	sa, _, err := env.ServiceAccountClient(ctx, "epp", "gatetuner")
	if err != nil {
		t.Fatal(err)
	}

	patch := []byte(`{"data":{"k":"patched"},"metadata":{"annotations":{"gatetuner.dev/paused":"true"}}}`)
	got, err := sa.CoreV1().ConfigMaps("epp").Patch(ctx, "epp-config", types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("serviceaccount patch of epp/epp-config must be allowed: %v", err)
	}
	if got.Data["k"] != "patched" || got.Annotations["gatetuner.dev/paused"] != "true" {
		t.Fatalf("patch not applied: data=%v annotations=%v", got.Data, got.Annotations)
	}
	got.Data["k"] = "updated"
	if _, err := sa.CoreV1().ConfigMaps("epp").Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("serviceaccount update of epp/epp-config must be allowed: %v", err)
	}

	forbidden := []struct {
		name string
		call func() error
	}{
		{"patch another configmap", func() error {
			_, err := sa.CoreV1().ConfigMaps("epp").Patch(ctx, "other-config", types.MergePatchType, patch, metav1.PatchOptions{})
			return err
		}},
		{"get another configmap", func() error {
			_, err := sa.CoreV1().ConfigMaps("epp").Get(ctx, "other-config", metav1.GetOptions{})
			return err
		}},
		{"list configmaps", func() error {
			_, err := sa.CoreV1().ConfigMaps("epp").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"delete the named configmap", func() error {
			return sa.CoreV1().ConfigMaps("epp").Delete(ctx, "epp-config", metav1.DeleteOptions{})
		}},
		{"get a secret", func() error {
			_, err := sa.CoreV1().Secrets("epp").Get(ctx, "creds", metav1.GetOptions{})
			return err
		}},
		{"patch the same name in another namespace", func() error {
			_, err := sa.CoreV1().ConfigMaps("elsewhere").Patch(ctx, "epp-config", types.MergePatchType, patch, metav1.PatchOptions{})
			return err
		}},
	}
	for _, tc := range forbidden {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !apierrors.IsForbidden(err) {
				t.Fatalf("want Forbidden, got %v", err)
			}
		})
	}
	other, err := env.Client.CoreV1().ConfigMaps("epp").Get(ctx, "other-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if other.Data["k"] != "v" {
		t.Fatalf("forbidden patch changed epp/other-config: %v", other.Data)
	}
}

const viewerBinding = `# The built-in view ClusterRole is aggregated by kube-controller-manager, which the harness
# does not run, so it has no rules here: declare the role explicitly.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: configmap-viewer
rules:
  - apiGroups: [""]
    resources: [configmaps]
    verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: viewers
  namespace: epp
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: configmap-viewer
subjects:
  - kind: Group
    name: viewers
    apiGroup: rbac.authorization.k8s.io
`

func testStaticUser(ctx context.Context, t *testing.T, env *kubeharness.Env) {
	if err := env.CreateNamespace(ctx, "epp"); err != nil {
		t.Fatal(err)
	}
	alice, err := env.ClientForUser("alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.CoreV1().ConfigMaps("epp").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("alice before the binding: want Forbidden, got %v", err)
	}
	if err := env.ApplyManifests(ctx, []byte(viewerBinding)); err != nil {
		t.Fatal(err)
	}
	// RBAC changes reach the authorizer through its informer: allow a moment.
	if err := waitFor(ctx, func() bool {
		_, err := alice.CoreV1().ConfigMaps("epp").List(ctx, metav1.ListOptions{})
		return err == nil
	}); err != nil {
		t.Fatalf("alice (group viewers, bound to configmap-viewer) never could list configmaps: %v", err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "epp", Name: "alice-made"}}
	if _, err := alice.CoreV1().ConfigMaps("epp").Create(ctx, cm, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("viewer create: want Forbidden, got %v", err)
	}
	if _, err := env.ClientForUser("nobody"); err == nil {
		t.Fatal("ClientForUser of an undeclared user must fail")
	}
	stranger, err := kubernetes.NewForConfig(env.ConfigForToken("not-a-token"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stranger.CoreV1().ConfigMaps("epp").List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
		t.Fatalf("unknown token: want Unauthorized, got %v", err)
	}
}

const widgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.gatetuner.dev
spec:
  group: example.gatetuner.dev
  names: {kind: Widget, listKind: WidgetList, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                size: {type: integer}
---
apiVersion: example.gatetuner.dev/v1
kind: Widget
metadata:
  name: w1
  namespace: epp
spec:
  size: %d
`

func testApplyCRD(ctx context.Context, t *testing.T, env *kubeharness.Env) {
	if err := env.CreateNamespace(ctx, "epp"); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "example.gatetuner.dev", Version: "v1", Resource: "widgets"}
	for _, size := range []int64{3, 5} {
		manifest := strings.Replace(widgetCRD, "%d", strconv.FormatInt(size, 10), 1)
		if err := env.ApplyManifests(ctx, []byte(manifest)); err != nil {
			t.Fatalf("apply size %d: %v", size, err)
		}
		w, err := dyn.Resource(gvr).Namespace("epp").Get(ctx, "w1", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get widget: %v", err)
		}
		got, _, _ := unstructured.NestedInt64(w.Object, "spec", "size")
		if got != size {
			t.Fatalf("widget size %d, want %d", got, size)
		}
	}
}

func TestFindBinariesNamesTheMissingComponent(t *testing.T) {
	t.Setenv(kubeharness.CacheEnv, t.TempDir())
	_, err := kubeharness.FindBinaries()
	if !errors.Is(err, kubeharness.ErrComponentsMissing) {
		t.Fatalf("want ErrComponentsMissing, got %v", err)
	}
	for _, want := range []string{"kube-apiserver not found at", "kube-" + kubeharness.KubeVersion, "make test-components"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestVersionsMatchBuildScript(t *testing.T) {
	script, err := os.ReadFile("build-components.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ variable, want string }{
		{"KUBE_VERSION", kubeharness.KubeVersion},
		{"ETCD_VERSION", kubeharness.EtcdVersion},
	} {
		m := regexp.MustCompile(`(?m)^` + tc.variable + `="([^"]+)"`).FindSubmatch(script)
		if m == nil {
			t.Fatalf("build-components.sh has no %s=\"...\" line", tc.variable)
		}
		if string(m[1]) != tc.want {
			t.Errorf("build-components.sh %s=%s, Go constant %s", tc.variable, m[1], tc.want)
		}
	}
}

// waitFor polls cond until it holds or 30 s pass.
func waitFor(ctx context.Context, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}
