package sink

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/deployactor"
	"github.com/gatetuner/gatetuner/test/kubeharness"
	"github.com/gatetuner/gatetuner/tuner/eppconfig"
	"github.com/gatetuner/gatetuner/tuner/leader"
)

var update = flag.Bool("update", false, "rewrite testdata/role.yaml from RenderRBAC")

// exampleRBAC is the configuration testdata/role.yaml is rendered from.
func exampleRBAC() RBACConfig {
	return RBACConfig{
		ServiceAccount:          "gatetuner",
		ServiceAccountNamespace: "gatetuner",
		LeaseName:               "gatetuner",
		Targets: RBACTargets(
			Target{Namespace: "llm-d", ConfigMap: "qwen3-32b-epp", Key: cmKey, Deployment: "qwen3-32b-epp"},
			Target{Namespace: "llm-d", ConfigMap: "gpt-oss-120b-epp", Key: cmKey, Deployment: "gpt-oss-120b-epp"},
		),
	}
}

func TestRenderRBACMatchesShippedRole(t *testing.T) {
	got, err := RenderRBAC(exampleRBAC())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "role.yaml")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (regenerate with go test ./tuner/sink -run TestRenderRBACMatchesShippedRole -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("testdata/role.yaml differs from RenderRBAC (regenerate with -update):\n%s", eppconfig.Diff("testdata/role.yaml", "RenderRBAC", want, got))
	}
}

func TestRenderRBACIsNamespacedAndNamed(t *testing.T) {
	out, err := RenderRBAC(exampleRBAC())
	if err != nil {
		t.Fatal(err)
	}
	objs, err := kubeharness.DecodeManifests(out)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
		if o.GetNamespace() == "" {
			t.Fatalf("%s %s is cluster-scoped", o.GetKind(), o.GetName())
		}
		if o.GetKind() != "Role" {
			continue
		}
		var role rbacv1.Role
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
			t.Fatal(err)
		}
		for _, r := range role.Rules {
			for _, s := range slices.Concat(r.Verbs, r.Resources, r.APIGroups, r.ResourceNames) {
				if strings.Contains(s, "*") {
					t.Fatalf("wildcard in %s: %+v", role.Name, r)
				}
			}
			named := len(r.ResourceNames) > 0
			switch {
			case slices.Equal(r.Resources, []string{"configmaps"}):
				if !named || !slices.Equal(r.Verbs, []string{"get", "update", "patch"}) {
					t.Fatalf("configmaps rule %+v", r)
				}
			case slices.Equal(r.Resources, []string{"deployments"}):
				if !named || !slices.Equal(r.Verbs, []string{"get", "patch"}) {
					t.Fatalf("deployments rule %+v", r)
				}
			case slices.Equal(r.Resources, []string{"events"}):
				if !slices.Equal(r.Verbs, []string{"create", "patch"}) {
					t.Fatalf("events rule %+v", r)
				}
			case slices.Equal(r.Resources, []string{"leases"}):
				if !(named && slices.Equal(r.Verbs, []string{"get", "update"})) && !(!named && slices.Equal(r.Verbs, []string{"create"})) {
					t.Fatalf("leases rule %+v", r)
				}
			default:
				t.Fatalf("unexpected rule %+v", r)
			}
		}
	}
	if kinds["ServiceAccount"] != 1 || kinds["Role"] != 2 || kinds["RoleBinding"] != 2 || len(kinds) != 3 {
		t.Fatalf("kinds %v", kinds)
	}
	if _, err := RenderRBAC(RBACConfig{Targets: []RBACTarget{{Namespace: "Bad_NS", ConfigMaps: []string{"x"}}}}); err == nil {
		t.Fatal("rendered an invalid namespace")
	}
}

