package sink

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/eppconfig"
)

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func mustProfile(t testing.TB, name string) gate.Profile {
	t.Helper()
	p, err := gate.LookupProfile(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// set builds a change of one instance.
func set(plugin string, kv ...any) eppconfig.Change {
	ch := eppconfig.Change{Target: eppconfig.Target{Plugin: plugin}, Set: map[gate.Key]eppconfig.Value{}}
	for i := 0; i < len(kv); i += 2 {
		k := kv[i].(gate.Key)
		switch v := kv[i+1].(type) {
		case float64:
			ch.Set[k] = eppconfig.Number(v)
		case int:
			ch.Set[k] = eppconfig.Number(float64(v))
		case string:
			ch.Set[k] = eppconfig.String(v)
		}
	}
	return ch
}

func mustRead(t testing.TB, s Sink) *Snapshot {
	t.Helper()
	snap, err := s.Read(context.Background())
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return snap
}

func mustApply(t testing.TB, s Sink, snap *Snapshot, meta Meta, changes ...eppconfig.Change) *Result {
	t.Helper()
	res, err := s.Apply(context.Background(), snap, changes, meta)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	return res
}

func ownedValue(t testing.TB, snap *Snapshot, plugin string, k gate.Key) string {
	t.Helper()
	in, ok := snap.Instance(plugin)
	if !ok {
		t.Fatalf("no instance %q in snapshot", plugin)
	}
	for _, v := range in.Owned {
		if v.Key == k {
			if !v.Present {
				return "(absent)"
			}
			return v.Value
		}
	}
	t.Fatalf("key %s not owned", k)
	return ""
}

// stepper advances a fake clock whenever someone waits on it, so waits of
// minutes take milliseconds while the order of events is kept.
func stepper(t testing.TB, fc *testingclock.FakeClock, step time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if fc.HasWaiters() {
				fc.Step(step)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
}

var _ clock.Clock = (*testingclock.FakeClock)(nil)

// failingQuerier injects a Prometheus that cannot be reached.
type failingQuerier struct{ err error }

func (f failingQuerier) Query(context.Context, string, time.Time) (model.Vector, v1.Warnings, error) {
	return nil, nil, f.err
}

func (f failingQuerier) QueryRange(context.Context, string, v1.Range) (model.Matrix, v1.Warnings, error) {
	return nil, nil, f.err
}

var errUnreachable = errors.New("dial tcp 127.0.0.1:9: connect: connection refused")

// lines returns the comment lines of a text (trimmed), in order.
func commentLines(text string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if i := strings.Index(l, "#"); i >= 0 {
			out = append(out, l[i:])
		}
	}
	return out
}

func writeFileBytes(path string, b []byte) error { return os.WriteFile(path, b, 0o644) }
