package tuner

import (
	"time"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/tuner/decide"
	"github.com/gatetuner/gatetuner/tuner/eppconfig"
	"github.com/gatetuner/gatetuner/tuner/shadow"
)

// Report is one cycle's decision record: the numbers, the recommendation,
// every guard, and what was done. The cycle's assemble stage builds it from
// what the cycle gathered and decided (assemble.go).
type Report struct {
	Target string    `json:"target"`
	At     time.Time `json:"at"`
	Result Result    `json:"result"`
	Hold   *Hold     `json:"hold,omitempty"`
	Mode   string    `json:"mode"`
	// Current are the settings in force.
	Current SettingsView `json:"current"`
	// Recommendation is absent when the cycle stopped before one existed.
	Recommendation *Recommendation `json:"recommendation,omitempty"`
	Guards         []Guard         `json:"guards"`
	// Diff is the exact change the recommendation makes to the EPP config
	// (what was written, or would be).
	Diff string `json:"diff,omitempty"`
	// Changes are the edits the recommendation makes (for --output patch).
	Changes []eppconfig.Change `json:"-"`
	// NewConfig is the edited config text.
	NewConfig []byte               `json:"-"`
	OldConfig []byte               `json:"-"`
	Source    string               `json:"source,omitempty"`
	Estimates *estimator.Estimates `json:"estimates,omitempty"`
	Apply     *ApplyView           `json:"apply,omitempty"`
	Error     string               `json:"error,omitempty"`
	// Approval is mode approve's verdict on the recommendation's hash.
	Approval *ApprovalView `json:"approval,omitempty"`
	// Shadow are the current and recommended settings' tallies for metrics.
	// shadowCur and shadowRec tally only the decisions no earlier cycle
	// counted (for the counters); shadowScale turns model draws into requests.
	shadowCur, shadowRec *shadow.Counts
	shadowScale          float64
	gateInput            GateInput
	// cost is what the cycle ran: its Prometheus queries (once it
	// estimated) and the decisions it replayed.
	cost *cycleCost
}

// cycleCost is one cycle's Prometheus queries and replayed decisions.
type cycleCost struct {
	queries  int
	replayed int64
}

// The decision's views live in package decide; these names keep the
// report's API.
type (
	// ApprovalView is mode approve's verdict on the recommendation's hash.
	ApprovalView = decide.ApprovalView
	// Hold is why a cycle did not write.
	Hold = decide.Hold
	// Guard is one guard's verdict.
	Guard = decide.Guard
	// SettingsView shows settings as the config has them.
	SettingsView = decide.SettingsView
	// Recommendation is the settings the tuner would write, with the evidence.
	Recommendation = decide.Recommendation
	// Evidence is what the recommendation rests on.
	Evidence = decide.Evidence
	// ReplayView says what a cycle's shadow replay did.
	ReplayView = decide.ReplayView
	// DayView is the day-level choice over the windows of the daily cycle.
	DayView = decide.DayView
	// DayWindow is one window of the day.
	DayWindow = decide.DayWindow
	// DayQueries counts the per-window estimates of one cycle.
	DayQueries = decide.DayQueries
	// ApplyWindowView is the apply window in force.
	ApplyWindowView = decide.ApplyWindowView
	// ObjectiveView compares current and recommended settings on the objective.
	ObjectiveView = decide.ObjectiveView
	// CandidateView is one candidate's standing.
	CandidateView = decide.CandidateView
	// FeedbackRow is one settings variant's outcome in the feedback replay.
	FeedbackRow = decide.FeedbackRow
	// WindowView is the shadow window.
	WindowView = decide.WindowView
	// EstimatesBrief are the estimate values the evidence cites.
	EstimatesBrief = decide.EstimatesBrief
	// ThroughputNote says what happens to peakPrefillThroughput.
	ThroughputNote = decide.ThroughputNote
	// ShadowPair are the shadow tallies of current and recommended settings.
	ShadowPair = decide.ShadowPair
	// ShadowRow is one settings variant's shadow result.
	ShadowRow = decide.ShadowRow
	// CostPair compares excess cost.
	CostPair = decide.CostPair
	// RestartCost is the estimated price of applying.
	RestartCost = decide.RestartCost
	// ConfidenceParts is the documented confidence formula's factors.
	ConfidenceParts = decide.ConfidenceParts
	// StepNote says the recommendation was clamped by the step limit.
	StepNote = decide.StepNote
	// GateInput is the current settings' gate-input distribution.
	GateInput = decide.GateInput
)

// Approval statuses (package decide).
const (
	ApprovalAwaiting = decide.ApprovalAwaiting
	ApprovalMismatch = decide.ApprovalMismatch
	ApprovalApproved = decide.ApprovalApproved
	ApprovalWritten  = decide.ApprovalWritten
)

// Objectives (package decide).
const (
	ObjectiveFeedbackTTFTP90 = decide.ObjectiveFeedbackTTFTP90
	ObjectiveExcessTokens    = decide.ObjectiveExcessTokens
)

// ApplyView is what the sink did.
type ApplyView struct {
	Outcome    string `json:"outcome"`
	Pending    bool   `json:"pending"`
	Attempts   int    `json:"attempts"`
	Recomputed bool   `json:"recomputed"`
	Seq        int    `json:"seq,omitempty"`
	Hold       string `json:"hold,omitempty"`
}

// stop ends the report with result (held or error) for reason.
func (rep *Report) stop(result Result, reason HoldReason, detail string) {
	rep.Result, rep.Hold = result, &Hold{Reason: reason, Detail: detail}
	if result == ResultError {
		rep.Error = detail
	}
	if rep.Recommendation != nil {
		rep.Recommendation.HoldReason = string(reason)
	}
}
