// Package config is the daemon's configuration: Prometheus and Kubernetes
// access, defaults, custom EPP build profiles and the targets to tune. It is
// read with viper from a YAML file, GATETUNER_* environment variables and
// flags; unknown keys are errors. The schema is documented in docs/config.md.
package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/robfig/cron/v3"
	"github.com/spf13/viper"

	"github.com/gatetuner/gatetuner/gate"
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

// Config is the whole daemon configuration.
type Config struct {
	Prometheus     Prometheus     `mapstructure:"prometheus"`
	Kubernetes     Kubernetes     `mapstructure:"kubernetes"`
	LeaderElection LeaderElection `mapstructure:"leaderElection"`
	Server         Server         `mapstructure:"server"`
	Defaults       Policy         `mapstructure:"defaults"`
	Profiles       []Profile      `mapstructure:"profiles"`
	Targets        []Target       `mapstructure:"targets"`
}

// Prometheus says where estimates come from.
type Prometheus struct {
	// URL of the Prometheus HTTP API, or "embedded" (a built-in TSDB filled by
	// scraping Scrape targets).
	URL                string            `mapstructure:"url"`
	BearerTokenFile    string            `mapstructure:"bearerTokenFile"`
	CAFile             string            `mapstructure:"caFile"`
	CertFile           string            `mapstructure:"certFile"`
	KeyFile            string            `mapstructure:"keyFile"`
	ServerName         string            `mapstructure:"serverName"`
	InsecureSkipVerify bool              `mapstructure:"insecureSkipVerify"`
	Headers            map[string]string `mapstructure:"headers"`
	Timeout            time.Duration     `mapstructure:"timeout"`
	// Scrape lists host:port /metrics endpoints for the embedded Prometheus.
	Scrape         []string      `mapstructure:"scrape"`
	ScrapeInterval time.Duration `mapstructure:"scrapeInterval"`
}

// Kubernetes says how to reach the API server.
type Kubernetes struct {
	// Kubeconfig path; empty means in-cluster.
	Kubeconfig string `mapstructure:"kubeconfig"`
}

// LeaderElection configures the Lease that makes one replica the writer.
type LeaderElection struct {
	Enabled       bool          `mapstructure:"enabled"`
	Namespace     string        `mapstructure:"namespace"`
	Name          string        `mapstructure:"name"`
	LeaseDuration time.Duration `mapstructure:"leaseDuration"`
	RenewDeadline time.Duration `mapstructure:"renewDeadline"`
	RetryPeriod   time.Duration `mapstructure:"retryPeriod"`
}

// Server is the daemon's HTTP endpoint (/metrics, /healthz, /readyz).
type Server struct {
	Address string `mapstructure:"address"`
}

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

