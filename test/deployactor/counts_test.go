package deployactor_test

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gatetuner/gatetuner/test/deployactor"
)

func rolling(surge, unavailable intstr.IntOrString) appsv1.DeploymentStrategy {
	return appsv1.DeploymentStrategy{
		Type:          appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &surge, MaxUnavailable: &unavailable},
	}
}

func TestPodCountsFollowTheStrategy(t *testing.T) {
	defaults := appsv1.DeploymentStrategy{} // 25 % surge (up), 25 % unavailable (down)
	recreate := appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
	tests := []struct {
		name       string
		strategy   appsv1.DeploymentStrategy
		desired    int32
		hasRunning bool
		rolling    bool
		want       deployactor.Counts
	}{
		{"steady state: all pods of the running template", defaults, 3, true, false, deployactor.Counts{New: 3, Available: 3}},
		{"nothing created yet", defaults, 3, false, false, deployactor.Counts{}},
		{"first rollout: all pods new, none available", defaults, 3, false, true, deployactor.Counts{New: 3}},
		{"one replica, default strategy: surge one, keep the old", defaults, 1, true, true, deployactor.Counts{Old: 1, New: 1, Available: 1}},
		{"four replicas, default strategy: surge 1 and drop 1 old", defaults, 4, true, true, deployactor.Counts{Old: 3, New: 2, Available: 3}},
		{"ten replicas, default strategy: 25 % rounds surge up and unavailable down", defaults, 10, true, true, deployactor.Counts{Old: 8, New: 5, Available: 8}},
		{"zero surge and zero unavailable means one unavailable", rolling(intstr.FromInt32(0), intstr.FromInt32(0)), 2, true, true, deployactor.Counts{Old: 1, New: 1, Available: 1}},
		{"max unavailable all: old pods all gone", rolling(intstr.FromInt32(0), intstr.FromString("100%")), 2, true, true, deployactor.Counts{New: 2}},
		{"new pods capped at desired", rolling(intstr.FromInt32(5), intstr.FromInt32(0)), 2, true, true, deployactor.Counts{Old: 2, New: 2, Available: 2}},
		{"recreate kills the old pods first", recreate, 3, true, true, deployactor.Counts{New: 3}},
		{"zero replicas", defaults, 0, true, true, deployactor.Counts{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := deployactor.PodCounts(tc.strategy, tc.desired, tc.hasRunning, tc.rolling)
			if got != tc.want {
				t.Fatalf("PodCounts = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestTemplateHashChangesWithTheTemplate(t *testing.T) {
	base := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"a": "1"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}},
	}
	same := *base.DeepCopy()
	changed := *base.DeepCopy()
	changed.Annotations["a"] = "2"
	if deployactor.TemplateHash(base) != deployactor.TemplateHash(same) {
		t.Fatal("equal templates hash differently")
	}
	if deployactor.TemplateHash(base) == deployactor.TemplateHash(changed) {
		t.Fatal("an annotation change did not change the hash")
	}
}

func TestRolloutCompleteFollowsKubectl(t *testing.T) {
	one := int32(1)
	progressing := func(reason string) []appsv1.DeploymentCondition {
		return []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: reason}}
	}
	tests := []struct {
		name   string
		gen    int64
		status appsv1.DeploymentStatus
		want   bool
	}{
		{"complete", 2, appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1, Conditions: progressing(deployactor.ReasonNewReplicaSetAvailable)}, true},
		{"generation not observed", 3, appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1}, false},
		{"old replicas remain", 2, appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 2, UpdatedReplicas: 1, AvailableReplicas: 1}, false},
		{"updated not available", 2, appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 0}, false},
		{"not all updated", 2, appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 0, UpdatedReplicas: 0}, false},
		{"deadline exceeded", 2, appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1, Conditions: progressing(deployactor.ReasonProgressDeadlineExceeded)}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: tc.gen}, Spec: appsv1.DeploymentSpec{Replicas: &one}, Status: tc.status}
			if got := deployactor.RolloutComplete(d); got != tc.want {
				t.Fatalf("RolloutComplete = %v, want %v", got, tc.want)
			}
		})
	}
}
