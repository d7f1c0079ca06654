package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/viper"
	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gatetuner/gatetuner/deploy/internal/render"
	"github.com/gatetuner/gatetuner/exporter"
	"github.com/gatetuner/gatetuner/test/kubeharness"
	"github.com/gatetuner/gatetuner/tuner/config"
)

// Paths of the shipped artifacts, relative to this package.
const (
	kustomizeBase = "kustomize/base"
	// kustomizeOverlay is the overlay docs/deploy.md shows.
	kustomizeOverlay = "kustomize/overlays/example"
	grafanaDir       = "grafana"
	chartDir         = "helm/gatetuner"
	dashboardPath    = "grafana/gatetuner.json"
	chartDashboard   = "helm/gatetuner/files/gatetuner.json"
	chartRuleSpec    = "helm/gatetuner/files/prometheusrule-spec.yaml"
	dockerfilePath   = "Dockerfile"
	crdDir           = "testdata/crds"
)

// helmCase is one way a user installs the chart.
type helmCase struct {
	name      string
	release   string
	namespace string
	values    string // file under the chart's ci/ (chart-testing's layout)
}

// helmCases are the chart renderings every test checks.
var helmCases = []helmCase{
	{name: "example", release: "gatetuner", namespace: "gatetuner", values: "example-values.yaml"},
	{name: "multi", release: "tuner", namespace: "platform", values: "multi-values.yaml"},
	{name: "off", release: "gatetuner", namespace: "gatetuner", values: "off-values.yaml"},
	{name: "openshift", release: "gatetuner", namespace: "gatetuner", values: "openshift-values.yaml"},
}

// chartCIDir holds the chart's test values, one file per helmCase.
const chartCIDir = chartDir + "/ci"

func (c helmCase) valuesMap(t testing.TB) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValuesFile(filepath.Join(chartCIDir, c.values))
	if err != nil {
		t.Fatalf("read %s: %v", c.values, err)
	}
	return v.AsMap()
}

// render renders the chart for the case, as `helm template` would.
func (c helmCase) render(t testing.TB) []byte {
	t.Helper()
	out, err := render.Helm(chartDir, render.HelmRelease{Name: c.release, Namespace: c.namespace, Values: c.valuesMap(t)})
	if err != nil {
		t.Fatalf("helm template %s: %v", c.name, err)
	}
	return out
}

func (c helmCase) objects(t testing.TB) []*unstructured.Unstructured {
	t.Helper()
	return decode(t, c.render(t))
}

func kustomizeObjects(t testing.TB, dir string) []*unstructured.Unstructured {
	t.Helper()
	out, err := render.Kustomize(dir)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, out)
}

func decode(t testing.TB, manifests []byte) []*unstructured.Unstructured {
	t.Helper()
	objs, err := kubeharness.DecodeManifests(manifests)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// ofKind returns the objects of kind, in order.
func ofKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// one returns the only object of kind, failing the test otherwise.
func one(t testing.TB, objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	t.Helper()
	got := ofKind(objs, kind)
	if len(got) != 1 {
		t.Fatalf("want exactly one %s, got %d", kind, len(got))
	}
	return got[0]
}

func find(objs []*unstructured.Unstructured, kind, namespace, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetNamespace() == namespace && o.GetName() == name {
			return o
		}
	}
	return nil
}

// convert decodes an unstructured object into a typed one.
func convert[T any](t testing.TB, u *unstructured.Unstructured) *T {
	t.Helper()
	var out T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, &out, true); err != nil {
		t.Fatalf("%s %s/%s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return &out
}

func deploymentOf(t testing.TB, objs []*unstructured.Unstructured) *appsv1.Deployment {
	t.Helper()
	return convert[appsv1.Deployment](t, one(t, objs, "Deployment"))
}

// loadConfig loads a config file's text with the daemon's own loader.
func loadConfig(t testing.TB, text string) *config.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	v := viper.New()
	v.SetConfigFile(path)
	cfg, err := config.Load(v)
	if err != nil {
		t.Fatalf("the daemon rejects the shipped config: %v\n%s", err, text)
	}
	return cfg
}

// normRules renders RBAC rules order-insensitively, one line a rule.
func normRules(rules []rbacv1.PolicyRule) []string {
	out := make([]string, 0, len(rules))
	for _, r := range rules {
		s := func(v []string) string {
			v = slices.Clone(v)
			sort.Strings(v)
			return strings.Join(v, ",")
		}
		out = append(out, fmt.Sprintf("groups=[%s] resources=[%s] names=[%s] verbs=[%s] urls=[%s]",
			s(r.APIGroups), s(r.Resources), s(r.ResourceNames), s(r.Verbs), s(r.NonResourceURLs)))
	}
	sort.Strings(out)
	return out
}

// metricInfo is one exported series name and its labels.
type metricInfo struct {
	labels map[string]bool
}

var (
	descName   = regexp.MustCompile(`fqName: "([^"]*)"`)
	descLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}\}$`)
)

// exporterMetrics lists every series name exporter.New registers, with its
// labels (histograms with their _bucket, _sum and _count series).
func exporterMetrics(t testing.TB) map[string]metricInfo {
	t.Helper()
	m := exporter.New("test", "test")
	out := map[string]metricInfo{}
	add := func(name string, labels []string, histogram bool) {
		set := map[string]bool{}
		for _, l := range labels {
			if l != "" {
				set[strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")")] = true
			}
		}
		if !histogram {
			out[name] = metricInfo{labels: set}
			return
		}
		withLE := map[string]bool{"le": true}
		for l := range set {
			withLE[l] = true
		}
		out[name+"_bucket"] = metricInfo{labels: withLE}
		out[name+"_sum"] = metricInfo{labels: set}
		out[name+"_count"] = metricInfo{labels: set}
	}
	v := reflect.ValueOf(m).Elem()
	for i := 0; i < v.NumField(); i++ {
		c, ok := v.Field(i).Interface().(prometheus.Collector)
		if !ok || v.Type().Field(i).Name == "Registry" {
			continue
		}
		_, histogram := c.(*prometheus.HistogramVec)
		ch := make(chan *prometheus.Desc, 8)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			s := d.String()
			n := descName.FindStringSubmatch(s)
			l := descLabels.FindStringSubmatch(s)
			if n == nil || l == nil {
				t.Fatalf("cannot read metric descriptor %s", s)
			}
			add(n[1], strings.Split(l[1], ","), histogram)
		}
	}
	// Metrics not held in a field (gatetuner_build_info, Go and process collectors).
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if _, ok := out[f.GetName()]; ok {
			continue
		}
		var labels []string
		if ms := f.GetMetric(); len(ms) > 0 {
			for _, lp := range ms[0].GetLabel() {
				labels = append(labels, lp.GetName())
			}
		}
		add(f.GetName(), labels, f.GetType().String() == "HISTOGRAM")
	}
	return out
}

// scrapeLabels are the labels Prometheus adds to every series of a target
// discovered through the ServiceMonitor.
var scrapeLabels = map[string]bool{"job": true, "instance": true, "namespace": true, "pod": true, "service": true, "endpoint": true, "container": true}