// applyWindowHook decodes the words auto and always into an ApplyWindow.
func applyWindowHook(from, to reflect.Type, data any) (any, error) {
	if from.Kind() != reflect.String || (to != reflect.TypeOf(ApplyWindow{}) && to != reflect.TypeOf(&ApplyWindow{})) {
		return data, nil
	}
	switch s := data.(string); s {
	case ApplyWindowAuto:
		return &ApplyWindow{Auto: true}, nil
	case ApplyWindowAlways:
		return &ApplyWindow{Always: true}, nil
	default:
		return nil, fmt.Errorf("applyWindow: want auto, always or {schedule, duration}, got %q", s)
	}
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

// Profile declares a custom EPP build profile.
type Profile struct {
	Name          string   `mapstructure:"name"`
	Keys          []string `mapstructure:"keys"`
	MissingSignal string   `mapstructure:"missingSignal"`
	ThresholdRule string   `mapstructure:"thresholdRule"`
	// DecisionCounter and GateSpan: the build exports
	// llm_d_epp_prefix_cache_affinity_filter_decisions_total and the
	// filter_prefix_cache_affinity span; Outcomes the outcome values it
	// records (default: those of its missing-signal rule).
	DecisionCounter bool     `mapstructure:"decisionCounter"`
	GateSpan        bool     `mapstructure:"gateSpan"`
	Outcomes        []string `mapstructure:"outcomes"`
	// ConfigAPIVersions are the EndpointPickerConfig apiVersions the
	// build's loader registers (default llm-d.ai/v1alpha1 and
	// inference.networking.x-k8s.io/v1alpha1).
	ConfigAPIVersions []string `mapstructure:"configAPIVersions"`
}

// build returns the gate profile the declaration describes.
func (p Profile) build() (gate.Profile, error) {
	return gate.NewCustomProfile(gate.ProfileSpec{Name: p.Name, Keys: p.Keys, MissingSignal: p.MissingSignal, ThresholdRule: p.ThresholdRule,
		DecisionCounter: p.DecisionCounter, GateSpan: p.GateSpan, Outcomes: p.Outcomes, ConfigAPIVersions: p.ConfigAPIVersions})
}

// Selector picks a target's series.
type Selector struct {
	// VLLM: PromQL label matchers of the target's vLLM pods, e.g. `namespace="llm-d",pod=~"qwen-.*"`.
	VLLM string `mapstructure:"vllm"`
	// EPP: label matchers of the target's EPP series.
	EPP string `mapstructure:"epp"`
}

// Records is an exact decision source: gate records from a file or an HTTP(S) stream.
type Records struct {
	File string `mapstructure:"file"`
	URL  string `mapstructure:"url"`
}

// Target is one EPP filter instance to tune.
type Target struct {
	Name string `mapstructure:"name"`
	// Where the EPP config lives: a ConfigMap (namespace, configMap, key) or a File.
	Namespace string `mapstructure:"namespace"`
	ConfigMap string `mapstructure:"configMap"`
	Key       string `mapstructure:"key"`
	File      string `mapstructure:"file"`
	// StateFile is a file target's state file (default FILE.gatetuner.json).
	StateFile  string `mapstructure:"stateFile"`
	Plugin     string `mapstructure:"plugin"`
	Deployment string `mapstructure:"deployment"`
	Profile    string `mapstructure:"profile"`
	// TTFTSLOMs, when set, is the matchedTokens ceiling.
	TTFTSLOMs           float64  `mapstructure:"ttftSLOMs"`
	MaxNumBatchedTokens int      `mapstructure:"maxNumBatchedTokens"`
	PriorPPT            float64  `mapstructure:"priorPPT"`
	CalibrationFile     string   `mapstructure:"calibrationFile"`
	Selector            Selector `mapstructure:"selector"`
	// SyncedEPPReplicas: the EPP replicas sync in-flight load across
	// replicas (each gauge holds its own share, the gate sees the sum), so
	// the estimator adds their in-flight gauges up. Metrics cannot tell.
	SyncedEPPReplicas bool `mapstructure:"syncedEPPReplicas"`
	// PDGateProfile, for a P/D-disaggregated pool, is the scheduling
	// profile (prefill or decode) whose plugins include the target's plugin.
	PDGateProfile string  `mapstructure:"pdGateProfile"`
	Records       Records `mapstructure:"records"`
	// AllowCalibrationOverride lets the tuner write peakPrefillThroughput over a calibrated value.
	AllowCalibrationOverride bool `mapstructure:"allowCalibrationOverride"`
	Policy                   `mapstructure:",squash"`
}

// Defaults for every knob, applied by Load.
var defaultPolicy = Policy{
	Mode: ModeOff, Schedule: "*/5 * * * *", Lookback: 2 * time.Hour, History: 24 * time.Hour, DayLength: 24 * time.Hour, WindowWidth: time.Hour, SaturationWindow: 2 * time.Minute, SnapshotStep: 30 * time.Second,
	DecisionSource: SourceModel, MinConfidence: ptr(0.7), GainRatio: ptr(0.8), MinGainShare: ptr(0.25), Deadband: ptr(0.2), MaxStep: ptr(4.0),
	Cooldown: 6 * time.Hour, DailyBudget: ptr(1), BudgetWindow: 24 * time.Hour, ApplyWindow: &ApplyWindow{Auto: true}, RestartWarmup: time.Minute,
	Verification: Verification{Window: 10 * time.Minute, TTFTMargin: 0.2, RolloutTimeout: 10 * time.Minute, Warmup: 2 * time.Minute},
	MinDecisions: ptr(200), BlockSizeTokens: ptr(64), ModelEndpointBudget: ptr(800),
}

func ptr[T any](v T) *T { return &v }

// DefaultPolicy returns the built-in defaults.
func DefaultPolicy() Policy { return defaultPolicy }

// DefaultPrometheus returns the prometheus: section's defaults (the query
// timeout and the embedded scraper's interval) that Load fills in.
func DefaultPrometheus() Prometheus {
	return Prometheus{Timeout: 30 * time.Second, ScrapeInterval: 15 * time.Second}
}

// Load reads the configuration from v (a file already set with
// v.SetConfigFile, environment variables and bound flags), rejects unknown
// keys, fills defaults and validates.
func Load(v *viper.Viper) (*Config, error) {
	for _, k := range envKeys {
		if err := v.BindEnv(k); err != nil {
			return nil, err
		}
	}
	if v.ConfigFileUsed() != "" {
		if err := v.ReadInConfig(); err != nil {
			return nil, fmt.Errorf("read config %s: %w", v.ConfigFileUsed(), err)
		}
	}
	var c Config
	if err := v.UnmarshalExact(&c, func(dc *mapstructure.DecoderConfig) {
		dc.DecodeHook = mapstructure.ComposeDecodeHookFunc(mapstructure.StringToTimeDurationHookFunc(), mapstructure.StringToSliceHookFunc(","), applyWindowHook)
	}); err != nil {
		if uk := unknownKeyError(v.ConfigFileUsed(), err); uk != nil {
			return nil, uk
		}
		return nil, fmt.Errorf("config %s: %w", orStdin(v.ConfigFileUsed()), oneLine(err))
	}
	if err := c.complete(); err != nil {
		return nil, fmt.Errorf("config %s: %w", orStdin(v.ConfigFileUsed()), err)
	}
	return &c, nil
}

// envKeys are the scalar keys GATETUNER_* environment variables may set
// (GATETUNER_PROMETHEUS_URL for prometheus.url, and so on).
var envKeys = []string{"prometheus.url", "prometheus.bearerTokenFile", "prometheus.caFile", "prometheus.timeout",
	"prometheus.insecureSkipVerify", "kubernetes.kubeconfig", "server.address", "leaderElection.enabled",
	"leaderElection.namespace", "leaderElection.name", "defaults.mode", "defaults.schedule", "defaults.lookback"}

func orStdin(s string) string {
	if s == "" {
		return "(environment/flags)"
	}
	return s
}

func oneLine(err error) error {
	return errors.New(strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " "))
}

