package sink

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gatetuner/gatetuner/tuner/hold"
)

// Annotations gatetuner reads and writes on the EPP ConfigMap (and, with the
// same JSON, fields of the file sink's sidecar). Documented in docs/push.md.
const (
	// AnnotationPrefix is the prefix of every gatetuner annotation.
	AnnotationPrefix = "gatetuner.dev/"
	// AnnotationPaused set to "true" by a person stops every automatic write.
	AnnotationPaused = AnnotationPrefix + "paused"
	// AnnotationApprove is set by a person to the hash of the recommendation
	// a target in mode approve may write (several hashes, comma-separated,
	// for a ConfigMap holding several targets). gatetuner never writes it.
	AnnotationApprove = AnnotationPrefix + "approve"
	// AnnotationHistory holds the apply history: a JSON array of Entry, oldest first.
	AnnotationHistory = AnnotationPrefix + "history"
	// AnnotationHold holds a failure hold (JSON Hold) set after an automatic
	// rollback; a person removes it to let gatetuner apply again.
	AnnotationHold = AnnotationPrefix + "hold"
	// AnnotationPendingRestart holds the write the EPP does not run yet (JSON Pending).
	AnnotationPendingRestart = AnnotationPrefix + "pending-restart"
	// AnnotationEffectiveAt is when the last applied config took effect (RFC 3339).
	AnnotationEffectiveAt = AnnotationPrefix + "effective-at"
	// AnnotationConfigHash is the EPP pod-template annotation holding the
	// sha256 (hex) of the config text the pods were started with.
	AnnotationConfigHash = AnnotationPrefix + "config-hash"
)

// Bounds of the state kept on a target.
const (
	// DefaultHistoryLimit is how many history entries are kept by default.
	DefaultHistoryLimit = 20
	// MaxHistoryBytes bounds the history annotation's JSON; the oldest entries
	// are dropped to fit.
	MaxHistoryBytes = 32 << 10
	// MaxTextBytes bounds an entry's reason and evidence, and a hold's message.
	MaxTextBytes = 512
)

// HoldReason names why a write was not made (hold.Reason, shared with the tuner).
type HoldReason = hold.Reason

// Hold reasons the sink produces (package hold lists them all, in check order).
const (
	HoldPaused                  = hold.Paused
	HoldChangedExternally       = hold.ChangedExternally
	HoldPendingRestart          = hold.PendingRestart
	HoldRolloutFailed           = hold.RolloutFailed
	HoldVerificationFailed      = hold.VerificationFailed
	HoldVerificationUnavailable = hold.VerificationUnavailable
)

// EntryKind says who made a history entry's change.
type EntryKind string

// Kinds of history entries.
const (
	// KindApply is a write the tuner decided.
	KindApply EntryKind = "apply"
	// KindRollback is a person's rollback (gatetuner rollback).
	KindRollback EntryKind = "rollback"
	// KindAutoRollback is the sink undoing a failed rollout or verification.
	KindAutoRollback EntryKind = "auto-rollback"
)

// Entry statuses.
const (
	// StatusPendingRestart: written, the EPP does not run it yet.
	StatusPendingRestart = "pending-restart"
	// StatusEffective: the EPP runs it (EffectiveAt says since when).
	StatusEffective = "effective"
	// StatusRolledBack: the rollout or verification failed and it was undone.
	StatusRolledBack = "rolled-back"
	// StatusFailed: the rollout or verification failed and could not be undone.
	StatusFailed = "failed"
	// StatusSuperseded: a pending write replaced by a rollback before the EPP ran it.
	StatusSuperseded = "superseded"
)

// Entry is one write in a target's history.
type Entry struct {
	// Seq numbers entries 1, 2, … on a target; never reused, even after old
	// entries are dropped.
	Seq  int       `json:"seq"`
	Kind EntryKind `json:"kind"`
	At   time.Time `json:"at"`
	// By is the writer's identity (pod name or user).
	By   string `json:"by,omitempty"`
	Mode string `json:"mode,omitempty"`
	// Reason and Evidence are short summaries (at most MaxTextBytes each).
	Reason             string `json:"reason,omitempty"`
	Evidence           string `json:"evidence,omitempty"`
	RecommendationHash string `json:"recommendationHash,omitempty"`
	// ConfigHash and PrevConfigHash are the sha256 (hex) of the config text
	// after and before the write.
	ConfigHash     string `json:"configHash"`
	PrevConfigHash string `json:"prevConfigHash,omitempty"`
	// Instances are the changed filter instances with their previous and new values.
	Instances []InstanceChange `json:"instances"`
	// Undoes is the Seq of the entry a rollback restored from.
	Undoes int `json:"undoes,omitempty"`
	// Status is pending-restart, effective, rolled-back or failed.
	Status      string     `json:"status"`
	EffectiveAt *time.Time `json:"effectiveAt,omitempty"`
	// Failure says why the rollout or verification failed.
	Failure      *Failure      `json:"failure,omitempty"`
	Verification *Verification `json:"verification,omitempty"`
}

