package tuner

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/tuner/sink"
)

const (
	// eventJoinResolved is the Event reason when the join problems clear.
	eventJoinResolved = "JoinProblemsResolved"
	eventActionJoin   = "Estimate"
)

// joinEventReason names a join reason as an Event reason:
// endpoint-names-unmatched → EndpointNamesUnmatched.
func joinEventReason(code estimator.ReasonCode) string {
	var b strings.Builder
	for _, w := range strings.Split(string(code), "-") {
		if w != "" {
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	return b.String()
}

// joinReasons lists the estimate's join reasons (reasons and warnings), in
// estimator.JoinReasonCodes order, with their details.
func joinReasons(e *estimator.Estimates) []estimator.Reason {
	if e == nil {
		return nil
	}
	var out []estimator.Reason
	all := append(append([]estimator.Reason(nil), e.Reasons...), e.Warnings...)
	for _, code := range estimator.JoinReasonCodes() {
		for _, r := range all {
			if r.Code == code {
				out = append(out, r)
				break
			}
		}
	}
	return out
}

// announceJoinProblems records a Warning Event on the target for each join
// reason its estimate newly carries (reason after the code, note the
// detail), and one Normal Event when they all clear: once per change of the
// set of reasons, not once per cycle.
func (t *Tuner) announceJoinProblems(ctx context.Context, tg *Target, mem *Memory, rep *Report) {
	if rep.Estimates == nil { // the estimate did not run: nothing is known about the joins
		return
	}
	nt, ok := tg.Sink.(sink.Notifier)
	if !ok {
		return
	}
	reasons := joinReasons(rep.Estimates)
	codes := make([]string, len(reasons))
	for i, r := range reasons {
		codes[i] = string(r.Code)
	}
	last, seen := mem.joinAnnounced, mem.joinSeen
	if slices.Equal(last, codes) || !seen && len(codes) == 0 {
		return
	}
	for _, r := range reasons {
		if slices.Contains(last, string(r.Code)) {
			continue
		}
		note := fmt.Sprintf("target %q: %s (%s): %s", rep.Target, r.Code, r.Part, r.Detail)
		if err := nt.Notify(ctx, true, joinEventReason(r.Code), eventActionJoin, note); err != nil {
			t.log().Warn("announce join problem", "target", rep.Target, "reason", r.Code, "err", err)
			return // retried next cycle: the set is not recorded
		}
	}
	if len(codes) == 0 {
		note := fmt.Sprintf("target %q: the estimate joins again (was: %s)", rep.Target, strings.Join(last, ", "))
		if err := nt.Notify(ctx, false, eventJoinResolved, eventActionJoin, note); err != nil {
			t.log().Warn("announce join problems resolved", "target", rep.Target, "err", err)
			return
		}
	}
	mem.joinAnnounced, mem.joinSeen = codes, true
}
