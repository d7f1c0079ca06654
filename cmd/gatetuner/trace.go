package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/truth"
)

// traceBaseScenario is the scenario --trace shapes when no --scenario is given.
const traceBaseScenario = "trace-saturation"

// traceFlags are --trace and the flags that shape a trace into a pool.
type traceFlags struct {
	fs       *pflag.FlagSet
	file     string
	pods     int
	scale    float64
	util     float64
	start    string
	window   string
	loop     bool
	envelope string
	dayToDay float64
	envSeed  uint64
	strict   bool
}

func (t *traceFlags) register(f *pflag.FlagSet) {
	t.fs = f
	f.StringVar(&t.file, "trace", "", "replay this Mooncake-format request trace (JSON lines, plain or .gz) as the scenario's trace class (default scenario: "+traceBaseScenario+")")
	f.IntVar(&t.pods, "pods", 0, "simulate this many pods instead of the scenario's")
	f.Float64Var(&t.scale, "trace-scale", 0, "speed the trace up by this factor (instead of the scenario's scale or target utilization)")
	f.Float64Var(&t.util, "trace-utilization", 0, "pick the trace's scale so that its uncacheable prefill work is this share of the pool's nominal rate")
	f.StringVar(&t.start, "trace-start", "", "replay the trace from this offset (duration, e.g. 20m)")
	f.StringVar(&t.window, "trace-window", "", "replay this long a window of the trace (duration; default to its end)")
	f.BoolVar(&t.loop, "trace-loop", true, "replay the window again when it ends (each pass new traffic)")
	f.StringVar(&t.envelope, "trace-envelope", "", "24 comma-separated rate multipliers, one per hour of day")
	f.Float64Var(&t.dayToDay, "trace-day-to-day", 0, "vary each day's hourly multipliers by this coefficient of variation")
	f.Uint64Var(&t.envSeed, "trace-envelope-seed", 1, "seed of the day-to-day variation")
	f.BoolVar(&t.strict, "trace-strict", false, "fail at the trace's first bad line (default: count, skip and report them)")
}

// scenario is the scenario to load: name, or the trace base scenario when
// --trace is given without one.
func (t *traceFlags) scenario(name string) string {
	if t.file != "" && (name == "" || !t.fs.Changed("scenario")) {
		return traceBaseScenario
	}
	return name
}

// load loads the scenario and shapes its trace with the flags.
func (t *traceFlags) load(name string) (*scenario.Scenario, error) {
	sc, err := loadScenario(t.scenario(name))
	if err != nil {
		return nil, err
	}
	if err := t.apply(sc); err != nil {
		return nil, err
	}
	return sc, nil
}

func (t *traceFlags) apply(sc *scenario.Scenario) error {
	if t.fs.Changed("pods") {
		sc.Pods.Count = t.pods
	}
	shaping := []string{"trace-scale", "trace-utilization", "trace-start", "trace-window", "trace-loop", "trace-envelope", "trace-day-to-day", "trace-envelope-seed", "trace-strict"}
	if t.file == "" && sc.Trace == nil {
		for _, n := range shaping {
			if t.fs.Changed(n) {
				return usageErr("--%s shapes a trace: give --trace FILE or a scenario with a trace", n)
			}
		}
		return sc.Validate()
	}
	if t.file != "" {
		if sc.Trace == nil {
			sc.Trace = &scenario.TraceSpec{Scale: 1, Loop: true, Seed: 1}
		}
		sc.Trace.UseFile(t.file)
	}
	tr := sc.Trace
	if t.fs.Changed("trace-scale") {
		tr.Scale, tr.TargetUtilization = t.scale, 0
	}
	if t.fs.Changed("trace-utilization") {
		tr.TargetUtilization, tr.Scale = t.util, 0
	}
	if t.fs.Changed("trace-scale") && t.fs.Changed("trace-utilization") {
		return usageErr("give --trace-scale or --trace-utilization, not both")
	}
	for _, d := range []struct {
		name, v string
		dst     *time.Duration
	}{{"trace-start", t.start, &tr.Start}, {"trace-window", t.window, &tr.Window}} {
		if t.fs.Changed(d.name) {
			v, err := time.ParseDuration(d.v)
			if err != nil {
				return usageErr("--%s: %v", d.name, err)
			}
			*d.dst = v
		}
	}
	if t.fs.Changed("trace-loop") {
		tr.Loop = t.loop
	}
	if t.fs.Changed("trace-envelope") {
		env, err := parseEnvelope(t.envelope)
		if err != nil {
			return usageErr("--trace-envelope: %v", err)
		}
		tr.Envelope = env
	}
	if t.fs.Changed("trace-day-to-day") {
		tr.DayToDay = t.dayToDay
	}
	if t.fs.Changed("trace-envelope-seed") {
		tr.Seed = t.envSeed
	}
	if t.fs.Changed("trace-strict") {
		tr.Strict = t.strict
	}
	if err := sc.Validate(); err != nil {
		return usageErr("%v", err)
	}
	return nil
}

func parseEnvelope(s string) ([]float64, error) {
	parts := strings.Split(s, ",")
	if len(parts) != 24 {
		return nil, fmt.Errorf("want 24 comma-separated multipliers (one per hour of day), got %d", len(parts))
	}
	out := make([]float64, 24)
	for i, p := range parts {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil {
			return nil, fmt.Errorf("hour %d: %q is not a number", i, p)
		}
		out[i] = v
	}
	return out, nil
}

// writeTraceText reports the trace class of a run: the scale in force and
// the bad lines skipped.
func writeTraceText(w io.Writer, tr *truth.Truth) {
	t := tr.Trace
	if t == nil {
		return
	}
	fmt.Fprintf(w, "trace %s (class %s): scale %.4g", t.File, t.Class, t.Scale)
	if t.TargetUtilization > 0 {
		fmt.Fprintf(w, " (picked for %.0f %% prefill utilization)", 100*t.TargetUtilization)
	}
	fmt.Fprintf(w, ", %d passes, %d requests measured, %.1f %% of prompt tokens in repeated blocks, %d too long for maxModelLen\n",
		t.Passes, t.Requests, 100*t.RepeatedShare, t.Dropped)
	if t.BadLines > 0 {
		fmt.Fprintf(w, "trace %s: %d bad lines skipped (--trace-strict stops at the first):\n", t.File, t.BadLines)
		for _, l := range t.FirstBadLines {
			fmt.Fprintf(w, "  line %d: %s\n", l.Line, l.Reason)
		}
	}
}
