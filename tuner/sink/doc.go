// Package sink writes gate settings into an llm-d EPP's config safely: the
// "hands" of the gatetuner daemon. The tuner decides what to write; a Sink
// guarantees how.
//
// A Sink is bound to one config location (a ConfigMap data key, or a file)
// and the filter instances gatetuner manages there. Read returns a Snapshot:
// the config text, the parsed eppconfig.File, each managed instance's
// gate.Params and owned values, the version (resourceVersion or content hash)
// and the State kept on the target (apply history, pause, failure hold,
// pending restart, the time the last applied config took effect). Apply
// writes changes computed against a Snapshot through one guarded path:
//
//   - re-read right before writing; owned keys of the managed instances that
//     changed since the Snapshot (a person, Helm or Argo CD edited them) hold
//     the write as changed-externally; other changes are merged by recomputing
//     the byte splice on the fresh content;
//   - write only when the content changes, with a precondition on the version
//     (resourceVersion for a ConfigMap), retried a bounded number of times on
//     conflict, so a concurrent writer never loses an update;
//   - provenance and history go to annotations (a sidecar JSON file for the
//     file sink), an Event on the ConfigMap carries the numbers;
//   - in rollout mode the EPP Deployment is restarted through a pod-template
//     annotation holding the config's sha256, the rollout is awaited with the
//     rules of `kubectl rollout status`, TTFT p90 is verified against the
//     value before the apply, and a failed rollout or verification is rolled
//     back automatically and the target held;
//   - in configmap mode the target stays pending-restart until the EPP runs
//     the new config.
//
// Several filter instances of one config are changed by one Apply: one write
// and one rollout (see Merge for combining targets that share a ConfigMap).
// The annotations, hold reasons and RBAC are documented in docs/push.md.
package sink
