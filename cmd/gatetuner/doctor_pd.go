package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/eppconfig"
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

// pdConfig is where the EPP config puts the target's filter in a P/D setup.
type pdConfig struct {
	// handler is the P/D profile handler plugin's type ("" when none).
	handler string
	// prefill and decode name the handler's profiles; gate is the role of
	// the profile(s) referencing the filter: prefill, decode, both or "".
	prefill, decode, gate string
	profiles              []string
}

// pdOfConfig reads the config's P/D profile handler (llm-d-router's
// disagg-profile-handler, or its deprecated pd-profile-handler alias) and
// which of its profiles references the instance. The profile names default
// to "prefill" and "decode" and are set by profiles.{prefill,decode}, or
// the deprecated prefillProfile / decodeProfile (disagg_profile_handler.go).
func pdOfConfig(in eppconfig.Instance) pdConfig {
	pc := pdConfig{prefill: "prefill", decode: "decode", profiles: in.Profiles()}
	for _, p := range in.Config.Plugins {
		if p.Type != "disagg-profile-handler" && p.Type != "pd-profile-handler" {
			continue
		}
		pc.handler = p.Type
		var params struct {
			Profiles struct {
				Prefill string `json:"prefill"`
				Decode  string `json:"decode"`
			} `json:"profiles"`
			PrefillProfile string `json:"prefillProfile"`
			DecodeProfile  string `json:"decodeProfile"`
		}
		if len(p.Parameters) > 0 && json.Unmarshal(p.Parameters, &params) == nil {
			for _, v := range []struct {
				dst      *string
				new, old string
			}{{&pc.prefill, params.Profiles.Prefill, params.PrefillProfile},
				{&pc.decode, params.Profiles.Decode, params.DecodeProfile}} {
				switch {
				case v.new != "":
					*v.dst = v.new
				case v.old != "":
					*v.dst = v.old
				}
			}
		}
	}
	inPrefill, inDecode := slices.Contains(pc.profiles, pc.prefill), slices.Contains(pc.profiles, pc.decode)
	switch {
	case pc.handler == "":
	case inPrefill && inDecode:
		pc.gate = "both"
	case inPrefill:
		pc.gate = estimator.PDGatePrefill
	case inDecode:
		pc.gate = estimator.PDGateDecode
	}
	return pc
}

