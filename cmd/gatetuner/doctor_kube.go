package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/config"
)

const (
	checkProfile  = "profile"
	checkMonitors = "monitors"
)

// profileCheck compares the EPP Deployment's image tag, mapped to the
// build profile of that release (gate.ProfileForImageTag), with the
// target's profile.
func (d *doctor) profileCheck(ctx context.Context, ct config.Target, prof gate.Profile) doctorCheck {
	switch {
	case ct.Deployment == "" || ct.Namespace == "":
		return doctorCheck{Name: checkProfile, Status: statusWarn, Reason: "not-checked",
			Detail: "the target names no EPP Deployment (deployment: and namespace:), so its image cannot be compared with profile " + prof.Name,
			Fix:    "set deployment: (the EPP Deployment) and namespace: on the target"}
	case d.kube == nil:
		return doctorCheck{Name: checkProfile, Status: statusWarn, Reason: "not-checked", Detail: "no API server access: " + d.kubeErr.Error(),
			Fix: "give --kubeconfig (or kubernetes.kubeconfig) to check the EPP Deployment's image against the profile"}
	}
	dep, err := d.kube.AppsV1().Deployments(ct.Namespace).Get(ctx, ct.Deployment, metav1.GetOptions{})
	if err != nil {
		return doctorCheck{Name: checkProfile, Status: statusFail, Reason: "deployment-unreadable",
			Detail: fmt.Sprintf("EPP Deployment %s/%s: %v", ct.Namespace, ct.Deployment, err),
			Fix:    "deployment: must name the EPP Deployment in the target's namespace, and gatetuner needs get on deployments there"}
	}
	var images []string
	for _, c := range dep.Spec.Template.Spec.Containers {
		images = append(images, c.Image)
		build, ok := gate.ProfileForImageTag(c.Image)
		if !ok {
			continue
		}
		where := fmt.Sprintf("Deployment %s/%s container %s runs %s", ct.Namespace, ct.Deployment, c.Name, c.Image)
		if build == prof.Name {
			return doctorCheck{Name: checkProfile, Status: statusPass, Detail: fmt.Sprintf("%s: the build of profile %s, the target's profile", where, build)}
		}
		return doctorCheck{Name: checkProfile, Status: statusFail, Reason: "profile-mismatch",
			Detail: fmt.Sprintf("%s, the build of profile %s, but the target's profile is %s", where, build, prof.Name),
			Fix:    fmt.Sprintf("set profile: %s on the target (docs/gate.md), or run the EPP build profile %s describes", build, prof.Name)}
	}
	return doctorCheck{Name: checkProfile, Status: statusWarn, Reason: "image-tag-unknown",
		Detail: fmt.Sprintf("Deployment %s/%s runs %s: no tag of a release doctor knows (a moving tag such as main or latest, a digest, a fork), so profile %s cannot be checked against the build",
			ct.Namespace, ct.Deployment, strings.Join(images, ", "), prof.Name),
		Fix: "make sure profile " + prof.Name + " is the build the EPP runs (docs/gate.md lists the profiles and their releases)"}
}

// Prometheus Operator resources (monitoring.coreos.com/v1).
var (
	podMonitors     = schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "podmonitors"}
	serviceMonitors = schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "servicemonitors"}
)

// targetNamespace is the target's namespace, else the one its vLLM
// selector pins with namespace="…".
func targetNamespace(ct config.Target) string {
	if ct.Namespace != "" {
		return ct.Namespace
	}
	ms, err := parser.NewParser(parser.Options{}).ParseMetricSelector("{" + ct.Selector.VLLM + "}")
	if err != nil {
		return ""
	}
	for _, m := range ms {
		if m.Name == "namespace" && m.Type == labels.MatchEqual {
			return m.Value
		}
	}
	return ""
}

