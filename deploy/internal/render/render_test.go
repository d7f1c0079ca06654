package render

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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

func TestDecodeRejectsIncompleteObjects(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     int
		err      string
	}{
		{"two objects and an empty document", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\napiVersion: v1\nkind: Service\nmetadata: {name: b}\n", 2, ""},
		{"no kind", "apiVersion: v1\nmetadata: {name: a}\n", 0, "document 1"},
		{"no name", "apiVersion: v1\nkind: ConfigMap\n---\n", 0, "metadata.name"},
		{"not YAML", "apiVersion: [\n", 0, "decode manifest document 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Decode([]byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || len(objs) != tc.want {
				t.Fatalf("got %d objects, %v; want %d", len(objs), err, tc.want)
			}
		})
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
	objs, err := Decode(out)
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
	objs, err := Decode(out)
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
	if objs, _ := Decode(out); len(objs) != 1 || objs[0].GetName() != "b-from-defaults" {
		t.Fatalf("a template rendering nothing must drop out; got %s", out)
	}
	if _, err := Helm(dir, HelmRelease{Name: "rel", Namespace: "ns", Values: map[string]any{"name": 3}}); err == nil {
		t.Fatal("values violating values.schema.json rendered")
	}
}

// FuzzDecode: any input either fails with an error or yields objects that all
// carry an apiVersion, a kind and a name.
func FuzzDecode(f *testing.F) {
	f.Add("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: b}\n")
	f.Add("---\n---\n")
	f.Add(`{"apiVersion":"v1","kind":"List","items":[]}`)
	f.Add("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [1, 2]\n")
	f.Add("a: &x [*x]\n")
	f.Fuzz(func(t *testing.T, in string) {
		objs, err := Decode([]byte(in))
		if err != nil {
			return
		}
		for _, o := range objs {
			if o.GetAPIVersion() == "" || o.GetKind() == "" || o.GetName() == "" {
				t.Fatalf("decoded an incomplete object %v from %q", o.Object, in)
			}
		}
	})
}
