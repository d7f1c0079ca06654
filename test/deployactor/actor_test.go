package deployactor_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gatetuner/gatetuner/test/deployactor"
	"github.com/gatetuner/gatetuner/test/kubeharness"
)

const (
	ns          = "epp"
	configAnnot = "gatetuner.dev/config-hash"
	waitTimeout = 60 * time.Second
)

func newDeployment(name string, replicas int32, config string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{configAnnot: config}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "epp", Image: "registry.example/epp:v1"}}},
			},
		},
	}
}

// recorder collects the templates OnRollout receives.
type recorder struct {
	mu      sync.Mutex
	configs []string
}

func (r *recorder) onRollout(t corev1.PodTemplateSpec) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.configs = append(r.configs, t.Annotations[configAnnot])
}

func (r *recorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.configs...)
}

// setConfig patches the pod-template annotation, which starts a rollout.
func setConfig(ctx context.Context, t *testing.T, c kubernetes.Interface, name, config string) int64 {
	t.Helper()
	patch := fmt.Appendf(nil, `{"spec":{"template":{"metadata":{"annotations":{%q:%q}}}}}`, configAnnot, config)
	d, err := c.AppsV1().Deployments(ns).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("patch deployment %s: %v", name, err)
	}
	return d.Generation
}

func startActor(ctx context.Context, t *testing.T, a *deployactor.Actor) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("actor Run: %v", err)
		}
	})
}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

func condition(d *appsv1.Deployment, typ appsv1.DeploymentConditionType) appsv1.DeploymentCondition {
	for _, c := range d.Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return appsv1.DeploymentCondition{}
}

func observed(gen int64) func(*appsv1.Deployment) bool {
	return func(d *appsv1.Deployment) bool { return d.Status.ObservedGeneration >= gen }
}

