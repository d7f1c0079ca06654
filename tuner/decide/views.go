package decide

import (
	"time"

	"github.com/gatetuner/gatetuner/tuner/shadow"
)

// The views below are the decision as the report shows it (package tuner's
// Report embeds them; docs/tuner.md documents the fields).

// ApprovalView is mode approve's verdict: the recommendation's hash, the
// approval found on the target and the command that approves the hash.
type ApprovalView struct {
	Hash string `json:"hash"`
	// Status is awaiting, mismatch, approved or written (already, once).
	Status   string   `json:"status"`
	Approved []string `json:"approved,omitempty"`
	Command  string   `json:"command"`
}

// Approval statuses.
const (
	ApprovalAwaiting = "awaiting"
	ApprovalMismatch = "mismatch"
	ApprovalApproved = "approved"
	ApprovalWritten  = "written"
)

// Hold is why a cycle did not write.
type Hold struct {
	Reason HoldReason `json:"reason"`
	Detail string     `json:"detail"`
}

// Guard is one guard's verdict.
type Guard struct {
	Name   string `json:"name"`
	Pass   bool   `json:"pass"`
	Detail string `json:"detail"`
}

// SettingsView shows settings as the config has them.
type SettingsView struct {
	Mode                  string  `json:"mode"`
	MaxTTFTPenaltyMs      float64 `json:"maxTTFTPenaltyMs"`
	PeakPrefillThroughput float64 `json:"peakPrefillThroughput"`
	PPTSource             string  `json:"pptSource"`
	TTFTSource            string  `json:"ttftSource"`
	AffinityThreshold     float64 `json:"affinityThreshold"`
	// BarTokens is maxTTFTPenaltyMs × peakPrefillThroughput / 1000 (null: no bar).
	BarTokens *float64 `json:"barTokens"`
}

// Recommendation is the settings the tuner would write, with the evidence.
type Recommendation struct {
	Target                string   `json:"target"`
	Mode                  string   `json:"mode"`
	MaxTTFTPenaltyMs      float64  `json:"maxTTFTPenaltyMs"`
	PeakPrefillThroughput float64  `json:"peakPrefillThroughput"`
	EffectiveBarTokens    *float64 `json:"effectiveBarTokens"`
	Confidence            float64  `json:"confidence"`
	Evidence              Evidence `json:"evidence"`
	HoldReason            string   `json:"holdReason,omitempty"`
	// Candidate is the candidate recommended (its settings as the shadow replayed them).
	Candidate Candidate `json:"-"`
	// MaxTokensInFlightPenalty is the recommended token bar of the
	// token-bar generation (router-2026-05-tokens); absent elsewhere.
	MaxTokensInFlightPenalty int64 `json:"maxTokensInFlightPenalty,omitempty"`
	// Hash identifies the change the recommendation would write (stable
	// across cycles for the same change); mode approve writes it only once
	// gatetuner.dev/approve names it. Empty when nothing would change.
	Hash string `json:"hash,omitempty"`
}

// Evidence is what the recommendation rests on.
type Evidence struct {
	Source     string         `json:"source"`
	Window     WindowView     `json:"window"`
	Estimates  EstimatesBrief `json:"estimates"`
	Throughput ThroughputNote `json:"throughput"`
	Shadow     ShadowPair     `json:"shadow"`
	// ExcessCost compares current and recommended over the window.
	ExcessCost  CostPair        `json:"excessCost"`
	RestartCost RestartCost     `json:"restartCost"`
	Confidence  ConfidenceParts `json:"confidence"`
	Step        *StepNote       `json:"step,omitempty"`
	GateInput   GateInput       `json:"gateInput"`
	Candidates  int             `json:"candidatesEvaluated"`
	// ReleaseChainFloorTokens is the lowest bar the excess-tokens objective
	// considers (the p99 prompt); 0 with the feedback objective (docs/tuner.md).
	ReleaseChainFloorTokens float64           `json:"releaseChainFloorTokens"`
	BestByMode              map[string]string `json:"bestByMode,omitempty"`
	// Objective is what the recommendation was chosen by.
	Objective ObjectiveView `json:"objective"`
	// Day is the day-level choice: every window of the daily cycle, current
	// vs recommended vs that window's own best (docs/tuner.md, "Decide on the day").
	Day *DayView `json:"day,omitempty"`
	// Replay is what this cycle's shadow replay replayed and reused.
	Replay ReplayView `json:"replay"`
}

