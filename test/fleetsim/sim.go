package fleetsim

import (
	"context"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim/engine"
	"github.com/gatetuner/gatetuner/test/fleetsim/epp"
	"github.com/gatetuner/gatetuner/test/fleetsim/export"
	"github.com/gatetuner/gatetuner/test/fleetsim/prefix"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/truth"
	"github.com/gatetuner/gatetuner/test/fleetsim/workload"
)

// Defaults of Options.
const (
	// DefaultWarmup is the simulated lead-in before the first measured phase
	// when a run starts past the scenario's beginning.
	DefaultWarmup = 10 * time.Minute
	// WarmupAll replays every phase before the first measured one.
	WarmupAll time.Duration = -1
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
	// truth.DefaultSaturationWindow); it is rounded to a whole number of
	// scrapes.
	SaturationWindow time.Duration
	// MaxKVUsage is the saturation rule's KV bound (0: truth.DefaultMaxKVUsage).
	MaxKVUsage float64
	// IgnoreMaxNumSeqs drops the saturation rule's "running below
	// max_num_seqs" condition (for an estimator that does not know it).
	IgnoreMaxNumSeqs bool
	// Metrics receives OpenMetrics text with explicit timestamps, one sample
	// per series per scrape over the measured phases.
	Metrics        io.Writer
	MetricsOptions export.MetricsOptions
	// Exporters overrides the scenario's export shape (nil: the scenario's,
	// else scenario.DefaultExportShape).
	Exporters *scenario.ExportShape
	// Records receives one gate record (JSON line) per decision in the
	// measured phases.
	Records io.Writer
	// MaxDrain bounds the run after the last phase (0: DefaultMaxDrain).
	MaxDrain time.Duration
}

// sim is the fleet: workload, EPP, engines, outputs and truth accumulators.
type sim struct {
	sc  *scenario.Scenario
	opt Options
	x   scenario.ExportShape
	// dpEngines is the vLLM engines behind each EPP endpoint.
	dpEngines int
	tree      prefix.Tree
	wl        *workload.Workload
	pods      []*engine.Pod
	ec        *prefix.Cache
	epp       *epp.EPP
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

	cat *export.Catalog
	om  *export.OpenMetricsWriter
	rec *export.RecordWriter

	nextID       int64
	pendingFirst int
	events       int64

	// timers are the KV transfers in flight (P/D); seq orders equal times.
	timers timerHeap
	seq    int64
	// lc are the pod departure's events.
	lc lifecycle

	acc *truth.Acc
}

