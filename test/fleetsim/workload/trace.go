package workload

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"time"

	"github.com/gatetuner/gatetuner/test/fleetsim/prefix"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
)

// openTrace opens t's trace for reading.
func openTrace(t *scenario.TraceSpec) (*TraceReader, io.Closer, error) {
	f, err := t.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("trace %s: %w", t.File, err)
	}
	r, err := NewTraceReader(f, TraceReaderOptions{Strict: t.Strict})
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("trace %s: %w", t.File, err)
	}
	return r, f, nil
}

// traceSummary is a pre-pass over the trace's window.
type traceSummary struct {
	requests        int64
	firstMs, lastMs int64
	promptTokens    int64
	repeatedTokens  int64
	// period is the length of one pass in trace time.
	period time.Duration
	bad    int64
	lines  []LineError
}

type traceWindowKey struct {
	start, window time.Duration
	strict        bool
}

// summarize reads t's window once (shared by the scenario's clones, per
// window: a clone whose window was edited gets its own).
func summarize(t *scenario.TraceSpec) (*traceSummary, error) {
	v, err := t.Once(traceWindowKey{t.Start, t.Window, t.Strict}, func() (any, error) {
		sum := &traceSummary{}
		return sum, prepass(t, sum)
	})
	return v.(*traceSummary), err
}

func prepass(t *scenario.TraceSpec, sum *traceSummary) error {
	r, c, err := openTrace(t)
	if err != nil {
		return err
	}
	defer c.Close()
	ids := newBlockIDs()
	sum.firstMs = -1
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("trace %s: %w", t.File, err)
		}
		in, over := t.InWindow(rec.TimestampMs)
		if over {
			break
		}
		if !in {
			continue
		}
		if sum.firstMs < 0 {
			sum.firstMs = rec.TimestampMs
		}
		sum.lastMs = rec.TimestampMs
		sum.requests++
		sum.promptTokens += int64(rec.InputLength)
		sum.repeatedTokens += ids.repeated(rec)
	}
	st := r.Stats()
	sum.bad, sum.lines = st.Bad, r.BadLines()
	if sum.requests == 0 {
		return fmt.Errorf("trace %s: no requests in the window [%v, %v) (%d bad lines)", t.File, t.Start, t.Start+t.Window, st.Bad)
	}
	sum.period = t.Window
	if sum.period == 0 {
		span := time.Duration(sum.lastMs-t.Start.Milliseconds()) * time.Millisecond
		gap := time.Second
		if sum.requests > 1 {
			gap = time.Duration(sum.lastMs-sum.firstMs) * time.Millisecond / time.Duration(sum.requests-1)
		}
		sum.period = span + max(gap, time.Millisecond)
	}
	return nil
}

// blockIDs tells which (prefix, id) blocks were seen, for the pre-pass.
type blockIDs struct{ seen map[blockKey]int32 }

func newBlockIDs() *blockIDs { return &blockIDs{seen: map[blockKey]int32{}} }

// repeated returns the prompt tokens of rec in blocks seen before, and marks
// its blocks seen.
func (b *blockIDs) repeated(rec *TraceRecord) int64 {
	var rep int64
	parent := int32(-1)
	for k, id := range rec.HashIDs {
		key, n := traceBlockKey(parent, id, k, rec)
		node, ok := b.seen[key]
		if ok {
			rep += int64(n)
		} else {
			node = int32(len(b.seen))
			b.seen[key] = node
		}
		parent = node
	}
	return rep
}

// blockKey identifies one trace block: its prefix (the parent block's
// node), its id and, for a partial last block, its length (a partial block
// is not the full block with the same id).
type blockKey struct {
	parent int32
	len    int32
	id     int64
}

func traceBlockKey(parent int32, id int64, k int, rec *TraceRecord) (blockKey, int32) {
	n := int32(TraceBlockTokens)
	if k == len(rec.HashIDs)-1 {
		n = rec.InputLength - int32(k)*TraceBlockTokens
	}
	return blockKey{parent: parent, id: id, len: n}, n
}

// traceScale is the trace's speed-up: Scale, or the one reaching TargetUtilization.
func traceScale(t *scenario.TraceSpec, sc *scenario.Scenario, sum *traceSummary) (float64, error) {
	if t.Scale > 0 {
		return t.Scale, nil
	}
	work := float64(sum.promptTokens-sum.repeatedTokens) / sum.period.Seconds()
	if work <= 0 {
		return 0, fmt.Errorf("trace %s: no uncached prompt tokens in the window: no scale reaches a utilization", t.File)
	}
	capacity := float64(sc.Pods.Count) * sc.Pods.Engine.NominalRate
	return t.TargetUtilization * capacity / work, nil
}

