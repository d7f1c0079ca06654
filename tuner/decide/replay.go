package decide

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"runtime"
	"slices"
	"time"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/shadow"
)

// Carry is what a target's cycles carry from one to the next for the
// decision: the shadow replay built so far, and the end of the last window
// whose decisions went into the shadow counters (windows overlap from cycle
// to cycle). The zero Carry is a new target's (or a restarted daemon's).
type Carry struct {
	stream  *replayStream
	counted time.Time
}

// Spans lists the starts of the spans the carried replay holds, in time order.
func (c *Carry) Spans() []time.Time {
	if c.stream == nil {
		return nil
	}
	var out []time.Time
	for key := range c.stream.spans {
		out = append(out, time.Unix(0, key).UTC())
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

// rateHold is how far (relative) this cycle's drain and feedback rates may
// move from those a target's replay stream was built with before the
// stream is rebuilt: within it, the cycle replays with the stream's rates.
const rateHold = 0.05

// replayInputs are what the replay stage replays with: the candidates'
// settings, the accumulators' rate (the gate-input distribution's tok/s)
// and the feedback replay's rates.
type replayInputs struct {
	settings     []gate.Settings
	drain        float64
	fbRate       float64
	fbRates      map[string]float64
	fbRateSource string
}

// replayKey is everything a replay stream's tallies and carried state were
// computed from, besides the decisions themselves: a stream is continued
// only by a cycle whose key is equal (docs/tuner.md, "Cost").
type replayKey struct {
	kind string
	// src is the records source (its identity); nil for the model.
	src      any
	clock    Clock
	settings []gate.Settings
	drain    float64
	fbRate   float64
	fbRates  map[string]float64
	replicas bool
	// The model's draws: block size, seed and endpoint budget.
	blockSize, budget int
	seed              uint64
}

// differs says how k differs from o ("" when equal).
func (k *replayKey) differs(o *replayKey) string {
	switch {
	case k.kind != o.kind || k.src != o.src:
		return "the decision source changed"
	case k.clock != o.clock:
		return "the day's windows changed"
	case k.drain != o.drain || k.fbRate != o.fbRate || !maps.Equal(k.fbRates, o.fbRates):
		return "the prefill rates moved"
	case !slices.Equal(k.settings, o.settings):
		return "the candidates changed"
	case k.replicas != o.replicas || k.blockSize != o.blockSize || k.budget != o.budget || k.seed != o.seed:
		return "the model's parameters changed"
	}
	return ""
}

// spanTally is one span's share of a replay stream: the decisions of one
// window of one day (from its start, or from a cut inside it).
type spanTally struct {
	key   int64 // the window's start (UnixNano)
	index int
	day   int64
	acc   *shadow.Accumulator
	part  int // the span's part in the stream's feedback replay
	n     int64
	reqs  float64
	// est is the estimates the model drew the span from (nil for records).
	est *Traffic
}

// replayStream is a target's replay carried from cycle to cycle: the
// feedback replay's state after the decisions replayed so far, every
// span's tallies, and where the source stopped. Its memory is bounded by
// the spans of the history (older spans are dropped) and the endpoints
// seen.
type replayStream struct {
	key    replayKey
	origin time.Time
	fb     *shadow.Sharded
	spans  map[int64]*spanTally
	free   []int
	// mark is where a records source stopped.
	mark Mark
	// sealed is the end of the model's last span replayed into fb.
	sealed time.Time
}

func newReplayStream(key replayKey, origin time.Time, in *replayInputs) *replayStream {
	return &replayStream{key: key, origin: origin, sealed: origin, spans: map[int64]*spanTally{},
		fb: shadow.NewSharded(in.settings, shadow.FeedbackOptions{Rate: in.fbRate, Rates: in.fbRates, PrefixReplicas: key.replicas}, replayShards(len(in.settings)))}
}

// replayShards is how many goroutines a feedback replay of n candidates
// runs on: one per core the process may use, up to four (the replay's
// entries are independent; the tallies are the same on any number).
func replayShards(n int) int {
	if n < 8 {
		return 1
	}
	return min(runtime.GOMAXPROCS(0), 4)
}

// span returns the span of a decision at ts (created in fb when new).
func (st *replayStream) span(fb *shadow.Sharded, c Clock, ts time.Time, in *replayInputs) *spanTally {
	start := c.Start(ts)
	key := start.UnixNano()
	if sp, ok := st.spans[key]; ok {
		return sp
	}
	sp := &spanTally{key: key, index: c.Index(ts), day: ts.Add(-c.Offset(ts)).Unix(), acc: shadow.NewAccumulator(in.settings, in.drain),
		part: st.part(fb)}
	st.spans[key] = sp
	return sp
}

// part returns a part of fb for a new span: one a dropped span freed when fb
// is the stream's own replay, else a new one.
func (st *replayStream) part(fb *shadow.Sharded) int {
	if fb == st.fb && len(st.free) > 0 {
		p := st.free[len(st.free)-1]
		st.free = st.free[:len(st.free)-1]
		return p
	}
	return fb.AddPart()
}

// drop forgets the spans that end at or before from (out of the history).
func (st *replayStream) drop(c Clock, from time.Time) {
	for key, sp := range st.spans {
		if !time.Unix(0, key).Add(c.Width).After(from) {
			st.fb.ResetPart(sp.part)
			st.free = append(st.free, sp.part)
			delete(st.spans, key)
		}
	}
}

// add replays one decision into its span and the feedback replay fb.
func (st *replayStream) add(fb *shadow.Sharded, sp *spanTally, d *Decision) {
	ds := sp.acc.Add(d.Endpoints)
	sp.acc.Observe(&ds[0], d.Observed)
	sp.n++
	sp.reqs += max(d.Weight, 0) + boolWeight(d.Weight <= 0)
	fd := shadow.FeedbackDecision{At: epochSeconds(d.TS), Weight: d.Weight, Endpoints: d.Endpoints, Names: d.Names,
		PromptTokens: d.PromptTokens, Chosen: d.Chosen, Part: sp.part, Decided: ds}
	fb.Add(&fd)
}

// epochSeconds is ts in seconds since the Unix epoch: the feedback replay's
// clock is fixed, not the window's start, so a decision's time is the same
// number in every cycle that replays it.
func epochSeconds(ts time.Time) float64 {
	return float64(ts.Unix()) + float64(ts.Nanosecond())/1e9
}

// replayRun is one cycle's pass over a stream: what it replayed and how.
type replayRun struct {
	st     *replayStream
	clock  Clock
	in     *replayInputs
	window WindowView
	since  time.Time
	fresh  *shadow.Accumulator
	view   ReplayView
	// open are the model spans replayed this cycle on a fork of the stream
	// (not kept); work is that fork.
	open []*spanTally
	work *shadow.Sharded
}

// replay runs every candidate over the window's decisions — the shadow
// accumulators and the feedback replay, which carries each candidate's own
// load forward in time order (docs/tuner.md) — continuing the target's
// carried replay where the source allows it: a later cycle replays only the
// decisions new since the last one (records), or only the spans not yet
// complete (the model), and reuses what the completed spans produced.
func replay(in *Input, c *Carry, ri *replayInputs) (*replayed, *Halt) {
	clock := ClockOf(in.Target.Policy)
	since := in.Window.From
	if c.counted.After(since) {
		since = c.counted
	}
	run := &replayRun{clock: clock, in: ri, window: in.Window, since: since, fresh: shadow.NewAccumulator(ri.settings, ri.drain)}
	src := in.Source
	key := replayKey{kind: src.Kind(), clock: clock, settings: ri.settings, drain: ri.drain, fbRate: ri.fbRate, fbRates: ri.fbRates,
		replicas: src.Kind() == SourceKindRecords}
	switch s := src.(type) {
	case Model:
		d := s.Draws()
		key.blockSize, key.budget, key.seed = d.BlockSize, d.Budget, d.Seed
	case Resumer:
		key.src = s.Identity()
	}
	if err := run.pass(c, src, in.Day, key); err != nil {
		if errors.Is(err, ErrModelData) {
			return nil, held(HoldInconclusive, err.Error())
		}
		return nil, failed(fmt.Sprintf("shadow: %v", err))
	}
	r := run.result(len(ri.settings))
	c.counted = in.Window.To
	return r, nil
}

// pass replays what this cycle must: it continues the carried replay when
// the key matches and the source can resume, else builds a new one.
func (run *replayRun) pass(c *Carry, src Decisions, day *Day, key replayKey) error {
	res, resumable := src.(Resumer)
	m, isModel := src.(Model)
	incremental := resumable || isModel && day.PerWindow
	if !incremental {
		run.view.Note = "the source cannot resume (not a records file or stream, or the model without per-window estimates): the whole history is replayed each cycle"
		run.st = newReplayStream(key, run.window.From, run.in)
		run.view.Rebuilt = "every cycle"
		return src.Replay(run.window.From, run.window.To, func(d *Decision) error {
			run.addNew(run.st.fb, run.st.span(run.st.fb, run.clock, d.TS, run.in), d)
			return nil
		})
	}
	run.st = c.take(&key, run.window, &run.view)
	run.st.drop(run.clock, run.window.From)
	if run.view.Continued && !isModel {
		run.view.SpansReused = len(run.st.spans)
	}
	var err error
	if isModel {
		err = run.model(m, day)
		if errors.Is(err, errSpanChanged) {
			run.view.restart(err.Error())
			run.st = newReplayStream(key, run.window.From, run.in)
			run.open, run.work = nil, nil
			err = run.model(m, day)
		}
	} else {
		err = run.records(res)
		if errors.Is(err, ErrStaleMark) {
			run.view.restart(err.Error())
			run.st = newReplayStream(key, run.window.From, run.in)
			err = run.records(res)
		}
	}
	if err != nil {
		return err
	}
	if isModel || run.st.mark.Resumable {
		c.stream = run.st
	} else {
		run.view.Note = "the records file is compressed: it cannot be resumed and is replayed in full each cycle"
	}
	return nil
}

// restart notes that the cycle rebuilt the stream it had continued.
func (v *ReplayView) restart(why string) {
	v.Rebuilt, v.Continued, v.SpansReused, v.Decisions = why, false, 0, 0
}

// addNew replays a decision this cycle reads for the first time.
func (run *replayRun) addNew(fb *shadow.Sharded, sp *spanTally, d *Decision) {
	if !d.TS.Before(run.since) {
		run.fresh.Add(d.Endpoints)
	}
	run.st.add(fb, sp, d)
	run.view.Decisions++
}

// records continues a records stream from its mark.
func (run *replayRun) records(res Resumer) error {
	st := run.st
	var last *spanTally
	mark, err := res.ReplayAfter(st.mark, run.window.From, run.window.To, func(d *Decision) error {
		if last == nil || run.clock.Start(d.TS).UnixNano() != last.key {
			last = st.span(st.fb, run.clock, d.TS, run.in)
		}
		run.addNew(st.fb, last, d)
		return nil
	})
	if err != nil {
		return err
	}
	st.mark = mark
	return nil
}

// errSpanChanged: a span the stream sealed has other estimates now.
var errSpanChanged = errors.New("a completed window's estimates changed")

// model continues a model stream: spans whose estimates are final (cached
// complete windows) are replayed once, in time order, into the stream;
// the rest (the open window, spans whose estimates may still change) are
// replayed on a fork of it, each cycle, and not kept.
func (run *replayRun) model(m Model, day *Day) error {
	st := run.st
	sealing := true
	for i := range day.Spans {
		s := &day.Spans[i]
		if !s.To.After(st.sealed) {
			if sp, ok := st.spans[run.clock.Start(s.From).UnixNano()]; ok && sp.est != s.Est {
				return errSpanChanged
			}
			run.view.SpansReused++
			continue
		}
		fb := st.fb
		if sealing = sealing && s.Final; !sealing {
			if run.work == nil {
				run.work = st.fb.Fork()
			}
			fb = run.work
		}
		sp := &spanTally{key: run.clock.Start(s.From).UnixNano(), index: s.Index, day: s.From.Add(-run.clock.Offset(s.From)).Unix(),
			acc: shadow.NewAccumulator(run.in.settings, run.in.drain), est: s.Est, part: st.part(fb)}
		err := m.Replay(s.From, s.To, func(d *Decision) error {
			run.addNew(fb, sp, d)
			return nil
		})
		if err != nil && !errors.Is(err, ErrModelData) {
			return err
		}
		if sealing {
			st.spans[sp.key] = sp
			st.sealed = s.To
		} else {
			run.open = append(run.open, sp)
		}
	}
	// A span the model cannot use draws nothing; none usable is the hold.
	return m.Usable()
}

// result sums the stream's spans (and this cycle's open ones) into the
// windows of the day.
func (run *replayRun) result(ncands int) *replayed {
	nw := run.clock.Windows()
	in := run.in
	r := &replayed{window: run.window, width: run.window.To.Sub(run.window.From), clock: run.clock, parts: make([]*shadow.Accumulator, nw),
		reqs: make([]float64, nw), n: make([]int64, nw), partScal: make([]float64, nw), days: make([]int, nw),
		fresh: run.fresh, fbRate: in.fbRate, fbRates: in.fbRates, fbRateSource: in.fbRateSource}
	for k := range r.parts {
		r.parts[k] = shadow.NewAccumulator(in.settings, in.drain)
	}
	r.fb = shadow.NewFeedback(in.settings, shadow.FeedbackOptions{Rate: in.fbRate, Rates: in.fbRates, Parts: nw, PrefixReplicas: run.st.key.replicas})
	type source struct {
		sp *spanTally
		fb *shadow.Sharded
	}
	var all []source
	for _, sp := range run.st.spans {
		all = append(all, source{sp, run.st.fb})
	}
	for _, sp := range run.open {
		all = append(all, source{sp, run.work})
	}
	// Time order, so that sums are added in the same order whatever the
	// cycle that replayed each span.
	slices.SortFunc(all, func(a, b source) int { return cmp.Compare(a.sp.key, b.sp.key) })
	lastDay := make([]int64, nw)
	for _, s := range all {
		sp, k := s.sp, s.sp.index
		r.parts[k].Merge(sp.acc)
		s.fb.MergeInto(r.fb, k, sp.part)
		r.n[k] += sp.n
		r.reqs[k] += sp.reqs
		if sp.n > 0 && (r.days[k] == 0 || lastDay[k] != sp.day) {
			r.days[k]++
			lastDay[k] = sp.day
		}
	}
	run.view.Spans = len(all)
	r.replay = run.view
	r.tally(run.st.key.kind, ncands)
	return r
}

// take takes the carried stream if this cycle may continue it, else starts
// a new one from the window's start, saying why in v. The stream is taken
// out of the carry until the cycle's replay succeeds and puts it back: a
// replay that fails leaves none.
func (c *Carry) take(key *replayKey, w WindowView, v *ReplayView) *replayStream {
	st := c.stream
	c.stream = nil
	in := &replayInputs{settings: key.settings, drain: key.drain, fbRate: key.fbRate, fbRates: key.fbRates}
	why := ""
	switch {
	case st == nil:
		why = "no earlier cycle (a new or restarted daemon)"
	case w.From.Before(st.origin):
		why = "the history reaches back before the stream's start"
	case w.CutAtApply && !w.From.Equal(st.origin):
		why = "a change took effect (the history is cut there)"
	default:
		why = key.differs(&st.key)
	}
	if why != "" {
		v.Rebuilt = why
		return newReplayStream(*key, w.From, in)
	}
	v.Continued = true
	return st
}

// heldRates returns the rates this cycle replays with: the carried
// stream's while each of its pooled rates is statistically this cycle's —
// inside this cycle's estimate's interval, or within rateHold of it — so
// the stream stays valid (the per-endpoint rates are held with them); else
// this cycle's. held says the stream's were used.
func heldRates(st *replayStream, in replayInputs, drainIv, fbIv *Interval) (replayInputs, bool) {
	if st == nil {
		return in, false
	}
	k := &st.key
	if !holds(k.drain, in.drain, drainIv) || !holds(k.fbRate, in.fbRate, fbIv) {
		return in, false
	}
	if k.drain == in.drain && k.fbRate == in.fbRate && maps.Equal(k.fbRates, in.fbRates) {
		return in, false
	}
	in.drain, in.fbRate, in.fbRates = k.drain, k.fbRate, k.fbRates
	return in, true
}

// holds: the held rate stands for this cycle's estimate v — inside its
// interval iv, or within rateHold of it.
func holds(held, v float64, iv *Interval) bool {
	return near(held, v) || iv != nil && held >= iv.Low && held <= iv.High
}

// near: a and b are within rateHold of each other (relative to b).
func near(a, b float64) bool {
	return a == b || b > 0 && math.Abs(a-b) <= rateHold*b
}

// replayRates are this cycle's replay inputs' rates — the drain rate the
// candidates are built with (and written as peakPrefillThroughput) and the
// feedback replay's — held at the target's stream's while within rateHold
// (the throughput note says so); held reports that.
func replayRates(st *replayStream, est *Estimate, params gate.Params, drain float64, ppt *ThroughputNote) (replayInputs, bool) {
	in := replayInputs{drain: drain}
	in.fbRate, in.fbRates, in.fbRateSource = feedbackRates(est, params)
	var drainIv, fbIv *Interval
	if ppt.Write {
		drainIv = est.Drain.Interval
	}
	switch in.fbRateSource {
	case "drain-rate estimate":
		fbIv = est.Drain.Interval
	case "nominal estimate":
		fbIv = est.Nominal.Interval
	}
	out, held := heldRates(st, in, drainIv, fbIv)
	if !held {
		return in, false
	}
	if out.drain != drain {
		ppt.Note += fmt.Sprintf("; %.0f tok/s held: the shadow replay's rate, within this cycle's estimate %.0f's interval or %.0f %% of it (docs/tuner.md, \"Cost\")", out.drain, drain, rateHold*100)
		if ppt.Value == drain {
			ppt.Value = out.drain
		}
	}
	return out, true
}

// replayed is the replay stage's result: every candidate's shadow tallies
// (whole window, per window of the day and the decisions no earlier cycle
// counted) and feedback outcomes over the window's decisions.
type replayed struct {
	window WindowView
	width  time.Duration
	clock  Clock
	// parts are the windows of the day by index (a window seen on several
	// days merges); reqs, n and scale are each window's real requests,
	// decisions and the factor that scales its draws' excess to requests;
	// days counts the days that contributed.
	parts    []*shadow.Accumulator
	reqs     []float64
	n        []int64
	partScal []float64
	days     []int
	fb       *shadow.Feedback
	fresh    *shadow.Accumulator
	total    []shadow.Counts
	outcomes []shadow.FeedbackOutcome
	// replay is what the cycle replayed and reused.
	replay ReplayView
	// costs are the candidates' excess tokens, scaled to the window's real
	// requests (scale: the model's draws stand for several); windowCosts
	// the same per window of the day ([window][candidate]).
	costs       []float64
	windowCosts [][]float64
	scale       float64
	gateInput   GateInput
	// fbRate, fbRates and fbRateSource turn the feedback's tokens into seconds.
	fbRate       float64
	fbRates      map[string]float64
	fbRateSource string
}

// boolWeight is 1 for a decision without a weight (it stands for one request).
func boolWeight(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// tally sums the windows into the whole-evidence counts, the gate-input
// distribution and every candidate's scaled excess and feedback outcome.
// The model's draws stand for each window's real requests: their excess is
// scaled per window.
func (r *replayed) tally(kind string, ncands int) {
	r.total = make([]shadow.Counts, ncands)
	var penalty, gap shadow.Sketch
	var reqs float64
	var n int64
	for k, p := range r.parts {
		for i := range r.total {
			r.total[i].Add(p.Counts(i))
		}
		penalty.Merge(p.PenaltyMs())
		gap.Merge(p.GapMinusMatched())
		r.partScal[k] = 1
		if kind == SourceKindModel && r.n[k] > 0 {
			r.partScal[k] = r.reqs[k] / float64(r.n[k])
		}
		reqs += r.reqs[k]
		n += r.n[k]
	}
	r.window.Decisions, r.window.Known = r.total[0].Decisions(), r.total[0].Known()
	r.gateInput = GateInput{PenaltyMs: shadow.QuantilesOf(&penalty), GapMinusMatchedTokens: shadow.QuantilesOf(&gap)}
	r.scale = 1.0
	if kind == SourceKindModel && n > 0 {
		r.scale = reqs / float64(n)
	}
	r.costs = make([]float64, ncands)
	r.windowCosts = make([][]float64, len(r.parts))
	for k, p := range r.parts {
		r.windowCosts[k] = make([]float64, ncands)
		for i := range r.costs {
			r.windowCosts[k][i] = p.Counts(i).ExcessTokens * r.partScal[k]
			r.costs[i] += r.windowCosts[k][i]
		}
	}
	r.outcomes = make([]shadow.FeedbackOutcome, ncands)
	for i := range r.outcomes {
		r.outcomes[i] = r.fb.Outcome(i)
	}
}