func newSim(sc *scenario.Scenario, opt Options, live bool) (*sim, error) {
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

	if s.wl, err = workload.New(sc, opt.Seed, &s.tree, live); err != nil {
		return nil, fmt.Errorf("run %s: %w", sc.Name, err)
	}
	s.wl.Measure(s.measStart, s.runEnd)
	for s.wl.Peek() < s.runStart {
		if a, ok := s.wl.Next(); ok {
			s.tree.Release(a.Out) // skipped: no request takes the arrival's hold
		}
	}
	eng := &sc.Pods.Engine
	n := s.x.Engines(sc)
	s.dpEngines = s.x.DPEngines
	s.ec = prefix.NewCache(int32(eng.BlockSize), n, &s.tree)
	cfg := engine.NewConfig(eng, &s.x)
	for i := 0; i < n; i++ {
		s.pods = append(s.pods, engine.NewPod(i, cfg, &s.tree, s.ec, s, eng.MaxModelLen))
	}
	s.epp = epp.New(sc, &s.tree, opt.Seed, s.x.Endpoints(sc), s.x.EPPReplicas, s.x.SyncReplicas)
	if s.x.PD() {
		s.epp.PD = newEPPPD(s)
	}
	s.initLifecycle()
	s.cur = s.phaseAt(s.runStart)
	s.epp.Settings = s.settings[s.cur]
	s.now = s.runStart
	s.cat = export.NewCatalog(sc, &s.x, s.pods, s.epp, opt.MetricsOptions)
	if opt.Metrics != nil {
		s.om = export.NewOpenMetricsWriter(s.cat, opt.Metrics, opt.MetricsOptions.Interleaved)
	}
	if opt.Records != nil {
		s.rec = export.NewRecordWriter(opt.Records, sc, s.base, &s.x)
	}
	s.acc = truth.NewAcc(truth.Run{Scenario: sc, Shape: &s.x, Seed: opt.Seed, Base: s.base,
		PhaseStart: s.phaseStart, PhaseEnd: s.phaseEnd, Settings: s.settings,
		MeasStart: s.measStart, RunEnd: s.runEnd, ScrapeNs: s.scrapeNs,
		SaturationWindow: opt.SaturationWindow, MaxKVUsage: opt.MaxKVUsage, IgnoreMaxNumSeqs: opt.IgnoreMaxNumSeqs,
		Pods: s.pods, PD: s.epp.PD != nil})
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
			if p.Busy() && p.StepEnd() < tp {
				tp, pi = p.StepEnd(), i
			}
		}
		ta := s.wl.Peek()
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
			s.epp.Settings = s.settings[s.cur]
		case tp:
			s.pods[pi].EndStep(t)
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
			if p.Busy() && p.StepEnd() < tp {
				tp, pi = p.StepEnd(), i
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
		s.pods[pi].EndStep(tp)
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
	a, ok := s.wl.Next()
	if !ok {
		return
	}
	s.nextID++
	r := engine.NewRequest(s.nextID, a.T, int16(s.phaseAt(a.T)), a.Leaf, a.Out, a.Prompt, a.Output)
	if s.epp.PD != nil {
		s.arrivePD(r, a.T >= s.measStart)
		return
	}
	dec := s.epp.Route(r.ID, r.Leaf, r.Prompt, &r.Ticket)
	measured := a.T >= s.measStart
	if dec.Chosen < 0 {
		// No endpoint to schedule to: the request fails.
		s.acc.Failed(r, measured)
		s.tree.Release(r.Out)
		return
	}
	r.Ticket.Ep = int32(dec.Chosen)
	r.Pod = int32(s.pickEngine(dec.Chosen))
	if measured && s.rec != nil {
		if dec.Pool != nil {
			s.rec.WritePool(r, dec.Eps, &dec, dec.Pool)
		} else {
			s.rec.Write(r, s.epp.Endpoints, &dec)
		}
	}
	s.acc.Decided(r, &dec, measured)
	s.pendingFirst++
	s.pods[r.Pod].Enqueue(r, s.now)
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
		score := int64(p.Waiting())*4 + int64(p.Running())
		if best < 0 || score < bestScore {
			best, bestScore = e, score
		}
	}
	return best
}

// FirstToken is the engine hook of r's first token.
func (s *sim) FirstToken(p *engine.Pod, r *engine.Request, now int64) {
	if r.IsLeg {
		s.acc.PodFirstToken(p, r, now)
		return
	}
	s.pendingFirst--
	s.epp.FirstToken(&r.Ticket)
	s.epp.Replicas[r.Ticket.Rep].Metrics.TTFTH.Observe(float64(now-r.Arrival) / 1e9)
	s.acc.FirstToken(p, r, now)
}

// Finished is the engine hook of r's last token.
func (s *sim) Finished(_ *engine.Pod, r *engine.Request, now int64) {
	if r.IsLeg {
		s.legFinished(r, now)
		return
	}
	s.epp.Finished(&r.Ticket)
	s.tree.Release(r.Out) // the request's hold, taken over from its arrival
	if s.x.UsageShare < 1 && unitHash(uint64(r.ID)) >= s.x.UsageShare {
		return // the response carried no usage: the EPP observes no tokens
	}
	m := &s.epp.Replicas[r.Ticket.Rep].Metrics
	m.InputH.Observe(float64(r.Prompt))
	m.CachedH.Observe(float64(s.usageCached(r)))
}

// usageCached is the cached tokens r's response reports: its engine's, or
// for a disaggregated request behind today's routing sidecar, its prefill
// leg's (llm-d-router pkg/sidecar/proxy/connector_nixlv2.go rewrites them).
func (s *sim) usageCached(r *engine.Request) int32 {
	if r.Peer != nil && s.x.PDUsageCached == scenario.PDProfilePrefill {
		return r.Peer.FirstCached
	}
	return r.FirstCached
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
	s.acc.Sample(t)
	if s.om != nil {
		s.om.Scrape(s.wallMillis(t))
	}
}

