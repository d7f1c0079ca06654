package sink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/eppconfig"
)

// object is one read of a target: its config text, state and version.
type object struct {
	text    []byte
	state   State
	version string
	raw     any    // the store's own representation (*corev1.ConfigMap for Kubernetes)
	key     string // the ConfigMap data key holding the config (Kubernetes only)
}

// errConflict marks a write whose precondition failed; the write is retried.
var errConflict = errors.New("the target changed since it was read")

// store is where a target's config and state live.
type store interface {
	// source names the config in messages.
	source() string
	// load reads the config text and state; a state that cannot be decoded wraps ErrMalformed.
	load(ctx context.Context) (*object, error)
	// write replaces text and state if the target is still at base.version,
	// else returns errConflict.
	write(ctx context.Context, base *object, text []byte, st State) (*object, error)
	// pendingInfo completes a pending restart record right after a write.
	pendingInfo(ctx context.Context, p *Pending) error
	// restartStatus reports whether the EPP runs the pending write, since when,
	// and what was seen.
	restartStatus(ctx context.Context, p *Pending) (resolved bool, at time.Time, note string, err error)
	// event records an Event about the target (best effort).
	event(ctx context.Context, obj *object, warning bool, reason, action, note string)
}

// restarter restarts a target's EPP and waits until it runs the given config.
type restarter interface {
	// restart returns when the EPP runs the config, with the time it took
	// effect; a *rolloutError when the EPP did not come up with it.
	restart(ctx context.Context, obj *object, configHash string) (time.Time, error)
}

// rolloutError is a restart that did not bring the EPP up with the new config.
type rolloutError struct{ msg string }

func (e *rolloutError) Error() string { return e.msg }

// engine implements Sink over a store and an optional restarter.
type engine struct {
	target    Target
	opts      Options
	log       *slog.Logger
	store     store
	restarter restarter
}

var _ Sink = (*engine)(nil)

func (e *engine) Target() Target { return e.target }

func (e *engine) now() time.Time { return e.opts.Clock.Now().UTC() }

// Read implements Sink.
func (e *engine) Read(ctx context.Context) (*Snapshot, error) {
	obj, err := e.store.load(ctx)
	if err != nil {
		return nil, err
	}
	if p := obj.state.Pending; p != nil {
		resolved, at, note, err := e.store.restartStatus(ctx, p)
		if err != nil {
			return nil, err
		}
		obj.state.PendingNote = note
		if resolved {
			if e.opts.ReadOnly {
				resolvePending(&obj.state, p.Seq, at)
				obj.state.PendingNote = note + " (not recorded: read-only)"
			} else {
				seq := p.Seq
				fresh, err := e.updateState(ctx, func(st *State) (bool, error) {
					if st.Pending == nil || st.Pending.Seq != seq {
						return false, nil
					}
					resolvePending(st, seq, at)
					return true, nil
				})
				if err != nil {
					return nil, fmt.Errorf("%s: record the resolved restart: %w", e.target, err)
				}
				e.log.Info("sink: pending restart resolved", "seq", seq, "effectiveAt", at, "note", note)
				e.store.event(ctx, fresh, false, "GateRestartObserved", "Restart",
					fmt.Sprintf("the EPP runs the config of history entry %d (sha256 %s) since %s: %s", seq, short(p.ConfigHash), at.Format(time.RFC3339), note))
				fresh.state.PendingNote = note
				obj = fresh
			}
		}
	}
	return e.snapshot(obj)
}

// snapshot parses an object into a Snapshot.
func (e *engine) snapshot(obj *object) (*Snapshot, error) {
	f, ins, err := parseTarget(e.target, obj.text, e.store.source())
	if err != nil {
		return nil, err
	}
	return &Snapshot{
		Target:     e.target,
		Source:     e.store.source(),
		Text:       obj.text,
		File:       f,
		Instances:  ins,
		Version:    obj.version,
		ConfigHash: ConfigHash(obj.text),
		State:      obj.state,
		ReadAt:     e.now(),
	}, nil
}

