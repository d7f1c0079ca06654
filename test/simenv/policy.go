package simenv

import (
	"time"

	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/tuner/config"
)

// RestartWarmup is the restart warm-up of the simulated EPP: restarts
// 10 minutes into prompt-shift's phases lose the prefix-cache hits of 2.1–7.4 s
// (median 4.4 s) of the cached-token rate on all but one endpoint in N — the
// backlog the restart-cost formula prices with this warm-up
// (TestHarnessRestartWarmupIsTheSimulatorsOwn measures it; docs/tuner.md).
// It is short because the simulated sessions come back within seconds at
// the compressed day's rates; 1 minute, the daemon's default, is for real
// pools, and neither scaling that default with the compressed day nor
// leaving it would be a measurement.
const RestartWarmup = 5 * time.Second

// WindowRule is how Policy cuts a simulated day into tuning windows.
type WindowRule int

const (
	// WindowEqualPhases is the phase length when one day's phases are equal,
	// else a twelfth of the day.
	WindowEqualPhases WindowRule = iota
	// WindowFirstPhase is the first phase's length when it divides the day,
	// else the whole day.
	WindowFirstPhase
)

// PolicyOptions are what the users of Policy choose: the mode, the
// estimator's lookback and the window rule.
type PolicyOptions struct {
	// Mode is the policy's mode (config.ModeOff for a dry run,
	// config.ModeConfigMap for a closed loop).
	Mode string
	// Lookback is the estimator's lookback; with LookbackInFirstPhase it is
	// at most the first phase's length.
	Lookback             time.Duration
	LookbackInFirstPhase bool
	// Window is how the day is cut into tuning windows.
	Window WindowRule
}

// Policy is the daemon policy over a simulated scenario: the default
// policy with its day-long clocks scaled to the scenario's compressed day
// (a phase of minutes stands for hours). The daily cycle is one simulated
// day (dayLength = history = the day's duration, windows by o.Window); the
// day-long guards (cooldown, the daily budget's window) are scaled to it;
// the apply window and the budget are the defaults (auto, one a day). The
// restart warm-up is the simulated EPP's own, measured (RestartWarmup),
// not a scaled default; the block size is the simulated EPP's.
func Policy(sc *scenario.Scenario, o PolicyOptions) config.Policy {
	p := config.DefaultPolicy()
	p.Mode = o.Mode
	p.Lookback = o.Lookback
	if d := sc.Phases[0].Duration; o.LookbackInFirstPhase && d > 0 && d < p.Lookback {
		p.Lookback = d
	}
	day := sc.DayDuration()
	scale := float64(day) / float64(24*time.Hour)
	p.Cooldown = time.Duration(float64(p.Cooldown) * scale)
	p.BudgetWindow = day
	p.RestartWarmup = RestartWarmup
	p.DayLength, p.History = day, day
	p.WindowWidth = windowWidth(sc, o.Window)
	bs := sc.EPP.PrefixIndex.BlockSizeTokens
	p.BlockSizeTokens = &bs
	return p
}

// windowWidth is the tuning window of one simulated day by rule.
func windowWidth(sc *scenario.Scenario, rule WindowRule) time.Duration {
	day, w := sc.DayDuration(), sc.Phases[0].Duration
	if rule == WindowFirstPhase {
		if w > 0 && day%w == 0 {
			return w
		}
		return day
	}
	n := sc.DayPhases
	if n <= 0 {
		n = len(sc.Phases)
	}
	for i := range n {
		if sc.Phases[i].Duration != w {
			return day / 12
		}
	}
	return w
}

// DryRunPolicy are the choices of a dry run over one simulated day
// (recommend --scenario): mode off, a 20-minute lookback within the first
// phase, windows of the first phase's length when it divides the day.
func DryRunPolicy() PolicyOptions {
	return PolicyOptions{Mode: config.ModeOff, Lookback: 20 * time.Minute, LookbackInFirstPhase: true, Window: WindowFirstPhase}
}

// LoopPolicy are the choices of a closed loop over simulated days (the
// demo and the day loop): configmap mode, a 15-minute lookback, windows of
// the day's phases when they are equal.
func LoopPolicy() PolicyOptions {
	return PolicyOptions{Mode: config.ModeConfigMap, Lookback: 15 * time.Minute, Window: WindowEqualPhases}
}

// ConfigTarget completes t — the EPP config the caller's daemon edits
// (file, plugin, data key) and its build profile — with what the scenario
// decides: the target's name, its engines' maxNumBatchedTokens, the series
// EstimatorTarget selects (a P/D pool's gate profile too) and pol.
func ConfigTarget(sc *scenario.Scenario, t config.Target, pol config.Policy) config.Target {
	et := EstimatorTarget(sc)
	t.Name = sc.Target
	t.MaxNumBatchedTokens = sc.Pods.Engine.MaxNumBatchedTokens
	t.Selector = config.Selector{VLLM: et.VLLMSelector, EPP: et.EPPSelector}
	t.PDGateProfile = et.PDGateProfile
	t.Policy = pol
	return t
}
