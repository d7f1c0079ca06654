package sink

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/gatetuner/gatetuner/estimator/prom"
	"github.com/gatetuner/gatetuner/tuner/eppconfig"
)

// FieldManager is the field manager of every write gatetuner makes, and the
// reporting controller of its Events.
const FieldManager = "gatetuner"

// Sink reads a target's config and state, and writes changes through the
// guarded path.
type Sink interface {
	// Target returns the target the sink writes (defaults filled in).
	Target() Target
	// Read returns the target's current config, managed instances and state.
	// A config that does not parse, lacks a managed plugin or holds parameters
	// the profile rejects is an error wrapping ErrMalformed. Unless the sink is
	// read-only, Read records a pending restart that has resolved (an
	// annotation-only write).
	Read(ctx context.Context) (*Snapshot, error)
	// Apply writes changes computed against snap (from Read) through the
	// guarded path and, in rollout mode, restarts, verifies and rolls back.
	// A write the guards refuse comes back as a Result with Outcome held and a
	// Hold, not as an error.
	Apply(ctx context.Context, snap *Snapshot, changes []eppconfig.Change, meta Meta) (*Result, error)
	// MarkRestarted records that the EPP restarted at t and so runs the
	// written config: the pending restart (if any, and written before t) is
	// resolved and t recorded as the effective time.
	MarkRestarted(ctx context.Context, t time.Time) error
}

// Errors the sink returns (wrapped with context).
var (
	// ErrMalformed: the target's config or gatetuner state cannot be read; it is left untouched.
	ErrMalformed = errors.New("malformed target")
	// ErrConflict: the target kept changing under the write; retries ran out.
	ErrConflict = errors.New("write conflict")
	// ErrReadOnly: the sink was opened read-only.
	ErrReadOnly = errors.New("sink is read-only")
	// ErrInvalidChange: a change touches a key gatetuner does not own or an
	// instance the target does not manage.
	ErrInvalidChange = errors.New("invalid change")
	// ErrNoPendingRestart: MarkRestarted found the restart predates the write.
	ErrNoPendingRestart = errors.New("restart predates the pending write")
)

// Meta describes a write for the history and the Event.
type Meta struct {
	// Kind is KindApply (default) or KindRollback. A rollback is not blocked
	// by a failure hold or a pending restart; a pause blocks both.
	Kind EntryKind
	// Reason is a short human summary of why (clipped to MaxTextBytes).
	Reason string
	// Evidence is a short summary of the numbers behind it (clipped).
	Evidence string
	// RecommendationHash identifies the recommendation applied.
	RecommendationHash string
	// Undoes is the history entry a rollback restores from.
	Undoes int
}

// Outcome is what Apply did.
type Outcome string

// Outcomes of Apply.
const (
	// OutcomeApplied: written; see Result.Pending for configmap mode.
	OutcomeApplied Outcome = "applied"
	// OutcomeUnchanged: the changes were already in place; nothing written.
	OutcomeUnchanged Outcome = "unchanged"
	// OutcomeHeld: a guard refused the write; see Result.Hold.
	OutcomeHeld Outcome = "held"
	// OutcomeRolledBack: written, the rollout or verification failed, the
	// previous values are back and the target is held (Result.Hold).
	OutcomeRolledBack Outcome = "rolled-back"
)

// Result reports an Apply.
type Result struct {
	Outcome Outcome
	// Hold says why the write was refused, or why the target is held after a rollback.
	Hold *Hold
	// Entry is the history entry of the write (nil when nothing was written),
	// as last recorded.
	Entry *Entry
	// Diff is the unified diff of the config text written.
	Diff string
	// ConfigHash is the sha256 (hex) of the config text on the target afterwards.
	ConfigHash string
	// Attempts counts write attempts (1 + retries after conflicts).
	Attempts int
	// Recomputed reports that the target changed after the Snapshot (not in
	// owned keys) and the splice was recomputed on the fresh content.
	Recomputed bool
	// Pending reports that the write awaits an EPP restart.
	Pending bool
}

// RestartHook restarts a file target's EPP so that it runs the config whose
// sha256 is configHash; an error means the EPP did not come up with it.
type RestartHook func(ctx context.Context, path, configHash string) error

// Options are a sink's dependencies and settings.
type Options struct {
	// Client talks to the API server (Kubernetes targets).
	Client kubernetes.Interface
	// Identity names this writer in history, Events and leases (default: hostname).
	Identity string
	// Clock measures waits and stamps history; the real clock when nil.
	Clock clock.Clock
	// Logger receives progress; slog.Default() when nil.
	Logger *slog.Logger
	// ReadOnly refuses every write (dry runs).
	ReadOnly bool

	// MaxAttempts bounds write attempts under conflicts (default 8).
	MaxAttempts int
	// HistoryLimit is how many history entries to keep (default DefaultHistoryLimit).
	HistoryLimit int

	// PollInterval is how often a rollout's status is read (default 2s).
	PollInterval time.Duration
	// RolloutTimeout bounds the wait for a rollout, on top of the
	// Deployment's progress deadline (default 10m).
	RolloutTimeout time.Duration
	// Verify, when set, checks TTFT after each rollout (rollout mode and a
	// file target with a RestartHook).
	Verify *Verify

	// RestartHook restarts a file target's EPP after a write; without it the
	// target stays pending-restart until MarkRestarted.
	RestartHook RestartHook

	// beforeWrite, when set, runs between the re-check and the write of each
	// attempt (tests inject concurrent writers here).
	beforeWrite func(attempt int)
}

