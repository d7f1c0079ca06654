package fleetsim

import (
	"context"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/gatetuner/gatetuner/gate"
)

// Defaults of Options.
const (
	// DefaultWarmup is the simulated lead-in before the first measured phase
	// when a run starts past the scenario's beginning.
	DefaultWarmup = 10 * time.Minute
	// WarmupAll replays every phase before the first measured one.
	WarmupAll time.Duration = -1
	// DefaultSaturationWindow is the length of the windows saturation is judged on.
	DefaultSaturationWindow = 2 * time.Minute
	// DefaultMaxKVUsage is the KV usage a saturated window must stay below.
	DefaultMaxKVUsage = 0.95
	// DefaultMaxDrain bounds how long a run goes on after its end so that the
	// requests already arrived get their first token.
	DefaultMaxDrain = time.Hour
)

// DefaultBaseTime is the wall time of scenario time 0 unless Options say
// otherwise: a fixed instant, so output does not depend on the clock.
func DefaultBaseTime() time.Time { return time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC) }

// Options configure one deterministic Run.
type Options struct {
	// Seed selects the random streams (workload, exploration draws). The same
	// seed and options give byte-identical outputs.
	Seed uint64
	// SettingsFor, when set, gives the gate settings in force during phase i
	// (index into Scenario.Phases), overriding the scenario's. The workload
	// does not depend on it, so runs with different settings see the same
	// requests.
	SettingsFor func(phase int) gate.Settings
	// First and Last name the measured phases (inclusive); "" means the
	// scenario's first and last.
	First, Last string
	// Warmup is simulated before First (0: DefaultWarmup; WarmupAll: every
	// earlier phase). Requests arriving before the warm-up are not simulated,
	// but the workload is generated from time 0, so the measured requests
	// are those of a full run.
	Warmup time.Duration
	// BaseTime is the wall time of scenario time 0 (zero: DefaultBaseTime()).
	// Set it so that a backfill falls inside the Prometheus retention.
	BaseTime time.Time
	// ScrapeInterval overrides the scenario's.
	ScrapeInterval time.Duration
	// SaturationWindow is the window length of the saturation rule (0:
	// DefaultSaturationWindow); it is rounded to a whole number of scrapes.
	SaturationWindow time.Duration
	// MaxKVUsage is the saturation rule's KV bound (0: DefaultMaxKVUsage).
	MaxKVUsage float64
	// IgnoreMaxNumSeqs drops the saturation rule's "running below
	// max_num_seqs" condition (for an estimator that does not know it).
	IgnoreMaxNumSeqs bool
	// Metrics receives OpenMetrics text with explicit timestamps, one sample
	// per series per scrape over the measured phases.
	Metrics        io.Writer
	MetricsOptions MetricsOptions
	// Exporters overrides the scenario's export shape (nil: the scenario's,
	// else DefaultExportShape).
	Exporters *ExportShape
	// Records receives one gate record (JSON line) per decision in the
	// measured phases.
	Records io.Writer
	// MaxDrain bounds the run after the last phase (0: DefaultMaxDrain).
	MaxDrain time.Duration
}

// sim is the fleet: workload, EPP, engines, outputs and truth accumulators.
type sim struct {
	sc  *Scenario
	opt Options
	x   ExportShape
	// dpEngines is the vLLM engines behind each EPP endpoint.
	dpEngines int
	tree      nodeTree
	wl        *workload
	pods      []*pod
	ec        *blockCache
	epp       *epp
	live      bool

	phaseStart []int64
	phaseEnd   []int64
	settings   []gate.Settings
	cur        int

	now         int64
	runStart    int64
	measStart   int64
	runEnd      int64 // math.MaxInt64 when live
	arrivalsEnd int64
	scrapeNs    int64
	nextScrape  int64
	base        time.Time

	cat *catalog
	om  *omWriter
	rec *recordWriter

	nextID       int64
	pendingFirst int
	events       int64

	// timers are the KV transfers in flight (P/D); seq orders equal times.
	timers timerHeap
	seq    int64
	// lc are the pod departure's events.
	lc lifecycle

	acc truthAcc
}