// InstanceChange is one filter instance's owned values before and after a write.
type InstanceChange struct {
	Plugin  string `json:"plugin"`
	DataKey string `json:"dataKey,omitempty"`
	// Old and New map canonical key names to values as JSON text ("18000",
	// "\"static\""); a key absent from the config is absent from the map.
	Old map[string]string `json:"old"`
	New map[string]string `json:"new"`
	// OldBarTokens and NewBarTokens are maxTTFTPenaltyMs × peakPrefillThroughput / 1000
	// with the EPP's defaults applied (0: gate or ceiling off).
	OldBarTokens float64 `json:"oldBarTokens"`
	NewBarTokens float64 `json:"newBarTokens"`
	OldMode      string  `json:"oldMode,omitempty"`
	NewMode      string  `json:"newMode,omitempty"`
}

// Failure is why a rollout or verification failed.
type Failure struct {
	Reason  HoldReason `json:"reason"`
	Message string     `json:"message"`
}

// Verification is the TTFT check of a rollout.
type Verification struct {
	// Metric is the histogram used, e.g. llm_d_epp_request_ttft_seconds.
	Metric   string  `json:"metric"`
	Quantile float64 `json:"quantile"`
	// Before and After are the quantile in seconds before the apply and after
	// the rollout (After is 0 when nothing could be measured).
	Before float64 `json:"before"`
	After  float64 `json:"after,omitempty"`
	Margin float64 `json:"margin"`
	// Result is passed, failed or inconclusive.
	Result string `json:"result"`
}

// Hold is a reason the target is not written now. Held by the sink
// (rollout-failed, verification-failed) it is stored on the target until a
// person removes it; other holds are returned by Apply only.
type Hold struct {
	Reason  HoldReason `json:"reason"`
	Since   time.Time  `json:"since,omitzero"`
	Message string     `json:"message"`
	// Seq is the history entry the hold is about (0 when none).
	Seq int `json:"seq,omitempty"`
}

// String renders "reason: message".
func (h *Hold) String() string {
	if h.Message == "" {
		return string(h.Reason)
	}
	return string(h.Reason) + ": " + h.Message
}

// Pending is a written config the EPP does not run yet.
type Pending struct {
	// Since is when the write completed.
	Since time.Time `json:"since"`
	// ConfigHash is the sha256 (hex) of the written text.
	ConfigHash string `json:"configHash"`
	// Seq is the history entry written.
	Seq int `json:"seq"`
	// Generation and TemplateHash are the EPP Deployment's generation and pod
	// template fingerprint right after the write; a rollout of a later
	// template resolves the pending restart.
	Generation   int64  `json:"generation,omitempty"`
	TemplateHash string `json:"templateHash,omitempty"`
}

// State is what gatetuner keeps on a target.
type State struct {
	// Paused is set by a person (gatetuner.dev/paused: "true").
	Paused bool
	// PausedValue is the pause annotation's raw value when it is not a boolean
	// (treated as paused).
	PausedValue string
	// Approve is the approval a person set (gatetuner.dev/approve, or a
	// file target's state-file "approve"): recommendation hashes.
	Approve string
	// Hold is a failure hold left by an automatic rollback.
	Hold *Hold
	// Pending is the write awaiting an EPP restart.
	Pending *Pending
	// PendingNote says what the sink saw while checking the pending restart
	// (not stored).
	PendingNote string
	// EffectiveAt is when the last applied config took effect in the EPP.
	EffectiveAt time.Time
	// History is the apply history, oldest first.
	History []Entry
}

// Last returns the newest history entry, or nil.
func (s *State) Last() *Entry {
	if len(s.History) == 0 {
		return nil
	}
	return &s.History[len(s.History)-1]
}

// Entry returns the history entry with sequence number seq.
func (s *State) Entry(seq int) (*Entry, bool) {
	for i := range s.History {
		if s.History[i].Seq == seq {
			return &s.History[i], true
		}
	}
	return nil, false
}

