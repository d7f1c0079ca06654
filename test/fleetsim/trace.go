package fleetsim

import (
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path"
	"sync"
	"time"
)

//go:embed traces/*.jsonl.gz
var embeddedTraces embed.FS

// TraceSpec is a trace class: requests replayed from a Mooncake-format trace
// (see TraceReader) beside the scenario's session classes, shaped into the
// pool. The phases' requestRate and mix drive the session classes only; the
// trace's rate is its own times Scale (or the scale that reaches
// TargetUtilization) times the envelope's multiplier of the hour.
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
	// lines are counted, skipped and reported in Truth.Trace.
	Strict bool

	hour    time.Duration // the envelope's hour in scenario time (0: an hour); Compressed divides it
	written string        // File as the scenario wrote it
	open    func() (io.ReadCloser, error)
	summary *traceSummaryOnce
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
	t.summary = &traceSummaryOnce{}
}

// useEmbedded makes a built-in scenario's trace read from the embedded traces.
func (t *TraceSpec) useEmbedded() {
	name := t.written
	t.File = "embedded:" + name
	t.open = func() (io.ReadCloser, error) {
		f, err := embeddedTraces.Open(path.Join("traces", name))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("no embedded trace %q (have: %s)", name, embeddedTraceNames())
		}
		return f, err
	}
	t.summary = &traceSummaryOnce{}
}

func embeddedTraceNames() string {
	ents, _ := fs.ReadDir(embeddedTraces, "traces")
	var s string
	for i, e := range ents {
		if i > 0 {
			s += ", "
		}
		s += e.Name()
	}
	return s
}

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
		if c.Name == t.className() {
			return fmt.Errorf("class %q is also a session class's name", c.Name)
		}
	}
	if t.open == nil {
		t.UseFile(t.File)
	}
	return nil
}

func (t *TraceSpec) className() string {
	if t.Class == "" {
		return "trace"
	}
	return t.Class
}

// reader opens the trace.
func (t *TraceSpec) reader() (*TraceReader, io.Closer, error) {
	f, err := t.open()
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

// inWindow reports whether a record's timestamp falls in the window, and
// whether the window is over.
func (t *TraceSpec) inWindow(tsMs int64) (in, over bool) {
	ts := time.Duration(tsMs) * time.Millisecond
	if ts < t.Start {
		return false, false
	}
	if t.Window > 0 && ts >= t.Start+t.Window {
		return false, true
	}
	return true, false
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

// traceSummaryOnce shares the pre-pass between a scenario's clones (a
// sweep's runs), per window: a clone whose window was edited gets its own.
type traceSummaryOnce struct {
	mu   sync.Mutex
	sums map[traceWindowKey]*traceSummaryEntry
}

type traceWindowKey struct {
	start, window time.Duration
	strict        bool
}

type traceSummaryEntry struct {
	once sync.Once
	sum  traceSummary
	err  error
}

// summarize reads the window once (shared by the scenario's clones).
func (t *TraceSpec) summarize() (*traceSummary, error) {
	if t.summary == nil {
		t.summary = &traceSummaryOnce{}
	}
	s := t.summary
	key := traceWindowKey{t.Start, t.Window, t.Strict}
	s.mu.Lock()
	if s.sums == nil {
		s.sums = map[traceWindowKey]*traceSummaryEntry{}
	}
	e := s.sums[key]
	if e == nil {
		e = &traceSummaryEntry{}
		s.sums[key] = e
	}
	s.mu.Unlock()
	e.once.Do(func() { e.err = t.prepass(&e.sum) })
	return &e.sum, e.err
}

func (t *TraceSpec) prepass(sum *traceSummary) error {
	r, c, err := t.reader()
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
		in, over := t.inWindow(rec.TimestampMs)
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

// scale is the trace's speed-up: Scale, or the one reaching TargetUtilization.
func (t *TraceSpec) scale(sc *Scenario, sum *traceSummary) (float64, error) {
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
	spec  *TraceSpec
	class int16
	tree  *nodeTree
	sum   *traceSummary
	scale float64
	env   envelope

	r      *TraceReader
	closer io.Closer
	pass   int64
	nodes  map[blockKey]int32 // this pass's blocks (each held)
	held   []int32            // nodes' values in creation order, released at the pass's end
	maxLen int

	next    arrival
	nextRep int64 // repeated tokens of next
	has     bool
	done    bool
	err     error

	measStart, measEnd int64
	tt                 TraceTruth
}

func newTraceSource(sc *Scenario, class int16, tree *nodeTree) (*traceSource, error) {
	spec := sc.Trace
	sum, err := spec.summarize()
	if err != nil {
		return nil, err
	}
	scale, err := spec.scale(sc, sum)
	if err != nil {
		return nil, err
	}
	s := &traceSource{spec: spec, class: class, tree: tree, sum: sum, scale: scale, maxLen: sc.Pods.Engine.MaxModelLen,
		env:     envelope{hours: spec.Envelope, cv: spec.DayToDay, seed: spec.Seed, scale: scale, hourNs: float64(spec.HourLength())},
		measEnd: math.MaxInt64}
	s.tt = TraceTruth{File: spec.File, Class: spec.className(), Scale: scale, TargetUtilization: spec.TargetUtilization,
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
	r, c, err := s.spec.reader()
	if err != nil {
		return err
	}
	s.r, s.closer = r, c
	for _, n := range s.held {
		s.tree.release(n)
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
			in, over = s.spec.inWindow(rec.TimestampMs)
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
		s.next = arrival{t: t, leaf: leaf, out: s.tree.add(leaf, int(out)), prompt: rec.InputLength, output: out,
			class: s.class, session: -1 - s.tt.Requests, turn: 0}
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
			node = s.tree.add(parent, int(n))
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
	return s.next.t
}

func (s *traceSource) pop() arrival {
	a := s.next
	if a.t >= s.measStart && a.t < s.measEnd {
		s.tt.Requests++
		s.tt.PromptTokens += int64(a.prompt)
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
