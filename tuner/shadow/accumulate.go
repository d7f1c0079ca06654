package shadow

import (
	"math"

	"github.com/gatetuner/gatetuner/gate"
)

// Counts are one settings variant's tallies.
type Counts struct {
	Outcomes            [gate.NumOutcomes]int64
	Reasons             [gate.NumReasons]int64
	Verdicts            [gate.NumVerdicts]int64
	ExcessTokens        float64
	ExplorationPossible int64
}

// Known is the number of decisions with a known verdict (held_* or released_*).
func (c *Counts) Known() int64 {
	var n int64
	for v := gate.HeldOK; v < gate.NumVerdicts; v++ {
		n += c.Verdicts[v]
	}
	return n
}

// Decisions is the number of decisions counted.
func (c *Counts) Decisions() int64 {
	var n int64
	for _, x := range c.Outcomes {
		n += x
	}
	return n
}

// WronglyHeldRate is held_wrong / known, and false when nothing is known.
func (c *Counts) WronglyHeldRate() (float64, bool) { return c.rate(gate.HeldWrong) }

// ForfeitedRate is released_wrong / known, and false when nothing is known.
func (c *Counts) ForfeitedRate() (float64, bool) { return c.rate(gate.ReleasedWrong) }

func (c *Counts) rate(v gate.Verdict) (float64, bool) {
	k := c.Known()
	if k == 0 {
		return 0, false
	}
	return float64(c.Verdicts[v]) / float64(k), true
}

// Add merges o into c.
func (c *Counts) Add(o *Counts) {
	for i := range c.Outcomes {
		c.Outcomes[i] += o.Outcomes[i]
	}
	for i := range c.Reasons {
		c.Reasons[i] += o.Reasons[i]
	}
	for i := range c.Verdicts {
		c.Verdicts[i] += o.Verdicts[i]
	}
	c.ExcessTokens += o.ExcessTokens
	c.ExplorationPossible += o.ExplorationPossible
}

func (c *Counts) count(d *gate.Decision) {
	c.Outcomes[d.Outcome]++
	c.Reasons[d.Reason]++
	v, excess := gate.Judge(d)
	c.Verdicts[v]++
	c.ExcessTokens += float64(excess)
	if d.ExplorationPossible {
		c.ExplorationPossible++
	}
}

// Agreement compares the current settings' decisions with what the live EPP did.
type Agreement struct {
	Agree int64 `json:"agree"`
	// Disagree: the recorded outcome differs from the replayed one.
	Disagree int64 `json:"disagree"`
	// Explained: the EPP explored where the settings make exploration possible.
	Explained int64 `json:"explainedByExploration"`
	// Unmodelled: an outcome the shadow does not model (e.g. request_load_override).
	Unmodelled int64 `json:"unmodelled"`
	// Unobserved: the record carries no observed outcome.
	Unobserved int64 `json:"unobserved"`
}

// Accumulator evaluates each decision for a list of settings (index 0 is
// the current settings) and tallies the results. It does not allocate per
// decision.
type Accumulator struct {
	settings  []gate.Settings
	counts    []Counts
	decisions []gate.Decision
	// ppt converts token gaps into the penalty a person compares with the
	// bar when the gate did not compute one itself.
	ppt             float64
	penaltyMs       Sketch
	gapMinusMatched Sketch
	agreement       Agreement
}

// NewAccumulator returns an accumulator for the settings; ppt (tok/s) is
// the rate used to express token gaps as milliseconds for the gate-input
// distribution (0: only the gate's own penalties are recorded).
func NewAccumulator(settings []gate.Settings, ppt float64) *Accumulator {
	return &Accumulator{
		settings:  settings,
		counts:    make([]Counts, len(settings)),
		decisions: make([]gate.Decision, len(settings)),
		ppt:       ppt,
	}
}

// Add evaluates one decision's endpoints under every settings entry and
// returns the decisions, valid until the next Add (index as the settings).
func (a *Accumulator) Add(eps []gate.Endpoint) []gate.Decision {
	gate.DecideAll(a.settings, eps, a.decisions)
	for i := range a.decisions {
		a.counts[i].count(&a.decisions[i])
	}
	if len(a.decisions) == 0 {
		return a.decisions
	}
	d := &a.decisions[0]
	switch {
	case d.TTFTCompared:
		a.penaltyMs.Add(d.PenaltyMs)
	case d.HasGap && a.ppt > 0 && d.BestSticky >= 0 && d.BestNonSticky >= 0:
		a.penaltyMs.Add(float64(eps[d.BestSticky].InFlightTokens)/a.ppt*1000 - float64(eps[d.BestNonSticky].InFlightTokens)/a.ppt*1000)
	}
	if v, _ := gate.Judge(d); v.Known() {
		a.gapMinusMatched.Add(float64(d.GapTokens - d.MatchedTokens))
	}
	return a.decisions
}

// Observe compares the current settings' decision with the live EPP's
// recorded outcome (empty = not recorded).
func (a *Accumulator) Observe(current *gate.Decision, outcome []byte) {
	o, known := gate.Outcome(0), false
	for i := gate.Outcome(0); i < gate.NumOutcomes; i++ {
		if string(outcome) == i.String() {
			o, known = i, true
			break
		}
	}
	switch {
	case len(outcome) == 0:
		a.agreement.Unobserved++
	case !known:
		a.agreement.Unmodelled++
	case o == current.Outcome:
		a.agreement.Agree++
	case o == gate.OutcomeExploration && current.ExplorationPossible:
		a.agreement.Explained++
	default:
		a.agreement.Disagree++
	}
}

// Merge adds o's tallies into a; o counts the same settings (in order).
func (a *Accumulator) Merge(o *Accumulator) {
	for i := range a.counts {
		a.counts[i].Add(&o.counts[i])
	}
	a.penaltyMs.Merge(&o.penaltyMs)
	a.gapMinusMatched.Merge(&o.gapMinusMatched)
	a.agreement.add(&o.agreement)
}

func (g *Agreement) add(o *Agreement) {
	g.Agree += o.Agree
	g.Disagree += o.Disagree
	g.Explained += o.Explained
	g.Unmodelled += o.Unmodelled
	g.Unobserved += o.Unobserved
}

// Counts returns settings entry i's tallies.
func (a *Accumulator) Counts(i int) *Counts { return &a.counts[i] }

// Agreement returns the comparison with the live EPP.
func (a *Accumulator) Agreement() Agreement { return a.agreement }

// PenaltyMs is the distribution of the gate's input, bestSticky −
// bestNonSticky TTFT in ms, for the current settings.
func (a *Accumulator) PenaltyMs() *Sketch { return &a.penaltyMs }

// GapMinusMatched is the distribution of gap − matched tokens over
// decisions with a known verdict.
func (a *Accumulator) GapMinusMatched() *Sketch { return &a.gapMinusMatched }

// Quantiles are a distribution's summary; null when empty.
type Quantiles struct {
	Count int64    `json:"count"`
	P50   *float64 `json:"p50"`
	P90   *float64 `json:"p90"`
	P99   *float64 `json:"p99"`
}

// QuantilesOf summarises a sketch.
func QuantilesOf(s *Sketch) Quantiles {
	q := Quantiles{Count: s.Count()}
	if q.Count == 0 {
		return q
	}
	f := func(x float64) *float64 {
		v := s.Quantile(x)
		if math.IsNaN(v) {
			return nil
		}
		return &v
	}
	q.P50, q.P90, q.P99 = f(0.5), f(0.9), f(0.99)
	return q
}
