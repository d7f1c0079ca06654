package doctor

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/eppconfig"
)

// roleLabel is llm-d's P/D role pod label (docs/exporters.md, "P/D pools").
const roleLabel = "llm-d.ai/role"

// onePhaseRoles are the llm-d.ai/role values of pods that do one phase
// only, prefill and decode: a pool with both kinds is disaggregated.
func onePhaseRoles() (prefillOnly, decodeOnly []string) {
	return []string{"prefill", "encode-prefill"}, []string{"decode"}
}

// podRoles lists the pods of the target's namespace by llm-d.ai/role; why
// says why they were not read.
func podRoles(ctx context.Context, e *env) (map[string][]string, *Result) {
	ns := targetNamespace(e.target)
	switch {
	case ns == "":
		return nil, &Result{Name: checkPDRoles, Status: StatusWarn, Reason: "not-checked",
			Detail: "no namespace known (the target has no namespace: and selector.vllm pins none), so the pods' " + roleLabel + " labels were not read",
			Fix:    "set namespace: on the target, or pin namespace=\"…\" in selector.vllm"}
	case e.kube == nil:
		return nil, &Result{Name: checkPDRoles, Status: StatusWarn, Reason: "not-checked", Detail: "no API server access: " + e.kubeErr.Error(),
			Fix: "give --kubeconfig (or kubernetes.kubeconfig) to read the pods' " + roleLabel + " labels"}
	}
	pods, err := e.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: roleLabel})
	if err != nil {
		return nil, &Result{Name: checkPDRoles, Status: StatusWarn, Reason: "not-checked",
			Detail: fmt.Sprintf("list pods labelled %s in %s: %v", roleLabel, ns, err), Fix: "grant list on pods in " + ns}
	}
	byRole := map[string][]string{}
	for _, p := range pods.Items {
		r := p.Labels[roleLabel]
		byRole[r] = append(byRole[r], p.Name)
	}
	return byRole, nil
}

// pdRolesCheck says whether the target's pool is prefill/decode-disaggregated
// (the pods' llm-d.ai/role labels, the EPP config's profile handler, the
// estimator's evidence) and whether the target's pdGateProfile names the
// profile the EPP config puts the filter in.
func pdRolesCheck(ctx context.Context, e *env) Result {
	ct := e.target
	var pc *eppconfig.PD
	if e.eppErr == nil {
		pd := e.epp.Instances[0].Instance.PD()
		pc = &pd
	}
	byRole, why := podRoles(ctx, e)
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
	prefillOnly, decodeOnly := onePhaseRoles()
	rolesPD := count(prefillOnly) > 0 && count(decodeOnly) > 0
	var evidence []string
	if rolesPD {
		evidence = append(evidence, "roles "+strings.Join(parts, "; "))
	}
	if pc != nil && pc.Handler != "" {
		evidence = append(evidence, "the EPP config's "+pc.Handler)
	}
	if e.est != nil && e.est.Shape.PD != nil {
		evidence = append(evidence, strings.Join(e.est.Shape.PD.Evidence, "; "))
	}
	if len(evidence) == 0 {
		if why != nil {
			return *why
		}
		detail := fmt.Sprintf("no pod in %s carries %s, no P/D profile handler, no KV transfer: not a P/D pool", targetNamespace(ct), roleLabel)
		if len(parts) > 0 {
			detail = fmt.Sprintf("not disaggregated (no pool of both prefill-only and decode-only pods) in %s; roles %s", targetNamespace(ct), strings.Join(parts, "; "))
		}
		return Result{Name: checkPDRoles, Status: StatusPass, Detail: detail}
	}
	return pdGateCheck(ct, pc, "a P/D pool ("+strings.Join(evidence, "; ")+")")
}

// pdGateCheck compares the target's pdGateProfile with the profile the EPP
// config puts the filter in.
func pdGateCheck(ct config.Target, pc *eppconfig.PD, what string) Result {
	c := Result{Name: checkPDRoles}
	switch {
	case pc == nil || pc.Handler == "":
		c.Status, c.Reason = StatusWarn, "pd-profile-handler-missing"
		c.Detail = what + ", but the EPP config read has no disagg-profile-handler: the filter then sees every pod, prefill and decode alike"
		c.Fix = "check that the target names the EPP config the P/D EPP runs (configMap/key), with its disagg-profile-handler"
	case pc.Gate == eppconfig.RoleBoth:
		c.Status, c.Reason = StatusWarn, "pd-gate-in-both-profiles"
		c.Detail = fmt.Sprintf("%s; the filter is in both the %s and the %s profile: one bar then gates prefill pods and decode pods, and gatetuner tunes it for the prefill pods", what, pc.Prefill, pc.Decode)
		c.Fix = "keep the prefix-cache-affinity-filter in the " + pc.Prefill + " profile only, and set pdGateProfile: prefill"
	case pc.Gate == "":
		c.Status, c.Reason = StatusWarn, "pd-gate-profile-unknown"
		c.Detail = fmt.Sprintf("%s; the filter is in profile(s) %s, neither the handler's %s nor its %s profile", what, strings.Join(pc.Profiles, ", "), pc.Prefill, pc.Decode)
		c.Fix = "reference the filter from the " + pc.Prefill + " profile and set pdGateProfile: prefill"
	case pc.Gate == eppconfig.RoleDecode:
		c.Status, c.Reason = StatusWarn, string(estimator.ReasonPDGateOnDecodeProfile)
		c.Detail = fmt.Sprintf("%s; the filter is in the %s profile: its in-flight tokens count prompts the decode pods receive by KV transfer and never compute, so the estimate holds (docs/estimator.md, \"P/D pools\")", what, pc.Decode)
		c.Fix = "move the prefix-cache-affinity-filter to the " + pc.Prefill + " profile and set pdGateProfile: prefill"
	case ct.PDGateProfile == "":
		c.Status, c.Reason = StatusWarn, "pd-gate-profile-unset"
		c.Detail = fmt.Sprintf("%s; the filter is in the %s profile, and the target sets no pdGateProfile: the estimator tells the profile from the metrics only when some requests are decode-only and the gate's decision counter is exported, else it holds pd-gate-profile-unknown", what, pc.Prefill)
		c.Fix = "set pdGateProfile: " + pc.Gate + " on the target"
	case ct.PDGateProfile != pc.Gate:
		c.Status, c.Reason = StatusFail, string(estimator.ReasonPDGateProfileMismatch)
		c.Detail = fmt.Sprintf("%s; the target's pdGateProfile is %s but the EPP config puts the filter in the %s profile", what, ct.PDGateProfile, pc.Gate)
		c.Fix = "set pdGateProfile: " + pc.Gate + " on the target"
	default:
		c.Status = StatusPass
		c.Detail = fmt.Sprintf("%s; the filter is in the %s profile and pdGateProfile says so: the estimator reads the prefill pods", what, pc.Prefill)
	}
	return c
}
