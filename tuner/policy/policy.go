// Package policy holds a target's tuning knobs — the mode, the schedule,
// the evidence's history and daily cycle, the guards' thresholds and the
// apply window — and their built-in defaults. The configuration (package
// config) reads them; the decision (package decide) judges by them.
package policy

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Modes of a target.
const (
	ModeOff       = "off"       // recommend only (the default)
	ModeConfigMap = "configmap" // write the ConfigMap; the EPP restarts later
	ModeRollout   = "rollout"   // write, roll the EPP Deployment, verify
	ModeApprove   = "approve"   // write the ConfigMap only with an operator's approval of the recommendation's hash
)

// Decision sources.
const (
	SourceModel   = "prometheus-model"
	SourceRecords = "records"
)

// ApplyWindow is when writes may happen: from each activation of a cron
// schedule for a duration, or (the string "auto", the default) in the
// window of the daily cycle whose restart costs least, or (the string
// "always") at any time.
type ApplyWindow struct {
	Schedule string        `mapstructure:"schedule"`
	Duration time.Duration `mapstructure:"duration"`
	// Auto: the window of least restart cost over the history.
	Auto bool `mapstructure:"-"`
	// Always: no window, writes at any time.
	Always bool `mapstructure:"-"`
}

// Apply-window words accepted in place of {schedule, duration}.
const (
	ApplyWindowAuto   = "auto"
	ApplyWindowAlways = "always"
)

// String is the window as configured: auto, always or "schedule for duration".
func (w *ApplyWindow) String() string {
	switch {
	case w == nil || w.Always:
		return ApplyWindowAlways
	case w.Auto:
		return ApplyWindowAuto
	}
	return fmt.Sprintf("%q for %s", w.Schedule, w.Duration)
}

// Verification is how a rollout is judged.
type Verification struct {
	// Window after the rollout in which TTFT p90 is compared with before.
	Window time.Duration `mapstructure:"window"`
	// TTFTMargin: a relative worsening of TTFT p90 above it rolls back.
	TTFTMargin float64 `mapstructure:"ttftMargin"`
	// RolloutTimeout bounds the wait for the new generation to be available.
	RolloutTimeout time.Duration `mapstructure:"rolloutTimeout"`
	// Warmup is skipped after the rollout before TTFT is compared: the
	// restarted EPP has lost its prefix index and is slower for a while.
	Warmup time.Duration `mapstructure:"warmup"`
}

// Policy holds the knobs a target inherits from defaults unless it sets them.
type Policy struct {
	Mode     string `mapstructure:"mode"`
	Schedule string `mapstructure:"schedule"`
	// Lookback is the estimator's rate window: the drain-rate and
	// throughput estimates read this far back.
	Lookback time.Duration `mapstructure:"lookback"`
	// History is the evidence the day is decided on (cut at the last change).
	History time.Duration `mapstructure:"history"`
	// DayLength is the period of the daily cycle; WindowWidth splits it
	// into windows (hour-of-day by default).
	DayLength   time.Duration `mapstructure:"dayLength"`
	WindowWidth time.Duration `mapstructure:"windowWidth"`
	// SaturationWindow is the estimator's saturated-window length.
	SaturationWindow time.Duration `mapstructure:"saturationWindow"`
	// SnapshotStep spaces the in-flight snapshots the Prometheus model replays.
	SnapshotStep   time.Duration `mapstructure:"snapshotStep"`
	DecisionSource string        `mapstructure:"decisionSource"`
	MinConfidence  *float64      `mapstructure:"minConfidence"`
	// GainRatio: the recommendation's excess cost must be ≤ this × the current's.
	GainRatio *float64 `mapstructure:"gainRatio"`
	// MinGainShare: with the Prometheus model, the excess cost saved per
	// second must be at least this share of the pool's computed prefill
	// tokens per second (a gain the gate's shadow sees but the pool would not feel is no gain).
	MinGainShare *float64 `mapstructure:"minGainShare"`
	// Deadband on the token bar (relative).
	Deadband *float64 `mapstructure:"deadband"`
	// MaxStep bounds each apply's bar move (×/÷).
	MaxStep     *float64      `mapstructure:"maxStep"`
	Cooldown    time.Duration `mapstructure:"cooldown"`
	DailyBudget *int          `mapstructure:"dailyBudget"`
	// BudgetWindow is the span the budget counts applies over (default 24h).
	BudgetWindow    time.Duration `mapstructure:"budgetWindow"`
	ApplyWindow     *ApplyWindow  `mapstructure:"applyWindow"`
	RestartWarmup   time.Duration `mapstructure:"restartWarmup"`
	Verification    Verification  `mapstructure:"verification"`
	MinDecisions    *int          `mapstructure:"minDecisions"`
	BlockSizeTokens *int          `mapstructure:"blockSizeTokens"`
	// ModelEndpointBudget bounds the Prometheus model's draws per snapshot
	// by their endpoints: draws × endpoints ≤ this (at most 50 draws).
	ModelEndpointBudget *int `mapstructure:"modelEndpointBudget"`
}

