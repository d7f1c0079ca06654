package sink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gatetuner/gatetuner/tuner/eppconfig"
)

// rollAndVerify restarts the EPP on a written config, waits for it, verifies
// TTFT against baseline (when given) and rolls back on failure.
func (e *engine) rollAndVerify(ctx context.Context, w *written, baseline *ttftSample) (*Result, error) {
	res := w.res
	seq := w.entry.Seq
	at, err := e.restarter.restart(ctx, w.obj, w.entry.ConfigHash)
	var rf *rolloutError
	if errors.As(err, &rf) {
		e.log.Warn("sink: rollout failed", "seq", seq, "err", rf.msg)
		if w.entry.Kind == KindRollback {
			return res, e.failRollback(ctx, w, rf.msg)
		}
		return e.autoRollback(ctx, w, HoldRolloutFailed, "the EPP did not become available with the new config: "+rf.msg, nil)
	}
	if err != nil {
		return res, fmt.Errorf("%s: restart the EPP on entry %d: %w (the entry stays pending-restart)", e.target, seq, err)
	}
	obj, err := e.recordEffective(ctx, seq, at, nil)
	if err != nil {
		return res, err
	}
	e.log.Info("sink: config effective", "seq", seq, "at", at)
	res.Entry = entryOf(obj, seq, res.Entry)
	if baseline == nil {
		return res, nil
	}
	v, failure, err := e.verifyAfter(ctx, at, baseline)
	if err != nil {
		return res, fmt.Errorf("%s: verify entry %d: %w", e.target, seq, err)
	}
	if failure != "" {
		e.log.Warn("sink: verification failed", "seq", seq, "why", failure)
		return e.autoRollback(ctx, w, HoldVerificationFailed, failure, v)
	}
	obj, err = e.recordEffective(ctx, seq, at, v)
	if err != nil {
		return res, err
	}
	res.Entry = entryOf(obj, seq, res.Entry)
	e.store.event(ctx, obj, false, "GateVerified", "Verify",
		fmt.Sprintf("entry %d verified: %s p%g %.3fs after vs %.3fs before (margin %g%%)", seq, v.Metric, v.Quantile*100, v.After, v.Before, v.Margin*100))
	return res, nil
}

// entryOf returns the stored entry seq of obj, or fallback.
func entryOf(obj *object, seq int, fallback *Entry) *Entry {
	if obj != nil {
		if en, ok := obj.state.Entry(seq); ok {
			c := *en
			return &c
		}
	}
	return fallback
}

