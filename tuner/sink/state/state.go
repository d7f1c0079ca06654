// Package state is what gatetuner keeps on a target: the pause and the
// approval a person sets, a failure hold left by an automatic rollback, the
// write awaiting an EPP restart, and the apply history. Package sink stores
// it on the ConfigMap (annotations) or in a file target's state file; the
// decision (package decide) reads it.
package state

import (
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/gatetuner/gatetuner/tuner/hold"
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
	Reason  hold.Reason `json:"reason"`
	Message string      `json:"message"`
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
	Reason  hold.Reason `json:"reason"`
	Since   time.Time   `json:"since,omitzero"`
	Message string      `json:"message"`
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