// complete fills defaults and validates.
func (c *Config) complete() error {
	if c.Prometheus.Timeout == 0 {
		c.Prometheus.Timeout = DefaultPrometheus().Timeout
	}
	if c.Prometheus.ScrapeInterval == 0 {
		c.Prometheus.ScrapeInterval = DefaultPrometheus().ScrapeInterval
	}
	if c.Server.Address == "" {
		c.Server.Address = ":9100"
	}
	le := &c.LeaderElection
	if le.Name == "" {
		le.Name = "gatetuner"
	}
	if le.LeaseDuration == 0 {
		le.LeaseDuration = 15 * time.Second
	}
	if le.RenewDeadline == 0 {
		le.RenewDeadline = 10 * time.Second
	}
	if le.RetryPeriod == 0 {
		le.RetryPeriod = 2 * time.Second
	}
	if le.Enabled && le.Namespace == "" {
		if ns, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
			le.Namespace = strings.TrimSpace(string(ns))
		} else {
			return fmt.Errorf("leaderElection.namespace is required outside a cluster")
		}
	}
	if u := c.Prometheus.URL; u != "" && u != "embedded" {
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return fmt.Errorf("prometheus.url: want http(s)://host[:port] or embedded, got %q", u)
		}
	}
	c.Defaults = merge(c.Defaults, defaultPolicy)
	if err := c.Defaults.validate("defaults"); err != nil {
		return err
	}
	seenProfile := map[string]bool{}
	for i, p := range c.Profiles {
		if _, err := p.build(); err != nil {
			return fmt.Errorf("profiles[%d]: %w", i, err)
		}
		if _, err := gate.LookupProfile(p.Name); err == nil || seenProfile[p.Name] {
			return fmt.Errorf("profiles[%d]: name %q is already taken", i, p.Name)
		}
		seenProfile[p.Name] = true
	}
	if len(c.Targets) == 0 {
		return fmt.Errorf("targets: at least one target is required")
	}
	names := map[string]bool{}
	for i := range c.Targets {
		t := &c.Targets[i]
		where := fmt.Sprintf("targets[%d]", i)
		if t.Name != "" {
			where = fmt.Sprintf("targets[%d] (%s)", i, t.Name)
		}
		if err := c.completeTarget(t); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if names[t.Name] {
			return fmt.Errorf("%s: name %q is used twice", where, t.Name)
		}
		names[t.Name] = true
	}
	return nil
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)

