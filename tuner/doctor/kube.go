package doctor

import (
	"context"
	"fmt"
	"slices"
	"strings"

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

// profileCheck compares the EPP Deployment's image tag, mapped to the
// build profile of that release (gate.ProfileForImageTag), with the
// target's profile.
func profileCheck(ctx context.Context, e *env) Result {
	ct, prof := e.target, e.tuned.Profile
	switch {
	case ct.Deployment == "" || ct.Namespace == "":
		return Result{Name: checkProfile, Status: StatusWarn, Reason: "not-checked",
			Detail: "the target names no EPP Deployment (deployment: and namespace:), so its image cannot be compared with profile " + prof.Name,
			Fix:    "set deployment: (the EPP Deployment) and namespace: on the target"}
	case e.kube == nil:
		return Result{Name: checkProfile, Status: StatusWarn, Reason: "not-checked", Detail: "no API server access: " + e.kubeErr.Error(),
			Fix: "give --kubeconfig (or kubernetes.kubeconfig) to check the EPP Deployment's image against the profile"}
	}
	dep, err := e.kube.AppsV1().Deployments(ct.Namespace).Get(ctx, ct.Deployment, metav1.GetOptions{})
	if err != nil {
		return Result{Name: checkProfile, Status: StatusFail, Reason: "deployment-unreadable",
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
			return Result{Name: checkProfile, Status: StatusPass, Detail: fmt.Sprintf("%s: the build of profile %s, the target's profile", where, build)}
		}
		return Result{Name: checkProfile, Status: StatusFail, Reason: "profile-mismatch",
			Detail: fmt.Sprintf("%s, the build of profile %s, but the target's profile is %s", where, build, prof.Name),
			Fix:    fmt.Sprintf("set profile: %s on the target (docs/gate.md), or run the EPP build profile %s describes", build, prof.Name)}
	}
	return Result{Name: checkProfile, Status: StatusWarn, Reason: "image-tag-unknown",
		Detail: fmt.Sprintf("Deployment %s/%s runs %s: no tag of a release doctor knows (a moving tag such as main or latest, a digest, a fork), so profile %s cannot be checked against the build",
			ct.Namespace, ct.Deployment, strings.Join(images, ", "), prof.Name),
		Fix: "make sure profile " + prof.Name + " is the build the EPP runs (docs/gate.md lists the profiles and their releases)"}
}

// monitorKind is a Prometheus Operator resource (monitoring.coreos.com/v1)
// and the field of its endpoints.
type monitorKind struct {
	gvr       schema.GroupVersionResource
	name, eps string
}

// monitorKinds are PodMonitors and ServiceMonitors.
func monitorKinds() []monitorKind {
	return []monitorKind{
		{schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "podmonitors"}, "PodMonitor", "podMetricsEndpoints"},
		{schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "servicemonitors"}, "ServiceMonitor", "endpoints"},
	}
}

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
func monitorChecks(ctx context.Context, e *env) []Result {
	ns := targetNamespace(e.target)
	switch {
	case ns == "":
		return []Result{{Name: checkMonitors, Status: StatusWarn, Reason: "not-checked",
			Detail: "no namespace known (the target has no namespace: and selector.vllm pins none), so its PodMonitors and ServiceMonitors were not read",
			Fix:    "set namespace: on the target, or pin namespace=\"…\" in selector.vllm"}}
	case e.dyn == nil:
		return []Result{{Name: checkMonitors, Status: StatusWarn, Reason: "not-checked", Detail: "no API server access: " + e.kubeErr.Error(),
			Fix: "give --kubeconfig (or kubernetes.kubeconfig) to check the PodMonitors and ServiceMonitors"}}
	}
	var out []Result
	counts := map[string]int{}
	for _, kind := range monitorKinds() {
		list, warn, err := monitorsSelecting(ctx, e, kind.gvr, ns)
		switch {
		case apierrors.IsNotFound(err):
			continue // the Operator's CRDs are not installed
		case err != nil:
			out = append(out, Result{Name: checkMonitors, Status: StatusWarn, Reason: "not-checked",
				Detail: fmt.Sprintf("%ss in %s cannot be listed: %v", kind.name, ns, err), Fix: "let gatetuner list " + kind.gvr.Resource + " in the namespace"})
			continue
		case warn != nil:
			warn.Detail = kind.name + "s " + warn.Detail
			out = append(out, *warn)
		}
		counts[kind.name] = len(list)
		for _, m := range list {
			out = append(out, monitorPorts(ctx, e, kind, m, ns)...)
		}
	}
	if len(out) == 0 {
		out = append(out, Result{Name: checkMonitors, Status: StatusPass,
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
	return slices.Contains(names, ns)
}

// monitorsSelecting lists the monitors of one kind that select ns: across
// the cluster, or, when gatetuner may not list them cluster-wide, those in
// ns only (warn names what was not read).
func monitorsSelecting(ctx context.Context, e *env, gvr schema.GroupVersionResource, ns string) ([]unstructured.Unstructured, *Result, error) {
	var warn *Result
	list, err := e.dyn.Resource(gvr).Namespace("").List(ctx, metav1.ListOptions{})
	if apierrors.IsForbidden(err) {
		warn = &Result{Name: checkMonitors, Status: StatusWarn, Reason: "not-checked",
			Detail: fmt.Sprintf("in other namespaces cannot be listed (%v): monitors elsewhere whose namespaceSelector selects %s were not read", err, ns),
			Fix:    "let gatetuner list " + gvr.Resource + " cluster-wide (a ClusterRole) to check monitors in a monitoring namespace"}
		list, err = e.dyn.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
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
func monitorPorts(ctx context.Context, e *env, kind monitorKind, m unstructured.Unstructured, ns string) []Result {
	eps, _, _ := unstructured.NestedSlice(m.Object, "spec", kind.eps)
	var out []Result
	for i, ep := range eps {
		epm, _ := ep.(map[string]any)
		port, _ := epm["port"].(string)
		if port == "" {
			continue
		}
		where := fmt.Sprintf("%s %s/%s %s[%d].port %q", kind.name, m.GetNamespace(), m.GetName(), kind.eps, i, port)
		if errs := validation.IsValidPortName(port); len(errs) > 0 {
			rule := "container port name (__meta_kubernetes_pod_container_port_name)"
			if kind.name == "ServiceMonitor" {
				rule = "Service port name (__meta_kubernetes_endpoint_port_name)"
			}
			out = append(out, Result{Name: checkMonitors, Status: StatusWarn, Reason: "monitor-port-number",
				Detail: fmt.Sprintf("%s is no port name (%s): the Prometheus Operator keeps only targets whose %s equals port, so this endpoint scrapes nothing", where, strings.Join(errs, "; "), rule),
				Fix:    "name the port (e.g. ports: [{name: metrics, containerPort: " + port + "}]) and set port: metrics, or use targetPort: " + port + " (deprecated, matched against the port number)"})
			continue
		}
		if c, bad := portUnmatched(ctx, e, kind.name, where, port, m, ns); bad {
			out = append(out, c)
		}
	}
	return out
}

// portUnmatched reports a monitor port that no port of the objects it
// selects in the target's namespace ns is named: a PodMonitor's the pods'
// container ports, a ServiceMonitor's the Services' ports.
func portUnmatched(ctx context.Context, e *env, kind, where, port string, m unstructured.Unstructured, ns string) (Result, bool) {
	sel, _, _ := unstructured.NestedMap(m.Object, "spec", "selector")
	var ls metav1.LabelSelector
	if sel != nil {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(sel, &ls); err != nil {
			return Result{}, false
		}
	}
	s, err := metav1.LabelSelectorAsSelector(&ls)
	if err != nil {
		return Result{}, false
	}
	objects, n, names, err := portNames(ctx, e, kind, ns, s.String())
	if err != nil {
		return Result{Name: checkMonitors, Status: StatusWarn, Reason: "not-checked",
			Detail: fmt.Sprintf("%s: the %s it selects cannot be listed, so the port name was not checked against them: %v", where, objects, err),
			Fix:    "let gatetuner list " + objects + " in the namespace"}, true
	}
	if n == 0 || slices.Contains(names, port) {
		return Result{}, false // nothing selected in ns (not running), or matched
	}
	var named []string
	for _, n := range names {
		if n != "" {
			named = append(named, n)
		}
	}
	return Result{Name: checkMonitors, Status: StatusWarn, Reason: "monitor-port-unmatched",
		Detail: fmt.Sprintf("%s: none of the %d %s it selects has a port named %q (their port names: %s), so it scrapes nothing", where, n, objects, port, orUnknown(strings.Join(named, ", "))),
		Fix:    "set port: to the name of the metrics port of the " + objects + " it selects"}, true
}

// portNames lists the port names ("" for an unnamed port) of the pods'
// containers (PodMonitor) or the Services (ServiceMonitor) the selector
// selects in ns, and how many objects it selects.
func portNames(ctx context.Context, e *env, kind, ns, selector string) (string, int, []string, error) {
	var names []string
	add := func(n string) {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	opts := metav1.ListOptions{LabelSelector: selector}
	if kind == "ServiceMonitor" {
		svcs, err := e.kube.CoreV1().Services(ns).List(ctx, opts)
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
	pods, err := e.kube.CoreV1().Pods(ns).List(ctx, opts)
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