// defaults are every knob's built-in value (Default).
var defaults = Policy{
	Mode: ModeOff, Schedule: "*/5 * * * *", Lookback: 2 * time.Hour, History: 24 * time.Hour, DayLength: 24 * time.Hour, WindowWidth: time.Hour, SaturationWindow: 2 * time.Minute, SnapshotStep: 30 * time.Second,
	DecisionSource: SourceModel, MinConfidence: ptr(0.7), GainRatio: ptr(0.8), MinGainShare: ptr(0.25), Deadband: ptr(0.2), MaxStep: ptr(4.0),
	Cooldown: 6 * time.Hour, DailyBudget: ptr(1), BudgetWindow: 24 * time.Hour, ApplyWindow: &ApplyWindow{Auto: true}, RestartWarmup: time.Minute,
	Verification: Verification{Window: 10 * time.Minute, TTFTMargin: 0.2, RolloutTimeout: 10 * time.Minute, Warmup: 2 * time.Minute},
	MinDecisions: ptr(200), BlockSizeTokens: ptr(64), ModelEndpointBudget: ptr(800),
}

func ptr[T any](v T) *T { return &v }

// Default returns the built-in defaults.
func Default() Policy { return defaults }

// Merge fills p's unset fields from def.
func Merge(p, def Policy) Policy {
	if p.Mode == "" {
		p.Mode = def.Mode
	}
	if p.Schedule == "" {
		p.Schedule = def.Schedule
	}
	if p.Lookback == 0 {
		p.Lookback = def.Lookback
	}
	if p.History == 0 {
		p.History = def.History
	}
	if p.DayLength == 0 {
		p.DayLength = def.DayLength
	}
	if p.WindowWidth == 0 {
		p.WindowWidth = def.WindowWidth
	}
	if p.SaturationWindow == 0 {
		p.SaturationWindow = def.SaturationWindow
	}
	if p.SnapshotStep == 0 {
		p.SnapshotStep = def.SnapshotStep
	}
	if p.DecisionSource == "" {
		p.DecisionSource = def.DecisionSource
	}
	if p.MinConfidence == nil {
		p.MinConfidence = def.MinConfidence
	}
	if p.GainRatio == nil {
		p.GainRatio = def.GainRatio
	}
	if p.MinGainShare == nil {
		p.MinGainShare = def.MinGainShare
	}
	if p.Deadband == nil {
		p.Deadband = def.Deadband
	}
	if p.MaxStep == nil {
		p.MaxStep = def.MaxStep
	}
	if p.Cooldown == 0 {
		p.Cooldown = def.Cooldown
	}
	if p.DailyBudget == nil {
		p.DailyBudget = def.DailyBudget
	}
	if p.BudgetWindow == 0 {
		p.BudgetWindow = def.BudgetWindow
	}
	if p.ApplyWindow == nil {
		p.ApplyWindow = def.ApplyWindow
	}
	if p.RestartWarmup == 0 {
		p.RestartWarmup = def.RestartWarmup
	}
	if p.Verification.Window == 0 {
		p.Verification.Window = def.Verification.Window
	}
	if p.Verification.TTFTMargin == 0 {
		p.Verification.TTFTMargin = def.Verification.TTFTMargin
	}
	if p.Verification.RolloutTimeout == 0 {
		p.Verification.RolloutTimeout = def.Verification.RolloutTimeout
	}
	if p.Verification.Warmup == 0 {
		p.Verification.Warmup = def.Verification.Warmup
	}
	if p.MinDecisions == nil {
		p.MinDecisions = def.MinDecisions
	}
	if p.BlockSizeTokens == nil {
		p.BlockSizeTokens = def.BlockSizeTokens
	}
	if p.ModelEndpointBudget == nil {
		p.ModelEndpointBudget = def.ModelEndpointBudget
	}
	return p
}

