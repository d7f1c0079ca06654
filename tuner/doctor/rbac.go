package doctor

import (
	"context"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/sink"
)

// access is one permission the daemon needs: a verb on a resource (by name
// when the Role limits it by name) in a namespace, and what for.
type access struct {
	namespace, group, resource, name, verb, why string
}

func (a access) String() string {
	s := a.verb + " " + a.resource
	if a.group != "" {
		s += "." + a.group
	}
	if a.name != "" {
		s += " " + a.name
	}
	return s + " in " + a.namespace
}

// requiredAccess is what the daemon does with the API server for cfg, the
// rules tuner/sink.RenderRBAC grants (docs/deploy.md): per namespace of a
// ConfigMap target, get/update/patch its ConfigMaps, get/patch its EPP
// Deployments and create/patch events; with leader election, get/update the
// Lease and create Leases in its namespace.
func requiredAccess(cfg *config.Config, leaderElection bool) []access {
	var targets []sink.Target
	for _, t := range cfg.Targets {
		targets = append(targets, sink.Target{Namespace: t.Namespace, ConfigMap: t.ConfigMap, Deployment: t.Deployment, File: t.File})
	}
	var out []access
	for _, rt := range sink.RBACTargets(targets...) {
		for _, cm := range rt.ConfigMaps {
			for _, v := range []string{"get", "update", "patch"} {
				out = append(out, access{rt.Namespace, "", "configmaps", cm, v, "read and write the EPP config"})
			}
		}
		for _, dep := range rt.Deployments {
			for _, v := range []string{"get", "patch"} {
				out = append(out, access{rt.Namespace, "apps", "deployments", dep, v, "roll the EPP and read its rollout"})
			}
		}
		for _, v := range []string{"create", "patch"} {
			out = append(out, access{rt.Namespace, "events.k8s.io", "events", "", v, "record Events on the EPP config"})
		}
	}
	if le := cfg.LeaderElection; leaderElection {
		for _, v := range []string{"get", "update"} {
			out = append(out, access{le.Namespace, "coordination.k8s.io", "leases", le.Name, v, "leader election"})
		}
		out = append(out, access{le.Namespace, "coordination.k8s.io", "leases", "", "create", "leader election (the first replica creates the Lease)"})
	}
	return out
}

// rbacCheck asks the API server, with a SubjectAccessReview per
// permission, whether the daemon's ServiceAccount may do what the daemon
// does.
func rbacCheck(ctx context.Context, e *env) Result {
	ns, name, _ := strings.Cut(e.serviceAccount, "/")
	who := "ServiceAccount " + e.serviceAccount
	if e.kube == nil {
		return Result{Name: checkRBAC, Status: StatusWarn, Reason: "not-checked", Detail: "no API server access: " + e.kubeErr.Error(),
			Fix: "give --kubeconfig (or kubernetes.kubeconfig) to check " + who + "'s permissions"}
	}
	need := requiredAccess(e.cfg, e.leaderElection)
	if len(need) == 0 {
		return Result{Name: checkRBAC, Status: StatusPass, Detail: "every target is a file: the daemon needs no API server permission"}
	}
	user := "system:serviceaccount:" + ns + ":" + name
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
	var denied []string
	for _, a := range need {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: a.namespace, Verb: a.verb, Group: a.group, Resource: a.resource, Name: a.name}}}
		res, err := e.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			return Result{Name: checkRBAC, Status: StatusWarn, Reason: "not-checked",
				Detail: fmt.Sprintf("a SubjectAccessReview for %s could not be created: %v", who, err),
				Fix:    "run doctor as a user allowed to create subjectaccessreviews (authorization.k8s.io), or check the Role with kubectl auth can-i --as " + user}
		}
		if !res.Status.Allowed {
			denied = append(denied, fmt.Sprintf("%s (%s)", a, a.why))
		}
	}
	if len(denied) > 0 {
		return Result{Name: checkRBAC, Status: StatusFail, Reason: "rbac-denied",
			Detail: fmt.Sprintf("%s may not: %s", who, strings.Join(denied, "; ")),
			Fix:    "apply the RBAC gatetuner renders for this config (deploy/, tuner/sink.RenderRBAC; docs/deploy.md), bound to " + who + ", or name the daemon's ServiceAccount with --service-account NAMESPACE/NAME"}
	}
	return Result{Name: checkRBAC, Status: StatusPass, Detail: fmt.Sprintf("%s may do all %d things the daemon does (SubjectAccessReview each)", who, len(need))}
}
