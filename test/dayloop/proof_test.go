package dayloop

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenarios"
	"github.com/gatetuner/gatetuner/tuner/config"
)

// The claims of the day-level tuner (issue #16, docs/tuner.md "Proof").
const (
	claimNoHarm  = "no-harm"  // no phase of day 2 has TTFT p90 > 10 % over the default's
	claimGain    = "gain"     // day 2 closes ≥ half the default–best-constant gap where it is ≥ 10 %
	claimApplies = "applies"  // ≤ 1 apply per simulated day, inside the apply window
	claimHeld    = "held-1pc" // penalty-mode: wrongly held ≤ 1 % (truth) on day 2
)

// knownMisses are the claims the tuner misses today, by cell
// ("scenario/profile/source") and claim, each with the measured number in
// docs/tuner.md ("Proof: day 2 judged"). A miss listed here is logged, not
// failed; every claim not listed must hold. Remove a line when the claim
// holds (the test logs "now holds").
var knownMisses = map[string]string{
	"prompt-shift/penalty-mode/prometheus-model held-1pc": "1.9 %: all of it in day 2's night before the switch at 02:11 (0.0 % in every phase after it); " +
		"a restart at 02:01 costs the night ×1.21 (the late phase's agent sessions coming back), so the auto window waits for the pool to settle",
	"trace-drift/penalty-mode/prometheus-model held-1pc": "16.3 %: the tuner holds the default, the best constant on this trace; every constant at ≤ 1 % " +
		"(matchedTokens at any ceiling, static 4k) runs day 2 at TTFT p90 231–3,351 s against 3.08 s",
	"trace-saturation/penalty-mode/prometheus-model held-1pc": "50.3 %: the tuner holds the default, the best constant on this trace; every constant at ≤ 1 % " +
		"(matchedTokens at any ceiling, static 4k) runs day 2 at TTFT p90 12.1–603 s against 5.26 s",
	"prompt-shift/penalty-mode/records held-1pc": "1.9 %: the same apply as the model's (02:11 → matchedTokens 287k), the same day 2; " +
		"all of it in day 2's night before the switch",
	"trace-drift/penalty-mode/records held-1pc": "16.3 %: the records' feedback replay finds no gain over the default (no-gain 19 cycles), " +
		"the best constant on this trace; every constant at ≤ 1 % runs day 2 at TTFT p90 231–3,351 s against 3.08 s",
	"trace-saturation/penalty-mode/records held-1pc": "50.3 %: the records' feedback replay finds no gain over the default (no-gain 11 cycles), " +
		"the best constant; every constant at ≤ 1 % runs day 2 at TTFT p90 12.1–603 s against 5.26 s",
}

// proofEnv set to "full" adds prompt-shift's gate-records cells to
// TestDayTwoProof (3–5 minutes of CPU each; the trace scenarios' records
// cells, under 80 s each, always run).
const proofEnv = "GATETUNER_PROOF"

// TestDayTwoProof runs the closed loop over two simulated days for each
// scenario × profile × decision source and judges day 2 — traffic the tuner
// did not see — against the EPP default all day and the best constant
// setting from a sweep, from the simulator's truth (every Prometheus-model
// cell and the trace scenarios' gate-records cells; GATETUNER_PROOF=full
// adds prompt-shift's gate-records cells).
func TestDayTwoProof(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates 10 closed loops of two days and their sweeps")
	}
	ctx := context.Background()
	j := &Judge{Workers: 2} // exact: every pure run simulates day 1 before day 2
	var table []string
	names := []string{"prompt-shift", "trace-drift", "trace-saturation"}
	scs := map[string]*scenario.Scenario{}
	for _, n := range names {
		scs[n] = twoDays(t, n)
	}
	full := os.Getenv(proofEnv) == "full"
	if !full {
		t.Logf("prompt-shift's gate-records cells skipped (3–5 min of CPU each; docs/tuner.md, Proof: day 2 judged); %s=full runs them", proofEnv)
	}
	for _, src := range []string{config.SourceModel, config.SourceRecords} {
		for _, name := range names {
			if src == config.SourceRecords && name == "prompt-shift" && !full {
				continue
			}
			for _, pn := range []string{gate.ProfileRouter202608, gate.ProfilePenaltyMode} {
				prof, err := gate.LookupProfile(pn)
				if err != nil {
					t.Fatal(err)
				}
				t.Run(name+"/"+pn+"/"+src, func(t *testing.T) {
					cpu := cpuTime()
					row := proveCell(ctx, t, j, scs[name], prof, src)
					table = append(table, fmt.Sprintf("| %s | %s | %s | %s %.0f s |", name, pn, src, row, (cpuTime()-cpu).Seconds()))
				})
			}
		}
	}
	t.Logf("day 2 matrix (TTFT p90 s):\n| scenario | profile | source | default | best constant | tuned | gap | closed | worst phase | wh tuned | applies | CPU |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n%s", strings.Join(table, "\n"))
}

