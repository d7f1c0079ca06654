package estimator

import (
	"math"
	"sync"
	"time"
)

// Tracker keeps a target's last conclusive estimate and attaches it, aged,
// to estimates that are not: a missing measurement is never replaced by a
// default. It is safe for concurrent use.
type Tracker struct {
	clock    func() time.Time
	halfLife time.Duration

	mu   sync.Mutex
	last *Estimates
}

// NewTracker returns a tracker ageing by clock with the given confidence
// half-life (zero: DefaultFreshnessHalfLife).
func NewTracker(clock func() time.Time, halfLife time.Duration) *Tracker {
	if halfLife <= 0 {
		halfLife = DefaultFreshnessHalfLife
	}
	return &Tracker{clock: clock, halfLife: halfLife}
}

// Observe records e when its status is ok; otherwise it sets e.LastGood to
// the last ok estimate aged to the clock's now (nil when there was none).
func (t *Tracker) Observe(e *Estimates) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e.Status == StatusOK {
		keep := *e
		keep.LastGood = nil
		keep.InFlight = InFlight{} // snapshots describe their own time only
		t.last = &keep
		e.LastGood = nil
		return
	}
	e.LastGood = t.aged()
}

// Last returns the last ok estimate aged to the clock's now, or nil.
func (t *Tracker) Last() *LastGood {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.aged()
}

func (t *Tracker) aged() *LastGood {
	if t.last == nil {
		return nil
	}
	age := t.clock().Sub(t.last.At)
	if age < 0 {
		age = 0
	}
	f := math.Exp2(-age.Hours() / t.halfLife.Hours())
	lg := &LastGood{At: t.last.At, AgeSeconds: age.Seconds(), DrainRate: t.last.DrainRate, Nominal: t.last.Nominal,
		Prompt: t.last.Prompt, Cached: t.last.Cached}
	lg.AgedConfidence = round3(t.last.DrainRate.Confidence * f)
	return lg
}