// resolvePending records that the pending write seq runs since at.
func resolvePending(st *State, seq int, at time.Time) {
	if st.Pending != nil && st.Pending.Seq == seq {
		st.Pending = nil
	}
	if at.After(st.EffectiveAt) {
		st.EffectiveAt = at
	}
	updateEntry(st, seq, func(en *Entry) {
		t := at
		en.EffectiveAt = &t
		if en.Status == StatusPendingRestart {
			en.Status = StatusEffective
		}
	})
}

// MarkRestarted implements Sink.
func (e *engine) MarkRestarted(ctx context.Context, t time.Time) error {
	if e.opts.ReadOnly {
		return ErrReadOnly
	}
	var seq int
	var hash string
	obj, err := e.updateState(ctx, func(st *State) (bool, error) {
		p := st.Pending
		if p == nil {
			return false, nil
		}
		if t.Before(p.Since) {
			return false, fmt.Errorf("%w: restart at %s, write of entry %d at %s", ErrNoPendingRestart, t.Format(time.RFC3339Nano), p.Seq, p.Since.Format(time.RFC3339Nano))
		}
		seq, hash = p.Seq, p.ConfigHash
		resolvePending(st, p.Seq, t.UTC())
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("%s: mark restarted: %w", e.target, err)
	}
	if seq != 0 {
		e.log.Info("sink: restart recorded", "seq", seq, "at", t)
		e.store.event(ctx, obj, false, "GateRestartObserved", "Restart",
			fmt.Sprintf("the EPP restarted at %s and runs the config of history entry %d (sha256 %s)", t.UTC().Format(time.RFC3339), seq, short(hash)))
	}
	return nil
}

// updateState changes the target's state only (the config text is written
// back as read), retrying on conflicts. mut reports whether it changed anything.
func (e *engine) updateState(ctx context.Context, mut func(*State) (bool, error)) (*object, error) {
	for attempt := 1; ; attempt++ {
		obj, err := e.store.load(ctx)
		if err != nil {
			return nil, err
		}
		st := clone(obj.state)
		changed, err := mut(&st)
		if err != nil || !changed {
			return obj, err
		}
		out, err := e.store.write(ctx, obj, obj.text, st)
		if errors.Is(err, errConflict) && attempt < e.opts.MaxAttempts {
			if err := e.backoff(ctx, attempt); err != nil {
				return nil, err
			}
			continue
		}
		if errors.Is(err, errConflict) {
			return nil, fmt.Errorf("%w: state update gave up after %d attempts", ErrConflict, attempt)
		}
		return out, err
	}
}

// Apply implements Sink.
func (e *engine) Apply(ctx context.Context, snap *Snapshot, changes []eppconfig.Change, meta Meta) (*Result, error) {
	if e.opts.ReadOnly {
		return nil, ErrReadOnly
	}
	if snap == nil || snap.File == nil {
		return nil, errors.New("apply: no snapshot (call Read first)")
	}
	if snap.Target.Location() != e.target.Location() {
		return nil, fmt.Errorf("apply: snapshot of %s given to the sink of %s", snap.Target, e.target)
	}
	switch meta.Kind {
	case "":
		meta.Kind = KindApply
	case KindApply, KindRollback:
	default:
		return nil, fmt.Errorf("apply: kind %q is not one a caller may write", meta.Kind)
	}
	if err := snap.checkChanges(changes); err != nil {
		return nil, err
	}
	req := writeReq{snap: snap, changes: changes, meta: meta}
	var baseline *ttftSample
	if e.restarter != nil && e.opts.Verify != nil && meta.Kind == KindApply {
		req.beforeWrite = func(ctx context.Context) (*Hold, error) {
			b, why, err := e.measureBaseline(ctx)
			if err != nil {
				return nil, err
			}
			if b == nil {
				return &Hold{Reason: HoldVerificationUnavailable, Since: e.now(),
					Message: "TTFT before the apply cannot be measured, so the rollout could not be verified: " + why}, nil
			}
			baseline = b
			return nil, nil
		}
	}
	w, res, err := e.guardedWrite(ctx, req)
	if err != nil || w == nil {
		return res, err
	}
	res = w.res
	note := fmt.Sprintf("%s %s: %s", kindVerb(meta.Kind), e.target.Name, changeSummary(w.entry))
	if e.restarter == nil {
		note += "; pending restart of the EPP"
		res.Pending = true
	}
	e.store.event(ctx, w.obj, false, eventReason(meta.Kind), actionOf(meta.Kind), note)
	e.log.Info("sink: written", "seq", w.entry.Seq, "kind", meta.Kind, "changes", changeSummary(w.entry), "attempts", res.Attempts, "recomputed", res.Recomputed)
	if e.restarter == nil {
		return res, nil
	}
	return e.rollAndVerify(ctx, w, baseline)
}

func kindVerb(k EntryKind) string {
	switch k {
	case KindRollback:
		return "rolled back"
	case KindAutoRollback:
		return "automatically rolled back"
	}
	return "applied to"
}

func eventReason(k EntryKind) string {
	switch k {
	case KindRollback:
		return "GateRollback"
	case KindAutoRollback:
		return "GateRolledBack"
	}
	return "GateApplied"
}

func actionOf(k EntryKind) string {
	if k == KindApply {
		return "Apply"
	}
	return "Rollback"
}

// writeReq is one guarded write.
type writeReq struct {
	// snap is the read the changes were computed on; owned values must not
	// have changed since.
	snap    *Snapshot
	changes []eppconfig.Change
	meta    Meta
	// beforeWrite runs once, after the guards passed, right before the first
	// write; a Hold refuses the write.
	beforeWrite func(ctx context.Context) (*Hold, error)
	// prepare adjusts the state written along with the entry.
	prepare func(st *State, en *Entry)
}

// written is a successful guarded write.
type written struct {
	obj   *object
	entry Entry
	res   *Result
}

// guardedWrite re-reads the target, checks the guards, recomputes the splice
// on the fresh content and writes with a precondition, retrying on conflict.
// It returns a written on success, or a Result when nothing was written.
func (e *engine) guardedWrite(ctx context.Context, req writeReq) (*written, *Result, error) {
	res := &Result{}
	prepared := req.beforeWrite == nil
	for attempt := 1; attempt <= e.opts.MaxAttempts; attempt++ {
		res.Attempts = attempt
		fresh, err := e.store.load(ctx)
		if err != nil {
			return nil, nil, err
		}
		f, ins, err := parseTarget(e.target, fresh.text, e.store.source())
		if err != nil {
			return nil, nil, fmt.Errorf("%s left untouched: %w", e.target, err)
		}
		st := clone(fresh.state)
		res.ConfigHash = ConfigHash(fresh.text)
		hold, err := e.guard(ctx, &st, req.meta.Kind)
		if err != nil {
			return nil, nil, err
		}
		if hold != nil {
			res.Outcome, res.Hold = OutcomeHeld, hold
			return nil, res, nil
		}
		if who := sameOwned(req.snap.Instances, ins); who != "" {
			var was, now string
			for i := range req.snap.Instances {
				if req.snap.Instances[i].Instance.String() == who {
					was, now = describeOwned(req.snap.Instances[i].Owned), describeOwned(ins[i].Owned)
				}
			}
			hold := &Hold{Reason: HoldChangedExternally, Since: e.now(),
				Message: clip(fmt.Sprintf("%s changed since it was read (was %s, now %s): someone else edited the owned keys; not overwriting", who, was, now))}
			res.Outcome, res.Hold = OutcomeHeld, hold
			e.store.event(ctx, fresh, true, "GateHeld", "Hold", hold.String())
			e.log.Warn("sink: held", "reason", hold.Reason, "message", hold.Message)
			return nil, res, nil
		}
		res.Recomputed = fresh.version != req.snap.Version
		newText, err := f.Edit(req.changes, e.target.Profile)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: edit refused, nothing written: %w", e.target, err)
		}
		if bytes.Equal(newText, fresh.text) {
			res.Outcome = OutcomeUnchanged
			return nil, res, nil
		}
		if !prepared {
			prepared = true
			hold, err := req.beforeWrite(ctx)
			if err != nil {
				return nil, nil, err
			}
			if hold != nil {
				res.Outcome, res.Hold = OutcomeHeld, hold
				return nil, res, nil
			}
		}
		entry, err := e.newEntry(&st, req.meta, ins, fresh.text, newText)
		if err != nil {
			return nil, nil, err
		}
		if st.Pending != nil {
			// A rollback replaces a write the EPP never ran.
			updateEntry(&st, st.Pending.Seq, func(en *Entry) {
				if en.Status == StatusPendingRestart {
					en.Status = StatusSuperseded
				}
			})
		}
		p := &Pending{Since: entry.At, ConfigHash: entry.ConfigHash, Seq: entry.Seq}
		if err := e.store.pendingInfo(ctx, p); err != nil {
			return nil, nil, err
		}
		st.Pending = p
		if req.prepare != nil {
			req.prepare(&st, &entry)
		}
		st.History = append(st.History, entry)
		if e.opts.beforeWrite != nil {
			e.opts.beforeWrite(attempt)
		}
		obj, err := e.store.write(ctx, fresh, newText, st)
		if errors.Is(err, errConflict) {
			e.log.Info("sink: conflict, re-checking on fresh content", "attempt", attempt)
			if err := e.backoff(ctx, attempt); err != nil {
				return nil, nil, err
			}
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		res.Outcome = OutcomeApplied
		res.Diff = eppconfig.Diff(e.store.source(), e.store.source()+" (new)", fresh.text, newText)
		res.ConfigHash = entry.ConfigHash
		en := entry
		res.Entry = &en
		return &written{obj: obj, entry: entry, res: res}, nil, nil
	}
	return nil, nil, fmt.Errorf("%s: %w: the target kept changing, gave up after %d attempts", e.target, ErrConflict, e.opts.MaxAttempts)
}

// backoff waits before retrying after the attempt-th conflict: the first
// retry is immediate, later ones wait 10 ms, 20 ms, … (at most 500 ms), ±50 %.
func (e *engine) backoff(ctx context.Context, attempt int) error {
	if attempt < 2 {
		return nil
	}
	d := min(10*time.Millisecond<<min(attempt-2, 6), 500*time.Millisecond)
	d = d/2 + time.Duration(rand.Int64N(int64(d)))
	select {
	case <-ctx.Done():
		return fmt.Errorf("%s: retry after conflict: %w", e.target, ctx.Err())
	case <-e.opts.Clock.After(d):
		return nil
	}
}

// guard checks pause, failure hold and pending restart on fresh state; a
// resolved pending restart is recorded in st (and written with the change).
func (e *engine) guard(ctx context.Context, st *State, kind EntryKind) (*Hold, error) {
	if st.Paused {
		msg := AnnotationPaused + " is set"
		if st.PausedValue != "" {
			msg = fmt.Sprintf("%s is %q, not a boolean: treated as paused", AnnotationPaused, st.PausedValue)
		}
		return &Hold{Reason: HoldPaused, Message: msg}, nil
	}
	if kind != KindApply {
		return nil, nil
	}
	if st.Hold != nil {
		h := *st.Hold
		h.Message = clip(h.Message + " (held until a person removes " + AnnotationHold + ")")
		return &h, nil
	}
	if p := st.Pending; p != nil {
		resolved, at, note, err := e.store.restartStatus(ctx, p)
		if err != nil {
			return nil, err
		}
		if !resolved {
			return &Hold{Reason: HoldPendingRestart, Since: p.Since, Seq: p.Seq,
				Message: fmt.Sprintf("history entry %d (sha256 %s) written at %s is not running yet: %s", p.Seq, short(p.ConfigHash), p.Since.Format(time.RFC3339), note)}, nil
		}
		resolvePending(st, p.Seq, at)
	}
	return nil, nil
}

// newEntry builds the history entry of a write from old to new text.
func (e *engine) newEntry(st *State, meta Meta, oldIns []InstanceState, oldText, newText []byte) (Entry, error) {
	_, newIns, err := parseTarget(e.target, newText, e.store.source())
	if err != nil {
		return Entry{}, fmt.Errorf("%s: edited config does not read back: %w", e.target, err)
	}
	en := Entry{
		Seq:                nextSeq(st),
		Kind:               meta.Kind,
		At:                 e.now(),
		By:                 e.opts.Identity,
		Mode:               e.modeName(),
		Reason:             clip(meta.Reason),
		Evidence:           clip(meta.Evidence),
		RecommendationHash: meta.RecommendationHash,
		ConfigHash:         ConfigHash(newText),
		PrevConfigHash:     ConfigHash(oldText),
		Undoes:             meta.Undoes,
		Status:             StatusPendingRestart,
	}
	sem := e.target.Profile.MissingSignal
	for i := range oldIns {
		o, n := oldIns[i], newIns[i]
		ic := InstanceChange{
			Plugin:       o.Name(),
			DataKey:      o.Instance.Config.DataKey,
			Old:          ownedMap(o.Owned),
			New:          ownedMap(n.Owned),
			OldBarTokens: barTokens(o.Params, sem),
			NewBarTokens: barTokens(n.Params, sem),
			OldMode:      o.Params.PenaltyMode.String(),
			NewMode:      n.Params.PenaltyMode.String(),
		}
		if mapsEqual(ic.Old, ic.New) {
			continue
		}
		en.Instances = append(en.Instances, ic)
	}
	return en, nil
}

func (e *engine) modeName() string {
	switch {
	case !e.target.IsFile():
		return string(e.target.Mode)
	case e.opts.RestartHook != nil:
		return "file+hook"
	}
	return "file"
}

func barTokens(p gate.Params, sem gate.Semantics) float64 {
	s := p.Settings(sem)
	return s.BarTokens()
}

func ownedMap(vs []eppconfig.OwnedValue) map[string]string {
	m := map[string]string{}
	for _, v := range vs {
		if v.Present {
			m[v.Key.String()] = v.Value
		}
	}
	return m
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// changeSummary renders an entry's changes with the numbers, e.g.
// `plugin "p": maxTTFTPenaltyMs 18000 → 5000 (bar 286704 → 79640 tokens, static)`.
func changeSummary(en Entry) string {
	var parts []string
	for _, ic := range en.Instances {
		keys := map[string]bool{}
		for k := range ic.Old {
			keys[k] = true
		}
		for k := range ic.New {
			keys[k] = true
		}
		names := make([]string, 0, len(keys))
		for k := range keys {
			names = append(names, k)
		}
		sort.Strings(names)
		var kv []string
		for _, k := range names {
			o, n := ic.Old[k], ic.New[k]
			if o == n {
				continue
			}
			kv = append(kv, fmt.Sprintf("%s %s → %s", k, orAbsent(o), orAbsent(n)))
		}
		mode := ic.NewMode
		if ic.OldMode != ic.NewMode {
			mode = ic.OldMode + " → " + ic.NewMode
		}
		parts = append(parts, fmt.Sprintf("plugin %q: %s (bar %s → %s tokens, %s)", ic.Plugin, strings.Join(kv, ", "),
			fmtNum(ic.OldBarTokens), fmtNum(ic.NewBarTokens), mode))
	}
	s := strings.Join(parts, "; ")
	if en.Reason != "" {
		s += "; reason: " + en.Reason
	}
	if en.Evidence != "" {
		s += "; evidence: " + en.Evidence
	}
	return s + fmt.Sprintf("; entry %d, config sha256 %s", en.Seq, short(en.ConfigHash))
}

func orAbsent(v string) string {
	if v == "" {
		return "(absent)"
	}
	return v
}

func fmtNum(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func short(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	return hash
}
