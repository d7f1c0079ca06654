package deployactor

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// RolloutComplete reports whether the Deployment's latest spec is fully rolled out, with the
// rules of `kubectl rollout status`: observed, all replicas updated, no old replicas left,
// all updated replicas available, and the progress deadline not exceeded.
func RolloutComplete(d *appsv1.Deployment) bool {
	if d.Generation > d.Status.ObservedGeneration || ProgressDeadlineExceeded(d) {
		return false
	}
	desired := int32(1)
	if d.Spec.Replicas != nil {
		desired = *d.Spec.Replicas
	}
	s := d.Status
	return s.UpdatedReplicas >= desired && s.Replicas <= s.UpdatedReplicas && s.AvailableReplicas >= s.UpdatedReplicas
}

// ProgressDeadlineExceeded reports whether the Deployment's latest observed rollout timed out.
func ProgressDeadlineExceeded(d *appsv1.Deployment) bool {
	c := findCondition(d.Status, appsv1.DeploymentProgressing)
	return c != nil && c.Reason == ReasonProgressDeadlineExceeded
}

// Available reports whether the Deployment's Available condition is True.
func Available(d *appsv1.Deployment) bool {
	c := findCondition(d.Status, appsv1.DeploymentAvailable)
	return c != nil && c.Status == "True"
}

// WaitForDeployment watches the Deployment until cond holds, and returns it; it fails when
// ctx ends first, reporting the last status seen.
func WaitForDeployment(ctx context.Context, client kubernetes.Interface, namespace, name string, cond func(*appsv1.Deployment) bool) (*appsv1.Deployment, error) {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	deployments := client.AppsV1().Deployments(namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return deployments.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return deployments.Watch(ctx, o)
		},
	}
	var last *appsv1.Deployment
	ev, err := watchtools.UntilWithSync(ctx, lw, &appsv1.Deployment{}, nil, func(ev watch.Event) (bool, error) {
		d, ok := ev.Object.(*appsv1.Deployment)
		if !ok || ev.Type == watch.Deleted {
			return false, nil
		}
		last = d
		return cond(d), nil
	})
	if err != nil {
		if last != nil {
			return last, fmt.Errorf("wait for deployment %s/%s (generation %d, status %+v): %w", namespace, name, last.Generation, last.Status, err)
		}
		return nil, fmt.Errorf("wait for deployment %s/%s: %w", namespace, name, err)
	}
	return ev.Object.(*appsv1.Deployment), nil
}
