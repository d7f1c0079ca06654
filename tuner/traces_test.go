package tuner_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim"
	"github.com/gatetuner/gatetuner/test/fleetsim/epp"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenarios"
	"github.com/gatetuner/gatetuner/tuner"
)

// TestTraceDriftPhaseByPhase judges the tuner on real traffic as
// TestPromptShiftPhaseByPhase does on prompt-shift: on trace-drift
// (Mooncake's production trace plus a growing long-context class) it
// recommends at the end of each phase and runs the next phase — data it
// was not fitted on — with the recommendation, for both decision sources
// and both profiles. A recommendation must never make the next phase's TTFT
// p90 more than twice the default's; the outcomes are logged next to the
// default's and the table is in docs/traces.md.
func TestTraceDriftPhaseByPhase(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates trace-drift several times")
	}
	sc, err := scenarios.Load("trace-drift")
	if err != nil {
		t.Fatal(err)
	}
	def := map[string]float64{}
	for _, ph := range sc.Phases[1:] {
		tr, err := fleetsim.Run(context.Background(), sc, fleetsim.Options{Seed: 1, First: ph.Name, Last: ph.Name,
			SettingsFor: func(int) gate.Settings { return epp.DefaultSettings() }})
		if err != nil {
			t.Fatal(err)
		}
		def[ph.Name] = tr.Phase(ph.Name).TTFT.P90
	}
	for _, source := range []string{tuner.SourceKindModel, tuner.SourceKindRecords} {
		for _, profile := range []string{gate.ProfileRouter202608, gate.ProfilePenaltyMode} {
			t.Run(source+"/"+profile, func(t *testing.T) {
				e := newPhaseEnv(t, "trace-drift", profile)
				cur := epp.DefaultSettings()
				var table strings.Builder
				for i := 0; i+1 < len(e.sc.Phases); i++ {
					ph, next := e.sc.Phases[i].Name, e.sc.Phases[i+1].Name
					rep, _ := e.recommendFrom(ph, cur, 1, source == tuner.SourceKindRecords)
					hold := ""
					if rep.Hold != nil {
						hold = string(rep.Hold.Reason)
					}
					nxt := recommended(rep, cur)
					tr, err := fleetsim.Run(context.Background(), e.sc, fleetsim.Options{Seed: 1, First: next, Last: next, SettingsFor: func(int) gate.Settings { return nxt }})
					if err != nil {
						t.Fatal(err)
					}
					p := tr.Phase(next)
					fmt.Fprintf(&table, "| %s → %s | %s %s | %s | %.2f s | %.2f s |\n", ph, next, rep.Result, hold, nxt.String(), p.TTFT.P90, def[next])
					if p.TTFT.P90 > 2*def[next] {
						t.Errorf("%s: TTFT p90 %.2fs with %s, more than twice the default's %.2fs", next, p.TTFT.P90, nxt.String(), def[next])
					}
					cur = nxt
				}
				t.Logf("%s/%s: | fitted on → judged on | result | settings in force | TTFT p90 | default's |\n%s", source, profile, table.String())
			})
		}
	}
}
