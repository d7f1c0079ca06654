package decide

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gatetuner/gatetuner/tuner/sink/state"
)

// approval is mode approve's check before the write: the recommendation
// is written only when the target's approval (gatetuner.dev/approve, or a
// file target's state-file "approve") names its hash, and never twice. It
// records its verdict and returns the halt, or nil to write.
func (w *Weighed) approval() *Halt {
	d := w.d
	hash := d.Recommendation.Hash
	st := w.in.Config.State
	cmd := w.in.Config.ApproveCommand(hash)
	approvals := st.Approvals()
	view := &ApprovalView{Hash: hash, Approved: approvals, Command: cmd}
	var h *Halt
	switch {
	case hash == "":
		h = held(HoldTargetError, "the recommendation has no hash (nothing to write)")
	case written(st, hash) != "":
		view.Status = ApprovalWritten
		h = &Halt{Result: ResultPending, Reason: HoldAwaitingApproval,
			Detail: fmt.Sprintf("recommendation %s was written already (%s); the same hash is never written twice", hash, written(st, hash))}
	case slices.Contains(approvals, hash):
		view.Status, d.Approval = ApprovalApproved, view
		d.Guards = append(d.Guards, Guard{Name: "approval", Pass: true, Detail: fmt.Sprintf("recommendation %s is approved", hash)})
		return nil
	case len(approvals) == 0:
		view.Status = ApprovalAwaiting
		h = &Halt{Result: ResultPending, Reason: HoldAwaitingApproval,
			Detail: fmt.Sprintf("recommendation %s awaits approval: %s", hash, cmd)}
	default:
		view.Status = ApprovalMismatch
		h = held(HoldApprovalMismatch, fmt.Sprintf("the approval names %s but this recommendation is %s (it changed since it was approved); to approve it: %s",
			strings.Join(approvals, ","), hash, cmd))
	}
	if view.Status != "" {
		d.Approval = view
	}
	d.Guards = append(d.Guards, Guard{Name: "approval", Detail: h.Detail})
	return h
}

// written names the history entry that wrote hash ("" when none).
func written(st *state.State, hash string) string {
	e, ok := st.WrittenHash(hash)
	if !ok {
		return ""
	}
	return fmt.Sprintf("history entry %d at %s", e.Seq, e.At.UTC().Format(time.RFC3339))
}

// Pending reports that the hash can still be approved (awaiting, or an
// approval names another hash).
func (a *ApprovalView) Pending() bool {
	return a.Status == ApprovalAwaiting || a.Status == ApprovalMismatch
}
