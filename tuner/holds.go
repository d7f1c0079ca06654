package tuner

// HoldReason names why a cycle did not write (documented in docs/holds.md).
type HoldReason string

// Hold reasons, in the order the guards are checked.
const (
	HoldTargetError           HoldReason = "target-error"
	HoldUnsupportedTTFTSource HoldReason = "unsupported-ttft-source"
	HoldPaused                HoldReason = "paused"
	HoldRolloutFailed         HoldReason = "rollout-failed"
	HoldVerificationFailed    HoldReason = "verification-failed"
	HoldPendingRestart        HoldReason = "pending-restart"
	HoldInconclusive          HoldReason = "inconclusive-estimate"
	HoldNoDecisions           HoldReason = "no-decisions"
	HoldLowConfidence         HoldReason = "low-confidence"
	HoldNoGain                HoldReason = "no-gain"
	HoldDeadband              HoldReason = "deadband"
	HoldRestartCost           HoldReason = "restart-cost"
	HoldCalibrated            HoldReason = "calibrated-throughput"
	HoldCooldown              HoldReason = "cooldown"
	HoldBudget                HoldReason = "budget"
	HoldOutsideWindow         HoldReason = "outside-apply-window"
	HoldChangedExternally     HoldReason = "changed-externally"
	HoldVerificationUnavail   HoldReason = "verification-unavailable"
)

// AllHoldReasons lists every reason, in check order.
func AllHoldReasons() []HoldReason {
	return []HoldReason{HoldTargetError, HoldUnsupportedTTFTSource, HoldPaused, HoldRolloutFailed, HoldVerificationFailed,
		HoldPendingRestart, HoldInconclusive, HoldNoDecisions, HoldLowConfidence, HoldNoGain, HoldDeadband, HoldRestartCost,
		HoldCalibrated, HoldCooldown, HoldBudget, HoldOutsideWindow, HoldChangedExternally, HoldVerificationUnavail}
}

// Result is what a cycle did.
type Result string

// Cycle results.
const (
	// ResultApplied: the recommendation was written.
	ResultApplied Result = "applied"
	// ResultRecommended: mode off; every guard passed, nothing written.
	ResultRecommended Result = "recommended"
	// ResultPending: every guard passed but the apply window is closed.
	ResultPending Result = "pending"
	// ResultHeld: a guard held the recommendation (Report.Hold says why).
	ResultHeld Result = "held"
	// ResultRolledBack: written, then rolled back after a failed rollout or verification.
	ResultRolledBack Result = "rolled-back"
	// ResultError: the cycle could not run (the target could not be read).
	ResultError Result = "error"
)