// ReplayView says what a cycle's shadow replay did: how much it replayed
// and what it took from earlier cycles (docs/tuner.md, "Cost").
type ReplayView struct {
	// Decisions is how many decisions this cycle replayed: those new since
	// the last cycle (records), the windows not complete yet (the model), or
	// the whole history when the stream was rebuilt.
	Decisions int64 `json:"decisions"`
	// Spans is how many spans (a window of one day) the evidence holds;
	// SpansReused how many of them this cycle took from earlier cycles.
	Spans       int `json:"spans"`
	SpansReused int `json:"spansReused"`
	// Continued: the cycle continued the replay an earlier cycle built;
	// Rebuilt says why it did not.
	Continued bool   `json:"continued"`
	Rebuilt   string `json:"rebuilt,omitempty"`
	// RatesHeld: the prefill rates replayed are the stream's, inside this
	// cycle's estimate's interval or within 5 % of it (the throughput note
	// says both).
	RatesHeld bool   `json:"ratesHeld,omitempty"`
	Note      string `json:"note,omitempty"`
}

// DayView is the day-level choice over the windows of the daily cycle.
type DayView struct {
	DayLengthSeconds   float64 `json:"dayLengthSeconds"`
	WindowWidthSeconds float64 `json:"windowWidthSeconds"`
	HistorySeconds     float64 `json:"historySeconds"`
	// Rule is the 10 % rule as applied (with its absolute tolerance).
	Rule string `json:"rule"`
	// CurrentScore and RecommendedScore are the request-weighted day
	// objective (feedback: mean of the windows' TTFT p90 in seconds;
	// excess-tokens: the day's excess tokens).
	CurrentScore     *float64    `json:"currentScore"`
	RecommendedScore *float64    `json:"recommendedScore"`
	Windows          []DayWindow `json:"windows"`
	// Note says what the choice ran into (a step clamp failing the rule,
	// the estimator giving no per-window estimates).
	Note string `json:"note,omitempty"`
	// Skipped lists spans of the history the Prometheus model could not
	// draw from, with why.
	Skipped []string `json:"skipped,omitempty"`
	// Queries is what this cycle asked Prometheus for the windows' estimates.
	Queries DayQueries `json:"queries"`
	// ApplyWindow is when the write may happen and why.
	ApplyWindow *ApplyWindowView `json:"applyWindow,omitempty"`
}

// DayWindow is one window of the day (merged over the days of the history).
type DayWindow struct {
	Index int    `json:"index"`
	Label string `json:"label"`
	// Days is how many days of the history contributed to the window.
	Days      int     `json:"days"`
	Requests  float64 `json:"requests"`
	Decisions int64   `json:"decisions"`
	// Current and Recommended are the settings' scores in the window
	// (null: no decisions, or excluded by the release-chain floor).
	Current     *float64 `json:"currentScore"`
	Recommended *float64 `json:"recommendedScore"`
	// Best is the window's own best candidate and its score.
	Best      string   `json:"best,omitempty"`
	BestScore *float64 `json:"bestScore"`
	// Allowed is the most a candidate may score here (10 % rule); Judged is
	// false where the window has too few decisions to judge.
	Allowed *float64 `json:"allowed"`
	Judged  bool     `json:"judged"`
	// Pass: the recommendation is not worse than the current settings by more than the rule allows.
	Pass bool `json:"pass"`
	// RestartCost is the estimated price of a restart in the window
	// (request-seconds of queueing; null: not priced).
	RestartCost *float64 `json:"restartCostSeconds"`
}

// DayQueries counts the per-window estimates of one cycle.
type DayQueries struct {
	SpansQueried int `json:"spansQueried"`
	SpansCached  int `json:"spansCached"`
	// Queries and Failed are the Prometheus queries the queried spans ran.
	Queries int    `json:"queries"`
	Failed  int    `json:"failed"`
	Note    string `json:"note,omitempty"`
}