// Run simulates the scenario (or the phases Options select) and returns its
// ground truth, writing the metrics and gate records Options ask for. It does
// not modify sc; concurrent Runs may share it.
func Run(ctx context.Context, sc *scenario.Scenario, opt Options) (*truth.Truth, error) {
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
	if err := s.wl.Err(); err != nil {
		return nil, fmt.Errorf("simulate %s: %w", sc.Name, err)
	}
	if s.om != nil {
		if err := s.om.Finish(); err != nil {
			return nil, fmt.Errorf("write metrics of %s: %w", sc.Name, err)
		}
	}
	if s.rec != nil {
		if err := s.rec.Flush(); err != nil {
			return nil, fmt.Errorf("write gate records of %s: %w", sc.Name, err)
		}
	}
	return s.truth(), nil
}

// truth is the run's truth at the time it reached.
func (s *sim) truth() *truth.Truth {
	return s.acc.Truth(s.now, s.live, s.wl.TraceTruth())
}

// exportShape resolves the shape of a run: Options over the scenario over
// the package default.
func exportShape(sc *scenario.Scenario, opt *Options) (scenario.ExportShape, error) {
	var x scenario.ExportShape
	switch {
	case opt.Exporters != nil:
		x = *opt.Exporters
	case sc.Exporters != nil:
		x = *sc.Exporters
	default:
		var err error
		if x, err = scenario.ExportShapeNamed(""); err != nil {
			return x, err
		}
	}
	x.Producers = append([]string(nil), x.Producers...)
	if err := x.Validate(); err != nil {
		return x, fmt.Errorf("scenario %s: exporters: %w", sc.Name, err)
	}
	if x.DepartPods > sc.Pods.Count {
		return x, fmt.Errorf("scenario %s: exporters: departPods %d exceeds the %d pods", sc.Name, x.DepartPods, sc.Pods.Count)
	}
	return x, nil
}

// Sim is a simulation in progress that its caller drives (package live
// drives one in real time).
type Sim struct{ s *sim }

// NewOpenEnded builds an open-ended simulation of sc under opt: measured
// from scenario time 0, its last phase never ends.
func NewOpenEnded(sc *scenario.Scenario, opt Options) (*Sim, error) {
	s, err := newSim(sc, opt, true)
	if err != nil {
		return nil, err
	}
	return &Sim{s: s}, nil
}

// Advance processes every event up to and including scenario time until (ns).
func (x *Sim) Advance(ctx context.Context, until int64) error { return x.s.advance(ctx, until) }

// Now is the scenario time the simulation reached (ns).
func (x *Sim) Now() int64 { return x.s.now }

// FlushRecords writes the buffered gate records (none without Options.Records).
func (x *Sim) FlushRecords() error {
	if x.s.rec == nil {
		return nil
	}
	return x.s.rec.Flush()
}

// WriteMetrics writes the current metrics in the Prometheus text format.
func (x *Sim) WriteMetrics(w io.Writer) error { return x.s.cat.WriteText(w) }

// Pin fixes the EPP's settings whatever the phase.
func (x *Sim) Pin(st gate.Settings) {
	s := x.s
	for i := range s.settings {
		s.settings[i] = st
	}
	s.epp.Settings = st
}

// Settings are the gate settings the EPP uses.
func (x *Sim) Settings() gate.Settings { return x.s.epp.Settings }

// RestartEPP restarts the EPP: its prefix index and in-flight accounting
// start empty.
func (x *Sim) RestartEPP() { x.s.epp.Restart() }

// Phase is the name of the phase the simulation is in.
func (x *Sim) Phase() string { return x.s.sc.Phases[x.s.cur].Name }

// Truth is the ground truth up to the time the simulation reached.
func (x *Sim) Truth() *truth.Truth { return x.s.truth() }

// EPP is the simulated EPP.
func (x *Sim) EPP() *epp.EPP { return x.s.epp }