// podRoles lists the pods of the target's namespace by llm-d.ai/role; why
// says why they were not read.
func (d *doctor) podRoles(ctx context.Context, ct config.Target) (map[string][]string, *doctorCheck) {
	ns := targetNamespace(ct)
	switch {
	case ns == "":
		return nil, &doctorCheck{Name: checkPDRoles, Status: statusWarn, Reason: "not-checked",
			Detail: "no namespace known (the target has no namespace: and selector.vllm pins none), so the pods' " + roleLabel + " labels were not read",
			Fix:    "set namespace: on the target, or pin namespace=\"…\" in selector.vllm"}
	case d.kube == nil:
		return nil, &doctorCheck{Name: checkPDRoles, Status: statusWarn, Reason: "not-checked", Detail: "no API server access: " + d.kubeErr.Error(),
			Fix: "give --kubeconfig (or kubernetes.kubeconfig) to read the pods' " + roleLabel + " labels"}
	}
	pods, err := d.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: roleLabel})
	if err != nil {
		return nil, &doctorCheck{Name: checkPDRoles, Status: statusWarn, Reason: "not-checked",
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
func (d *doctor) pdRolesCheck(ctx context.Context, ct config.Target, pc *pdConfig, est *estimator.Estimates) doctorCheck {
	byRole, why := d.podRoles(ctx, ct)
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
	rolesPD := count(prefillOnly) > 0 && count(decodeOnly) > 0
	var evidence []string
	if rolesPD {
		evidence = append(evidence, "roles "+strings.Join(parts, "; "))
	}
	if pc != nil && pc.handler != "" {
		evidence = append(evidence, "the EPP config's "+pc.handler)
	}
	if est != nil && est.Shape.PD != nil {
		evidence = append(evidence, strings.Join(est.Shape.PD.Evidence, "; "))
	}
	if len(evidence) == 0 {
		if why != nil {
			return *why
		}
		detail := fmt.Sprintf("no pod in %s carries %s, no P/D profile handler, no KV transfer: not a P/D pool", targetNamespace(ct), roleLabel)
		if len(parts) > 0 {
			detail = fmt.Sprintf("not disaggregated (no pool of both prefill-only and decode-only pods) in %s; roles %s", targetNamespace(ct), strings.Join(parts, "; "))
		}
		return doctorCheck{Name: checkPDRoles, Status: statusPass, Detail: detail}
	}
	return pdGateCheck(ct, pc, "a P/D pool ("+strings.Join(evidence, "; ")+")")
}

// pdGateCheck compares the target's pdGateProfile with the profile the EPP
// config puts the filter in.
func pdGateCheck(ct config.Target, pc *pdConfig, what string) doctorCheck {
	c := doctorCheck{Name: checkPDRoles}
	switch {
	case pc == nil || pc.handler == "":
		c.Status, c.Reason = statusWarn, "pd-profile-handler-missing"
		c.Detail = what + ", but the EPP config read has no disagg-profile-handler: the filter then sees every pod, prefill and decode alike"
		c.Fix = "check that the target names the EPP config the P/D EPP runs (configMap/key), with its disagg-profile-handler"
	case pc.gate == "both":
		c.Status, c.Reason = statusWarn, "pd-gate-in-both-profiles"
		c.Detail = fmt.Sprintf("%s; the filter is in both the %s and the %s profile: one bar then gates prefill pods and decode pods, and gatetuner tunes it for the prefill pods", what, pc.prefill, pc.decode)
		c.Fix = "keep the prefix-cache-affinity-filter in the " + pc.prefill + " profile only, and set pdGateProfile: prefill"
	case pc.gate == "":
		c.Status, c.Reason = statusWarn, "pd-gate-profile-unknown"
		c.Detail = fmt.Sprintf("%s; the filter is in profile(s) %s, neither the handler's %s nor its %s profile", what, strings.Join(pc.profiles, ", "), pc.prefill, pc.decode)
		c.Fix = "reference the filter from the " + pc.prefill + " profile and set pdGateProfile: prefill"
	case pc.gate == estimator.PDGateDecode:
		c.Status, c.Reason = statusWarn, string(estimator.ReasonPDGateOnDecodeProfile)
		c.Detail = fmt.Sprintf("%s; the filter is in the %s profile: its in-flight tokens count prompts the decode pods receive by KV transfer and never compute, so the estimate holds (docs/estimator.md, \"P/D pools\")", what, pc.decode)
		c.Fix = "move the prefix-cache-affinity-filter to the " + pc.prefill + " profile and set pdGateProfile: prefill"
	case ct.PDGateProfile == "":
		c.Status, c.Reason = statusWarn, "pd-gate-profile-unset"
		c.Detail = fmt.Sprintf("%s; the filter is in the %s profile, and the target sets no pdGateProfile: the estimator tells the profile from the metrics only when some requests are decode-only and the gate's decision counter is exported, else it holds pd-gate-profile-unknown", what, pc.prefill)
		c.Fix = "set pdGateProfile: " + pc.gate + " on the target"
	case ct.PDGateProfile != pc.gate:
		c.Status, c.Reason = statusFail, string(estimator.ReasonPDGateProfileMismatch)
		c.Detail = fmt.Sprintf("%s; the target's pdGateProfile is %s but the EPP config puts the filter in the %s profile", what, ct.PDGateProfile, pc.gate)
		c.Fix = "set pdGateProfile: " + pc.gate + " on the target"
	default:
		c.Status = statusPass
		c.Detail = fmt.Sprintf("%s; the filter is in the %s profile and pdGateProfile says so: the estimator reads the prefill pods", what, pc.prefill)
	}
	return c
}
