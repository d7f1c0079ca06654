package tuner

import (
	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/decide"
)

// HoldReason names why a cycle did not write (hold.Reason; docs/holds.md).
type HoldReason = decide.HoldReason

// Hold reasons, in the order the guards are checked (package hold).
const (
	HoldTargetError           = decide.HoldTargetError
	HoldUnsupportedTTFTSource = decide.HoldUnsupportedTTFTSource
	HoldPaused                = decide.HoldPaused
	HoldRolloutFailed         = decide.HoldRolloutFailed
	HoldVerificationFailed    = decide.HoldVerificationFailed
	HoldPendingRestart        = decide.HoldPendingRestart
	HoldRecordsUnavailable    = decide.HoldRecordsUnavailable
	HoldInconclusive          = decide.HoldInconclusive
	HoldNoDecisions           = decide.HoldNoDecisions
	HoldLowConfidence         = decide.HoldLowConfidence
	HoldNoGain                = decide.HoldNoGain
	HoldDeadband              = decide.HoldDeadband
	HoldRestartCost           = decide.HoldRestartCost
	HoldCalibrated            = decide.HoldCalibrated
	HoldCooldown              = decide.HoldCooldown
	HoldBudget                = decide.HoldBudget
	HoldAwaitingApproval      = decide.HoldAwaitingApproval
	HoldApprovalMismatch      = decide.HoldApprovalMismatch
	HoldApplyWindowUnknown    = decide.HoldApplyWindowUnknown
	HoldOutsideWindow         = decide.HoldOutsideWindow
	HoldChangedExternally     = decide.HoldChangedExternally
	HoldVerificationUnavail   = decide.HoldVerificationUnavail
)

// AllHoldReasons lists every reason, in check order.
func AllHoldReasons() []HoldReason { return decide.AllHoldReasons() }

// Result is what a cycle did (package decide).
type Result = decide.Result

// Cycle results.
const (
	ResultApplied     = decide.ResultApplied
	ResultRecommended = decide.ResultRecommended
	ResultPending     = decide.ResultPending
	ResultHeld        = decide.ResultHeld
	ResultRolledBack  = decide.ResultRolledBack
	ResultError       = decide.ResultError
)

// TokenBarOnly reports whether the settings' only load gate is the token
// bar maxTokensInFlightPenalty (decide.TokenBarOnly).
func TokenBarOnly(prof gate.Profile, s gate.Settings) bool { return decide.TokenBarOnly(prof, s) }
