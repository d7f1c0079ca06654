package fleetsim

import (
	"context"
	"fmt"
	"math"
	"sync"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/truth"
)

// SweepResult is one candidate's run.
type SweepResult struct {
	Settings gate.Settings
	Truth    *truth.Truth
}

// Sweep re-runs the scenario once per candidate, each candidate in force in
// every phase, with opt otherwise unchanged (outputs must be nil: the runs
// are concurrent). workers bounds the concurrency (< 1: one). Results are in
// candidate order and do not depend on workers.
func Sweep(ctx context.Context, sc *scenario.Scenario, opt Options, candidates []gate.Settings, workers int) ([]SweepResult, error) {
	if opt.Metrics != nil || opt.Records != nil {
		return nil, fmt.Errorf("sweep %s: outputs are not supported (runs are concurrent)", sc.Name)
	}
	workers = max(workers, 1)
	out := make([]SweepResult, len(candidates))
	errs := make([]error, len(candidates))
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				o := opt
				st := candidates[i]
				o.SettingsFor = func(int) gate.Settings { return st }
				out[i].Settings = st
				out[i].Truth, errs[i] = Run(ctx, sc, o)
			}
		}()
	}
	for i := range candidates {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("sweep candidate %d (%s): %w", i, candidates[i].String(), err)
		}
	}
	return out, nil
}

// StaticBars returns static-mode settings whose token bars
// (maxTTFTPenaltyMs × peakPrefillThroughput / 1000) are the given values,
// keeping base's throughput and everything else.
func StaticBars(base gate.Settings, bars ...float64) []gate.Settings {
	out := make([]gate.Settings, 0, len(bars))
	for _, b := range bars {
		s := base
		s.Mode = gate.ModeStatic
		s.MaxTTFTPenaltyMs = b / s.PeakPrefillThroughput * 1000
		out = append(out, s)
	}
	return out
}

// Best returns the index of the result with the lowest score on the named
// phase (first on ties), or -1 when no result has that phase.
func Best(results []SweepResult, phase string, score func(*truth.PhaseTruth) float64) int {
	best, bestV := -1, math.Inf(1)
	for i := range results {
		p := results[i].Truth.Phase(phase)
		if p == nil {
			continue
		}
		if v := score(p); v < bestV {
			best, bestV = i, v
		}
	}
	return best
}

// TTFTP90 scores a phase by its TTFT p90 (seconds).
func TTFTP90(p *truth.PhaseTruth) float64 { return p.TTFT.P90 }

// SettingsByPhase returns an Options.SettingsFor that takes each phase's
// settings from m (by phase name) and falls back to the scenario's.
func SettingsByPhase(sc *scenario.Scenario, m map[string]gate.Settings) func(int) gate.Settings {
	return func(i int) gate.Settings {
		if s, ok := m[sc.Phases[i].Name]; ok {
			return s
		}
		return sc.Phases[i].Settings
	}
}
