// Package decide is a tuning cycle's decision, in pure code over values:
// what a cycle gathered for one target (Input — the EPP config's filter
// instance and state, the lookback's estimates, the history's spans with
// their own, the last minutes' traffic) and what the target's cycles carry
// (Carry) in, the recommendation with its evidence, every guard's verdict,
// the edit, and the write or the hold (Outcome) out. It reads no clock,
// queries nothing and opens no file; a test pins its imports
// (imports_test.go).
//
// The decision has three stages, run by package tuner between its gather
// stages:
//
//   - Admit: a gate the tuner can tune (not one on predicted milliseconds).
//   - Weigh → Weighed: the decision source (sourceHalt), the throughput
//     written (chooseThroughputFor), the replay's rates (replayRates), the
//     candidates (BuildCandidates), the shadow replay (replay.go), the
//     objective and the day-level choice (objective.go, choice.go), the
//     evidence (evidence) and the apply window (applyWindow). Weighed.RecentSpan
//     says whether a restart now must be priced, and on which span of the
//     latest traffic: the caller estimates it before Settle.
//   - Settle → Outcome: the restart's price now (priceNow), the confidence,
//     the edit and its preview (through Config.Preview, the sink's pure text
//     functions), the guards (guards.go, in docs/holds.md's order), and mode
//     off's recommendation, mode approve's approval (approve.go), the apply
//     window's hold, or the write.
//
// A data reason to hold yields to the target's state (stateFirst). The
// history's decisions are the one input not held as a value: a day of gate
// records can be millions, so the replay consumes them from a stream
// (Decisions, fed by the caller as the records are read or the Prometheus
// model draws them), one decision at a time, continuing the replay a
// target's earlier cycles built (Carry) where the source can resume.
package decide
