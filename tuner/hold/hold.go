// Package hold names why a tuning cycle did not write: the one list of hold
// reasons the tuner and the sink share, in the order the guards are checked
// (docs/holds.md, pinned by a test).
package hold

// Reason names why a cycle did not write.
type Reason string

// Hold reasons, in the order the guards are checked.
const (
	// TargetError: the EPP config cannot be read, parsed or edited.
	TargetError Reason = "target-error"
	// UnsupportedTTFTSource: ttftSource is latencyPredictor (reported only).
	UnsupportedTTFTSource Reason = "unsupported-ttft-source"
	// Paused: the target carries gatetuner.dev/paused: "true".
	Paused Reason = "paused"
	// RolloutFailed: the EPP did not become available with the new config;
	// it was rolled back and the target is held until a person clears the hold.
	RolloutFailed Reason = "rollout-failed"
	// VerificationFailed: TTFT p90 got worse by more than the margin (or
	// could not be measured after the rollout); rolled back and held.
	VerificationFailed Reason = "verification-failed"
	// PendingRestart: a previous write is not running in the EPP yet.
	PendingRestart Reason = "pending-restart"
	// RecordsUnavailable: the gate-records stream is down or erroring.
	RecordsUnavailable Reason = "records-unavailable"
	// Inconclusive: the estimates the recommendation needs are inconclusive.
	Inconclusive Reason = "inconclusive-estimate"
	// NoDecisions: too few decisions with a known verdict in the window.
	NoDecisions Reason = "no-decisions"
	// LowConfidence: confidence below minConfidence.
	LowConfidence Reason = "low-confidence"
	// NoGain: the recommendation is not better by the objective.
	NoGain Reason = "no-gain"
	// Deadband: the decisive bar moves less than the deadband.
	Deadband Reason = "deadband"
	// RestartCost: the saving does not pay for an EPP restart.
	RestartCost Reason = "restart-cost"
	// Calibrated: peakPrefillThroughput is calibrated and may not be overridden.
	Calibrated Reason = "calibrated-throughput"
	// Cooldown: the last change took effect less than cooldown ago.
	Cooldown Reason = "cooldown"
	// Budget: dailyBudget applies within budgetWindow already.
	Budget Reason = "budget"
	// ApplyWindowUnknown: the auto apply window cannot be chosen yet (the
	// history lacks a window of the day, or its restart cost is unknown).
	ApplyWindowUnknown Reason = "apply-window-unknown"
	// OutsideWindow: the apply window is closed (result pending).
	OutsideWindow Reason = "outside-apply-window"
	// ChangedExternally: owned keys changed since the cycle read them.
	ChangedExternally Reason = "changed-externally"
	// VerificationUnavailable: TTFT p90 before the apply could not be
	// measured, so a rollout could not be verified; nothing was written.
	VerificationUnavailable Reason = "verification-unavailable"
)

// All lists every reason, in check order.
func All() []Reason {
	return []Reason{TargetError, UnsupportedTTFTSource, Paused, RolloutFailed, VerificationFailed,
		PendingRestart, RecordsUnavailable, Inconclusive, NoDecisions, LowConfidence, NoGain, Deadband, RestartCost,
		Calibrated, Cooldown, Budget, ApplyWindowUnknown, OutsideWindow, ChangedExternally, VerificationUnavailable}
}