// monitorChecks look at the PodMonitors and ServiceMonitors that select
// the target's namespace — those in it without a namespaceSelector, and
// those anywhere whose namespaceSelector is any or names it — for endpoints
// whose port cannot match the target's pods or Services: the Operator keeps
// a target whose port *name* equals port (docs/doctor.md), and a number is
// never a Kubernetes port name.
func (d *doctor) monitorChecks(ctx context.Context, ct config.Target) []doctorCheck {
	ns := targetNamespace(ct)
	switch {
	case ns == "":
		return []doctorCheck{{Name: checkMonitors, Status: statusWarn, Reason: "not-checked",
			Detail: "no namespace known (the target has no namespace: and selector.vllm pins none), so its PodMonitors and ServiceMonitors were not read",
			Fix:    "set namespace: on the target, or pin namespace=\"…\" in selector.vllm"}}
	case d.dyn == nil:
		return []doctorCheck{{Name: checkMonitors, Status: statusWarn, Reason: "not-checked", Detail: "no API server access: " + d.kubeErr.Error(),
			Fix: "give --kubeconfig (or kubernetes.kubeconfig) to check the PodMonitors and ServiceMonitors"}}
	}
	var out []doctorCheck
	counts := map[string]int{}
	for _, kind := range []struct {
		gvr       schema.GroupVersionResource
		name, eps string
	}{{podMonitors, "PodMonitor", "podMetricsEndpoints"}, {serviceMonitors, "ServiceMonitor", "endpoints"}} {
		list, warn, err := d.monitorsSelecting(ctx, kind.gvr, ns)
		switch {
		case apierrors.IsNotFound(err):
			continue // the Operator's CRDs are not installed
		case err != nil:
			out = append(out, doctorCheck{Name: checkMonitors, Status: statusWarn, Reason: "not-checked",
				Detail: fmt.Sprintf("%ss in %s cannot be listed: %v", kind.name, ns, err), Fix: "let gatetuner list " + kind.gvr.Resource + " in the namespace"})
			continue
		case warn != nil:
			warn.Detail = kind.name + "s " + warn.Detail
			out = append(out, *warn)
		}
		counts[kind.name] = len(list)
		for _, m := range list {
			out = append(out, d.monitorPorts(ctx, kind.name, kind.eps, m, ns)...)
		}
	}
	if len(out) == 0 {
		out = append(out, doctorCheck{Name: checkMonitors, Status: statusPass,
			Detail: fmt.Sprintf("%d PodMonitor(s) and %d ServiceMonitor(s) select %s: every endpoint's port can match a port name", counts["PodMonitor"], counts["ServiceMonitor"], ns)})
	}
	return out
}

// monitorSelects reports whether monitor m selects targets in namespace ns:
// prometheus-operator's rule (pkg/prometheus/promcfg.go,
// getNamespacesFromNamespaceSelector): namespaceSelector.any selects every
// namespace, else matchNames the namespaces named, else the monitor's own.
func monitorSelects(m unstructured.Unstructured, ns string) bool {
	if anyNS, _, _ := unstructured.NestedBool(m.Object, "spec", "namespaceSelector", "any"); anyNS {
		return true
	}
	names, _, _ := unstructured.NestedStringSlice(m.Object, "spec", "namespaceSelector", "matchNames")
	if len(names) == 0 {
		return m.GetNamespace() == ns
	}
	return contains(names, ns)
}

// monitorsSelecting lists the monitors of one kind that select ns: across
// the cluster, or, when gatetuner may not list them cluster-wide, those in
// ns only (warn names what was not read).
func (d *doctor) monitorsSelecting(ctx context.Context, gvr schema.GroupVersionResource, ns string) ([]unstructured.Unstructured, *doctorCheck, error) {
	var warn *doctorCheck
	list, err := d.dyn.Resource(gvr).Namespace("").List(ctx, metav1.ListOptions{})
	if apierrors.IsForbidden(err) {
		warn = &doctorCheck{Name: checkMonitors, Status: statusWarn, Reason: "not-checked",
			Detail: fmt.Sprintf("in other namespaces cannot be listed (%v): monitors elsewhere whose namespaceSelector selects %s were not read", err, ns),
			Fix:    "let gatetuner list " + gvr.Resource + " cluster-wide (a ClusterRole) to check monitors in a monitoring namespace"}
		list, err = d.dyn.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
	}
	if err != nil {
		return nil, nil, err
	}
	var out []unstructured.Unstructured
	for _, m := range list.Items {
		if monitorSelects(m, ns) {
			out = append(out, m)
		}
	}
	return out, warn, nil
}

