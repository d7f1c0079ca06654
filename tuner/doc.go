// Package tuner is the daemon's brain: it joins estimates, the shadow and the
// push path into guarded tuning cycles.
//
// A cycle (Tuner.Cycle, Tuner.CycleGroup in cycle.go) plans each target
// with Tuner.plan, one stage after another, each a function with a typed
// result (plan.go):
//
//   - readTarget → targetRead: the EPP config and the target's filter instance
//   - estimate → estimator.Estimates
//   - decisionSource → DecisionSource (package source: records or the Prometheus model)
//   - replay → replayed: every candidate's shadow tallies and feedback outcomes
//   - choose → choice: the objective's scores (objective.go: the objective
//     interface, feedbackTTFT and excessTokens) and the step-limited pick
//   - evidence → Recommendation and its Evidence (evidence.go)
//   - confidence → ConfidenceParts
//   - edit: the change and its preview
//   - guards: the guard table (guards.go), run in the order docs/holds.md
//     lists, the release-chain bypass as one wrapper (releaseChainBypass)
//   - writePlanFor → writePlan, returned to the cycle, which writes it
//     through the target's sink (or, for targets sharing a config, the joint sink)
//
// A stage that cannot go on returns a halt, which Report.stop records; the
// hold reasons are package hold's. The report types are in report.go, the
// metrics in metrics.go.
package tuner