func newSim(sc *Scenario, opt Options, live bool) (*sim, error) {
	sc = sc.Clone() // Run never modifies the caller's scenario; runs may share it
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	s := &sim{sc: sc, opt: opt, live: live, base: opt.BaseTime}
	var err error
	if s.x, err = exportShape(sc, &opt); err != nil {
		return nil, err
	}
	if s.base.IsZero() {
		s.base = DefaultBaseTime()
	}
	var t int64
	for i := range sc.Phases {
		s.phaseStart = append(s.phaseStart, t)
		t += int64(sc.Phases[i].Duration)
		s.phaseEnd = append(s.phaseEnd, t)
		st := sc.Phases[i].Settings
		if opt.SettingsFor != nil {
			st = opt.SettingsFor(i)
		}
		s.settings = append(s.settings, st)
	}
	first, last := 0, len(sc.Phases)-1
	if opt.First != "" {
		if first, err = sc.PhaseIndex(opt.First); err != nil {
			return nil, err
		}
	}
	if opt.Last != "" {
		if last, err = sc.PhaseIndex(opt.Last); err != nil {
			return nil, err
		}
	}
	if last < first {
		return nil, fmt.Errorf("run %s: last phase %q comes before first phase %q", sc.Name, opt.Last, opt.First)
	}
	s.measStart = s.phaseStart[first]
	s.runEnd = s.phaseEnd[last]
	warm := opt.Warmup
	switch {
	case warm == 0:
		warm = DefaultWarmup
	case warm < 0:
		warm = time.Duration(s.measStart)
	}
	s.runStart = max(0, s.measStart-int64(warm))
	if live {
		s.runStart, s.measStart, s.runEnd = 0, 0, math.MaxInt64
	}
	s.arrivalsEnd = s.runEnd
	s.scrapeNs = int64(sc.ScrapeInterval)
	if opt.ScrapeInterval > 0 {
		s.scrapeNs = int64(opt.ScrapeInterval)
	}
	s.nextScrape = s.measStart

	if s.wl, err = newWorkload(sc, opt.Seed, &s.tree, live); err != nil {
		return nil, fmt.Errorf("run %s: %w", sc.Name, err)
	}
	s.wl.measure(s.measStart, s.runEnd)
	for s.wl.peek() < s.runStart {
		if a, ok := s.wl.next(); ok {
			s.tree.release(a.out) // skipped: no request takes the arrival's hold
		}
	}
	eng := &sc.Pods.Engine
	n := s.x.engines(sc)
	s.dpEngines = s.x.DPEngines
	s.ec = newBlockCache(int32(eng.BlockSize), n, &s.tree)
	cfg := newEngineCfg(eng)
	cfg.iterEveryStep = s.x.IterationEveryStep
	cfg.pcCount = prefixCounting(s.x.VLLM)
	for i := 0; i < n; i++ {
		s.pods = append(s.pods, newPod(i, cfg, &s.tree, s.ec, s, eng.MaxModelLen))
	}
	s.epp = newEPP(sc, &s.tree, opt.Seed, s.x.endpoints(sc), s.x.EPPReplicas, s.x.SyncReplicas)
	if s.x.pd() {
		s.epp.pd = newEPPPD(s)
	}
	s.initLifecycle()
	s.cur = s.phaseAt(s.runStart)
	s.epp.settings = s.settings[s.cur]
	s.now = s.runStart
	s.cat = newCatalog(s, opt.MetricsOptions, &s.x)
	if opt.Metrics != nil {
		s.om = newOMWriter(s.cat, opt.Metrics, opt.MetricsOptions.Interleaved)
	}
	if opt.Records != nil {
		s.rec = newRecordWriter(opt.Records, sc, s.base, &s.x)
	}
	s.acc.init(s)
	return s, nil
}

