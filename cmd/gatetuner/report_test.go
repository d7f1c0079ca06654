package main

import (
	"strings"
	"testing"

	"github.com/gatetuner/gatetuner/tuner"
)

// TestReportPrintsTheHashAndTheApproval: the text report carries the
// recommendation's hash, the token bar it sets, and in mode approve the
// approval's status with the command that approves it.
func TestReportPrintsTheHashAndTheApproval(t *testing.T) {
	const cmd = "kubectl annotate configmap epp -n llm-d gatetuner.dev/approve=3f2a9c0d1e4b5a67 --overwrite"
	r := &tuner.Report{Target: "t", Result: tuner.ResultPending, Mode: "approve",
		Hold:           &tuner.Hold{Reason: tuner.HoldAwaitingApproval, Detail: "recommendation 3f2a9c0d1e4b5a67 awaits approval: " + cmd},
		Recommendation: &tuner.Recommendation{Target: "t", Mode: "static", Hash: "3f2a9c0d1e4b5a67", MaxTokensInFlightPenalty: 84090},
		Approval:       &tuner.ApprovalView{Hash: "3f2a9c0d1e4b5a67", Status: tuner.ApprovalAwaiting, Command: cmd}}
	var b strings.Builder
	writeReport(&b, r)
	for _, want := range []string{
		"  hash         3f2a9c0d1e4b5a67 (the change it would write)\n",
		"  token bar    maxTokensInFlightPenalty 84090",
		"  approval     awaiting; approve with: " + cmd + "\n",
		"(awaiting-approval)",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}