// Approvals returns the recommendation hashes the approval names (split at
// commas and white space).
func (s *State) Approvals() []string {
	return strings.FieldsFunc(s.Approve, func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
}

// WrittenHash returns the apply entry that wrote the recommendation hash h
// (a joint write records its targets' hashes joined by "+").
func (s *State) WrittenHash(h string) (*Entry, bool) {
	for i := range s.History {
		e := &s.History[i]
		if e.Kind == KindApply && slices.Contains(strings.Split(e.RecommendationHash, "+"), h) {
			return e, true
		}
	}
	return nil, false
}

// AppliesSince counts entries of kind apply written at or after t (the
// tuner's apply budget).
func (s *State) AppliesSince(t time.Time) int {
	n := 0
	for _, e := range s.History {
		if e.Kind == KindApply && !e.At.Before(t) {
			n++
		}
	}
	return n
}

func (s *State) nextSeq() int {
	if e := s.Last(); e != nil {
		return e.Seq + 1
	}
	return 1
}

// clone returns a deep copy.
func (s State) clone() State {
	b, err := json.Marshal(s.toSidecar())
	if err != nil {
		panic(fmt.Sprintf("sink: marshal state: %v", err)) // plain data always marshals
	}
	var sc sidecar
	if err := json.Unmarshal(b, &sc); err != nil {
		panic(fmt.Sprintf("sink: unmarshal state: %v", err))
	}
	out := sc.toState()
	out.PausedValue, out.PendingNote = s.PausedValue, s.PendingNote
	return out
}

// updateEntry applies f to the entry with sequence seq, if kept.
func (s *State) updateEntry(seq int, f func(*Entry)) {
	if e, ok := s.Entry(seq); ok {
		f(e)
	}
}

// decodeAnnotations reads the state from ConfigMap annotations. A value that
// is not what gatetuner writes is an error naming the annotation.
func decodeAnnotations(ann map[string]string) (State, error) {
	var s State
	if v, ok := ann[AnnotationPaused]; ok {
		s.Paused, s.PausedValue = parsePaused(v)
	}
	s.Approve = ann[AnnotationApprove]
	if v := ann[AnnotationHistory]; v != "" {
		if err := strictJSON(v, &s.History); err != nil {
			return s, fmt.Errorf("annotation %s: %w (fix or remove it)", AnnotationHistory, err)
		}
		if err := checkHistory(s.History); err != nil {
			return s, fmt.Errorf("annotation %s: %w (fix or remove it)", AnnotationHistory, err)
		}
	}
	if v := ann[AnnotationHold]; v != "" {
		var h Hold
		if err := strictJSON(v, &h); err != nil {
			return s, fmt.Errorf("annotation %s: %w (remove it to clear the hold)", AnnotationHold, err)
		}
		if h.Reason == "" {
			h.Reason = "held"
		}
		s.Hold = &h
	}
	if v := ann[AnnotationPendingRestart]; v != "" {
		var p Pending
		if err := strictJSON(v, &p); err != nil {
			return s, fmt.Errorf("annotation %s: %w (fix or remove it)", AnnotationPendingRestart, err)
		}
		s.Pending = &p
	}
	if v := ann[AnnotationEffectiveAt]; v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return s, fmt.Errorf("annotation %s: %w (fix or remove it)", AnnotationEffectiveAt, err)
		}
		s.EffectiveAt = t
	}
	return s, nil
}

// parsePaused reads the pause annotation: a boolean, anything else is paused
// (fail safe) and kept as PausedValue.
func parsePaused(v string) (bool, string) {
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		return true, v
	}
	return b, ""
}

// checkHistory validates what a person could have mangled.
func checkHistory(h []Entry) error {
	for i, e := range h {
		if e.Seq <= 0 {
			return fmt.Errorf("entry %d: seq must be positive, got %d", i, e.Seq)
		}
		if i > 0 && e.Seq <= h[i-1].Seq {
			return fmt.Errorf("entry %d: seq %d does not follow %d", i, e.Seq, h[i-1].Seq)
		}
		switch e.Kind {
		case KindApply, KindRollback, KindAutoRollback:
		default:
			return fmt.Errorf("entry seq %d: unknown kind %q", e.Seq, e.Kind)
		}
		for _, in := range e.Instances {
			for k, v := range in.Old {
				if !json.Valid([]byte(v)) {
					return fmt.Errorf("entry seq %d: old value of %s is not JSON: %q", e.Seq, k, v)
				}
			}
			for k, v := range in.New {
				if !json.Valid([]byte(v)) {
					return fmt.Errorf("entry seq %d: new value of %s is not JSON: %q", e.Seq, k, v)
				}
			}
		}
	}
	return nil
}

func strictJSON(v string, dst any) error {
	dec := json.NewDecoder(strings.NewReader(v))
	if err := dec.Decode(dst); err != nil {
		return fmt.Errorf("not valid JSON: %w", err)
	}
	if dec.More() {
		return fmt.Errorf("not valid JSON: trailing data")
	}
	return nil
}

