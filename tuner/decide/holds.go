package decide

import "github.com/gatetuner/gatetuner/tuner/hold"

// HoldReason names why a cycle did not write (hold.Reason; docs/holds.md).
type HoldReason = hold.Reason

// Hold reasons, in the order the guards are checked (package hold).
const (
	HoldTargetError           = hold.TargetError
	HoldUnsupportedTTFTSource = hold.UnsupportedTTFTSource
	HoldPaused                = hold.Paused
	HoldRolloutFailed         = hold.RolloutFailed
	HoldVerificationFailed    = hold.VerificationFailed
	HoldPendingRestart        = hold.PendingRestart
	HoldRecordsUnavailable    = hold.RecordsUnavailable
	HoldInconclusive          = hold.Inconclusive
	HoldNoDecisions           = hold.NoDecisions
	HoldLowConfidence         = hold.LowConfidence
	HoldNoGain                = hold.NoGain
	HoldDeadband              = hold.Deadband
	HoldRestartCost           = hold.RestartCost
	HoldCalibrated            = hold.Calibrated
	HoldCooldown              = hold.Cooldown
	HoldBudget                = hold.Budget
	HoldAwaitingApproval      = hold.AwaitingApproval
	HoldApprovalMismatch      = hold.ApprovalMismatch
	HoldApplyWindowUnknown    = hold.ApplyWindowUnknown
	HoldOutsideWindow         = hold.OutsideWindow
	HoldChangedExternally     = hold.ChangedExternally
	HoldVerificationUnavail   = hold.VerificationUnavailable
)

// AllHoldReasons lists every reason, in check order.
func AllHoldReasons() []HoldReason { return hold.All() }

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