// recordEffective records that entry seq runs since at (and its verification).
func (e *engine) recordEffective(ctx context.Context, seq int, at time.Time, v *Verification) (*object, error) {
	obj, err := e.updateState(ctx, func(st *State) (bool, error) {
		resolvePending(st, seq, at)
		if v != nil {
			updateEntry(st, seq, func(en *Entry) { c := *v; en.Verification = &c })
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: record entry %d effective at %s: %w", e.target, seq, at.Format(time.RFC3339), err)
	}
	return obj, nil
}

// autoRollback restores the values entry w replaced, through the same guarded
// path, rolls the EPP again and holds the target with reason.
func (e *engine) autoRollback(ctx context.Context, w *written, reason HoldReason, msg string, v *Verification) (*Result, error) {
	res := w.res
	seq := w.entry.Seq
	hold := &Hold{Reason: reason, Since: e.now(), Message: clip(msg), Seq: seq}
	res.Hold = hold
	markFailed := func(status string, extra string) func(*State) {
		return func(st *State) {
			h := *hold
			if extra != "" {
				h.Message = clip(h.Message + "; " + extra)
			}
			st.Hold = &h
			updateEntry(st, seq, func(en *Entry) {
				en.Status = status
				en.Failure = &Failure{Reason: reason, Message: h.Message}
				if v != nil {
					c := *v
					en.Verification = &c
				}
			})
		}
	}
	setHold := func(status, extra string) (*object, error) {
		return e.updateState(ctx, func(st *State) (bool, error) {
			markFailed(status, extra)(st)
			return true, nil
		})
	}

	obj, err := e.store.load(ctx)
	if err != nil {
		return res, fmt.Errorf("%s: entry %d failed (%s) and the target cannot be re-read to roll back: %w", e.target, seq, msg, err)
	}
	snap, err := e.snapshot(obj)
	if err != nil {
		if _, herr := setHold(StatusFailed, "not rolled back: the config cannot be read"); herr != nil {
			e.log.Error("sink: record hold", "err", herr)
		}
		return res, fmt.Errorf("%s: entry %d failed (%s); not rolled back: %w", e.target, seq, msg, err)
	}
	for _, ic := range w.entry.Instances {
		in, ok := snap.Instance(ic.Plugin)
		if !ok || !mapsEqual(ownedMap(in.Owned), ic.New) {
			extra := fmt.Sprintf("not rolled back: plugin %q no longer holds the values entry %d wrote (someone edited them)", ic.Plugin, seq)
			obj, herr := setHold(StatusFailed, extra)
			if herr != nil {
				return res, fmt.Errorf("%s: entry %d failed (%s), %s, and the hold could not be recorded: %w", e.target, seq, msg, extra, herr)
			}
			res.Outcome = OutcomeHeld
			res.Hold = obj.state.Hold
			res.Entry = entryOf(obj, seq, res.Entry)
			e.store.event(ctx, obj, true, "GateRollbackSkipped", "Rollback", hold.String()+"; "+extra)
			return res, nil
		}
	}
	changes, err := restoreChanges(w.entry, snap)
	if err != nil {
		return res, err
	}
	rw, rres, err := e.guardedWrite(ctx, writeReq{
		snap:    snap,
		changes: changes,
		meta:    Meta{Kind: KindAutoRollback, Undoes: seq, Reason: hold.String()},
		prepare: func(st *State, _ *Entry) { markFailed(StatusRolledBack, "")(st) },
	})
	if err != nil {
		if _, herr := setHold(StatusFailed, "the rollback write failed: "+err.Error()); herr != nil {
			e.log.Error("sink: record hold", "err", herr)
		}
		return res, fmt.Errorf("%s: entry %d failed (%s) and could not be rolled back: %w", e.target, seq, msg, err)
	}
	if rw == nil {
		// Nothing written: held (paused) or already at the old values.
		extra := "not rolled back: " + string(rres.Outcome)
		if rres.Hold != nil {
			extra += " (" + rres.Hold.String() + ")"
		}
		obj, herr := setHold(StatusFailed, extra)
		if herr != nil {
			return res, herr
		}
		res.Outcome, res.Hold = OutcomeHeld, obj.state.Hold
		res.Entry = entryOf(obj, seq, res.Entry)
		return res, nil
	}
	e.store.event(ctx, rw.obj, true, eventReason(KindAutoRollback), "Rollback",
		fmt.Sprintf("%s; %s", hold.String(), changeSummary(rw.entry)))
	at, err := e.restarter.restart(ctx, rw.obj, rw.entry.ConfigHash)
	if err != nil {
		extra := "the rollback's rollout failed too: " + err.Error()
		obj, herr := e.updateState(ctx, func(st *State) (bool, error) {
			markFailed(StatusRolledBack, extra)(st)
			updateEntry(st, rw.entry.Seq, func(en *Entry) {
				en.Status = StatusFailed
				en.Failure = &Failure{Reason: HoldRolloutFailed, Message: clip(err.Error())}
			})
			return true, nil
		})
		if herr != nil {
			e.log.Error("sink: record hold", "err", herr)
		} else {
			res.Hold = obj.state.Hold
		}
		return res, fmt.Errorf("%s: entry %d failed (%s); rolled back in the config but %s", e.target, seq, msg, extra)
	}
	obj, err = e.recordEffective(ctx, rw.entry.Seq, at, nil)
	if err != nil {
		return res, err
	}
	res.Outcome = OutcomeRolledBack
	res.Hold = obj.state.Hold
	res.Entry = entryOf(obj, seq, res.Entry)
	res.ConfigHash = rw.entry.ConfigHash
	res.Attempts += rw.res.Attempts
	return res, nil
}

// failRollback records a person's rollback whose rollout failed: the target
// is held, nothing is undone automatically.
func (e *engine) failRollback(ctx context.Context, w *written, msg string) error {
	seq := w.entry.Seq
	hold := &Hold{Reason: HoldRolloutFailed, Since: e.now(), Seq: seq,
		Message: clip("the EPP did not become available after the rollback: " + msg)}
	_, err := e.updateState(ctx, func(st *State) (bool, error) {
		st.Hold = hold
		updateEntry(st, seq, func(en *Entry) {
			en.Status = StatusFailed
			en.Failure = &Failure{Reason: HoldRolloutFailed, Message: hold.Message}
		})
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("%s: rollback entry %d: %s; and the hold could not be recorded: %w", e.target, seq, hold.Message, err)
	}
	w.res.Hold = hold
	return fmt.Errorf("%s: rollback entry %d written, but %s (target held)", e.target, seq, hold.Message)
}

// restoreChanges returns the changes that put back the values entry en replaced.
func restoreChanges(en Entry, snap *Snapshot) ([]eppconfig.Change, error) {
	var out []eppconfig.Change
	for _, ic := range en.Instances {
		in, ok := snap.Instance(ic.Plugin)
		if !ok || ic.Plugin == "" {
			return nil, fmt.Errorf("%w: history entry %d changed plugin %q, which %s does not manage (name it with its plugin)", ErrInvalidChange, en.Seq, ic.Plugin, snap.Target)
		}
		ch, err := restoreValues(in.Target(), ic.Old, ownedKeys(snap.Target.Profile), en.Seq)
		if err != nil {
			return nil, err
		}
		out = append(out, ch)
	}
	return out, nil
}
