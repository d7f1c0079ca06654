package deploy

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"

	"github.com/gatetuner/gatetuner/deploy/internal/render"
)

// TestChartCIValuesPassHelmLintStrict runs `helm lint --strict` (helm's lint
// action) on the chart with every values file in its ci/ folder, the layout
// chart-testing lints, and requires a helmCase for each file.
func TestChartCIValuesPassHelmLintStrict(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(chartCIDir, "*-values.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no %s/*-values.yaml: %v", chartCIDir, err)
	}
	cased := map[string]bool{}
	for _, c := range helmCases {
		cased[c.values] = true
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			if !cased[filepath.Base(f)] {
				t.Errorf("%s has no helmCase: the render tests would not check it", f)
			}
			vals, err := chartutil.ReadValuesFile(f)
			if err != nil {
				t.Fatal(err)
			}
			msgs, failed := lintStrict(vals.AsMap())
			for _, m := range msgs {
				t.Logf("helm lint: %s", m)
			}
			for _, m := range failed {
				t.Errorf("helm lint --strict -f %s: %s", f, m)
			}
		})
	}
}

// lintStrict runs helm's chart linter (what `helm lint --strict` runs, without
// helm's action package and its registry client) with vals; failed are the
// messages --strict fails on (warnings and errors).
func lintStrict(vals map[string]any) (all, failed []support.Message) {
	l := lint.AllWithKubeVersionAndSchemaValidation(chartDir, vals, "gatetuner", nil, false)
	for _, m := range l.Messages {
		if m.Severity >= support.WarningSev {
			failed = append(failed, m)
		}
	}
	return l.Messages, failed
}

// minimalValues are the values the chart needs to render at all.
func minimalValues() map[string]any {
	return map[string]any{
		"image":   map[string]any{"repository": "registry.example.com/platform/gatetuner"},
		"targets": []any{map[string]any{"name": "a", "namespace": "llm-d", "configMap": "a-epp"}},
	}
}

// TestValuesSchemaRefusesMisspeltKeys: values.schema.json (additionalProperties:
// false) makes a misspelt key a render error naming it, where Helm alone
// ignores it; `helm lint --strict` refuses it too.
func TestValuesSchemaRefusesMisspeltKeys(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(map[string]any)
		want string
	}{
		{"servicemonitor in lower case", func(v map[string]any) { v["servicemonitor"] = map[string]any{"enabled": false} }, "servicemonitor"},
		{"serviceMonitor.enable", func(v map[string]any) { v["serviceMonitor"] = map[string]any{"enable": false} }, "enable"},
		{"image.repo", func(v map[string]any) { v["image"].(map[string]any)["repo"] = "x" }, "repo"},
		{"podDisruptionBudget.minAvailabe", func(v map[string]any) { v["podDisruptionBudget"] = map[string]any{"minAvailabe": 1} }, "minAvailabe"},
		{"replicas as a string", func(v map[string]any) { v["replicas"] = "2" }, "replicas"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals := minimalValues()
			tc.set(vals)
			_, err := render.Helm(chartDir, render.HelmRelease{Name: "gatetuner", Namespace: "gatetuner", Values: vals})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want a schema error naming %q", err, tc.want)
			}
			if _, failed := lintStrict(vals); len(failed) == 0 {
				t.Errorf("helm lint --strict accepted the misspelt values")
			}
		})
	}
}