// ApplyWindowView is the apply window in force: configured (cron), always,
// or auto (the window of least restart cost) — and, for auto, why.
type ApplyWindowView struct {
	Kind string `json:"kind"`
	// Window and Label name the auto window; Opens is its next start
	// (zero while it is open).
	Window int        `json:"window,omitempty"`
	Label  string     `json:"label,omitempty"`
	Open   bool       `json:"open"`
	Opens  *time.Time `json:"opens,omitempty"`
	// CostSeconds is the chosen window's restart cost; DayMeanSeconds and
	// DayMaxSeconds the day's mean and worst window.
	CostSeconds    *float64 `json:"costSeconds,omitempty"`
	DayMeanSeconds *float64 `json:"dayMeanSeconds,omitempty"`
	DayMaxSeconds  *float64 `json:"dayMaxSeconds,omitempty"`
	// Unknown says why auto could not choose (hold apply-window-unknown).
	Unknown string `json:"unknown,omitempty"`
	// Settling says why an open auto window waits: a restart now would cost
	// far more than the window usually does (hold outside-apply-window).
	Settling string `json:"settling,omitempty"`
	Detail   string `json:"detail"`
}

// ObjectiveFeedbackTTFTP90 names the tuner's objective: the p90 of the
// estimated time to first token in the feedback replay (docs/tuner.md).
const ObjectiveFeedbackTTFTP90 = "feedback-ttft-p90"

// ObjectiveExcessTokens names the Prometheus model's objective: the
// per-decision excess cost in tokens, with the release-chain floor.
const ObjectiveExcessTokens = "excess-tokens"

// ObjectiveView compares current and recommended settings on the objective.
type ObjectiveView struct {
	Name        string      `json:"name"`
	Current     FeedbackRow `json:"current"`
	Recommended FeedbackRow `json:"recommended"`
	// Ratio is recommended / current estimated TTFT p90 (null when the
	// current one is 0).
	Ratio *float64 `json:"ratio"`
	// SavingOverCooldownTokens is the drop in queued tokens (ahead + own,
	// summed over requests) over a cooldown.
	SavingOverCooldownTokens float64 `json:"savingOverCooldownTokens"`
	// SavingOverCooldownSeconds is the same saving in request-seconds of
	// queueing (tokens ÷ the per-endpoint rate), compared with the restart
	// cost's delay.
	SavingOverCooldownSeconds float64 `json:"savingOverCooldownSeconds"`
	// RateSource is the drain rate that turns tokens into seconds.
	RateSource string `json:"rateSource"`
	// Candidates lists every candidate's numbers, so "why not X?" has an answer.
	Candidates []CandidateView `json:"candidates,omitempty"`
}

// CandidateView is one candidate's standing.
type CandidateView struct {
	Label string `json:"label"`
	Mode  string `json:"mode"`
	// BarTokens is null for no bar.
	BarTokens       *float64 `json:"barTokens"`
	ExcessTokens    float64  `json:"excessTokens"`
	FeedbackP90     float64  `json:"feedbackTTFTP90Seconds"`
	Excluded        string   `json:"excluded,omitempty"`
	ProfileRejected string   `json:"profileRejected,omitempty"`
}

// FeedbackRow is one settings variant's outcome in the feedback replay.
type FeedbackRow struct {
	Settings string `json:"settings"`
	shadow.FeedbackOutcome
}

// WindowView is the shadow window.
type WindowView struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// CutAtApply: the window starts at the last apply's effective time
	// (windows spanning an apply are discarded).
	CutAtApply bool  `json:"cutAtApply"`
	Decisions  int64 `json:"decisions"`
	Known      int64 `json:"known"`
}

// EstimatesBrief are the estimate values the evidence cites.
type EstimatesBrief struct {
	Status          string    `json:"status"`
	DrainRate       *float64  `json:"drainRate"`
	DrainStatus     string    `json:"drainStatus"`
	DrainConfidence float64   `json:"drainConfidence"`
	DrainInterval   *Interval `json:"drainInterval,omitempty"`
	Nominal         *float64  `json:"nominal"`
	PerRequestRate  *float64  `json:"perRequestRate"`
	PromptP50       *float64  `json:"promptP50"`
	PromptP90       *float64  `json:"promptP90"`
	CachedMean      *float64  `json:"cachedMean"`
	RequestRate     *float64  `json:"requestRate"`
	Reasons         []string  `json:"reasons,omitempty"`
}