// monitorPorts checks one monitor's endpoints: a port that is no valid
// port name (a number) matches nothing; a named port must be a port of
// some pod (PodMonitor) or Service (ServiceMonitor) it selects.
func (d *doctor) monitorPorts(ctx context.Context, kind, field string, m unstructured.Unstructured, ns string) []doctorCheck {
	eps, _, _ := unstructured.NestedSlice(m.Object, "spec", field)
	var out []doctorCheck
	for i, ep := range eps {
		e, _ := ep.(map[string]any)
		port, _ := e["port"].(string)
		if port == "" {
			continue
		}
		where := fmt.Sprintf("%s %s/%s %s[%d].port %q", kind, m.GetNamespace(), m.GetName(), field, i, port)
		if errs := validation.IsValidPortName(port); len(errs) > 0 {
			rule := "container port name (__meta_kubernetes_pod_container_port_name)"
			if kind == "ServiceMonitor" {
				rule = "Service port name (__meta_kubernetes_endpoint_port_name)"
			}
			out = append(out, doctorCheck{Name: checkMonitors, Status: statusWarn, Reason: "monitor-port-number",
				Detail: fmt.Sprintf("%s is no port name (%s): the Prometheus Operator keeps only targets whose %s equals port, so this endpoint scrapes nothing", where, strings.Join(errs, "; "), rule),
				Fix:    "name the port (e.g. ports: [{name: metrics, containerPort: " + port + "}]) and set port: metrics, or use targetPort: " + port + " (deprecated, matched against the port number)"})
			continue
		}
		if c, bad := d.portUnmatched(ctx, kind, where, port, m, ns); bad {
			out = append(out, c)
		}
	}
	return out
}

// portUnmatched reports a monitor port that no port of the objects it
// selects in the target's namespace ns is named: a PodMonitor's the pods'
// container ports, a ServiceMonitor's the Services' ports.
func (d *doctor) portUnmatched(ctx context.Context, kind, where, port string, m unstructured.Unstructured, ns string) (doctorCheck, bool) {
	sel, _, _ := unstructured.NestedMap(m.Object, "spec", "selector")
	var ls metav1.LabelSelector
	if err := convertMap(sel, &ls); err != nil {
		return doctorCheck{}, false
	}
	s, err := metav1.LabelSelectorAsSelector(&ls)
	if err != nil {
		return doctorCheck{}, false
	}
	objects, n, names, err := d.portNames(ctx, kind, ns, s.String())
	if err != nil {
		return doctorCheck{Name: checkMonitors, Status: statusWarn, Reason: "not-checked",
			Detail: fmt.Sprintf("%s: the %s it selects cannot be listed, so the port name was not checked against them: %v", where, objects, err),
			Fix:    "let gatetuner list " + objects + " in the namespace"}, true
	}
	if n == 0 || contains(names, port) {
		return doctorCheck{}, false // nothing selected in ns (not running), or matched
	}
	var named []string
	for _, n := range names {
		if n != "" {
			named = append(named, n)
		}
	}
	return doctorCheck{Name: checkMonitors, Status: statusWarn, Reason: "monitor-port-unmatched",
		Detail: fmt.Sprintf("%s: none of the %d %s it selects has a port named %q (their port names: %s), so it scrapes nothing", where, n, objects, port, orUnknown(strings.Join(named, ", "))),
		Fix:    "set port: to the name of the metrics port of the " + objects + " it selects"}, true
}

// portNames lists the port names ("" for an unnamed port) of the pods'
// containers (PodMonitor) or the Services (ServiceMonitor) the selector
// selects in ns, and how many objects it selects.
func (d *doctor) portNames(ctx context.Context, kind, ns, selector string) (string, int, []string, error) {
	var names []string
	add := func(n string) {
		if !contains(names, n) {
			names = append(names, n)
		}
	}
	opts := metav1.ListOptions{LabelSelector: selector}
	if kind == "ServiceMonitor" {
		svcs, err := d.kube.CoreV1().Services(ns).List(ctx, opts)
		if err != nil {
			return "services", 0, nil, err
		}
		for _, sv := range svcs.Items {
			for _, p := range sv.Spec.Ports {
				add(p.Name)
			}
		}
		return "services", len(svcs.Items), names, nil
	}
	pods, err := d.kube.CoreV1().Pods(ns).List(ctx, opts)
	if err != nil {
		return "pods", 0, nil, err
	}
	for _, p := range pods.Items {
		for _, c := range p.Spec.Containers {
			for _, cp := range c.Ports {
				add(cp.Name)
			}
		}
	}
	return "pods", len(pods.Items), names, nil
}

// convertMap decodes an unstructured map into a typed object.
func convertMap(in map[string]any, out any) error {
	if in == nil {
		return nil
	}
	return runtimeConverter.FromUnstructured(in, out)
}

func fileReadable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	return f.Close()
}

// streamAnswers GETs a records stream and checks it answers 200.
func streamAnswers(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("records stream %s: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("records stream %s: %w", url, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("records stream %s: HTTP %d", url, resp.StatusCode)
	}
	return nil
}

var runtimeConverter = runtime.DefaultUnstructuredConverter
