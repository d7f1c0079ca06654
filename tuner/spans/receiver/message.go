package receiver

import (
	"fmt"
	"strings"

	"github.com/gatetuner/gatetuner/tuner/spans"
	"github.com/gatetuner/gatetuner/tuner/spans/window"
)

// rejectionMessage names why gate spans were rejected, with counts.
func rejectionMessage(in *window.Ingested) string {
	var b strings.Builder
	b.WriteString("gatetuner rejected gate spans:")
	for f := range spans.NumFaults {
		if n := in.Malformed[f]; n > 0 {
			fmt.Fprintf(&b, " %d malformed (%s);", n, f)
		}
	}
	for _, c := range []struct {
		n    uint64
		what string
	}{
		{in.Unrouted, "matching no target"},
		{in.Ambiguous, "matching several targets"},
		{in.Old, "older than the window"},
		{in.Future, "ending in the future"},
	} {
		if c.n > 0 {
			fmt.Fprintf(&b, " %d %s;", c.n, c.what)
		}
	}
	if in.FirstFault != "" {
		b.WriteString(" first: " + in.FirstFault)
	}
	return strings.TrimSuffix(b.String(), ";")
}
