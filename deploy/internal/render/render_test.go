package render

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gatetuner/gatetuner/test/kubeharness"
)

func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestKustomizeKeepsToItsFolder(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{
		"outside.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: outside}\n",
		"k/kustomization.yaml":    "resources:\n- ../outside.yaml\n",
		"ok/kustomization.yaml":   "namespace: x\nresources:\n- cm.yaml\n",
		"ok/cm.yaml":              "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: inside}\n",
		"bad/kustomization.yaml":  "resources:\n- missing.yaml\n",
		"bad/unrelated-file.yaml": "{}",
	})
	if _, err := Kustomize(filepath.Join(dir, "k")); err == nil {
		t.Error("a kustomization reading a file outside its folder built; users' kubectl would refuse it")
	}
	if _, err := Kustomize(filepath.Join(dir, "bad")); err == nil {
		t.Error("a kustomization naming a missing file built")
	}
	out, err := Kustomize(filepath.Join(dir, "ok"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := kubeharness.DecodeManifests(out)
	if err != nil || len(objs) != 1 || objs[0].GetNamespace() != "x" {
		t.Fatalf("got %v %v, want the ConfigMap moved to namespace x", objs, err)
	}
}

func TestHelmRendersLikeHelmTemplate(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{
		"Chart.yaml":             "apiVersion: v2\nname: c\nversion: 0.1.0\n",
		"values.yaml":            "name: from-defaults\nenabled: true\n",
		"values.schema.json":     `{"type":"object","properties":{"name":{"type":"string"}}}`,
		"templates/b.yaml":       "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b-{{ .Values.name }}\n  namespace: {{ .Release.Namespace }}\n",
		"templates/a.yaml":       "{{ if .Values.enabled }}apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a-{{ .Release.Name }}\n{{ end }}",
		"templates/_helpers.tpl": "{{ define \"x\" }}apiVersion: v1{{ end }}",
		"templates/NOTES.txt":    "kind: NotAnObject\n",
	})
	out, err := Helm(dir, HelmRelease{Name: "rel", Namespace: "ns", Values: map[string]any{"name": "set"}})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := kubeharness.DecodeManifests(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 || objs[0].GetName() != "a-rel" || objs[1].GetName() != "b-set" || objs[1].GetNamespace() != "ns" {
		t.Fatalf("got %s", out)
	}
	out, err = Helm(dir, HelmRelease{Name: "rel", Namespace: "ns", Values: map[string]any{"enabled": false}})
	if err != nil {
		t.Fatal(err)
	}
	if objs, _ := kubeharness.DecodeManifests(out); len(objs) != 1 || objs[0].GetName() != "b-from-defaults" {
		t.Fatalf("a template rendering nothing must drop out; got %s", out)
	}
	if _, err := Helm(dir, HelmRelease{Name: "rel", Namespace: "ns", Values: map[string]any{"name": 3}}); err == nil {
		t.Fatal("values violating values.schema.json rendered")
	}
}
