// Package tuner runs the daemon's tuning cycles: it gathers what a target's
// cycle reads through its ports, has package decide decide on it, and
// assembles the report and the write.
//
// A cycle (Tuner.CycleGroupWith in cycle.go; Cycle and CycleGroup use the
// Tuner's own memory) plans each target with Tuner.plan, one stage after
// another, each a function with a typed result — gather stages read through
// a port, decide stages are package decide's pure code:
//
//   - readTarget → targetRead (gather, the sink): the EPP config, the
//     target's filter instance and the state kept on it
//   - decide.Admit (decide): a gate the tuner can tune
//   - gatherEvidence → gathered (gather, the estimator and the decision
//     source): the lookback's estimates, each span of the history's own
//     (daySpans, day.go), and the decisions' stream (records or the
//     Prometheus model, stream.go), projected onto decide's values (project.go)
//   - decide.Weigh → decide.Weighed (decide): candidates, the shadow replay
//     consuming the stream, the choice, the evidence and the apply window
//   - gatherRecent → recentEstimate (gather, the estimator): the last
//     minutes' traffic, estimated only when the decision prices a restart now
//   - decide.Settle → decide.Outcome (decide): the restart's price, the
//     confidence, the edit, the guards, the write or the hold
//   - assemble → Report (assemble.go)
//
// The cycle then announces Events (approve.go, joinevents.go), writes the
// plans that passed through the target's sink or, for targets sharing a
// config, the joint sink (apply, applyJoint in assemble.go), and records the
// metrics (metrics.go). What a
// target's cycles carry from one to the next is its Memory (memory.go): the
// daemon keeps one per target and passes it in; a cycle updates it.
package tuner
