package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gatetuner/gatetuner/tuner/config"
)

const (
	checkPDRoles = "pd-roles"
	// roleLabel is llm-d's P/D role pod label (docs/exporters.md, "P/D pools").
	roleLabel = "llm-d.ai/role"
)

// prefillOnly and decodeOnly are the llm-d.ai/role values of pods that do
// one phase only: a pool with both kinds is disaggregated.
var (
	prefillOnly = []string{"prefill", "encode-prefill"}
	decodeOnly  = []string{"decode"}
)

// pdRolesCheck reads the llm-d.ai/role labels of the pods in the target's
// namespace and says whether the pool is prefill/decode-disaggregated and
// which pods do which phase.
func (d *doctor) pdRolesCheck(ctx context.Context, ct config.Target) doctorCheck {
	ns := targetNamespace(ct)
	switch {
	case ns == "":
		return doctorCheck{Name: checkPDRoles, Status: statusWarn, Reason: "not-checked",
			Detail: "no namespace known (the target has no namespace: and selector.vllm pins none), so the pods' " + roleLabel + " labels were not read",
			Fix:    "set namespace: on the target, or pin namespace=\"…\" in selector.vllm"}
	case d.kube == nil:
		return doctorCheck{Name: checkPDRoles, Status: statusWarn, Reason: "not-checked", Detail: "no API server access: " + d.kubeErr.Error(),
			Fix: "give --kubeconfig (or kubernetes.kubeconfig) to read the pods' " + roleLabel + " labels"}
	}
	pods, err := d.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: roleLabel})
	if err != nil {
		return doctorCheck{Name: checkPDRoles, Status: statusWarn, Reason: "not-checked",
			Detail: fmt.Sprintf("list pods labelled %s in %s: %v", roleLabel, ns, err), Fix: "grant list on pods in " + ns}
	}
	byRole := map[string][]string{}
	for _, p := range pods.Items {
		r := p.Labels[roleLabel]
		byRole[r] = append(byRole[r], p.Name)
	}
	var parts []string
	for _, r := range slices.Sorted(maps.Keys(byRole)) {
		slices.Sort(byRole[r])
		parts = append(parts, fmt.Sprintf("%s: %s", r, strings.Join(byRole[r], ", ")))
	}
	count := func(roles []string) (n int) {
		for _, r := range roles {
			n += len(byRole[r])
		}
		return n
	}
	switch {
	case len(pods.Items) == 0:
		return doctorCheck{Name: checkPDRoles, Status: statusPass, Detail: fmt.Sprintf("no pod in %s carries %s: not a P/D pool", ns, roleLabel)}
	case count(prefillOnly) == 0 || count(decodeOnly) == 0:
		return doctorCheck{Name: checkPDRoles, Status: statusPass,
			Detail: fmt.Sprintf("not disaggregated (no pool of both prefill-only and decode-only pods) in %s; roles %s", ns, strings.Join(parts, "; "))}
	}
	return doctorCheck{Name: checkPDRoles, Status: statusWarn, Reason: "pd-pool-not-modelled",
		Detail: fmt.Sprintf("a P/D pool in %s (roles %s): the EPP sends each request to a decode pod and runs the prefill profile only when the decider disaggregates; "+
			"a decode pod counts the KV it pulls from the prefill pod as cached, so its cached tokens are nearly the whole prompt. "+
			"The estimator does not tell decode pods apart (their role does not reach Prometheus): its cached-token and drain-rate estimates mix both kinds of pods",
			ns, strings.Join(parts, "; ")),
		Fix: "gatetuner does not model P/D pools yet (docs/exporters.md, \"P/D pools\"): run it in mode off or approve on this pool, " +
			"and check each recommendation against the prefill pods' own measurements"}
}
