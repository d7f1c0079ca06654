package kubeharness_test

import (
	"strings"
	"testing"

	"github.com/gatetuner/gatetuner/test/kubeharness"
)

func FuzzDecodeManifests(f *testing.F) {
	for _, seed := range []string{
		eppRBAC,
		widgetCRD,
		viewerBinding,
		"",
		"---\n---\n",
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}`,
		"apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a}\n",
		"apiVersion: v1\nkind: ConfigMap\n",
		"kind: [\n",
		"apiVersion: 'a/b/c'\nkind: X\nmetadata: {name: x}\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [1, 2]\n",
		"a: &x [*x]\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, err := kubeharness.DecodeManifests(data)
		if err != nil {
			return
		}
		for i, o := range objs {
			if o.GetAPIVersion() == "" || o.GetKind() == "" || o.GetName() == "" {
				t.Fatalf("object %d accepted without apiVersion/kind/name: %v", i, o.Object)
			}
		}
	})
}

func TestDecodeManifests(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []string // kind/name
		wantErr bool
	}{
		{name: "two documents in order", in: eppRBAC, want: []string{"Role/gatetuner-epp-config", "RoleBinding/gatetuner-epp-config"}},
		{name: "empty documents skipped", in: "---\n\n---\n# only a comment\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n", want: []string{"ConfigMap/a"}},
		{name: "json object", in: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}`, want: []string{"ConfigMap/a"}},
		{name: "list expanded", in: "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a}\n- apiVersion: v1\n  kind: Secret\n  metadata: {name: b}\n", want: []string{"ConfigMap/a", "Secret/b"}},
		{name: "missing kind rejected", in: "apiVersion: v1\nmetadata: {name: a}\n", wantErr: true},
		{name: "missing name rejected", in: "apiVersion: v1\nkind: ConfigMap\n", wantErr: true},
		{name: "bad apiVersion rejected", in: "apiVersion: a/b/c\nkind: X\nmetadata: {name: x}\n", wantErr: true},
		{name: "malformed yaml rejected", in: "kind: [\n", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := kubeharness.DecodeManifests([]byte(tc.in))
			if tc.wantErr {
				if err == nil {
					t.Fatalf("want error, got %d objects", len(objs))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range objs {
				got = append(got, o.GetKind()+"/"+o.GetName())
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}