// traceSource produces the trace class's arrivals in time order: each
// record's prompt becomes a path of prefix-tree nodes, one per 512-token
// block (the last maybe partial), shared by every prompt with the same
// block ids up to it, so that caches of any block size see equal prefixes
// as equal and different ones as different.
type traceSource struct {
	spec  *scenario.TraceSpec
	class int16
	tree  *prefix.Tree
	sum   *traceSummary
	scale float64
	env   envelope

	r      *TraceReader
	closer io.Closer
	pass   int64
	nodes  map[blockKey]int32 // this pass's blocks (each held)
	held   []int32            // nodes' values in creation order, released at the pass's end
	maxLen int

	next    Arrival
	nextRep int64 // repeated tokens of next
	has     bool
	done    bool
	err     error

	measStart, measEnd int64
	tt                 TraceTruth
}

func newTraceSource(sc *scenario.Scenario, class int16, tree *prefix.Tree) (*traceSource, error) {
	spec := sc.Trace
	sum, err := summarize(spec)
	if err != nil {
		return nil, err
	}
	scale, err := traceScale(spec, sc, sum)
	if err != nil {
		return nil, err
	}
	s := &traceSource{spec: spec, class: class, tree: tree, sum: sum, scale: scale, maxLen: sc.Pods.Engine.MaxModelLen,
		env:     envelope{hours: spec.Envelope, cv: spec.DayToDay, seed: spec.Seed, scale: scale, hourNs: float64(spec.HourLength())},
		measEnd: math.MaxInt64}
	s.tt = TraceTruth{File: spec.File, Class: spec.ClassName(), Scale: scale, TargetUtilization: spec.TargetUtilization,
		PeriodSeconds: sum.period.Seconds(), TraceRequests: sum.requests,
		TraceRequestRate:   float64(sum.requests) / sum.period.Seconds(),
		TraceRepeatedShare: float64(sum.repeatedTokens) / float64(sum.promptTokens),
		BadLines:           sum.bad, FirstBadLines: sum.lines}
	if s.tt.FirstBadLines == nil {
		s.tt.FirstBadLines = []LineError{}
	}
	if err := s.startPass(); err != nil {
		return nil, err
	}
	s.advance()
	return s, s.err
}

func (s *traceSource) startPass() error {
	if s.closer != nil {
		s.closer.Close()
	}
	r, c, err := openTrace(s.spec)
	if err != nil {
		return err
	}
	s.r, s.closer = r, c
	for _, n := range s.held {
		s.tree.Release(n)
	}
	s.held = s.held[:0]
	s.nodes = make(map[blockKey]int32, len(s.nodes))
	return nil
}

// advance reads the next record of the window (looping when asked) and
// builds its arrival into s.next.
func (s *traceSource) advance() {
	s.has = false
	for !s.done {
		rec, err := s.r.Next()
		over := errors.Is(err, io.EOF)
		if err != nil && !over {
			s.fail(fmt.Errorf("trace %s, pass %d: %w", s.spec.File, s.pass+1, err))
			return
		}
		var in bool
		if !over {
			in, over = s.spec.InWindow(rec.TimestampMs)
		}
		if over {
			if !s.spec.Loop {
				s.finish()
				return
			}
			s.pass++
			if err := s.startPass(); err != nil {
				s.fail(err)
			}
			continue
		}
		if !in {
			continue
		}
		x := time.Duration(s.pass)*s.sum.period + time.Duration(rec.TimestampMs)*time.Millisecond - s.spec.Start
		t, ok := s.env.at(x)
		if !ok {
			s.finish()
			return
		}
		out := max(rec.OutputLength, 1) // vLLM generates at least one token
		if int(rec.InputLength)+int(out) > s.maxLen {
			if t >= s.measStart && t < s.measEnd {
				s.tt.Dropped++
			}
			continue
		}
		leaf, rep := s.path(rec)
		s.next = Arrival{T: t, Leaf: leaf, Out: s.tree.Add(leaf, int(out)), Prompt: rec.InputLength, Output: out,
			Class: s.class, Session: -1 - s.tt.Requests, Turn: 0}
		s.nextRep, s.has = rep, true
		return
	}
}

// path maps rec's blocks onto this pass's nodes, returning the leaf and the
// prompt tokens in blocks an earlier prompt of the pass already had.
func (s *traceSource) path(rec *TraceRecord) (int32, int64) {
	parent := int32(-1)
	var rep int64
	for k, id := range rec.HashIDs {
		key, n := traceBlockKey(parent, id, k, rec)
		node, ok := s.nodes[key]
		if ok {
			rep += int64(n)
		} else {
			node = s.tree.Add(parent, int(n))
			s.nodes[key] = node
			s.held = append(s.held, node)
		}
		parent = node
	}
	return parent, rep
}

