package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/deployactor"
	"github.com/gatetuner/gatetuner/test/kubeharness"
	"github.com/gatetuner/gatetuner/tuner/eppconfig"
	"github.com/gatetuner/gatetuner/tuner/sink"
)

const (
	rbCM  = "qwen3-32b-epp"
	rbKey = "default-plugins.yaml"
)

// runRollbackCLI runs `gatetuner rollback args…` in-process.
func runRollbackCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"rollback"}, args...), strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func sampleCM(t *testing.T, ns string) *corev1.ConfigMap {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "tuner", "sink", "testdata", "epp-configmap-chart-style.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := sigsyaml.UnmarshalStrict(b, &cm); err != nil {
		t.Fatal(err)
	}
	cm.Namespace = ns
	return &cm
}

func maxChange(v float64) eppconfig.Change {
	return eppconfig.Change{Set: map[gate.Key]eppconfig.Value{gate.KeyMaxTTFTPenaltyMs: eppconfig.Number(v)}}
}

func TestRollbackCommand(t *testing.T) {
	env := kubeharness.Start(t)
	ctx := context.Background()
	c := env.Client
	prof, _ := gate.LookupProfile("")

	t.Run("configmap mode restores the last apply", func(t *testing.T) {
		ns := "rollback-cm"
		if err := env.CreateNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
		orig, err := c.CoreV1().ConfigMaps(ns).Create(ctx, sampleCM(t, ns), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s, err := sink.New(sink.Target{Name: "qwen", Namespace: ns, ConfigMap: rbCM, Key: rbKey, Profile: prof}, sink.Options{Client: c, Identity: "daemon"})
		if err != nil {
			t.Fatal(err)
		}
		snap, err := s.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if res, err := s.Apply(ctx, snap, []eppconfig.Change{maxChange(5000)}, sink.Meta{Reason: "test"}); err != nil || res.Outcome != sink.OutcomeApplied {
			t.Fatalf("apply: %+v %v", res, err)
		}
		applied, _ := c.CoreV1().ConfigMaps(ns).Get(ctx, rbCM, metav1.GetOptions{})
		base := []string{"--target", "qwen", "--kubeconfig", env.Kubeconfig(), "--namespace", ns, "--configmap", rbCM, "--key", rbKey}

		code, out, errOut := runRollbackCLI(t, append(base, "--dry-run")...)
		if code != 0 || !strings.Contains(out, "-    maxTTFTPenaltyMs: 5000") || !strings.Contains(out, "+    maxTTFTPenaltyMs: 18000") || !strings.Contains(out, "dry run") {
			t.Fatalf("dry run: exit %d\n%s\n%s", code, out, errOut)
		}
		if cm, _ := c.CoreV1().ConfigMaps(ns).Get(ctx, rbCM, metav1.GetOptions{}); cm.ResourceVersion != applied.ResourceVersion {
			t.Fatal("dry run wrote")
		}

		code, out, errOut = runRollbackCLI(t, base...)
		if code != 0 || !strings.Contains(out, "written as history entry 2") || !strings.Contains(out, "after its next restart") {
			t.Fatalf("rollback: exit %d\n%s\n%s", code, out, errOut)
		}
		cm, _ := c.CoreV1().ConfigMaps(ns).Get(ctx, rbCM, metav1.GetOptions{})
		if cm.Data[rbKey] != orig.Data[rbKey] || cm.Data["payload-agnostic.yaml"] != orig.Data["payload-agnostic.yaml"] {
			t.Fatalf("not restored:\n%s", eppconfig.Diff("orig", "now", []byte(orig.Data[rbKey]), []byte(cm.Data[rbKey])))
		}
		snap, err = s.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		h := snap.State.History
		if len(h) != 2 || h[1].Kind != sink.KindRollback || h[1].Undoes != 1 || !strings.HasPrefix(h[1].By, "gatetuner-rollback:") ||
			h[0].Status != sink.StatusSuperseded {
			t.Fatalf("history %+v", h)
		}
		// Again: the values are already there.
		code, out, _ = runRollbackCLI(t, base...)
		if code != 0 || !strings.Contains(out, "nothing to write") {
			t.Fatalf("second rollback: exit %d\n%s", code, out)
		}
	})

	t.Run("rollout mode rolls the EPP", func(t *testing.T) {
		ns := "rollback-rollout"
		if err := env.CreateNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
		orig, err := c.CoreV1().ConfigMaps(ns).Create(ctx, sampleCM(t, ns), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		replicas := int32(1)
		labels := map[string]string{"app": "epp"}
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "epp"}, Spec: appsv1.DeploymentSpec{
			Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "epp", Image: "epp:v1"}}}}}}
		if _, err := c.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		actor := deployactor.New(c, ns, "epp", deployactor.Options{RolloutDelay: 20 * time.Millisecond})
		actx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- actor.Run(actx) }()
		defer func() { cancel(); <-done }()

		target := sink.Target{Name: "qwen", Namespace: ns, ConfigMap: rbCM, Key: rbKey, Deployment: "epp", Mode: sink.ModeRollout, Profile: prof}
		s, err := sink.New(target, sink.Options{Client: c, Identity: "daemon", PollInterval: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []float64{5000, 4000} {
			snap, err := s.Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if res, err := s.Apply(ctx, snap, []eppconfig.Change{maxChange(v)}, sink.Meta{}); err != nil || res.Outcome != sink.OutcomeApplied {
				t.Fatalf("apply %v: %+v %v", v, res, err)
			}
		}
		// --to 1: the values before entry 1, i.e. the original config.
		code, out, errOut := runRollbackCLI(t, "--target", "qwen", "--kubeconfig", env.Kubeconfig(), "--namespace", ns,
			"--configmap", rbCM, "--key", rbKey, "--deployment", "epp", "--mode", "rollout", "--to", "1")
		if code != 0 || !strings.Contains(out, "the EPP runs it since") {
			t.Fatalf("rollback: exit %d\n%s\n%s", code, out, errOut)
		}
		cm, _ := c.CoreV1().ConfigMaps(ns).Get(ctx, rbCM, metav1.GetOptions{})
		if cm.Data[rbKey] != orig.Data[rbKey] {
			t.Fatal("not restored")
		}
		dep, _ := c.AppsV1().Deployments(ns).Get(ctx, "epp", metav1.GetOptions{})
		if dep.Spec.Template.Annotations[sink.AnnotationConfigHash] != sink.ConfigHash([]byte(orig.Data[rbKey])) {
			t.Fatal("the EPP was not rolled to the restored config")
		}
		if run, ok := actor.Running(); !ok || run.Annotations[sink.AnnotationConfigHash] != sink.ConfigHash([]byte(orig.Data[rbKey])) {
			t.Fatal("the restored config is not running")
		}
	})

	t.Run("without --key the data key holding the plugin is used; several holding it exit 2 naming them", func(t *testing.T) {
		ns := "rollback-nokey"
		if err := env.CreateNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
		orig, err := c.CoreV1().ConfigMaps(ns).Create(ctx, sampleCM(t, ns), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s, err := sink.New(sink.Target{Name: "qwen", Namespace: ns, ConfigMap: rbCM, Key: rbKey, Profile: prof}, sink.Options{Client: c, Identity: "daemon"})
		if err != nil {
			t.Fatal(err)
		}
		snap, err := s.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if res, err := s.Apply(ctx, snap, []eppconfig.Change{maxChange(5000)}, sink.Meta{Reason: "test"}); err != nil || res.Outcome != sink.OutcomeApplied {
			t.Fatalf("apply: %+v %v", res, err)
		}
		base := []string{"--target", "qwen", "--kubeconfig", env.Kubeconfig(), "--namespace", ns, "--configmap", rbCM}
		code, out, errOut := runRollbackCLI(t, base...)
		if code != 0 || !strings.Contains(out, "written as history entry 2") {
			t.Fatalf("rollback without --key: exit %d\n%s\n%s", code, out, errOut)
		}
		cm, _ := c.CoreV1().ConfigMaps(ns).Get(ctx, rbCM, metav1.GetOptions{})
		if cm.Data[rbKey] != orig.Data[rbKey] {
			t.Fatalf("not restored under %s", rbKey)
		}
		cm.Data["copy.yaml"] = cm.Data[rbKey] // a second key holding the plugin
		written, err := c.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		code, out, errOut = runRollbackCLI(t, base...)
		if code != 2 || !strings.Contains(errOut, "copy.yaml") || !strings.Contains(errOut, rbKey) {
			t.Fatalf("two keys holding the plugin: exit %d, want 2 naming both keys\n%s\n%s", code, out, errOut)
		}
		if after, _ := c.CoreV1().ConfigMaps(ns).Get(ctx, rbCM, metav1.GetOptions{}); after.ResourceVersion != written.ResourceVersion {
			t.Fatal("a refused rollback wrote")
		}
	})

	t.Run("usage errors exit 2", func(t *testing.T) {
		for name, args := range map[string][]string{
			"no target":        {"--configmap", rbCM, "--key", rbKey},
			"no configmap":     {"--target", "x", "--key", rbKey},
			"bad mode":         {"--target", "x", "--configmap", rbCM, "--key", rbKey, "--mode", "yolo"},
			"rollout, no dep":  {"--target", "x", "--configmap", rbCM, "--key", rbKey, "--mode", "rollout"},
			"file and cm":      {"--target", "x", "--file", "f.yaml", "--configmap", rbCM},
			"unknown profile":  {"--target", "x", "--file", "f.yaml", "--profile", "nope"},
			"no such entry":    {"--target", "x", "--kubeconfig", env.Kubeconfig(), "--namespace", "rollback-cm", "--configmap", rbCM, "--key", rbKey, "--to", "9"},
			"negative --to":    {"--target", "x", "--file", "f.yaml", "--to", "-1"},
			"stray positional": {"--target", "x", "--file", "f.yaml", "extra"},
		} {
			if code, out, errOut := runRollbackCLI(t, args...); code != 2 {
				t.Errorf("%s: exit %d, want 2\n%s%s", name, code, out, errOut)
			}
		}
	})
}

func TestRollbackFileTarget(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "epp.yaml")
	b, err := os.ReadFile(filepath.Join("..", "..", "tuner", "sink", "testdata", "epp-config-production-commented.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	prof, _ := gate.LookupProfile("")
	s, err := sink.New(sink.Target{Name: "prod", File: path, Profile: prof}, sink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := s.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(context.Background(), snap, []eppconfig.Change{maxChange(9000)}, sink.Meta{}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runRollbackCLI(t, "--target", "prod", "--file", path)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, b) {
		t.Fatalf("not restored:\n%s", eppconfig.Diff("orig", "now", b, got))
	}
}