func (s *sim) phaseAt(t int64) int {
	for i, e := range s.phaseEnd {
		if t < e {
			return i
		}
	}
	return len(s.phaseEnd) - 1
}

// nextPhaseBoundary is the time the current phase ends (MaxInt64 for the
// last one, or past the run).
func (s *sim) nextPhaseBoundary() int64 {
	if s.cur >= len(s.phaseEnd)-1 {
		return math.MaxInt64
	}
	if e := s.phaseEnd[s.cur]; e < s.runEnd {
		return e
	}
	return math.MaxInt64
}

// advance processes every event up to and including time until.
func (s *sim) advance(ctx context.Context, until int64) error {
	for {
		tp, pi := int64(math.MaxInt64), -1
		for i, p := range s.pods {
			if p.busy && p.stepEnd < tp {
				tp, pi = p.stepEnd, i
			}
		}
		ta := s.wl.peek()
		if ta >= s.arrivalsEnd {
			ta = math.MaxInt64
		}
		tsc := s.nextScrape
		if tsc > s.runEnd {
			tsc = math.MaxInt64
		}
		tph := s.nextPhaseBoundary()
		tt := s.timers.next()
		tl := s.nextLifecycle()
		if tl > s.runEnd {
			tl = math.MaxInt64
		}
		t := min(tp, ta, tsc, tph, tt, tl)
		if t > until || t == math.MaxInt64 {
			if until != math.MaxInt64 && until > s.now {
				s.now = until
			}
			return nil
		}
		s.now = t
		switch t {
		case tph:
			s.cur++
			s.epp.settings = s.settings[s.cur]
		case tp:
			s.pods[pi].endStep(t)
		case tt:
			s.fireTimer()
		case tl:
			s.fireLifecycle()
		case ta:
			s.arrive()
		default:
			s.scrape()
		}
		s.events++
		if s.events&0x3fff == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	}
}

