package dayloop

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim"
	"github.com/gatetuner/gatetuner/test/fleetsim/epp"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/truth"
)

// Judge runs the pure simulations a closed loop's day is judged against
// (no Prometheus, no daemon: the settings fixed all day) and keeps them
// for the life of the Judge, so tests sharing a Judge share the runs.
type Judge struct {
	// Workers bounds the concurrent simulations of a sweep (< 1: one).
	Workers int
	// Warmup is simulated before the judged day (0: every earlier day, the
	// exact history a closed loop's day has behind it).
	Warmup time.Duration

	mu    sync.Mutex
	cache map[string]*truth.Truth
}

// Runs returns, for each constant setting, the truth of the judged day
// (1-based) of sc run on it all along with the given seed; runs already
// made are not repeated.
func (j *Judge) Runs(ctx context.Context, sc *scenario.Scenario, seed uint64, day int, settings []gate.Settings) ([]fleetsim.SweepResult, error) {
	if day < 1 || day > sc.DayCount() {
		return nil, fmt.Errorf("judge %s: no day %d (it has %d)", sc.Name, day, sc.DayCount())
	}
	keys := make([]string, len(settings))
	out := make([]fleetsim.SweepResult, len(settings))
	var missing []gate.Settings
	var at []int
	j.mu.Lock()
	if j.cache == nil {
		j.cache = map[string]*truth.Truth{}
	}
	for i, st := range settings {
		keys[i] = fmt.Sprintf("%s|%d×%d|%s|seed %d|day %d|warmup %s|%+v", sc.Name, sc.DayCount(), sc.DayPhases, sc.Duration(), seed, day, j.Warmup, st)
		out[i].Settings = st
		if tr, ok := j.cache[keys[i]]; ok {
			out[i].Truth = tr
			continue
		}
		missing, at = append(missing, st), append(at, i)
	}
	j.mu.Unlock()
	if len(missing) == 0 {
		return out, nil
	}
	first, last := sc.Phases[0].Name, sc.Phases[len(sc.Phases)-1].Name
	if sc.DayPhases > 0 {
		first, last = sc.Phases[(day-1)*sc.DayPhases].Name, sc.Phases[day*sc.DayPhases-1].Name
	}
	warm := j.Warmup
	if warm == 0 {
		warm = fleetsim.WarmupAll
	}
	res, err := fleetsim.Sweep(ctx, sc, fleetsim.Options{Seed: seed, First: first, Last: last, Warmup: warm}, missing, j.Workers)
	if err != nil {
		return nil, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for k, r := range res {
		j.cache[keys[at[k]]] = r.Truth
		out[at[k]].Truth = r.Truth
	}
	return out, nil
}

// Constants are the constant settings the best one is searched among:
// static bars halving from the EPP default's down to 1/64 of it, the gate
// off (release nothing), and — when the profile accepts penaltyMode —
// matchedTokens with a ceiling at the default's bar, at a sixteenth of it,
// and none. (The tuner's own grid is 2^(1/4) apart; these are every fourth
// point of it, to keep the sweeps within the test budget.)
func Constants(prof gate.Profile) []gate.Settings {
	def := epp.DefaultSettings()
	bar := def.BarTokens()
	var bars []float64
	for k := 0; k >= -6; k-- {
		bars = append(bars, bar*math.Exp2(float64(k)))
	}
	out := fleetsim.StaticBars(def, bars...)
	off := def
	off.MaxTTFTPenaltyMs = 0
	out = append(out, off)
	if prof.Accepts(gate.KeyPenaltyMode) {
		for _, f := range []float64{1, 1.0 / 16, 0} {
			m := def
			m.Mode = gate.ModeMatchedTokens
			m.MaxTTFTPenaltyMs = def.MaxTTFTPenaltyMs * f
			out = append(out, m)
		}
	}
	return out
}

// PhaseRow is one phase of the judged day.
type PhaseRow struct {
	Phase    string
	Requests int
	// TTFT p90 in seconds: the default all day, the closed loop, the best
	// constant all day.
	Default, Tuned, Best float64
	// Wrongly-held rates (truth; nil when nothing was known).
	DefaultWH, TunedWH, BestWH *float64
	// Ratio is Tuned / Default.
	Ratio float64
}

// Verdict is the judged day: per phase and over all its requests.
type Verdict struct {
	Day  int
	Rows []PhaseRow
	// Default, Tuned and Best pool the day's requests.
	Default, Tuned, Best truth.OverallTruth
	BestSettings         gate.Settings
	// Gap is (default − best) / default TTFT p90 over the day.
	Gap float64
	// Closed is (default − tuned) / (default − best): 1 is the best
	// constant's result, 0 the default's, negative worse (NaN: no gap).
	Closed float64
	// WorstPhase has the highest Ratio.
	WorstPhase string
	WorstRatio float64
}

// NewVerdict judges day (1-based) of a closed loop's truth against the
// default's run and the sweep (the best constant is the lowest TTFT p90
// over the day's requests).
func NewVerdict(day int, tuned, def *truth.Truth, sweep []fleetsim.SweepResult) (*Verdict, error) {
	if len(tuned.Days) < day || len(def.Days) < day {
		return nil, fmt.Errorf("judge day %d: the truths hold no such day", day)
	}
	v := &Verdict{Day: day, Tuned: tuned.Days[day-1], Default: def.Days[day-1]}
	best := -1
	for i := range sweep {
		o := sweep[i].Truth.Days[day-1]
		if best < 0 || o.TTFT.P90 < v.Best.TTFT.P90 {
			best, v.Best = i, o
		}
	}
	if best < 0 {
		return nil, fmt.Errorf("judge day %d: an empty sweep", day)
	}
	v.BestSettings = sweep[best].Settings
	d, t, b := v.Default.TTFT.P90, v.Tuned.TTFT.P90, v.Best.TTFT.P90
	v.Gap = (d - b) / d
	v.Closed = math.NaN()
	if d > b {
		v.Closed = (d - t) / (d - b)
	}
	for _, dp := range def.Phases {
		dd, name, ok := scenario.SplitDayPhase(dp.Name)
		if !ok || dd != day {
			continue
		}
		tp, bp := tuned.Phase(dp.Name), sweep[best].Truth.Phase(dp.Name)
		if tp == nil || bp == nil {
			return nil, fmt.Errorf("judge day %d: phase %s missing from a run", day, dp.Name)
		}
		r := PhaseRow{Phase: name, Requests: dp.Requests, Default: dp.TTFT.P90, Tuned: tp.TTFT.P90, Best: bp.TTFT.P90,
			DefaultWH: dp.WronglyHeldRate, TunedWH: tp.WronglyHeldRate, BestWH: bp.WronglyHeldRate, Ratio: tp.TTFT.P90 / dp.TTFT.P90}
		if v.WorstPhase == "" || r.Ratio > v.WorstRatio {
			v.WorstPhase, v.WorstRatio = name, r.Ratio
		}
		v.Rows = append(v.Rows, r)
	}
	return v, nil
}