// ThroughputNote says what happens to peakPrefillThroughput.
type ThroughputNote struct {
	// Write: the recommendation writes the drain-rate estimate.
	Write bool    `json:"write"`
	Value float64 `json:"value"`
	Note  string  `json:"note"`
}

// ShadowPair are the shadow tallies of current and recommended settings.
type ShadowPair struct {
	Current     ShadowRow `json:"current"`
	Recommended ShadowRow `json:"recommended"`
}

// ShadowRow is one settings variant's shadow result.
type ShadowRow struct {
	Settings string               `json:"settings"`
	Verdicts shadow.VerdictCounts `json:"verdicts"`
	Outcomes shadow.OutcomeCounts `json:"outcomes"`
	Rates    shadow.Rates         `json:"rates"`
	// ExcessTokens is per the window's real decisions (the model's draws scaled).
	ExcessTokens float64 `json:"excessTokens"`
}

// CostPair compares excess cost (tokens over the window, and tokens/s).
type CostPair struct {
	Current            float64  `json:"current"`
	Recommended        float64  `json:"recommended"`
	Ratio              *float64 `json:"ratio"`
	SavingPerSecond    float64  `json:"savingTokensPerSecond"`
	SavingOverCooldown float64  `json:"savingOverCooldownTokens"`
	// Seconds of prefill at the rate used (null when no rate is known).
	CurrentSeconds     *float64 `json:"currentSeconds"`
	RecommendedSeconds *float64 `json:"recommendedSeconds"`
}

// RestartCost is the estimated price of applying (the EPP loses its prefix
// index): the re-prefilled tokens and the queueing they cause.
type RestartCost struct {
	// Tokens is the re-prefill backlog B the restart creates.
	Tokens        float64 `json:"tokens"`
	WarmupSeconds float64 `json:"warmupSeconds"`
	// CapacityTokensPerSecond is the pool's prefill capacity C (the rate
	// that turns tokens into seconds, over all endpoints).
	CapacityTokensPerSecond float64 `json:"capacityTokensPerSecond"`
	// Utilization is the pool's computed prefill over C (null: unknown).
	Utilization *float64 `json:"utilization"`
	// DrainSeconds is how long the backlog takes to drain on the spare
	// capacity, B / (C·(1−ρ)) (null: unknown).
	DrainSeconds *float64 `json:"drainSeconds"`
	// DelaySeconds is the extra queueing the backlog causes, summed over
	// the requests that meet it (request-seconds): λ·B² / (2·C²·(1−ρ)).
	DelaySeconds *float64 `json:"delaySeconds"`
	Formula      string   `json:"formula"`
	// Unknown says what is missing when the cost cannot be estimated at
	// all; the restart-cost guard then holds.
	Unknown string `json:"unknown,omitempty"`
	// PricedAt says which window's estimates price the restart: the one
	// the write will happen in (or the last minutes' traffic, when a
	// restart now costs more).
	PricedAt string `json:"pricedAt,omitempty"`
	// UsualDelaySeconds is the window's usual price when a restart now is
	// priced higher (the last minutes' traffic).
	UsualDelaySeconds *float64 `json:"usualDelaySeconds,omitempty"`
}

// ConfidenceParts is the documented confidence formula's factors.
type ConfidenceParts struct {
	Value       float64 `json:"value"`
	Rate        float64 `json:"rate"`
	Source      float64 `json:"source"`
	Sample      float64 `json:"sample"`
	Consistency float64 `json:"consistency"`
}

// StepNote says the recommendation was clamped by the step limit.
type StepNote struct {
	WantedBarTokens  *float64 `json:"wantedBarTokens"`
	ClampedBarTokens *float64 `json:"clampedBarTokens"`
	MaxStep          float64  `json:"maxStep"`
}

// GateInput is the current settings' gate-input distribution.
type GateInput struct {
	PenaltyMs             shadow.Quantiles `json:"penaltyMs"`
	GapMinusMatchedTokens shadow.Quantiles `json:"gapMinusMatchedTokens"`
}
