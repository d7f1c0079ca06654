package sink

import (
	"context"
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/deployactor"
	"github.com/gatetuner/gatetuner/test/kubeharness"
)

// shared is the package's API server (kubeharness.Shared), stopped by TestMain.
var shared kubeharness.Shared

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	shared.Stop()
	os.Exit(code)
}

// needEnv returns the shared API server and a fresh namespace for the test;
// it skips under -short and fails loudly when the server is missing.
func needEnv(t *testing.T) (*kubeharness.Env, string) {
	t.Helper()
	return shared.Need(t)
}

const (
	cmName   = "qwen3-32b-epp"
	cmKey    = "default-plugins.yaml"
	depName  = "qwen3-32b-epp"
	waitLong = 60 * time.Second
)

// sampleConfigMap returns the chart-style sample ConfigMap in namespace ns.
func sampleConfigMap(t testing.TB, ns string) *corev1.ConfigMap {
	t.Helper()
	var cm corev1.ConfigMap
	if err := sigsyaml.UnmarshalStrict(readTestdata(t, "epp-configmap-chart-style.yaml"), &cm); err != nil {
		t.Fatal(err)
	}
	cm.Namespace = ns
	return &cm
}

func createConfigMap(t testing.TB, c kubernetes.Interface, cm *corev1.ConfigMap) *corev1.ConfigMap {
	t.Helper()
	out, err := c.CoreV1().ConfigMaps(cm.Namespace).Create(context.Background(), cm, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func getConfigMap(t testing.TB, c kubernetes.Interface, ns, name string) *corev1.ConfigMap {
	t.Helper()
	cm, err := c.CoreV1().ConfigMaps(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

// editConfigMap changes the ConfigMap as another client would (retrying on conflict).
func editConfigMap(t testing.TB, c kubernetes.Interface, ns, name string, edit func(*corev1.ConfigMap)) *corev1.ConfigMap {
	t.Helper()
	for {
		cm := getConfigMap(t, c, ns, name)
		edit(cm)
		out, err := c.CoreV1().ConfigMaps(ns).Update(context.Background(), cm, metav1.UpdateOptions{FieldManager: "someone-else"})
		if err == nil {
			return out
		}
		if !strings.Contains(err.Error(), "the object has been modified") {
			t.Fatal(err)
		}
	}
}

// createDeployment creates the EPP Deployment (2 replicas).
func createDeployment(t testing.TB, c kubernetes.Interface, ns string) {
	t.Helper()
	replicas := int32(2)
	labels := map[string]string{"app": depName}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: depName},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "epp", Image: "registry.example/llm-d-router:v0.4",
					Args: []string{"--config-file", "/config/" + cmKey}}}},
			},
		},
	}
	if _, err := c.AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// startActor plays the Deployment controller until the test ends, and waits
// for the initial rollout.
func startActor(t testing.TB, c kubernetes.Interface, ns string, opts deployactor.Options) *deployactor.Actor {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	a := deployactor.New(c, ns, depName, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("deployactor: %v", err)
		}
	})
	wctx, wcancel := context.WithTimeout(context.Background(), waitLong)
	defer wcancel()
	if err := a.WaitForRollouts(wctx, 1); err != nil {
		t.Fatal(err)
	}
	return a
}

// kubeTarget is the sample's target in ns.
func kubeTarget(ns string, mode Mode, profile string) Target {
	return Target{Name: "qwen3-32b", Namespace: ns, ConfigMap: cmName, Key: cmKey, Deployment: depName, Mode: mode,
		Plugins: []string{"prefix-cache-affinity-filter"}, Profile: mustProfileName(profile)}
}

func mustProfileName(name string) gate.Profile {
	p, err := gate.LookupProfile(name)
	if err != nil {
		panic(err)
	}
	return p
}