func twoDays(t *testing.T, name string) *scenario.Scenario {
	t.Helper()
	one, err := scenarios.Load(name)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := scenario.Days(one, 2)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// proveCell runs one cell, checks its claims and returns its table row.
func proveCell(ctx context.Context, t *testing.T, j *Judge, sc *scenario.Scenario, prof gate.Profile, src string) string {
	t0, cpu0 := time.Now(), cpuTime()
	l, err := New(ctx, Options{Scenario: sc, Profile: prof, Source: src, Seed: 1, CycleEvery: 10 * time.Minute, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	res, err := l.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	loopWall, loopCPU := time.Since(t0), cpuTime()-cpu0
	cands := Constants(prof)
	sweep, err := j.Runs(ctx, sc, 1, 2, cands)
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewVerdict(2, res.Truth, sweep[0].Truth, sweep) // Constants' first is the EPP default
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range v.Rows {
		t.Logf("%-10s TTFT p90 default %6.3f tuned %6.3f (×%.2f) best %6.3f; wh default %s tuned %s", r.Phase, r.Default, r.Tuned, r.Ratio, r.Best, pct(r.DefaultWH), pct(r.TunedWH))
	}
	var applies []string
	perDay := map[int]int{}
	for _, a := range res.Applies {
		d, _, _ := scenario.SplitDayPhase(a.Phase)
		perDay[d]++
		applies = append(applies, fmt.Sprintf("%s (%s) → %s", clockOf(a.Restart), a.Phase, barOf(a.Settings)))
	}
	t.Logf("day 2: default %.3f s, best constant %.3f s (%s), tuned %.3f s; gap %.0f %%, closed %.2f; worst phase %s ×%.2f; wh tuned %s; %d cycles, applies %d: %s; holds %v; loop %s wall, %s CPU (the process's)",
		v.Default.TTFT.P90, v.Best.TTFT.P90, barOf(v.BestSettings), v.Tuned.TTFT.P90, 100*v.Gap, v.Closed, v.WorstPhase, v.WorstRatio,
		pct(v.Tuned.WronglyHeldRate), res.Cycles, len(res.Applies), strings.Join(applies, ", "), res.Holds, loopWall.Round(time.Second), loopCPU.Round(time.Second))

	cell := sc.Name + "/" + prof.Name + "/" + src
	check := func(claim string, ok bool, measured string) {
		key := cell + " " + claim
		_, known := knownMisses[key]
		switch {
		case ok && known:
			t.Logf("%s: now holds (%s): remove it from knownMisses and docs/tuner.md", key, measured)
		case ok:
		case known:
			t.Logf("%s: known miss (docs/tuner.md): %s", key, measured)
		default:
			t.Errorf("%s: %s", key, measured)
		}
	}
	check(claimNoHarm, v.WorstRatio <= 1.10, fmt.Sprintf("phase %s TTFT p90 ×%.2f of the default's", v.WorstPhase, v.WorstRatio))
	if v.Gap >= 0.10 {
		check(claimGain, v.Closed >= 0.5, fmt.Sprintf("closed %.2f of a %.0f %% gap", v.Closed, 100*v.Gap))
	}
	most := 0
	for _, n := range perDay {
		most = max(most, n)
	}
	outside := outsideWindow(res, l.TargetPolicy())
	check(claimApplies, most <= 1 && len(outside) == 0, fmt.Sprintf("%d applies on one day: %s; outside the apply window: %s", most, strings.Join(applies, ", "), strings.Join(outside, ", ")))
	if prof.Accepts(gate.KeyPenaltyMode) {
		wh := math.NaN()
		if v.Tuned.WronglyHeldRate != nil {
			wh = *v.Tuned.WronglyHeldRate
		}
		check(claimHeld, wh <= 0.01, fmt.Sprintf("wrongly held %s on day 2", pct(v.Tuned.WronglyHeldRate)))
	}
	closed := "—"
	if !math.IsNaN(v.Closed) {
		closed = fmt.Sprintf("%.2f", v.Closed)
	}
	return fmt.Sprintf("%.3f | %.3f (%s) | %.3f | %.0f %% | %s | %s ×%.2f | %s | %s |", v.Default.TTFT.P90, v.Best.TTFT.P90, barOf(v.BestSettings),
		v.Tuned.TTFT.P90, 100*v.Gap, closed, v.WorstPhase, v.WorstRatio, pct(v.Tuned.WronglyHeldRate), strings.Join(applies, "; "))
}

// cpuTime is the process's user + system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func pct(p *float64) string {
	if p == nil {
		return "—"
	}
	return fmt.Sprintf("%.1f %%", 100**p)
}

func clockOf(d time.Duration) string {
	return fmt.Sprintf("%02d:%02d", int(d.Hours()), int(d.Minutes())%60)
}

// barOf names a setting by its mode and token bar.
func barOf(s gate.Settings) string {
	bar := "no bar"
	if s.MaxTTFTPenaltyMs > 0 {
		bar = fmt.Sprintf("%.0fk", s.BarTokens()/1000)
	}
	if s.Mode == gate.ModeMatchedTokens {
		return "matchedTokens " + bar
	}
	return "static " + bar
}

// outsideWindow lists the applies written outside the apply window the
// cycle's report names: for auto, the write's window of the day must be the
// chosen one and open (a report without a day view, or "always", has no
// window to be outside of).
func outsideWindow(res *Result, pol config.Policy) []string {
	var out []string
	for _, a := range res.Applies {
		rec := a.Report.Recommendation
		if rec == nil || rec.Evidence.Day == nil || rec.Evidence.Day.ApplyWindow == nil {
			continue
		}
		av := rec.Evidence.Day.ApplyWindow
		if av.Kind != config.ApplyWindowAuto {
			if !av.Open {
				out = append(out, fmt.Sprintf("%s (%s window closed)", clockOf(a.Cycle), av.Kind))
			}
			continue
		}
		idx := int((a.Cycle % pol.DayLength) / pol.WindowWidth) // the scenario starts at UTC midnight
		if !av.Open || idx != av.Window {
			out = append(out, fmt.Sprintf("%s in window %d, the auto window is %d %s (open %v)", clockOf(a.Cycle), idx, av.Window, av.Label, av.Open))
		}
	}
	return out
}
