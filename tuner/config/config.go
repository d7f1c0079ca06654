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
	"github.com/gatetuner/gatetuner/tuner/policy"
)

// Modes of a target (package policy).
const (
	ModeOff       = policy.ModeOff
	ModeConfigMap = policy.ModeConfigMap
	ModeRollout   = policy.ModeRollout
	ModeApprove   = policy.ModeApprove
)

// Decision sources (package policy).
const (
	SourceModel   = policy.SourceModel
	SourceRecords = policy.SourceRecords
)

// Apply-window words accepted in place of {schedule, duration} (package policy).
const (
	ApplyWindowAuto   = policy.ApplyWindowAuto
	ApplyWindowAlways = policy.ApplyWindowAlways
)

// The knobs live in package policy; these names keep the config's API.
type (
	// Policy holds the knobs a target inherits from defaults unless it sets them.
	Policy = policy.Policy
	// ApplyWindow is when writes may happen.
	ApplyWindow = policy.ApplyWindow
	// Verification is how a rollout is judged.
	Verification = policy.Verification
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

// DefaultPolicy returns the built-in defaults.
func DefaultPolicy() Policy { return policy.Default() }

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
	c.Defaults = policy.Merge(c.Defaults, policy.Default())
	if err := c.Defaults.Validate("defaults"); err != nil {
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

// completeTarget fills the target's defaults and validates it, reporting
// every problem of the target in one pass, not the first of them.
func (c *Config) completeTarget(t *Target) error {
	t.Policy = policy.Merge(t.Policy, c.Defaults)
	errs := t.locationProblems()
	if _, err := c.ResolveProfile(t.Profile); err != nil {
		errs = append(errs, fmt.Sprintf("profile: %v", err))
	}
	errs = append(errs, t.sourceProblems()...)
	if err := t.Policy.Validate(""); err != nil {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// locationProblems are what is wrong with where the target's EPP config
// lives and the mode that writes it.
func (t *Target) locationProblems() []string {
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
	return errs
}

// sourceProblems are what is wrong with the target's numbers, decision
// source and selectors; it defaults the selectors it can.
func (t *Target) sourceProblems() []string {
	var errs []string
	bad := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
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
	return errs
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

// ParseSchedule parses a cron expression as the config does.
func ParseSchedule(s string) (cron.Schedule, error) { return policy.ParseSchedule(s) }
