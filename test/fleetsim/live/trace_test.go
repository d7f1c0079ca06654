package live

import (
	"context"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/test/fleetsim/internal/fleettest"
)

// A trace scenario runs live compressed in content (what simulate --live
// --time-scale does): trace-drift at 6x is in its second phase five minutes
// in, and its trace class has sent the requests of the first five minutes
// times its scale of trace time, at the trace's own rate.
func TestLiveTraceScenarioIsCompressedInContent(t *testing.T) {
	sc := fleettest.Load(t, "trace-drift")
	clk := &fakeClock{t: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	l, err := New(sc, Options{Seed: 1, TimeScale: 6, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	clk.Add(5 * time.Minute)
	if err := l.Advance(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ph := l.Phase(); ph != sc.Phases[1].Name {
		t.Errorf("phase %q five minutes in at 6x (phases of %v), want %q", ph, sc.Phases[0].Duration/6, sc.Phases[1].Name)
	}
	tt := l.Truth().Trace
	if tt == nil {
		t.Fatal("no trace truth")
	}
	raw := fleettest.ReadRawTrace(t, "../traces/mooncake-conversation.jsonl.gz")
	want := int64(0)
	for _, ts := range raw.TS {
		if ts < 300*tt.Scale {
			want++
		}
	}
	if got := tt.Requests + tt.Dropped; got < want-1 || got > want {
		t.Errorf("%d trace requests in 5 minutes at scale %.4g, the trace holds %d in its first %.0f s", got, tt.Scale, want, 300*tt.Scale)
	}
}
