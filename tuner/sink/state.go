package sink

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gatetuner/gatetuner/tuner/hold"
	"github.com/gatetuner/gatetuner/tuner/sink/state"
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

// The state's types live in package state; these names keep the sink's API.
type (
	// EntryKind says who made a history entry's change.
	EntryKind = state.EntryKind
	// Entry is one write in a target's history.
	Entry = state.Entry
	// InstanceChange is one filter instance's owned values before and after a write.
	InstanceChange = state.InstanceChange
	// Failure is why a rollout or verification failed.
	Failure = state.Failure
	// Verification is the TTFT check of a rollout.
	Verification = state.Verification
	// Hold is a reason the target is not written now.
	Hold = state.Hold
	// Pending is a written config the EPP does not run yet.
	Pending = state.Pending
	// State is what gatetuner keeps on a target.
	State = state.State
)

// Kinds of history entries (package state).
const (
	KindApply        = state.KindApply
	KindRollback     = state.KindRollback
	KindAutoRollback = state.KindAutoRollback
)

// Entry statuses (package state).
const (
	StatusPendingRestart = state.StatusPendingRestart
	StatusEffective      = state.StatusEffective
	StatusRolledBack     = state.StatusRolledBack
	StatusFailed         = state.StatusFailed
	StatusSuperseded     = state.StatusSuperseded
)

// nextSeq is the sequence number of s's next history entry.
func nextSeq(s *State) int {
	if e := s.Last(); e != nil {
		return e.Seq + 1
	}
	return 1
}

// clone returns a deep copy of s.
func clone(s State) State {
	b, err := json.Marshal(toSidecar(s))
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

// updateEntry applies f to s's entry with sequence seq, if kept.
func updateEntry(s *State, seq int, f func(*Entry)) {
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

// toSidecar is s as the state file holds it.
func toSidecar(s State) sidecar {
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
	b, err := json.MarshalIndent(toSidecar(s), "", "  ")
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