func (s *traceSource) fail(err error) { s.err, s.done, s.has = err, true, false; s.finish() }

func (s *traceSource) finish() {
	s.done = true
	if s.closer != nil {
		s.closer.Close()
		s.closer = nil
	}
}

func (s *traceSource) peek() int64 {
	if !s.has {
		return math.MaxInt64
	}
	return s.next.T
}

func (s *traceSource) pop() Arrival {
	a := s.next
	if a.T >= s.measStart && a.T < s.measEnd {
		s.tt.Requests++
		s.tt.PromptTokens += int64(a.Prompt)
		s.tt.RepeatedTokens += s.nextRep
	}
	s.advance()
	return a
}

func (s *traceSource) truth() *TraceTruth {
	tt := s.tt
	tt.Passes = s.pass + 1
	if tt.PromptTokens > 0 {
		tt.RepeatedShare = float64(tt.RepeatedTokens) / float64(tt.PromptTokens)
	}
	return &tt
}

// TraceTruth is what the trace class did in a run.
type TraceTruth struct {
	File  string `json:"file"`
	Class string `json:"class"`
	// Scale is the speed-up in force (picked when TargetUtilization is set).
	Scale             float64 `json:"scale"`
	TargetUtilization float64 `json:"targetUtilization"`
	// PeriodSeconds is one pass of the window in trace time; TraceRequests
	// and TraceRequestRate the window's requests and their rate per trace
	// second; TraceRepeatedShare its prompt tokens in blocks repeating an
	// earlier block.
	PeriodSeconds      float64 `json:"periodSeconds"`
	TraceRequests      int64   `json:"traceRequests"`
	TraceRequestRate   float64 `json:"traceRequestRate"`
	TraceRepeatedShare float64 `json:"traceRepeatedShare"`
	// Passes counts the passes started (loops + 1).
	Passes int64 `json:"passes"`
	// Requests, PromptTokens and RepeatedTokens are the trace class's
	// arrivals in the measured range, their prompt tokens and those in
	// blocks repeating an earlier block of the same pass; RepeatedShare is
	// their ratio.
	Requests       int64   `json:"requests"`
	PromptTokens   int64   `json:"promptTokens"`
	RepeatedTokens int64   `json:"repeatedTokens"`
	RepeatedShare  float64 `json:"repeatedShare"`
	// Dropped counts measured records longer than maxModelLen (prompt +
	// output), which the engines would reject.
	Dropped int64 `json:"dropped"`
	// BadLines counts the trace's bad lines (skipped); FirstBadLines lists
	// the first of them.
	BadLines      int64       `json:"badLines"`
	FirstBadLines []LineError `json:"firstBadLines"`
}

// envelope maps trace time onto scenario time: the trace's clock runs
// scale × multiplier(hour) times as fast as the scenario's, hour by hour of
// hourNs scenario nanoseconds (0: an hour).
type envelope struct {
	hours  []float64
	cv     float64
	seed   uint64
	scale  float64
	hourNs float64

	// Walking state: the segment (hour) holding the last answer.
	hour      int64
	traceAt   time.Duration // trace time at the hour's start
	day       int64
	dayFactor [24]float64
	dayReady  bool
}

// at returns the scenario time (ns) at which trace time x (from the window's
// first pass start) is reached. Queries must not go back in time.
func (e *envelope) at(x time.Duration) (int64, bool) {
	if len(e.hours) == 0 {
		return int64(float64(x) / e.scale), true
	}
	hourNs := e.hourNs
	if hourNs <= 0 {
		hourNs = float64(time.Hour)
	}
	for idle := 0; ; {
		rate := e.scale * e.multiplier(e.hour)
		span := time.Duration(rate * hourNs)
		if rate > 0 && x < e.traceAt+span {
			return int64(float64(e.hour)*hourNs + float64(x-e.traceAt)/rate), true
		}
		if rate == 0 {
			if idle++; idle > 24*366 {
				return 0, false
			}
		} else {
			idle = 0
		}
		e.traceAt += span
		e.hour++
	}
}

// multiplier is hour h's rate multiplier (h counted from scenario time 0).
func (e *envelope) multiplier(h int64) float64 {
	m := e.hours[h%24]
	if e.cv <= 0 {
		return m
	}
	if d := h / 24; !e.dayReady || d != e.day {
		e.day, e.dayReady = d, true
		r := rand.New(rand.NewPCG(e.seed, uint64(d)))
		sigma := math.Sqrt(math.Log1p(e.cv * e.cv))
		for i := range e.dayFactor {
			e.dayFactor[i] = math.Exp(sigma*r.NormFloat64() - sigma*sigma/2)
		}
	}
	return m * e.dayFactor[h%24]
}
