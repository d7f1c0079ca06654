package sink

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// RBAC names used by RenderRBAC.
const (
	// RoleName names the Role and RoleBinding in each target namespace.
	RoleName = "gatetuner"
	// LeaderElectionRoleName names the Role and RoleBinding for the Lease.
	LeaderElectionRoleName = "gatetuner-leader-election"
)

// RBACConfig describes what the daemon touches.
type RBACConfig struct {
	// ServiceAccount and ServiceAccountNamespace name the daemon's identity
	// (default "gatetuner" in namespace "gatetuner").
	ServiceAccount          string
	ServiceAccountNamespace string
	// LeaseName and LeaseNamespace name the leader-election Lease (default
	// "gatetuner" in the ServiceAccount's namespace).
	LeaseName      string
	LeaseNamespace string
	// Targets are the namespaces with the ConfigMaps and Deployments written.
	Targets []RBACTarget
}

// RBACTarget is what the daemon writes in one namespace.
type RBACTarget struct {
	Namespace   string
	ConfigMaps  []string
	Deployments []string
}

// RBACTargets groups the Kubernetes targets by namespace (file targets need no RBAC).
func RBACTargets(targets ...Target) []RBACTarget {
	byNS := map[string]*RBACTarget{}
	for _, t := range targets {
		if t.IsFile() {
			continue
		}
		rt := byNS[t.Namespace]
		if rt == nil {
			rt = &RBACTarget{Namespace: t.Namespace}
			byNS[t.Namespace] = rt
		}
		if t.ConfigMap != "" && !slices.Contains(rt.ConfigMaps, t.ConfigMap) {
			rt.ConfigMaps = append(rt.ConfigMaps, t.ConfigMap)
		}
		if t.Deployment != "" && !slices.Contains(rt.Deployments, t.Deployment) {
			rt.Deployments = append(rt.Deployments, t.Deployment)
		}
	}
	out := make([]RBACTarget, 0, len(byNS))
	for _, rt := range byNS {
		out = append(out, *rt)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Namespace < out[j].Namespace })
	return out
}

// RenderRBAC renders the ServiceAccount, and per namespace the Role and
// RoleBinding, that let the daemon do exactly what the sink and the leader
// election do: get/update/patch the named ConfigMaps, get/patch the named
// Deployments, create/patch Events, get/update the named Lease and create
// Leases (create cannot be limited by name). Nothing is cluster-wide.
func RenderRBAC(cfg RBACConfig) ([]byte, error) {
	cfg = cfg.withDefaults()
	targets, namespaces, err := cfg.byNamespace()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString("# gatetuner RBAC, rendered by tuner/sink.RenderRBAC: namespaced Roles only, every\n")
	b.WriteString("# ConfigMap, Deployment and Lease limited by name. Nothing cluster-wide.\n")
	fmt.Fprintf(&b, `apiVersion: v1
kind: ServiceAccount
metadata:
  name: %s
  namespace: %s
  labels:
    app.kubernetes.io/name: gatetuner
`, cfg.ServiceAccount, cfg.ServiceAccountNamespace)
	for _, ns := range namespaces {
		writeTargetRole(&b, cfg, targets[ns])
	}
	writeLeaseRole(&b, cfg)
	return b.Bytes(), nil
}

// withDefaults names the service account and the Lease gatetuner when unset.
func (cfg RBACConfig) withDefaults() RBACConfig {
	if cfg.ServiceAccount == "" {
		cfg.ServiceAccount = "gatetuner"
	}
	if cfg.ServiceAccountNamespace == "" {
		cfg.ServiceAccountNamespace = "gatetuner"
	}
	if cfg.LeaseName == "" {
		cfg.LeaseName = "gatetuner"
	}
	if cfg.LeaseNamespace == "" {
		cfg.LeaseNamespace = cfg.ServiceAccountNamespace
	}
	return cfg
}