func TestActor(t *testing.T) {
	env := kubeharness.Start(t)
	if err := env.CreateNamespace(t.Context(), ns); err != nil {
		t.Fatal(err)
	}

	t.Run("healthy template changes roll out and call OnRollout", func(t *testing.T) {
		ctx := waitCtx(t)
		const name = "healthy"
		if _, err := env.Client.AppsV1().Deployments(ns).Create(ctx, newDeployment(name, 1, "v1"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		rec := &recorder{}
		a := deployactor.New(env.Client, ns, name, deployactor.Options{RolloutDelay: time.Second, OnRollout: rec.onRollout})
		startActor(ctx, t, a)

		d, err := deployactor.WaitForDeployment(ctx, env.Client, ns, name, deployactor.RolloutComplete)
		if err != nil {
			t.Fatalf("initial rollout: %v", err)
		}
		if got := condition(d, appsv1.DeploymentProgressing).Reason; got != deployactor.ReasonNewReplicaSetAvailable {
			t.Fatalf("Progressing reason %q after the initial rollout", got)
		}
		if !deployactor.Available(d) || d.Status.AvailableReplicas != 1 {
			t.Fatalf("initial rollout not available: %+v", d.Status)
		}

		gen := setConfig(ctx, t, env.Client, name, "v2")
		// The new generation is acknowledged at once: a surge pod of the new template exists and
		// the old pod still serves.
		d, err = deployactor.WaitForDeployment(ctx, env.Client, ns, name, observed(gen))
		if err != nil {
			t.Fatal(err)
		}
		want := counts{ObservedGeneration: gen, Replicas: 2, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
		if got := countsOf(d.Status); got != want {
			t.Fatalf("status while rolling: got %+v, want %+v", got, want)
		}
		if got := condition(d, appsv1.DeploymentProgressing).Reason; got != deployactor.ReasonReplicaSetUpdated {
			t.Fatalf("Progressing reason while rolling %q, want %q", got, deployactor.ReasonReplicaSetUpdated)
		}
		if deployactor.RolloutComplete(d) {
			t.Fatal("rollout complete before the new pods became available")
		}

		d, err = deployactor.WaitForDeployment(ctx, env.Client, ns, name, func(d *appsv1.Deployment) bool {
			return d.Status.ObservedGeneration >= gen && deployactor.RolloutComplete(d)
		})
		if err != nil {
			t.Fatalf("second rollout: %v", err)
		}
		want = counts{ObservedGeneration: gen, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
		if got := countsOf(d.Status); got != want {
			t.Fatalf("status after the rollout: got %+v, want %+v", got, want)
		}
		if err := a.WaitForRollouts(ctx, 2); err != nil {
			t.Fatal(err)
		}
		if got := rec.get(); fmt.Sprint(got) != "[v1 v2]" {
			t.Fatalf("OnRollout saw %v, want [v1 v2]", got)
		}
		if tmpl, ok := a.Running(); !ok || tmpl.Annotations[configAnnot] != "v2" {
			t.Fatalf("Running() = %v, %v; want the v2 template", tmpl.Annotations, ok)
		}

		// Scaling is not a rollout: no new template, no OnRollout.
		scale := []byte(`{"spec":{"replicas":3}}`)
		d, err = env.Client.AppsV1().Deployments(ns).Patch(ctx, name, types.MergePatchType, scale, metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.WaitForGeneration(ctx, d.Generation); err != nil {
			t.Fatal(err)
		}
		d, err = deployactor.WaitForDeployment(ctx, env.Client, ns, name, observed(d.Generation))
		if err != nil {
			t.Fatal(err)
		}
		if d.Status.AvailableReplicas != 3 || !deployactor.RolloutComplete(d) {
			t.Fatalf("after scaling to 3: %+v", d.Status)
		}
		if a.Rollouts() != 2 || len(rec.get()) != 2 {
			t.Fatalf("scaling counted as a rollout: Rollouts()=%d OnRollout=%v", a.Rollouts(), rec.get())
		}
	})

	t.Run("unhealthy template crash-loops until the progress deadline", func(t *testing.T) {
		ctx := waitCtx(t)
		const name = "crashloop"
		if _, err := env.Client.AppsV1().Deployments(ns).Create(ctx, newDeployment(name, 1, "good"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		rec := &recorder{}
		a := deployactor.New(env.Client, ns, name, deployactor.Options{
			RolloutDelay:     200 * time.Millisecond,
			ProgressDeadline: 2 * time.Second,
			Healthy:          func(t corev1.PodTemplateSpec) bool { return t.Annotations[configAnnot] != "bad" },
			OnRollout:        rec.onRollout,
		})
		startActor(ctx, t, a)
		if _, err := deployactor.WaitForDeployment(ctx, env.Client, ns, name, deployactor.RolloutComplete); err != nil {
			t.Fatalf("initial rollout: %v", err)
		}

		gen := setConfig(ctx, t, env.Client, name, "bad")
		if err := a.WaitForGeneration(ctx, gen); err != nil {
			t.Fatal(err)
		}
		d, err := deployactor.WaitForDeployment(ctx, env.Client, ns, name, deployactor.ProgressDeadlineExceeded)
		if err != nil {
			t.Fatalf("progress deadline never reported: %v", err)
		}
		// Only the old pod serves; the new one exists (updated) but never becomes available.
		want := counts{ObservedGeneration: gen, Replicas: 2, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1, UnavailableReplicas: 0}
		if got := countsOf(d.Status); got != want {
			t.Fatalf("crash-looping status: got %+v, want %+v", got, want)
		}
		if c := condition(d, appsv1.DeploymentProgressing); c.Status != corev1.ConditionFalse {
			t.Fatalf("Progressing %+v, want False", c)
		}
		if deployactor.RolloutComplete(d) {
			t.Fatal("a crash-looping rollout reported complete")
		}
		if a.Rollouts() != 1 || fmt.Sprint(rec.get()) != "[good]" {
			t.Fatalf("bad template became running: Rollouts()=%d OnRollout=%v", a.Rollouts(), rec.get())
		}

		// Rolling back to the running template completes without a new rollout.
		gen = setConfig(ctx, t, env.Client, name, "good")
		d, err = deployactor.WaitForDeployment(ctx, env.Client, ns, name, func(d *appsv1.Deployment) bool {
			return d.Status.ObservedGeneration >= gen && deployactor.RolloutComplete(d)
		})
		if err != nil {
			t.Fatalf("rollback: %v", err)
		}
		if got := condition(d, appsv1.DeploymentProgressing).Reason; got != deployactor.ReasonNewReplicaSetAvailable {
			t.Fatalf("Progressing reason after rollback %q", got)
		}
		if a.Rollouts() != 1 {
			t.Fatalf("rollback counted as a rollout: %d", a.Rollouts())
		}
	})

	t.Run("a never-healthy deployment never becomes available", func(t *testing.T) {
		ctx := waitCtx(t)
		const name = "never"
		if _, err := env.Client.AppsV1().Deployments(ns).Create(ctx, newDeployment(name, 2, "bad"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var called atomic.Bool
		a := deployactor.New(env.Client, ns, name, deployactor.Options{
			RolloutDelay:     100 * time.Millisecond,
			ProgressDeadline: time.Second,
			Healthy:          func(corev1.PodTemplateSpec) bool { return false },
			OnRollout:        func(corev1.PodTemplateSpec) { called.Store(true) },
		})
		startActor(ctx, t, a)
		d, err := deployactor.WaitForDeployment(ctx, env.Client, ns, name, deployactor.ProgressDeadlineExceeded)
		if err != nil {
			t.Fatalf("progress deadline never reported: %v", err)
		}
		want := counts{ObservedGeneration: d.Generation, Replicas: 2, UpdatedReplicas: 2, UnavailableReplicas: 2}
		if got := countsOf(d.Status); got != want {
			t.Fatalf("status: got %+v, want %+v", got, want)
		}
		if deployactor.Available(d) {
			t.Fatalf("Available condition %+v with no pod available", condition(d, appsv1.DeploymentAvailable))
		}
		if got := condition(d, appsv1.DeploymentAvailable).Reason; got != deployactor.ReasonMinimumReplicasMissing {
			t.Fatalf("Available reason %q", got)
		}
		if a.Rollouts() != 0 || called.Load() {
			t.Fatalf("unhealthy template became running: Rollouts()=%d OnRollout called=%v", a.Rollouts(), called.Load())
		}
		if _, ok := a.Running(); ok {
			t.Fatal("Running() reports a template though none is available")
		}
	})

	t.Run("a restarted actor adopts the completed rollout", func(t *testing.T) {
		ctx := waitCtx(t)
		const name = "adopt"
		if _, err := env.Client.AppsV1().Deployments(ns).Create(ctx, newDeployment(name, 1, "v1"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		first := deployactor.New(env.Client, ns, name, deployactor.Options{})
		firstCtx, stopFirst := context.WithCancel(ctx)
		firstDone := make(chan error, 1)
		go func() { firstDone <- first.Run(firstCtx) }()
		if err := first.WaitForRollouts(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := deployactor.WaitForDeployment(ctx, env.Client, ns, name, deployactor.RolloutComplete); err != nil {
			t.Fatal(err)
		}
		stopFirst()
		if err := <-firstDone; err != nil {
			t.Fatal(err)
		}

		rec := &recorder{}
		second := deployactor.New(env.Client, ns, name, deployactor.Options{OnRollout: rec.onRollout})
		startActor(ctx, t, second)
		if err := second.WaitForGeneration(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if tmpl, ok := second.Running(); !ok || tmpl.Annotations[configAnnot] != "v1" {
			t.Fatalf("restarted actor did not adopt the running template: %v %v", tmpl.Annotations, ok)
		}
		if second.Rollouts() != 0 || len(rec.get()) != 0 {
			t.Fatalf("adoption replayed a rollout: Rollouts()=%d OnRollout=%v", second.Rollouts(), rec.get())
		}
		gen := setConfig(ctx, t, env.Client, name, "v2")
		if _, err := deployactor.WaitForDeployment(ctx, env.Client, ns, name, func(d *appsv1.Deployment) bool {
			return d.Status.ObservedGeneration >= gen && deployactor.RolloutComplete(d)
		}); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(rec.get()) != "[v2]" {
			t.Fatalf("OnRollout after adoption saw %v, want [v2]", rec.get())
		}
	})
}

// counts are the numeric fields of a Deployment status.
type counts struct {
	ObservedGeneration                                                               int64
	Replicas, UpdatedReplicas, ReadyReplicas, AvailableReplicas, UnavailableReplicas int32
}

// countsOf keeps the numeric fields of a status.
func countsOf(s appsv1.DeploymentStatus) counts {
	return counts{
		ObservedGeneration:  s.ObservedGeneration,
		Replicas:            s.Replicas,
		UpdatedReplicas:     s.UpdatedReplicas,
		ReadyReplicas:       s.ReadyReplicas,
		AvailableReplicas:   s.AvailableReplicas,
		UnavailableReplicas: s.UnavailableReplicas,
	}
}