// CronParser parses the schedules of the config (5 fields, or descriptors like @every 5m).
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseSchedule parses a cron expression as the config does.
func ParseSchedule(s string) (cron.Schedule, error) { return cronParser.Parse(s) }

// Validate checks the knobs; prefix names their section in messages
// ("defaults", or "" for a target's own keys).
func (p *Policy) Validate(prefix string) error {
	key := func(k string) string {
		if prefix == "" {
			return k
		}
		return prefix + "." + k
	}
	var errs []string
	bad := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	switch p.Mode {
	case ModeOff, ModeConfigMap, ModeRollout, ModeApprove:
	default:
		bad("%s: want off, configmap, rollout or approve, got %q", key("mode"), p.Mode)
	}
	if _, err := ParseSchedule(p.Schedule); err != nil {
		bad("%s: %q: %v", key("schedule"), p.Schedule, err)
	}
	switch p.DecisionSource {
	case SourceModel, SourceRecords:
	default:
		bad("%s: want prometheus-model or records, got %q", key("decisionSource"), p.DecisionSource)
	}
	if *p.MinConfidence < 0 || *p.MinConfidence > 1 {
		bad("%s: want a value in [0,1], got %v", key("minConfidence"), *p.MinConfidence)
	}
	if *p.GainRatio <= 0 || *p.GainRatio > 1 {
		bad("%s: want a value in (0,1], got %v", key("gainRatio"), *p.GainRatio)
	}
	if *p.MinGainShare < 0 {
		bad("%s: want ≥ 0, got %v", key("minGainShare"), *p.MinGainShare)
	}
	if *p.Deadband < 0 || *p.Deadband >= 1 {
		bad("%s: want a value in [0,1), got %v", key("deadband"), *p.Deadband)
	}
	if *p.MaxStep < 1 {
		bad("%s: want ≥ 1, got %v", key("maxStep"), *p.MaxStep)
	}
	if *p.DailyBudget < 0 {
		bad("%s: want ≥ 0, got %d", key("dailyBudget"), *p.DailyBudget)
	}
	if p.Lookback < p.SaturationWindow*4 {
		bad("%s: %v is shorter than 4 saturation windows (%v)", key("lookback"), p.Lookback, p.SaturationWindow)
	}
	switch {
	case p.WindowWidth <= 0 || p.DayLength <= 0:
		bad("%s and %s: want positive durations, got %v and %v", key("dayLength"), key("windowWidth"), p.DayLength, p.WindowWidth)
	case p.DayLength%p.WindowWidth != 0:
		bad("%s: %v does not divide %s %v", key("windowWidth"), p.WindowWidth, key("dayLength"), p.DayLength)
	case p.History < p.WindowWidth:
		bad("%s: %v is shorter than one window (%s %v)", key("history"), p.History, key("windowWidth"), p.WindowWidth)
	}
	if w := p.ApplyWindow; w != nil && !w.Auto && !w.Always {
		if _, err := ParseSchedule(w.Schedule); err != nil {
			bad("%s: %q: %v", key("applyWindow.schedule"), w.Schedule, err)
		}
		if w.Duration <= 0 {
			bad("%s: want a positive duration", key("applyWindow.duration"))
		}
	}
	if p.Verification.TTFTMargin < 0 {
		bad("%s: want ≥ 0", key("verification.ttftMargin"))
	}
	if *p.BlockSizeTokens <= 0 {
		bad("%s: want > 0", key("blockSizeTokens"))
	}
	if *p.ModelEndpointBudget <= 0 {
		bad("%s: want > 0 (draws × endpoints per snapshot)", key("modelEndpointBudget"))
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}