// byNamespace merges the targets by namespace (names sorted, each once) and
// checks every name; namespaces are sorted.
func (cfg RBACConfig) byNamespace() (map[string]*RBACTarget, []string, error) {
	var errs []string
	check := func(what, v string, dns1123Label bool) {
		var msgs []string
		if dns1123Label {
			msgs = validation.IsDNS1123Label(v)
		} else {
			msgs = validation.IsDNS1123Subdomain(v)
		}
		if len(msgs) > 0 {
			errs = append(errs, fmt.Sprintf("%s %q: %s", what, v, strings.Join(msgs, "; ")))
		}
	}
	check("service account", cfg.ServiceAccount, false)
	check("service account namespace", cfg.ServiceAccountNamespace, true)
	check("lease", cfg.LeaseName, false)
	check("lease namespace", cfg.LeaseNamespace, true)
	targets := map[string]*RBACTarget{}
	var namespaces []string
	for _, t := range cfg.Targets {
		check("target namespace", t.Namespace, true)
		rt := targets[t.Namespace]
		if rt == nil {
			rt = &RBACTarget{Namespace: t.Namespace}
			targets[t.Namespace] = rt
			namespaces = append(namespaces, t.Namespace)
		}
		for _, c := range t.ConfigMaps {
			check("configmap", c, false)
			rt.ConfigMaps = append(rt.ConfigMaps, c)
		}
		for _, d := range t.Deployments {
			check("deployment", d, false)
			rt.Deployments = append(rt.Deployments, d)
		}
	}
	for _, rt := range targets {
		rt.ConfigMaps = sortedUnique(rt.ConfigMaps)
		rt.Deployments = sortedUnique(rt.Deployments)
		if len(rt.ConfigMaps) == 0 {
			errs = append(errs, fmt.Sprintf("target namespace %q: no ConfigMap named", rt.Namespace))
		}
	}
	if len(errs) > 0 {
		return nil, nil, fmt.Errorf("render RBAC: %s", strings.Join(errs, "; "))
	}
	sort.Strings(namespaces)
	return targets, namespaces, nil
}

// writeTargetRole renders the Role and RoleBinding of one namespace's targets.
func writeTargetRole(b *bytes.Buffer, cfg RBACConfig, rt *RBACTarget) {
	ns := rt.Namespace
	fmt.Fprintf(b, `---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: %s
  namespace: %s
  labels:
    app.kubernetes.io/name: gatetuner
rules:
# Read the EPP config, write it with a resourceVersion precondition, keep
# gatetuner.dev/ annotations on it.
- apiGroups: [""]
  resources: ["configmaps"]
  resourceNames: %s
  verbs: ["get", "update", "patch"]
`, RoleName, ns, flowList(rt.ConfigMaps))
	if len(rt.Deployments) > 0 {
		fmt.Fprintf(b, `# Roll the EPP (pod-template annotation gatetuner.dev/config-hash) and read
# its rollout status.
- apiGroups: ["apps"]
  resources: ["deployments"]
  resourceNames: %s
  verbs: ["get", "patch"]
`, flowList(rt.Deployments))
	}
	fmt.Fprintf(b, `# Events on the ConfigMap carrying the numbers of each apply, hold and rollback.
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: %s
  namespace: %s
  labels:
    app.kubernetes.io/name: gatetuner
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: %s
subjects:
- kind: ServiceAccount
  name: %s
  namespace: %s
`, RoleName, ns, RoleName, cfg.ServiceAccount, cfg.ServiceAccountNamespace)
}

// writeLeaseRole renders the leader election's Role and RoleBinding.
func writeLeaseRole(b *bytes.Buffer, cfg RBACConfig) {
	fmt.Fprintf(b, `---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: %s
  namespace: %s
  labels:
    app.kubernetes.io/name: gatetuner
rules:
# Leader election: only the replica holding this Lease writes.
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  resourceNames: [%q]
  verbs: ["get", "update"]
# The first replica creates the Lease; create cannot be limited by name.
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["create"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: %s
  namespace: %s
  labels:
    app.kubernetes.io/name: gatetuner
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: %s
subjects:
- kind: ServiceAccount
  name: %s
  namespace: %s
`, LeaderElectionRoleName, cfg.LeaseNamespace, cfg.LeaseName, LeaderElectionRoleName, cfg.LeaseNamespace,
		LeaderElectionRoleName, cfg.ServiceAccount, cfg.ServiceAccountNamespace)
}

func sortedUnique(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return slices.Compact(s)
}

// flowList renders names as a YAML flow sequence of double-quoted strings.
func flowList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