// Verify configures the TTFT check after a rollout.
type Verify struct {
	// Querier reads Prometheus.
	Querier prom.Querier
	// Selector holds the PromQL label matchers (without braces) selecting the
	// target's series of llm_d_epp_request_ttft_seconds_bucket, e.g.
	// `namespace="llm-d",model_name="qwen3-32b"`.
	Selector string
	// VLLMSelector selects vllm:time_to_first_token_seconds_bucket, used when
	// the EPP metric has no data; default Selector.
	VLLMSelector string
	// Quantile is the TTFT quantile compared (default 0.9).
	Quantile float64
	// Margin is the tolerated relative increase, e.g. 0.2 for +20 % (default 0.2).
	Margin float64
	// Window is how long after the rollout (and warm-up) TTFT is watched, and
	// the span of the before-apply measurement (default 10m).
	Window time.Duration
	// Warmup is skipped after the rollout: a restarted EPP has lost its prefix
	// index and is slower for a while (default 2m; negative for none).
	Warmup time.Duration
	// Interval is how often TTFT is read during the window (default 30s).
	Interval time.Duration
}

func (o Options) withDefaults() Options {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Identity == "" {
		if h, err := os.Hostname(); err == nil && h != "" {
			o.Identity = h
		} else {
			o.Identity = "gatetuner"
		}
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 8
	}
	if o.HistoryLimit <= 0 {
		o.HistoryLimit = DefaultHistoryLimit
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 2 * time.Second
	}
	if o.RolloutTimeout <= 0 {
		o.RolloutTimeout = 10 * time.Minute
	}
	if o.Verify != nil {
		v := *o.Verify
		if v.Quantile <= 0 || v.Quantile >= 1 {
			v.Quantile = 0.9
		}
		if v.Margin <= 0 {
			v.Margin = 0.2
		}
		if v.Window <= 0 {
			v.Window = 10 * time.Minute
		}
		if v.Warmup < 0 {
			v.Warmup = 0
		} else if v.Warmup == 0 {
			v.Warmup = 2 * time.Minute
		}
		if v.Interval <= 0 {
			v.Interval = 30 * time.Second
		}
		if v.VLLMSelector == "" {
			v.VLLMSelector = v.Selector
		}
		o.Verify = &v
	}
	return o
}

// New opens a sink for the target: a file sink when t.File is set, else a
// Kubernetes sink (which needs opts.Client).
func New(t Target, opts Options) (Sink, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	t, err := t.withDefaults()
	if err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if opts.Verify != nil && opts.Verify.Querier == nil {
		return nil, fmt.Errorf("%s: verification needs a Prometheus querier", t)
	}
	e := &engine{target: t, opts: opts, log: opts.Logger.With("target", t.Name)}
	if t.IsFile() {
		fs, err := newFileStore(t, opts)
		if err != nil {
			return nil, err
		}
		e.store = fs
		if opts.RestartHook != nil {
			e.restarter = fs
		}
		return e, nil
	}
	if opts.Client == nil {
		return nil, fmt.Errorf("%s: a Kubernetes target needs a client", t)
	}
	ks := &kubeStore{target: t, client: opts.Client, opts: opts}
	e.store = ks
	if t.Mode == ModeRollout {
		e.restarter = ks
	}
	return e, nil
}

// ConfigHash returns the sha256 of a config text in hex, as written to the
// EPP pod template's gatetuner.dev/config-hash annotation.
func ConfigHash(text []byte) string {
	sum := sha256.Sum256(text)
	return hex.EncodeToString(sum[:])
}

// Announcer records a notice for people about a target: an Event on a
// ConfigMap target, a log line for a file target. A read-only sink records
// nothing.
type Announcer interface {
	Announce(ctx context.Context, reason, action, note string) error
}

// Notifier records a notice like Announcer, Normal or Warning.
type Notifier interface {
	Notify(ctx context.Context, warning bool, reason, action, note string) error
}

// Announce implements Announcer.
func (e *engine) Announce(ctx context.Context, reason, action, note string) error {
	return e.Notify(ctx, false, reason, action, note)
}

// Notify implements Notifier.
func (e *engine) Notify(ctx context.Context, warning bool, reason, action, note string) error {
	if e.opts.ReadOnly {
		return nil
	}
	obj, err := e.store.load(ctx)
	if err != nil {
		return fmt.Errorf("%s: announce %s: %w", e.target, reason, err)
	}
	e.store.event(ctx, obj, warning, reason, action, note)
	return nil
}