// encodeAnnotations writes the state into ann (a copy of the object's
// annotations): gatetuner's own keys are set or removed, others are kept.
// The pause annotation belongs to people and is never touched.
func encodeAnnotations(ann map[string]string, s State, historyLimit int) (map[string]string, error) {
	out := make(map[string]string, len(ann)+4)
	for k, v := range ann {
		out[k] = v
	}
	set := func(key string, v any, present bool) error {
		if !present {
			delete(out, key)
			return nil
		}
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("encode annotation %s: %w", key, err)
		}
		out[key] = string(b)
		return nil
	}
	hist, err := boundHistory(s.History, historyLimit)
	if err != nil {
		return nil, err
	}
	if err := set(AnnotationHistory, hist, len(hist) > 0); err != nil {
		return nil, err
	}
	if err := set(AnnotationHold, s.Hold, s.Hold != nil); err != nil {
		return nil, err
	}
	if err := set(AnnotationPendingRestart, s.Pending, s.Pending != nil); err != nil {
		return nil, err
	}
	if s.EffectiveAt.IsZero() {
		delete(out, AnnotationEffectiveAt)
	} else {
		out[AnnotationEffectiveAt] = s.EffectiveAt.UTC().Format(time.RFC3339Nano)
	}
	return out, nil
}

// boundHistory keeps the newest limit entries and drops older ones until the
// JSON fits MaxHistoryBytes.
func boundHistory(h []Entry, limit int) ([]Entry, error) {
	if limit <= 0 {
		limit = DefaultHistoryLimit
	}
	if len(h) > limit {
		h = h[len(h)-limit:]
	}
	for len(h) > 0 {
		b, err := json.Marshal(h)
		if err != nil {
			return nil, fmt.Errorf("encode history: %w", err)
		}
		if len(b) <= MaxHistoryBytes {
			return h, nil
		}
		if len(h) == 1 {
			return nil, fmt.Errorf("encode history: one entry is %d bytes, over the %d-byte bound", len(b), MaxHistoryBytes)
		}
		h = h[1:]
	}
	return h, nil
}

// sidecar is the file sink's state file (same JSON as the annotations).
type sidecar struct {
	Version     int        `json:"version"`
	Paused      bool       `json:"paused"`
	Approve     string     `json:"approve,omitempty"`
	Hold        *Hold      `json:"hold,omitempty"`
	Pending     *Pending   `json:"pendingRestart,omitempty"`
	EffectiveAt *time.Time `json:"effectiveAt,omitempty"`
	History     []Entry    `json:"history"`
}

const sidecarVersion = 1

func (s State) toSidecar() sidecar {
	sc := sidecar{Version: sidecarVersion, Paused: s.Paused, Approve: s.Approve, Hold: s.Hold, Pending: s.Pending, History: s.History}
	if !s.EffectiveAt.IsZero() {
		t := s.EffectiveAt
		sc.EffectiveAt = &t
	}
	if sc.History == nil {
		sc.History = []Entry{}
	}
	return sc
}

func (sc sidecar) toState() State {
	s := State{Paused: sc.Paused, Approve: sc.Approve, Hold: sc.Hold, Pending: sc.Pending, History: sc.History}
	if sc.EffectiveAt != nil {
		s.EffectiveAt = *sc.EffectiveAt
	}
	if len(s.History) == 0 {
		s.History = nil
	}
	return s
}

// decodeSidecar reads a sidecar file's content.
func decodeSidecar(b []byte) (State, error) {
	var sc sidecar
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sc); err != nil {
		return State{}, fmt.Errorf("not valid gatetuner state JSON: %w", err)
	}
	if dec.More() {
		return State{}, fmt.Errorf("not valid gatetuner state JSON: trailing data")
	}
	if sc.Version != sidecarVersion {
		return State{}, fmt.Errorf("state version %d, this gatetuner reads version %d", sc.Version, sidecarVersion)
	}
	if err := checkHistory(sc.History); err != nil {
		return State{}, err
	}
	return sc.toState(), nil
}

// encodeSidecar renders a sidecar file's content.
func encodeSidecar(s State, historyLimit int) ([]byte, error) {
	hist, err := boundHistory(s.History, historyLimit)
	if err != nil {
		return nil, err
	}
	s.History = hist
	b, err := json.MarshalIndent(s.toSidecar(), "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode state: %w", err)
	}
	return append(b, '\n'), nil
}

// clip bounds a summary to MaxTextBytes on a rune boundary.
func clip(s string) string {
	if len(s) <= MaxTextBytes {
		return s
	}
	cut := MaxTextBytes - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