// TestValuesSchemaAcceptsEveryDocumentedKey: every key of values.yaml, set
// explicitly to its default, and the documented alternatives render.
func TestValuesSchemaAcceptsEveryDocumentedKey(t *testing.T) {
	defaults, err := chartutil.ReadValuesFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	all := defaults.AsMap()
	for k, v := range minimalValues() {
		if k == "image" {
			all["image"].(map[string]any)["repository"] = v.(map[string]any)["repository"]
			continue
		}
		all[k] = v
	}
	for _, tc := range []struct {
		name string
		vals map[string]any
	}{
		{"every key at its default", all},
		{"OpenShift: no fixed UID", merge(minimalValues(), map[string]any{"podSecurityContext": map[string]any{"runAsUser": nil, "runAsGroup": nil}})},
		{"PDB by maxUnavailable percentage", merge(minimalValues(), map[string]any{"podDisruptionBudget": map[string]any{"minAvailable": nil, "maxUnavailable": "50%"}})},
		{"NetworkPolicy with egress", merge(minimalValues(), map[string]any{"networkPolicy": map[string]any{"enabled": true,
			"egress": []any{map[string]any{"ports": []any{map[string]any{"port": 53, "protocol": "UDP"}}}}}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := render.Helm(chartDir, render.HelmRelease{Name: "gatetuner", Namespace: "gatetuner", Values: tc.vals}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func merge(a, b map[string]any) map[string]any {
	for k, v := range b {
		a[k] = v
	}
	return a
}

// freeForm are values whose content the chart passes through (Kubernetes
// objects, the daemon config): documented as one key, not key by key.
var freeForm = map[string]bool{"resources": true, "podSecurityContext": true, "securityContext": true, "config": true,
	"affinity": true, "podAnnotations": true, "podLabels": true, "nodeSelector": true,
	"serviceAccount.annotations": true, "service.annotations": true, "serviceMonitor.labels": true,
	"prometheusRule.labels": true, "dashboard.labels": true, "dashboard.annotations": true}

// valueKeys flattens values.yaml to its documented keys.
func valueKeys(prefix string, m map[string]any, out *[]string) {
	for k, v := range m {
		key := k
		if prefix != "" {
			key = prefix + "." + k
		}
		if sub, ok := v.(map[string]any); ok && !freeForm[key] && len(sub) > 0 {
			valueKeys(key, sub, out)
			continue
		}
		*out = append(*out, key)
	}
}

var docKey = regexp.MustCompile("`([A-Za-z.]+)`")

// docValueKeys reads the keys of docs/deploy.md's values table: `a.b`, then
// `.c` for a sibling a.c.
func docValueKeys(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var keys []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "| value | default | what |") {
			in = true
			continue
		}
		if in && !strings.HasPrefix(line, "|") {
			break
		}
		if !in || strings.HasPrefix(line, "|---") {
			continue
		}
		cell := strings.Split(line, "|")[1]
		parent := ""
		for _, m := range docKey.FindAllStringSubmatch(cell, -1) {
			k := m[1]
			if strings.HasPrefix(k, ".") {
				k = parent + k
			} else if i := strings.LastIndex(k, "."); i >= 0 {
				parent = k[:i]
			} else {
				parent = k
			}
			keys = append(keys, k)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestValuesTableIsTheChartsValues: docs/deploy.md's values table lists
// exactly the keys of values.yaml.
func TestValuesTableIsTheChartsValues(t *testing.T) {
	defaults, err := chartutil.ReadValuesFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	valueKeys("", defaults.AsMap(), &want)
	got := docValueKeys(t)
	sort.Strings(want)
	sort.Strings(got)
	for _, k := range want {
		if !slices.Contains(got, k) {
			t.Errorf("values.yaml key %s is not in docs/deploy.md's values table", k)
		}
	}
	for _, k := range got {
		if !slices.Contains(want, k) {
			t.Errorf("docs/deploy.md's values table lists %s, which values.yaml does not have", k)
		}
	}
}

var notesRef = regexp.MustCompile(`kubectl -n (\S+) (?:logs (deploy)/(\S+)|port-forward (svc)/(\S+) (\d+):(\d+)|get (lease) (\S+))`)

// TestNotesCommandsNameRenderedObjects: every kubectl command NOTES.txt
// prints names an object of the release (the Lease: the config's), in its
// namespace and on its port, and none chains a command after a blocking one.
func TestNotesCommandsNameRenderedObjects(t *testing.T) {
	for _, c := range helmCases {
		t.Run(c.name, func(t *testing.T) {
			notes, err := render.HelmNotes(chartDir, render.HelmRelease{Name: c.release, Namespace: c.namespace, Values: c.valuesMap(t)})
			if err != nil {
				t.Fatal(err)
			}
			objs := c.objects(t)
			dep := deploymentOf(t, objs)
			cfg := loadConfig(t, configOf(t, install{objs: objs, namespace: c.namespace}, dep))
			n := 0
			for _, line := range strings.Split(notes, "\n") {
				line = strings.TrimSpace(line)
				if !strings.HasPrefix(line, "kubectl") {
					continue
				}
				n++
				if strings.Contains(line, "port-forward") && strings.ContainsAny(line, "&;|") {
					t.Errorf("a command chained after port-forward, which blocks: %s", line)
				}
				m := notesRef.FindStringSubmatch(line)
				if m == nil {
					t.Errorf("NOTES command the test cannot read: %s", line)
					continue
				}
				if m[1] != c.namespace {
					t.Errorf("%s: namespace %s, the release's is %s", line, m[1], c.namespace)
				}
				switch {
				case m[2] == "deploy" && m[3] != dep.Name:
					t.Errorf("%s: Deployment %s is %s", line, m[3], dep.Name)
				case m[4] == "svc":
					svc := find(objs, "Service", c.namespace, m[5])
					if svc == nil {
						t.Errorf("%s: no Service %s rendered", line, m[5])
					}
					if _, port, _ := strings.Cut(cfg.Server.Address, ":"); m[6] != port || m[7] != port {
						t.Errorf("%s: the daemon serves on %s", line, cfg.Server.Address)
					}
				case m[8] == "lease" && m[9] != cfg.LeaderElection.Name:
					t.Errorf("%s: the config's Lease is %q", line, cfg.LeaderElection.Name)
				}
			}
			if n < 3 {
				t.Errorf("NOTES.txt prints %d kubectl commands, want logs, lease and port-forward:\n%s", n, notes)
			}
		})
	}
}