func (c *Config) completeTarget(t *Target) error {
	t.Policy = merge(t.Policy, c.Defaults)
	// One pass reports every problem of the target, not the first of them.
	var errs []string
	bad := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	if t.Name == "" {
		bad("name is required")
	}
	switch {
	case t.File != "" && t.ConfigMap != "":
		bad("set either file or configMap, not both")
	case t.File == "" && t.ConfigMap == "":
		bad("configMap (with namespace) or file is required")
	case t.StateFile != "" && t.File == "":
		bad("stateFile goes with file (a ConfigMap keeps its state in annotations)")
	case t.ConfigMap != "":
		if !dnsLabel.MatchString(t.ConfigMap) {
			bad("configMap: %q is not a valid name", t.ConfigMap)
		}
		if t.Namespace == "" || !dnsLabel.MatchString(t.Namespace) {
			bad("namespace: %q is not a valid namespace", t.Namespace)
		}
	}
	if t.Mode == ModeRollout && t.File != "" {
		bad("mode rollout needs a configMap target; a file target supports off and configmap (and approve, the approval in its state file)")
	} else if t.Mode == ModeRollout && t.Deployment == "" {
		bad("mode rollout needs deployment (the EPP Deployment to restart)")
	}
	if _, err := c.ResolveProfile(t.Profile); err != nil {
		bad("profile: %v", err)
	}
	if t.TTFTSLOMs < 0 || t.PriorPPT < 0 || t.MaxNumBatchedTokens < 0 {
		bad("ttftSLOMs, priorPPT and maxNumBatchedTokens must be ≥ 0")
	}
	if t.DecisionSource == SourceRecords && t.Records.File == "" && t.Records.URL == "" {
		bad("decisionSource records needs records.file or records.url")
	}
	if t.PDGateProfile != "" && t.PDGateProfile != "prefill" && t.PDGateProfile != "decode" {
		bad("pdGateProfile must be prefill or decode, got %q", t.PDGateProfile)
	}
	if t.Selector.VLLM == "" {
		if t.Namespace == "" {
			bad("selector.vllm is required (PromQL label matchers of the vLLM pods; a file target has no namespace to default it from)")
		} else {
			t.Selector.VLLM = fmt.Sprintf(`namespace=%q`, t.Namespace)
		}
	}
	if t.Selector.EPP == "" {
		t.Selector.EPP = t.Selector.VLLM
	}
	if err := t.Policy.validate(""); err != nil {
		bad("%v", err)
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// ResolveProfile returns a built-in or a declared custom profile ("" = default).
func (c *Config) ResolveProfile(name string) (gate.Profile, error) {
	for _, p := range c.Profiles {
		if p.Name == name {
			return p.build()
		}
	}
	return gate.LookupProfile(name)
}

// merge fills p's unset fields from def.
func merge(p, def Policy) Policy {
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

func (p *Policy) validate(prefix string) error {
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
