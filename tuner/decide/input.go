package decide

import (
	"errors"
	"time"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/eppconfig"
	"github.com/gatetuner/gatetuner/tuner/policy"
	"github.com/gatetuner/gatetuner/tuner/sink/state"
)

// Input is what a cycle gathered for one target: everything the decision
// reads, as values — but the decisions of the history, which it consumes
// from a stream (Decisions).
type Input struct {
	Now    time.Time
	Target Target
	Config Config
	// Lookback is the estimate over the estimator's lookback.
	Lookback *Estimate
	// Window is the history the evidence holds (HistoryWindow).
	Window WindowView
	// Day is the history split into the windows of the day, each span with
	// its own estimates.
	Day *Day
	// Source is the stream of the history's decisions; SourceDown says why
	// a records stream is down ("" when it is up).
	Source     Decisions
	SourceDown string
}

// Target is the configured target as the decision reads it.
type Target struct {
	Name    string
	Profile gate.Profile
	Policy  policy.Policy
	// TTFTSLOMs, when > 0, is the matchedTokens ceiling.
	TTFTSLOMs float64
	// AllowCalibrationOverride lets the tuner write peakPrefillThroughput
	// over a calibrated value.
	AllowCalibrationOverride bool
}

// Config is the target's EPP config as read: its filter instance, the
// parameters and settings in force, the state gatetuner keeps on it, and
// the pure text functions over it (package sink's Snapshot).
type Config struct {
	// Instance addresses the target's filter instance in a change.
	Instance eppconfig.Target
	Params   gate.Params
	Current  gate.Settings
	State    *state.State
	// Preview returns the config text the changes would produce and its
	// unified diff; it writes nothing.
	Preview func(changes []eppconfig.Change) ([]byte, string, error)
	// ApproveCommand is what an operator runs to approve a recommendation hash.
	ApproveCommand func(hash string) string
}

// Interval is a two-sided interval around a value.
type Interval struct {
	Low  float64 `json:"low"`
	High float64 `json:"high"`
}

// Rate is a rate estimate (tokens per second) as the decision reads it.
type Rate struct {
	Value *float64
	// StatusOK, StatusPrior and Inconclusive are the estimate's status:
	// measured, the prior standing in, or no trustworthy value.
	StatusOK, StatusPrior, Inconclusive bool
	// Prior: the value is the prior, not a measurement.
	Prior      bool
	Method     string
	Source     string
	Confidence float64
	Interval   *Interval
	// Reasons are the estimate's reasons as text ("" when there are none).
	Reasons string
	// PerEndpoint are the per-endpoint rates, keyed by pod and by
	// in-flight endpoint name.
	PerEndpoint map[string]float64
}

// Traffic is what an estimate says about a stretch of traffic: what prices
// a restart, and when the in-flight snapshots were taken.
type Traffic struct {
	RequestRate, PromptMean, CachedMean *float64
	// Endpoints are the routed endpoints' names.
	Endpoints []string
	// Snapshots are the in-flight snapshots' times.
	Snapshots []time.Time
}

// Estimate is the lookback's estimate as the decision reads it.
type Estimate struct {
	Traffic
	Drain, Nominal       Rate
	PromptP90, PromptP99 *float64
	// StepSeconds spaces the in-flight snapshots.
	StepSeconds float64
	// Brief are the values the evidence cites.
	Brief EstimatesBrief
}

// Day is the history split at the windows of the daily cycle, each span
// with its own estimates (or the lookback's for every window when the
// estimator has no span estimates: PerWindow false).
type Day struct {
	Clock     Clock
	Spans     []Span
	PerWindow bool
	// Queries is what the cycle asked Prometheus for the spans' estimates.
	Queries DayQueries
}

// Span is a stretch of the history inside one window of one day, with its
// estimates or why it has none.
type Span struct {
	From, To time.Time
	Index    int
	// Est is the span's traffic (nil: no estimates, Err says why). A span
	// whose estimates did not change since a cycle replayed it has the
	// same Est.
	Est *Traffic
	Err string
	// Final: the span is complete and its estimates are kept (a later
	// cycle gets the same ones).
	Final bool
	// Unusable says why the Prometheus model cannot draw from the span
	// ("" when it can).
	Unusable string
}

// Recent is the estimate of the last minutes' traffic, which prices a
// restart that would happen now.
type Recent struct {
	From, To time.Time
	// Est is nil when the estimate failed (Err says why).
	Est *Traffic
	Err string
}

// Decision source kinds, as reported in evidence and metrics.
const (
	SourceKindRecords = "records"
	SourceKindModel   = "prometheus-model"
)

// Decision is one decision's input, as a stream yields it. Slices are
// valid only during the callback.
type Decision struct {
	TS        time.Time
	Endpoints []gate.Endpoint
	Names     [][]byte
	// Observed is the live EPP's outcome when recorded (records only).
	Observed []byte
	// Chosen names the endpoint the live EPP picked, when recorded.
	Chosen []byte
	// PromptTokens is the request's prompt length (< 0: unknown).
	PromptTokens int64
	// Weight is how many real requests the decision stands for (0: one);
	// the Prometheus model's draws each stand for several.
	Weight float64
}

// Decisions is the stream of a history's decisions, fed by gather (gate
// records read as they are replayed, or the Prometheus model's draws): the
// decision consumes it one decision at a time and never holds a day of
// them.
type Decisions interface {
	// Kind is SourceKindRecords or SourceKindModel.
	Kind() string
	// Replay calls fn for each decision with from ≤ TS < to, in time order.
	Replay(from, to time.Time, fn func(*Decision) error) error
}

// Resumer is a stream a later cycle resumes where an earlier one stopped
// (records): replaying from the zero Mark and then from each returned mark
// yields what one Replay yields.
type Resumer interface {
	Decisions
	ReplayAfter(mark Mark, from, to time.Time, fn func(*Decision) error) (Mark, error)
	// Identity is the source the stream reads: a replay continues only on
	// the same source.
	Identity() any
}

// Mark is where a resumable stream stopped; the zero Mark is its start.
type Mark struct {
	// Resumable: a later ReplayAfter may continue from the mark.
	Resumable bool
	// Pos is the source's own position (opaque to the decision).
	Pos any
}

// Model is the Prometheus model's stream: decisions drawn from the
// history's estimates.
type Model interface {
	Decisions
	// Usable says why the model cannot draw, or nil.
	Usable() error
	// Draws are the model's parameters: a replay continues only with equal ones.
	Draws() Draws
}

// Draws are the Prometheus model's parameters.
type Draws struct {
	BlockSize, Budget int
	Seed              uint64
}

// ErrModelData is returned when the estimates lack what the model needs.
var ErrModelData = errors.New("prometheus model: missing data")

// ErrStaleMark is returned when a source no longer continues a mark (the
// file was replaced or truncated, or the stream dropped records not yet
// replayed): the replay starts again from the zero Mark.
var ErrStaleMark = errors.New("the source no longer continues the last cycle's position")