// drain runs the engines after the last arrival until every request has its
// first token, or until maxDrain.
func (s *sim) drain(ctx context.Context, maxDrain time.Duration) error {
	limit := s.runEnd + int64(maxDrain)
	s.arrivalsEnd = 0
	for s.pendingFirst > 0 {
		tp, pi := int64(math.MaxInt64), -1
		for i, p := range s.pods {
			if p.busy && p.stepEnd < tp {
				tp, pi = p.stepEnd, i
			}
		}
		if tt := s.timers.next(); tt < tp {
			if tt > limit {
				return nil
			}
			s.now = tt
			s.fireTimer()
			continue
		}
		if tp > limit {
			return nil
		}
		s.now = tp
		s.pods[pi].endStep(tp)
		s.events++
		if s.events&0x3fff == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *sim) arrive() {
	a, ok := s.wl.next()
	if !ok {
		return
	}
	s.nextID++
	r := &request{id: s.nextID, arrival: a.t, vArr: a.t, phase: int16(s.phaseAt(a.t)), leaf: a.leaf, out: a.out,
		prompt: a.prompt, output: a.output, firstSched: -1, firstToken: -1, heapIdx: -1}
	if s.epp.pd != nil {
		s.arrivePD(r, a.t >= s.measStart)
		return
	}
	dec := s.epp.route(r)
	measured := a.t >= s.measStart
	if dec.chosen < 0 {
		// No endpoint to schedule to: the request fails.
		s.acc.failed(r, measured)
		s.tree.release(r.out)
		return
	}
	r.ep = int32(dec.chosen)
	r.pod = int32(s.pickEngine(dec.chosen))
	if measured && s.rec != nil {
		if dec.pool != nil {
			s.rec.writePool(r, dec.eps, &dec, dec.pool)
		} else {
			s.rec.write(r, s.epp.eps, &dec)
		}
	}
	s.acc.decided(s, r, &dec, measured)
	s.pendingFirst++
	s.pods[r.pod].enqueue(r, s.now)
}

// pickEngine is the engine behind endpoint ep that vLLM's front-end gives
// a request: the least waiting×4 + running, ties to the lowest index.
func (s *sim) pickEngine(ep int) int {
	if s.dpEngines == 1 {
		return ep
	}
	best, bestScore := -1, int64(0)
	for e := ep * s.dpEngines; e < (ep+1)*s.dpEngines; e++ {
		p := s.pods[e]
		score := int64(p.waiting.len())*4 + int64(p.nRunning)
		if best < 0 || score < bestScore {
			best, bestScore = e, score
		}
	}
	return best
}

func (s *sim) firstToken(p *pod, r *request, now int64) {
	if r.isLeg {
		s.acc.podFirstToken(s, p, r, now)
		return
	}
	s.pendingFirst--
	s.epp.firstToken(r)
	s.epp.reps[r.eppRep].m.ttftH.observe(float64(now-r.arrival) / 1e9)
	s.acc.firstToken(s, p, r, now)
}

func (s *sim) finished(_ *pod, r *request, now int64) {
	if r.isLeg {
		s.legFinished(r, now)
		return
	}
	s.epp.finished(r)
	s.tree.release(r.out) // the request's hold, taken over from its arrival
	if s.x.UsageShare < 1 && unitHash(uint64(r.id)) >= s.x.UsageShare {
		return // the response carried no usage: the EPP observes no tokens
	}
	m := &s.epp.reps[r.eppRep].m
	m.inputH.observe(float64(r.prompt))
	m.cachedH.observe(float64(s.usageCached(r)))
}

// usageCached is the cached tokens r's response reports: its engine's, or
// for a disaggregated request behind today's routing sidecar, its prefill
// leg's (llm-d-router pkg/sidecar/proxy/connector_nixlv2.go rewrites them).
func (s *sim) usageCached(r *request) int32 {
	if r.peer != nil && s.x.PDUsageCached == PDProfilePrefill {
		return r.peer.firstCached
	}
	return r.firstCached
}

// unitHash maps v to [0, 1) deterministically (splitmix64), so that which
// responses carry usage draws on no random stream.
func unitHash(v uint64) float64 {
	v += 0x9e3779b97f4a7c15
	v = (v ^ (v >> 30)) * 0xbf58476d1ce4e5b9
	v = (v ^ (v >> 27)) * 0x94d049bb133111eb
	v ^= v >> 31
	return float64(v>>11) / (1 << 53)
}

func (s *sim) wallMillis(t int64) int64 {
	return s.base.UnixMilli() + t/int64(time.Millisecond)
}

func (s *sim) scrape() {
	t := s.nextScrape
	s.nextScrape += s.scrapeNs
	s.acc.sample(s, t)
	if s.om != nil {
		s.om.scrape(s.wallMillis(t))
	}
}

// Run simulates the scenario (or the phases Options select) and returns its
// ground truth, writing the metrics and gate records Options ask for. It does
// not modify sc; concurrent Runs may share it.
func Run(ctx context.Context, sc *Scenario, opt Options) (*Truth, error) {
	s, err := newSim(sc, opt, false)
	if err != nil {
		return nil, err
	}
	if err := s.advance(ctx, s.runEnd); err != nil {
		return nil, fmt.Errorf("simulate %s: %w", sc.Name, err)
	}
	maxDrain := opt.MaxDrain
	if maxDrain <= 0 {
		maxDrain = DefaultMaxDrain
	}
	if err := s.drain(ctx, maxDrain); err != nil {
		return nil, fmt.Errorf("simulate %s: %w", sc.Name, err)
	}
	if err := s.wl.err(); err != nil {
		return nil, fmt.Errorf("simulate %s: %w", sc.Name, err)
	}
	if s.om != nil {
		if err := s.om.finish(); err != nil {
			return nil, fmt.Errorf("write metrics of %s: %w", sc.Name, err)
		}
	}
	if s.rec != nil {
		if err := s.rec.flush(); err != nil {
			return nil, fmt.Errorf("write gate records of %s: %w", sc.Name, err)
		}
	}
	return s.truth(), nil
}
