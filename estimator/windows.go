package estimator

import (
	"math"
	"sort"
	"time"
)

// This file is the aggregation half of the drain estimators: it lays the
// window queries out per engine, applies the saturation rule and sums each
// pod's engines into per-pod saturated windows. rates.go estimates from them.

// winVal is one pod's saturated window: the sums over its engines.
type winVal struct {
	end time.Time
	// drain is the computed-token rate (the drain rate's evidence).
	drain float64
	// step is budget × steps/s − decode tokens/s (the step rate's evidence).
	step float64
	// full is budget × steps/s (the step-time nominal's evidence).
	full                       float64
	hasDrain, hasStep, hasFull bool
}

// windowsResult is the outcome of judging every window.
type windowsResult struct {
	perPod map[podKey][]winVal
	// rows are every engine's busy windows, for the step-cost fit.
	rows         []stepRow
	droppedReset int
	droppedNaN   int
	nonFinite    int
}

// engineSeries are the window queries laid out on the grid, one column per engine.
type engineSeries struct {
	wait, samples, kv, run, pre, rate, resets, steps, decodes, itlSum, runMin, fitRate map[engineKey]column
}

func (d *drainInputs) engineSeries() engineSeries {
	g, u := d.g, d.units
	s := engineSeries{
		wait: columns(d.wait, g, u), samples: columns(d.samples, g, u),
		kv: columns(d.kv, g, u), run: columns(d.run, g, u), pre: columns(d.preempt, g, u),
		rate: columns(d.rate, g, u), resets: columns(d.resets, g, u),
		steps: columns(d.steps, g, u), decodes: columns(d.decodes, g, u), itlSum: columns(d.itlSum, g, u),
		runMin: columns(d.runMin, g, u),
	}
	d.stepShare = s.stepCountShare(d)
	if d.stepsUnobserved() {
		s.steps = nil // the ITL gives the steps (stepsAt)
	}
	s.fitRate = s.rate
	if d.fit != nil && d.fit != d.cs {
		s.fitRate = columns(d.fitRate, g, u)
	}
	return s
}

// stepCountShare is the iteration histogram's steps over the ITL's
// (decodes over the ITL sum) summed over busy windows, NaN when unknown.
func (s *engineSeries) stepCountShare(d *drainInputs) float64 {
	var count, itl float64
	for ek, st := range s.steps {
		for i := 0; i < d.g.n; i++ {
			rm, okM := s.runMin[ek].at(i)
			c, okC := st.at(i)
			dc, okD := s.decodes[ek].at(i)
			is, okI := s.itlSum[ek].at(i)
			if okM && rm >= 1 && okC && okD && okI && finite(c) && finite(dc) && finite(is) && dc > 0 && is > 0 {
				count += c
				itl += dc / is
			}
		}
	}
	if !(itl > 0) {
		return math.NaN()
	}
	return count / itl
}

// stepsAt is the engine's steps per second in window i: the iteration
// histogram's count rate, else decodes over the decode-weighted ITL sum.
func (s *engineSeries) stepsAt(ek engineKey, i int) (float64, bool) {
	if st, ok := s.steps[ek].at(i); ok {
		return st, finite(st) && st > 0
	}
	dc, okD := s.decodes[ek].at(i)
	is, okI := s.itlSum[ek].at(i)
	if okD && okI && finite(dc) && finite(is) && is > 0 && dc > 0 {
		return dc / is, true
	}
	return 0, false
}

// cond is one condition of the saturation rule over one column.
type cond struct {
	skip bool
	col  func(*engineSeries) map[engineKey]column
	pred func(float64) bool
}

// saturationRule is the documented rule's conditions, in order: a backlog
// at every scrape, enough scrapes, KV usage, running set and preemptions.
func (d *drainInputs) saturationRule() []cond {
	cfg, t, f := d.cfg, d.t, d.f
	return []cond{
		{false, func(s *engineSeries) map[engineKey]column { return s.wait }, func(x float64) bool { return x > 0 }},
		{false, func(s *engineSeries) map[engineKey]column { return s.samples }, func(x float64) bool { return x >= float64(cfg.MinSamplesPerWindow) }},
		{f.KVUsage == "", func(s *engineSeries) map[engineKey]column { return s.kv }, func(x float64) bool { return x < cfg.MaxKVUsage }},
		{!(t.MaxNumSeqs > 0 && f.Running != ""), func(s *engineSeries) map[engineKey]column { return s.run }, func(x float64) bool { return x < float64(t.MaxNumSeqs) }},
		{f.Preemptions == "", func(s *engineSeries) map[engineKey]column { return s.pre }, func(x float64) bool { return x < 0.5 }},
	}
}