// TestShippedRoleIsEnoughAndNoMore binds the rendered Role to a
// ServiceAccount and runs everything the daemon does with its token, then
// checks that anything else is forbidden.
func TestShippedRoleIsEnoughAndNoMore(t *testing.T) {
	env, ns := needEnv(t)
	ctx := context.Background()
	admin := env.Client
	daemonNS := ns + "-sys"
	otherNS := ns + "-other"
	for _, n := range []string{daemonNS, otherNS} {
		if err := env.CreateNamespace(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	manifests, err := RenderRBAC(RBACConfig{ServiceAccountNamespace: daemonNS, Targets: RBACTargets(kubeTarget(ns, ModeRollout, gate.ProfileRouter202608))})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.ApplyManifests(ctx, manifests); err != nil {
		t.Fatal(err)
	}
	createConfigMap(t, admin, sampleConfigMap(t, ns))
	other := sampleConfigMap(t, ns)
	other.Name = "another-epp"
	createConfigMap(t, admin, other)
	elsewhere := sampleConfigMap(t, otherNS)
	createConfigMap(t, admin, elsewhere)
	if _, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hf-token"}, StringData: map[string]string{"token": "x"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createDeployment(t, admin, ns)
	startActor(t, admin, ns, deployactor.Options{RolloutDelay: 20 * time.Millisecond})

	sa, _, err := env.ServiceAccountClient(ctx, daemonNS, "gatetuner")
	if err != nil {
		t.Fatal(err)
	}

	t.Run("enough", func(t *testing.T) {
		fc := testingclock.NewFakeClock(time.Now())
		stepper(t, fc, time.Second)
		s := newKubeSink(t, sa, kubeTarget(ns, ModeRollout, gate.ProfileRouter202608), Options{Clock: fc, PollInterval: time.Second})
		// get + update ConfigMap, patch + get Deployment, create Events.
		res := mustApply(t, s, mustRead(t, s), Meta{}, set(filter, gate.KeyMaxTTFTPenaltyMs, 5000))
		if res.Outcome != OutcomeApplied || res.Entry.Status != StatusEffective {
			t.Fatalf("apply as the ServiceAccount: %+v", res)
		}
		if evs := gatetunerEvents(t, admin, ns, cmName); len(evs) == 0 {
			t.Fatal("no Event recorded with the ServiceAccount")
		}
		// patch ConfigMap (annotations), patch Events.
		if _, err := sa.CoreV1().ConfigMaps(ns).Patch(ctx, cmName, types.MergePatchType, []byte(`{"metadata":{"annotations":{"gatetuner.dev/probe":"1"}}}`), metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
			t.Fatalf("patch configmap: %v", err)
		}
		evs, err := admin.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(evs.Items) == 0 {
			t.Fatal(err)
		}
		if _, err := sa.EventsV1().Events(ns).Patch(ctx, evs.Items[0].Name, types.MergePatchType, []byte(`{"series":null}`), metav1.PatchOptions{}); err != nil {
			t.Fatalf("patch event: %v", err)
		}
		// Lease: create, get, update (renew), release.
		el, err := leader.New(leader.Config{Client: sa, Namespace: daemonNS, Name: "gatetuner", Identity: "gatetuner-0",
			LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		renewed := make(chan struct{})
		go func() {
			// Leading long enough to renew at least once.
			for lctx.Err() == nil {
				l, err := admin.CoordinationV1().Leases(daemonNS).Get(lctx, "gatetuner", metav1.GetOptions{})
				if err == nil && l.Spec.RenewTime != nil && l.Spec.AcquireTime != nil && l.Spec.RenewTime.After(l.Spec.AcquireTime.Time) {
					close(renewed)
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
		var led bool
		if err := el.Run(lctx, func(c context.Context) {
			led = true
			select {
			case <-renewed:
			case <-c.Done():
			}
			cancel()
		}); err != nil {
			t.Fatal(err)
		}
		if !led {
			t.Fatal("the ServiceAccount never led")
		}
		l, err := admin.CoordinationV1().Leases(daemonNS).Get(ctx, "gatetuner", metav1.GetOptions{})
		if err != nil || (l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "") {
			t.Fatalf("lease not released: %+v %v", l.Spec, err)
		}
	})

	t.Run("no more", func(t *testing.T) {
		forbidden := map[string]func() error{
			"read a Secret": func() error {
				_, err := sa.CoreV1().Secrets(ns).Get(ctx, "hf-token", metav1.GetOptions{})
				return err
			},
			"list Secrets": func() error {
				_, err := sa.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
				return err
			},
			"patch another ConfigMap": func() error {
				_, err := sa.CoreV1().ConfigMaps(ns).Patch(ctx, "another-epp", types.MergePatchType, []byte(`{"data":{"x":"y"}}`), metav1.PatchOptions{})
				return err
			},
			"read another ConfigMap": func() error {
				_, err := sa.CoreV1().ConfigMaps(ns).Get(ctx, "another-epp", metav1.GetOptions{})
				return err
			},
			"list ConfigMaps": func() error {
				_, err := sa.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
				return err
			},
			"watch ConfigMaps": func() error {
				w, err := sa.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{})
				if err == nil {
					w.Stop()
				}
				return err
			},
			"create a ConfigMap": func() error {
				_, err := sa.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "new"}}, metav1.CreateOptions{})
				return err
			},
			"delete the ConfigMap": func() error {
				return sa.CoreV1().ConfigMaps(ns).Delete(ctx, cmName, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
			},
			"the same ConfigMap in another namespace": func() error {
				_, err := sa.CoreV1().ConfigMaps(otherNS).Get(ctx, cmName, metav1.GetOptions{})
				return err
			},
			"update the Deployment": func() error {
				d, err := admin.AppsV1().Deployments(ns).Get(ctx, depName, metav1.GetOptions{})
				if err != nil {
					return nil // not the point: make the test fail below
				}
				_, err = sa.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{})
				return err
			},
			"list Deployments": func() error {
				_, err := sa.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
				return err
			},
			"delete the Deployment": func() error {
				return sa.AppsV1().Deployments(ns).Delete(ctx, depName, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
			},
			"another Lease": func() error {
				_, err := sa.CoordinationV1().Leases(daemonNS).Get(ctx, "kube-scheduler", metav1.GetOptions{})
				return err
			},
			"list Pods": func() error {
				_, err := sa.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
				return err
			},
			"list Namespaces (cluster-wide)": func() error {
				_, err := sa.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
				return err
			},
			"core Events in another namespace": func() error {
				_, err := sa.EventsV1().Events(otherNS).List(ctx, metav1.ListOptions{})
				return err
			},
		}
		for name, op := range forbidden {
			if err := op(); !apierrors.IsForbidden(err) {
				t.Errorf("%s: %v, want Forbidden", name, err)
			}
		}
	})
}
