package fleetsim

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gatetuner/gatetuner/test/fleetsim/epp"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenarios"
)

// TestPromptShiftBestBarsAcrossSeeds sweeps static bars on a 2^(1/2) grid
// (1.1k–1.15M tokens) over three seeds for the prompt-shift phases the
// tuner's proof judges at its ends, and pins what the sweep says about the
// best bar itself:
//   - night: the TTFT p90 curve is flat at the bottom — the bars within 10 %
//     of each seed's best span more than ×2, so "the best bar" is not one
//     number there, and a bar factor taken from it is not either;
//   - morning: every bar within 10 % of the best is at least 20× the
//     night's best, although the night has no agent requests at all (mix
//     chat 1, agent 0): no recommendation that serves the night's own data
//     well can be within 10 % of the best in the morning;
//   - late: the bars within 10 % of the best lie within ×2 (72k–143k), the
//     best ~101k in every seed: a recommendation from the evening must land
//     in that window.
//
// It runs 3 phases × 3 seeds × 21 bars (~90 s on two cores; skipped with
// -short); docs/tuner.md quotes its output.
func TestPromptShiftBestBarsAcrossSeeds(t *testing.T) {
	if testing.Short() {
		t.Skip("sweeps prompt-shift over three seeds")
	}
	sc, err := scenarios.Load("prompt-shift")
	if err != nil {
		t.Fatal(err)
	}
	var bars []float64
	for k := -16; k <= 4; k++ {
		bars = append(bars, 286704*math.Exp2(float64(k)/2))
	}
	// near returns, per seed, the lowest and highest bar within 10 % of that
	// seed's best TTFT p90, and the best bar.
	type span struct{ lo, hi, best float64 }
	near := func(phase string) []span {
		var out []span
		for _, seed := range []uint64{1, 2, 3} {
			res, err := Sweep(context.Background(), sc, Options{Seed: seed, First: phase, Last: phase}, StaticBars(epp.DefaultSettings(), bars...), 2)
			if err != nil {
				t.Fatal(err)
			}
			bi := Best(res, phase, TTFTP90)
			bp := res[bi].Truth.Phase(phase).TTFT.P90
			s := span{lo: math.Inf(1), best: bars[bi]}
			var line strings.Builder
			for i, r := range res {
				p := r.Truth.Phase(phase).TTFT.P90
				mark := " "
				if p <= 1.1*bp {
					s.lo, s.hi = math.Min(s.lo, bars[i]), math.Max(s.hi, bars[i])
					mark = "*"
				}
				fmt.Fprintf(&line, " %.0fk:%.2f%s", bars[i]/1000, p, mark)
			}
			t.Logf("%s seed %d (TTFT p90 s, * within 10 %% of the best):%s", phase, seed, line.String())
			out = append(out, s)
		}
		return out
	}
	night, morning, late := near("night"), near("morning"), near("late")
	nightBest := 0.0
	for i, s := range night {
		nightBest = math.Max(nightBest, s.best)
		if s.hi/s.lo < 2 {
			t.Errorf("night seed %d: bars within 10 %% of the best span only %.0f–%.0f", i+1, s.lo, s.hi)
		}
	}
	for i, s := range morning {
		if s.lo < 20*nightBest {
			t.Errorf("morning seed %d: bar %.0f is within 10 %% of the best, less than 20× the night's best %.0f", i+1, s.lo, nightBest)
		}
	}
	for i, s := range late {
		if s.lo < 70000 || s.hi > 150000 {
			t.Errorf("late seed %d: bars within 10 %% of the best span %.0f–%.0f, wider than 72k–143k", i+1, s.lo, s.hi)
		}
	}
}
