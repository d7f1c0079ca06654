package dayloop

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim"
	"github.com/gatetuner/gatetuner/test/fleetsim/epp"
	"github.com/gatetuner/gatetuner/test/fleetsim/live"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenarios"
	"github.com/gatetuner/gatetuner/test/fleetsim/truth"
	"github.com/gatetuner/gatetuner/test/simenv"
)

// restartLoss is what one EPP restart cost in the phase it happened in.
type restartLoss struct {
	Phase string
	// LostCachedTokens is the engines' prefix-cache hits the restart cost
	// over the phase (the run without it minus the run with it).
	LostCachedTokens float64
	// CachedTokenRate is the phase's cached tokens per second without the
	// restart (request rate × mean cached).
	CachedTokenRate float64
	// Warmup is the effective warm-up: the lost tokens as seconds of the
	// cached-token rate missed on all but 1/N of the endpoints — the
	// restartWarmup that the restart-cost formula's backlog
	// (requestRate × mean cached × warm-up × (N−1)/N) needs to equal them.
	Warmup time.Duration
}

// MeasureRestartWarmup restarts the simulated EPP (same settings, so only
// the empty prefix index and in-flight accounting differ) at offset into each
// named phase of sc, one run per restart, and measures each restart's
// effective warm-up against a run without it.
func MeasureRestartWarmup(ctx context.Context, sc *scenario.Scenario, seed uint64, phases []string, offset time.Duration) ([]restartLoss, error) {
	st := epp.DefaultSettings()
	base, err := liveRun(ctx, sc, seed, -1, st)
	if err != nil {
		return nil, err
	}
	starts := map[string]time.Duration{}
	var at time.Duration
	for _, p := range sc.Phases {
		starts[p.Name] = at
		at += p.Duration
	}
	n := float64(sc.Pods.Count)
	var out []restartLoss
	for _, name := range phases {
		s, ok := starts[name]
		if !ok {
			return nil, fmt.Errorf("measure restart warm-up: scenario %s has no phase %q", sc.Name, name)
		}
		tr, err := liveRun(ctx, sc, seed, s+offset, st)
		if err != nil {
			return nil, err
		}
		bp, rp := base.Phase(name), tr.Phase(name)
		if bp == nil || rp == nil {
			return nil, fmt.Errorf("measure restart warm-up: phase %s missing from a run", name)
		}
		lost := bp.CachedTokens.Mean*float64(bp.CachedTokens.N) - rp.CachedTokens.Mean*float64(rp.CachedTokens.N)
		rate := bp.RequestRate * bp.CachedTokens.Mean
		w := time.Duration(lost / (rate * (n - 1) / n) * float64(time.Second))
		out = append(out, restartLoss{Phase: name, LostCachedTokens: lost, CachedTokenRate: rate, Warmup: w})
	}
	return out, nil
}

// liveRun plays sc on a virtual clock, restarting the EPP onto st once at
// restartAt (< 0: never), and returns the truth.
func liveRun(ctx context.Context, sc *scenario.Scenario, seed uint64, restartAt time.Duration, st gate.Settings) (*truth.Truth, error) {
	start := fleetsim.DefaultBaseTime()
	now := start
	l, err := live.New(sc, live.Options{Seed: seed, Start: start, Now: func() time.Time { return now }, Logger: discard()})
	if err != nil {
		return nil, err
	}
	end := start.Add(sc.Duration())
	restarted := restartAt < 0
	for vt := start.Add(sc.ScrapeInterval); !vt.After(end); vt = vt.Add(sc.ScrapeInterval) {
		now = vt
		if err := l.AdvanceTo(ctx, vt); err != nil {
			return nil, err
		}
		if !restarted && !vt.Before(start.Add(restartAt)) {
			if err := l.RestartWith(ctx, st); err != nil {
				return nil, err
			}
			restarted = true
		}
	}
	return l.Truth(), nil
}

// TestHarnessRestartWarmupIsTheSimulatorsOwn pins the closed loop's
// restartWarmup to the simulated EPP's measured relearning: restarts in the
// middle of prompt-shift's phases lose what the restart-cost formula's
// backlog predicts with a warm-up within a factor of two of Policy's.
func TestHarnessRestartWarmupIsTheSimulatorsOwn(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates five days of prompt-shift")
	}
	sc := oneDay(t, "prompt-shift")
	phases := []string{"d1-midday", "d1-afternoon", "d1-evening", "d1-late"}
	losses, err := MeasureRestartWarmup(context.Background(), sc, 1, phases, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var ws []float64
	var rows []string
	for _, l := range losses {
		ws = append(ws, l.Warmup.Seconds())
		rows = append(rows, fmt.Sprintf("%s: lost %.3g cached tokens of %.3g/s → warm-up %s", l.Phase, l.LostCachedTokens, l.CachedTokenRate, l.Warmup.Round(100*time.Millisecond)))
	}
	sort.Float64s(ws)
	median := (ws[len(ws)/2-1] + ws[len(ws)/2]) / 2
	got := simenv.Policy(sc, simenv.LoopPolicy()).RestartWarmup.Seconds()
	t.Logf("restarts 10 min into each phase:\n%s\nmedian warm-up %.1f s; the harness's restartWarmup %.1f s", strings.Join(rows, "\n"), median, got)
	if median <= 0 || got < median/2 || got > median*2 || math.IsNaN(median) {
		t.Errorf("the harness prices restarts with a %.1f s warm-up; the simulated EPP's measured warm-up is %.1f s (median of %v)", got, median, ws)
	}
}

func oneDay(t *testing.T, name string) *scenario.Scenario {
	t.Helper()
	one, err := scenarios.Load(name)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := scenario.Days(one, 1)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}
