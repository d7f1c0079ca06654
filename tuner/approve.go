package tuner

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gatetuner/gatetuner/tuner/sink"
)

// Event reason and action of the approve-mode notice (docs/push.md).
const (
	eventApprovalPending = "GateApprovalPending"
	eventActionApprove   = "Approve"
)

// approvalHalt is mode approve's check before the write: the recommendation
// is written only when the target's approval (gatetuner.dev/approve, or a
// file target's state-file "approve") names its hash, and never twice. It
// records its verdict on rep and returns the halt, or nil to write.
func approvalHalt(rep *Report, snap *sink.Snapshot) *halt {
	hash := rep.Recommendation.Hash
	st := &snap.State
	cmd := ApproveCommand(snap.Target, hash)
	approvals := st.Approvals()
	view := &ApprovalView{Hash: hash, Approved: approvals, Command: cmd}
	var h *halt
	switch {
	case hash == "":
		h = held(HoldTargetError, "the recommendation has no hash (nothing to write)")
	case written(st, hash) != "":
		view.Status = ApprovalWritten
		h = &halt{result: ResultPending, reason: HoldAwaitingApproval,
			detail: fmt.Sprintf("recommendation %s was written already (%s); the same hash is never written twice", hash, written(st, hash))}
	case slices.Contains(approvals, hash):
		view.Status, rep.Approval = ApprovalApproved, view
		rep.Guards = append(rep.Guards, Guard{Name: "approval", Pass: true, Detail: fmt.Sprintf("recommendation %s is approved", hash)})
		return nil
	case len(approvals) == 0:
		view.Status = ApprovalAwaiting
		h = &halt{result: ResultPending, reason: HoldAwaitingApproval,
			detail: fmt.Sprintf("recommendation %s awaits approval: %s", hash, cmd)}
	default:
		view.Status = ApprovalMismatch
		h = held(HoldApprovalMismatch, fmt.Sprintf("the approval names %s but this recommendation is %s (it changed since it was approved); to approve it: %s",
			strings.Join(approvals, ","), hash, cmd))
	}
	if view.Status != "" {
		rep.Approval = view
	}
	rep.Guards = append(rep.Guards, Guard{Name: "approval", Detail: h.detail})
	return h
}

// written names the history entry that wrote hash ("" when none).
func written(st *sink.State, hash string) string {
	e, ok := st.WrittenHash(hash)
	if !ok {
		return ""
	}
	return fmt.Sprintf("history entry %d at %s", e.Seq, e.At.UTC().Format(time.RFC3339))
}

// ApproveCommand is what an operator runs to approve hash on target t: the
// kubectl annotation of a ConfigMap, or the state-file field of a file target.
func ApproveCommand(t sink.Target, hash string) string {
	if t.IsFile() {
		path := t.StateFile
		if path == "" {
			path = sink.SidecarPath(t.File)
		}
		return fmt.Sprintf(`set "approve": %q in the state file %s`, hash, path)
	}
	return fmt.Sprintf("kubectl annotate configmap %s -n %s %s=%s --overwrite", t.ConfigMap, t.Namespace, sink.AnnotationApprove, hash)
}

// announceApproval records one Event per recommendation that starts to
// await approval (not one per cycle): "recommendation <hash> awaits
// approval: <command>".
func (t *Tuner) announceApproval(ctx context.Context, tg *Target, rep *Report) {
	a := rep.Approval
	if a == nil || !a.Pending() {
		return
	}
	an, ok := tg.Sink.(sink.Announcer)
	if !ok {
		return
	}
	hash := a.Hash
	t.announcedMu.Lock()
	last := t.announced[rep.Target]
	t.announcedMu.Unlock()
	if last == hash {
		return
	}
	note := fmt.Sprintf("recommendation %s awaits approval: %s", hash, a.Command)
	if a.Status == ApprovalMismatch {
		note += fmt.Sprintf(" (the approval names %s)", strings.Join(a.Approved, ","))
	}
	if err := an.Announce(ctx, eventApprovalPending, eventActionApprove, note); err != nil {
		t.log().Warn("announce approval", "target", rep.Target, "err", err)
		return
	}
	t.announcedMu.Lock()
	if t.announced == nil {
		t.announced = map[string]string{}
	}
	t.announced[rep.Target] = hash
	t.announcedMu.Unlock()
}

// Pending reports that the hash can still be approved (awaiting, or an
// approval names another hash).
func (a *ApprovalView) Pending() bool {
	return a.Status == ApprovalAwaiting || a.Status == ApprovalMismatch
}
