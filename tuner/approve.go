package tuner

import (
	"context"
	"fmt"
	"strings"

	"github.com/gatetuner/gatetuner/tuner/sink"
)

// Event reason and action of the approve-mode notice (docs/push.md).
const (
	eventApprovalPending = "GateApprovalPending"
	eventActionApprove   = "Approve"
)

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
func (t *Tuner) announceApproval(ctx context.Context, tg *Target, mem *Memory, rep *Report) {
	a := rep.Approval
	if a == nil || !a.Pending() {
		return
	}
	an, ok := tg.Sink.(sink.Announcer)
	if !ok {
		return
	}
	hash := a.Hash
	if mem.announced == hash {
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
	mem.announced = hash
}
