package scenario

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"time"
)

// TraceSpec is a trace class: requests replayed from a Mooncake-format
// trace (see workload.TraceReader) beside the scenario's session classes,
// shaped into the pool. The phases' requestRate and mix drive the session
// classes only; the trace's rate is its own times Scale (or the scale that
// reaches TargetUtilization) times the envelope's multiplier of the hour.
type TraceSpec struct {
	// File is the trace as the scenario names it: relative to the scenario
	// file's directory, or for built-in scenarios one of the embedded traces
	// (test/fleetsim/traces).
	File string
	// Class names the trace's requests (default "trace"); it must differ
	// from the session classes' names.
	Class string
	// Scale speeds the trace up (2 = twice its request rate, every gap
	// halved). Exactly one of Scale and TargetUtilization is set.
	Scale float64
	// TargetUtilization picks the scale at which the trace's prefill work at
	// envelope multiplier 1 — its prompt tokens not in a block repeating an
	// earlier one, per second — is this share of the pool's nominal rate
	// (pods × nominalRate). The run reports the scale it picked.
	TargetUtilization float64
	// Start and Window select the trace's records with Start <= timestamp <
	// Start+Window (Window 0: to the trace's end).
	Start, Window time.Duration
	// Loop replays the window again when it ends, for as long as the
	// scenario runs; every pass is new traffic (its prefixes are distinct
	// from the other passes').
	Loop bool
	// Envelope, when set, is a rate multiplier per hour of day (24 values,
	// hour 0 at scenario time 0): the trace's clock runs Scale × multiplier
	// times as fast as the scenario's. A Compressed scenario's hours are
	// shorter (see HourLength); the multipliers keep their rates.
	Envelope []float64
	// DayToDay varies each day's hourly multipliers by a lognormal factor
	// with mean 1 and this coefficient of variation, drawn from Seed.
	DayToDay float64
	Seed     uint64
	// Strict fails the run at the trace's first bad line; otherwise bad
	// lines are counted, skipped and reported in truth.Truth.Trace.
	Strict bool

	hour    time.Duration // the envelope's hour in scenario time (0: an hour); Compressed divides it
	written string        // File as the scenario wrote it
	open    func() (io.ReadCloser, error)
	memo    *traceMemo
}

// HourLength is how long an hour of the envelope's day lasts in scenario
// time: an hour, or an hour divided by the factor of a Compressed scenario.
func (t *TraceSpec) HourLength() time.Duration {
	if t.hour > 0 {
		return t.hour
	}
	return time.Hour
}

// compress shortens the envelope's hours by factor (Scenario.Compressed):
// the trace keeps its rate, its day passes factor times as fast.
func (t *TraceSpec) compress(factor float64) {
	t.hour = max(time.Duration(float64(t.HourLength())/factor), 1)
}

// UseFile makes the trace read path from the file system.
func (t *TraceSpec) UseFile(path string) {
	t.File = path
	t.open = func() (io.ReadCloser, error) { return os.Open(path) }
	t.memo = &traceMemo{}
}

// UseOpen makes the trace read from open, naming it file (a built-in
// scenario's embedded trace).
func (t *TraceSpec) UseOpen(file string, open func() (io.ReadCloser, error)) {
	t.File = file
	t.open = open
	t.memo = &traceMemo{}
}

// Written is the trace file as the scenario wrote it.
func (t *TraceSpec) Written() string { return t.written }

func (t *TraceSpec) clone() *TraceSpec {
	c := *t
	c.Envelope = append([]float64(nil), t.Envelope...)
	return &c
}

func (t *TraceSpec) validate(sc *Scenario) error {
	switch {
	case t.File == "":
		return errors.New("file is required")
	case (t.Scale > 0) == (t.TargetUtilization > 0):
		return fmt.Errorf("exactly one of scale and targetUtilization must be > 0, got %v and %v", t.Scale, t.TargetUtilization)
	case t.Scale < 0 || math.IsInf(t.Scale, 0) || math.IsNaN(t.Scale):
		return fmt.Errorf("scale must be a finite number > 0, got %v", t.Scale)
	case t.TargetUtilization < 0 || t.TargetUtilization > 10 || math.IsNaN(t.TargetUtilization):
		return fmt.Errorf("targetUtilization must be in (0, 10], got %v", t.TargetUtilization)
	case t.Start < 0 || t.Window < 0:
		return fmt.Errorf("start and window must be >= 0, got %v and %v", t.Start, t.Window)
	case t.DayToDay < 0 || t.DayToDay > 10 || math.IsNaN(t.DayToDay):
		return fmt.Errorf("envelope.dayToDay must be in [0, 10], got %v", t.DayToDay)
	}
	if len(t.Envelope) > 0 {
		if len(t.Envelope) != 24 {
			return fmt.Errorf("envelope.hours needs 24 multipliers (one per hour of day), got %d", len(t.Envelope))
		}
		var sum float64
		for h, m := range t.Envelope {
			if m < 0 || math.IsNaN(m) || math.IsInf(m, 0) {
				return fmt.Errorf("envelope.hours[%d] must be a finite number >= 0, got %v", h, m)
			}
			sum += m
		}
		if sum == 0 {
			return errors.New("envelope.hours: at least one multiplier must be > 0")
		}
	} else if t.DayToDay > 0 {
		return errors.New("envelope.dayToDay needs envelope.hours")
	}
	for _, c := range sc.Classes {
		if c.Name == t.ClassName() {
			return fmt.Errorf("class %q is also a session class's name", c.Name)
		}
	}
	if t.open == nil {
		t.UseFile(t.File)
	}
	return nil
}

// ClassName is the trace's class name (default "trace").
func (t *TraceSpec) ClassName() string {
	if t.Class == "" {
		return "trace"
	}
	return t.Class
}

// Open opens the trace file.
func (t *TraceSpec) Open() (io.ReadCloser, error) { return t.open() }

// InWindow reports whether a record's timestamp falls in the window, and
// whether the window is over.
func (t *TraceSpec) InWindow(tsMs int64) (in, over bool) {
	ts := time.Duration(tsMs) * time.Millisecond
	if ts < t.Start {
		return false, false
	}
	if t.Window > 0 && ts >= t.Start+t.Window {
		return false, true
	}
	return true, false
}

// traceMemo shares what runs derive from the trace file between a
// TraceSpec's clones (a sweep's runs), once per key.
type traceMemo struct {
	mu   sync.Mutex
	vals map[any]*memoEntry
}

type memoEntry struct {
	once sync.Once
	v    any
	err  error
}

// Once returns compute's result for key, computing it once for the spec and
// its clones (UseFile and UseOpen start afresh): a workload's pre-pass over
// the trace's window is read once per sweep, and a clone whose window was
// edited gets its own.
func (t *TraceSpec) Once(key any, compute func() (any, error)) (any, error) {
	if t.memo == nil {
		t.memo = &traceMemo{}
	}
	s := t.memo
	s.mu.Lock()
	if s.vals == nil {
		s.vals = map[any]*memoEntry{}
	}
	e := s.vals[key]
	if e == nil {
		e = &memoEntry{}
		s.vals[key] = e
	}
	s.mu.Unlock()
	e.once.Do(func() { e.v, e.err = compute() })
	return e.v, e.err
}