// aggregator judges windows engine by engine and sums them per pod.
type aggregator struct {
	d      *drainInputs
	s      engineSeries
	rule   []cond
	budget float64
	res    windowsResult
}

// judge applies the saturation rule to every engine and window, sums the
// engines of each pod, and collects every engine's busy windows for the
// step-cost fit.
func (d *drainInputs) judge() windowsResult {
	a := &aggregator{d: d, s: d.engineSeries(), rule: d.saturationRule(), budget: float64(d.t.MaxNumBatchedTokens),
		res: windowsResult{perPod: map[podKey][]winVal{}}}
	enginesOf := map[podKey][]engineKey{}
	for k := range a.s.wait {
		enginesOf[k.podKey()] = append(enginesOf[k.podKey()], k)
	}
	for pk, engines := range enginesOf {
		sort.Slice(engines, func(i, j int) bool { return engines[i].engine < engines[j].engine })
		for i := 0; i < d.g.n; i++ {
			if w, ok := a.podWindow(pk, engines, i); ok {
				a.res.perPod[pk] = append(a.res.perPod[pk], w)
			}
		}
	}
	return a.res
}

// podWindow sums pod pk's engines in window i; false when the window is not
// saturated on every engine that has data, or was dropped.
func (a *aggregator) podWindow(pk podKey, engines []engineKey, i int) (winVal, bool) {
	w := winVal{end: a.d.g.time(i), hasDrain: a.d.cs != nil, hasStep: a.budget > 0, hasFull: a.budget > 0}
	present, saturated, dropReset, dropNaN := 0, true, false, false
	for _, ek := range engines {
		if _, ok := a.s.wait[ek].at(i); !ok {
			continue // the engine has no data in this window
		}
		present++
		rs, okRs := a.s.resets[ek].at(i)
		reset := okRs && rs > 0
		a.collectBusy(pk, ek, i, reset)
		if !saturated {
			continue
		}
		if saturated = a.saturated(ek, i); !saturated {
			continue
		}
		dropReset = dropReset || reset
		if rv, ok := a.s.rate[ek].at(i); ok && finite(rv) && rv >= 0 {
			w.drain += rv
		} else {
			w.hasDrain = false
			dropNaN = dropNaN || ok && !finite(rv)
		}
		a.addSteps(&w, ek, i)
	}
	switch {
	case present == 0 || !saturated:
		return w, false
	case dropReset:
		a.res.droppedReset++
		return w, false
	case dropNaN:
		a.res.droppedNaN++
		return w, false
	}
	return w, true
}

// saturated applies the rule's conditions to engine ek in window i,
// counting a non-finite value that decides it.
func (a *aggregator) saturated(ek engineKey, i int) bool {
	for _, c := range a.rule {
		if c.skip {
			continue
		}
		v, ok := c.col(&a.s)[ek].at(i)
		switch {
		case !ok:
			return false
		case !finite(v):
			a.res.nonFinite++
			return false
		case !c.pred(v):
			return false
		}
	}
	return true
}

// addSteps adds engine ek's step evidence in window i to w.
func (a *aggregator) addSteps(w *winVal, ek engineKey, i int) {
	if a.budget <= 0 {
		return
	}
	st, okS := a.s.stepsAt(ek, i)
	if !okS {
		w.hasStep, w.hasFull = false, false
		return
	}
	w.full += a.budget * st
	if dc, okD := a.s.decodes[ek].at(i); okD && finite(dc) {
		w.step += a.budget*st - dc
	} else {
		w.hasStep = false
	}
}

// collectBusy adds engine ek's window i to the step-cost fit when it is
// busy (a running request at every scrape) and clean (no reset, no
// preemption).
func (a *aggregator) collectBusy(pk podKey, ek engineKey, i int, reset bool) {
	if a.budget <= 0 || reset {
		return
	}
	s, cfg := &a.s, a.d.cfg
	if a.d.f.Preemptions != "" {
		if pv, ok := s.pre[ek].at(i); !ok || !(pv < 0.5) {
			return
		}
	}
	rm, okM := s.runMin[ek].at(i)
	sm, okS := s.samples[ek].at(i)
	st, okSt := s.stepsAt(ek, i)
	dc, okD := s.decodes[ek].at(i)
	fv, okF := s.fitRate[ek].at(i)
	if okM && rm >= 1 && okS && sm >= float64(cfg.MinSamplesPerWindow) && okSt && okD && finite(dc) && dc >= 0 && okF && finite(fv) && fv >= 0 {
		a.res.rows = append(a.res.rows, stepRow{s: st, d: fv, g: dc, end: a.d.g.time(i), pod: pk})
	}
}
