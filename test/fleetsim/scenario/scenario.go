// Package scenario is what a simulated fleet runs: its pods and engine, its
// EPP and gate parameters, its workload (session classes, a trace) and
// phases, decoded from YAML by struct tags with every error located in its
// file, and validated; the export shapes; multi-day scenarios.
package scenario

import (
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/gatetuner/gatetuner/gate"
)

// Scenario is a fleet, its EPP, its workload and the phases it goes through.
// Parse one with Parse or load a built-in with scenarios.Load; the
// fields may be edited before Run (e.g. a smaller scale for a test) as long as
// Validate still passes.
type Scenario struct {
	Name        string
	Description string
	// Source is the file the scenario was read from ("" when built in code).
	Source string

	Namespace string
	// Target is the deployment the gate records name.
	Target string
	// Model is the model_name label.
	Model string
	// ScrapeInterval is the spacing of metric samples and of the truth's
	// sampling grid.
	ScrapeInterval time.Duration

	Pods    PodsSpec
	EPP     EPPSpec
	Classes []SessionClass
	Phases  []Phase

	// Exporters is the export shape (nil: DefaultExportShape).
	Exporters *ExportShape
	// Trace, when set, replays a request trace beside the session classes
	// (which may then be empty).
	Trace *TraceSpec
	// DayPhases is the number of phases in one simulated day of a scenario
	// Days made (0: not a multi-day scenario).
	DayPhases int
}

// PodsSpec is the set of identical vLLM pods.
type PodsSpec struct {
	Count int `yaml:"count" required:"true"`
	// NamePrefix names pods <NamePrefix>-<index>; default <Target>-decode.
	NamePrefix string     `yaml:"namePrefix"`
	Engine     EngineSpec `yaml:"engine" required:"true"`
}

// EngineSpec is one vLLM engine (one per pod, engine label "0").
type EngineSpec struct {
	// NominalRate is the idle engine's prefill rate on full chunks, tok/s:
	// what llm-d's calibration recipe measures (chunk / TTFT of a
	// chunk-sized cache-missing prompt on an idle pod).
	NominalRate float64 `yaml:"nominalRate" required:"true"`
	// MaxNumBatchedTokens is the per-step token budget (decode tokens count 1 each).
	MaxNumBatchedTokens int `yaml:"maxNumBatchedTokens" required:"true"`
	// MaxNumSeqs bounds the running set.
	MaxNumSeqs int `yaml:"maxNumSeqs"`
	// StepOverhead is the fixed time of every engine step.
	StepOverhead time.Duration `yaml:"stepOverhead"`
	// DecodeCost is the time of one decode token in a step relative to one
	// prefill token.
	DecodeCost float64 `yaml:"decodeCost"`
	// BlockSize is the KV block size in tokens (vLLM --block-size).
	BlockSize int `yaml:"blockSize"`
	// NumGPUBlocks is the KV capacity in blocks; the prefix cache lives in
	// the blocks no running request holds.
	NumGPUBlocks int `yaml:"numGPUBlocks" required:"true"`
	// MaxModelLen bounds prompt + output, and sets the 1-2-5 token buckets.
	MaxModelLen int `yaml:"maxModelLen" required:"true"`
}

// PrefillTokenTime is the time of one prefill token in a step, so that a
// full chunk on an idle engine runs at NominalRate.
func (e *EngineSpec) PrefillTokenTime() time.Duration {
	return time.Duration(e.PrefillTokenSeconds() * 1e9)
}

// PrefillTokenSeconds is PrefillTokenTime in seconds, unrounded.
func (e *EngineSpec) PrefillTokenSeconds() float64 {
	b := float64(e.MaxNumBatchedTokens)
	return (b/e.NominalRate - e.StepOverhead.Seconds()) / b
}

// EPPSpec is the endpoint picker: its build profile, the gate plugin and the
// approximate prefix index.
type EPPSpec struct {
	// Pod is the EPP pod's name (pod label of llm_d_epp_* series).
	Pod string
	// Profile is the EPP build profile the parameters are decoded with.
	Profile gate.Profile
	// Plugin is the gate's plugin name (records' "plugin", decisions' plugin_name).
	Plugin string
	// Parameters are the plugin's parameters as JSON, as the EPP decodes them.
	Parameters []byte
	// Settings are the decoded parameters' deciding values.
	Settings    gate.Settings
	PrefixIndex PrefixIndexSpec
	// Picker chooses among the endpoints the gate kept.
	Picker Picker
}

// Picker is how the EPP picks an endpoint among those the gate kept.
type Picker string

// Pickers.
const (
	// PickerLeastTokens picks the fewest in-flight tokens, ties by endpoint order.
	PickerLeastTokens Picker = "least-tokens"
	// PickerLeastTokensThenRequests picks the fewest in-flight tokens, ties by
	// fewest in-flight requests, then by endpoint order (the default: with
	// ties by order alone an idle fleet sends everything to its first pod).
	PickerLeastTokensThenRequests Picker = "least-tokens-then-requests"
)

// PrefixIndexSpec is the approx-prefix-cache-producer's index.
type PrefixIndexSpec struct {
	// BlockSizeTokens is the index's block size (>= 64).
	BlockSizeTokens int `yaml:"blockSizeTokens"`
	// LRUCapacityPerServer is the number of blocks remembered per pod.
	LRUCapacityPerServer int `yaml:"lruCapacityPerServer"`
	// MaxPrefixBlocksToMatch caps the blocks hashed per request (0 = no cap);
	// the prompt beyond it counts as uncached in-flight tokens.
	MaxPrefixBlocksToMatch int `yaml:"maxPrefixBlocksToMatch"`
}

// SessionClass is a kind of session: a shared system prompt, an optional
// document (shared from a pool, or unique per session), and turns whose
// prompts grow by the previous output and a new user message.
type SessionClass struct {
	Name         string    `yaml:"name" required:"true"`
	SystemPrompt *PoolSpec `yaml:"systemPrompt"`
	Document     *PoolSpec `yaml:"document"`
	Turns        Dist      `yaml:"turns"`
	// FirstUserTokens is the first turn's user message (default UserTokens).
	FirstUserTokens *Dist `yaml:"firstUserTokens"`
	UserTokens      Dist  `yaml:"userTokens" required:"true"`
	OutputTokens    Dist  `yaml:"outputTokens" required:"true"`
	// ThinkSeconds is the gap between a turn's arrival and the next one's
	// (open loop: it does not wait for the response).
	ThinkSeconds Dist `yaml:"thinkSeconds"`
	// Pace multiplies a session's think times; drawn once per session, it
	// makes some sessions persistently hotter than others (default 1).
	Pace Dist `yaml:"pace"`

	meanTurns float64
}

// MeanTurns is the mean number of turns of a session (Validate computes it).
func (c *SessionClass) MeanTurns() float64 { return c.meanTurns }

// PoolSpec is a pool of shared prompt parts: Count items (0 = a fresh one
// per session) of Tokens length, picked with Zipf exponent Zipf (0 = uniform).
// With Churn > 0 the popularity ranking rotates every Churn: the coldest item
// becomes the hottest and every other item moves down one rank, so a new
// prefix keeps becoming popular (a trending document, a team's new repo).
type PoolSpec struct {
	Count  int           `yaml:"count"`
	Tokens Dist          `yaml:"tokens" required:"true"`
	Zipf   float64       `yaml:"zipf"`
	Churn  time.Duration `yaml:"churn"`
}

// Phase is a stretch of the scenario with its own load, mix and (optionally)
// gate parameters.
type Phase struct {
	Name     string
	Duration time.Duration
	// RequestRate is the mean request rate (req/s) the phase's session
	// starts aim for: session-start rate = RequestRate / E[turns].
	RequestRate float64
	Arrivals    ArrivalSpec
	// Mix weights the classes of sessions started in the phase, in class order.
	Mix []float64
	// Parameters are the plugin parameters in force (the EPP's merged with
	// the phase's overrides), as JSON; Settings their deciding values.
	Parameters []byte
	Settings   gate.Settings
}

// ArrivalProcess names how session starts arrive.
type ArrivalProcess string

// Arrival processes.
const (
	ArrivalPoisson ArrivalProcess = "poisson"
	ArrivalBursts  ArrivalProcess = "bursts"
	ArrivalDiurnal ArrivalProcess = "diurnal"
)

// ArrivalSpec modulates a phase's Poisson arrivals. All keep the phase's mean
// rate: bursts multiply the rate by BurstFactor for BurstDuration every
// BurstEvery (the rest of the time runs lower); diurnal follows a sine with
// the given peak-to-trough ratio and period, anchored at scenario time 0.
type ArrivalSpec struct {
	Process       ArrivalProcess `yaml:"process" required:"true"`
	BurstFactor   float64        `yaml:"burstFactor"`
	BurstDuration time.Duration  `yaml:"burstDuration"`
	BurstEvery    time.Duration  `yaml:"burstEvery"`
	PeakToTrough  float64        `yaml:"peakToTrough"`
	Period        time.Duration  `yaml:"period"`
}

// Duration is the scenario's total length.
func (sc *Scenario) Duration() time.Duration {
	var d time.Duration
	for i := range sc.Phases {
		d += sc.Phases[i].Duration
	}
	return d
}

// PhaseIndex returns the index of the named phase.
func (sc *Scenario) PhaseIndex(name string) (int, error) {
	var names []string
	for i := range sc.Phases {
		if sc.Phases[i].Name == name {
			return i, nil
		}
		names = append(names, sc.Phases[i].Name)
	}
	return -1, fmt.Errorf("scenario %s has no phase %q (phases: %s)", sc.Name, name, strings.Join(names, ", "))
}

// PodName returns pod i's name.
func (sc *Scenario) PodName(i int) string {
	return fmt.Sprintf("%s-%d", sc.Pods.NamePrefix, i)
}

// PrefillNamePrefix is the name prefix of a P/D pool's prefill pods
// (ExportShape.PrefillPods): the pods' prefix with "-decode" renamed
// "-prefill", else with "-prefill" appended.
func (sc *Scenario) PrefillNamePrefix() string { return prefillPrefix(sc) }

// Clone returns a deep copy that may be edited independently.
func (sc *Scenario) Clone() *Scenario {
	c := *sc
	c.EPP.Parameters = append([]byte(nil), sc.EPP.Parameters...)
	if sc.Exporters != nil {
		x := *sc.Exporters
		x.Producers = append([]string(nil), x.Producers...)
		c.Exporters = &x
	}
	c.Classes = make([]SessionClass, len(sc.Classes))
	for i, cl := range sc.Classes {
		if cl.SystemPrompt != nil {
			p := *cl.SystemPrompt
			cl.SystemPrompt = &p
		}
		if cl.Document != nil {
			p := *cl.Document
			cl.Document = &p
		}
		if cl.FirstUserTokens != nil {
			d := *cl.FirstUserTokens
			cl.FirstUserTokens = &d
		}
		c.Classes[i] = cl
	}
	if sc.Trace != nil {
		c.Trace = sc.Trace.clone()
	}
	c.Phases = make([]Phase, len(sc.Phases))
	for i, p := range sc.Phases {
		p.Mix = append([]float64(nil), p.Mix...)
		p.Parameters = append([]byte(nil), p.Parameters...)
		c.Phases[i] = p
	}
	return &c
}

// Compressed returns a copy whose phase durations (and diurnal periods, and
// a trace envelope's hours) are divided by factor; rates, think times, a
// trace's gaps and the engine are unchanged, so the content is compressed
// while the clock is not.
func (sc *Scenario) Compressed(factor float64) (*Scenario, error) {
	if !(factor > 0) || math.IsInf(factor, 0) {
		return nil, fmt.Errorf("compress scenario %s: factor must be > 0, got %v", sc.Name, factor)
	}
	c := sc.Clone()
	if c.Trace != nil {
		c.Trace.compress(factor)
	}
	for i := range c.Phases {
		p := &c.Phases[i]
		p.Duration = time.Duration(float64(p.Duration) / factor)
		if p.Arrivals.Period > 0 {
			p.Arrivals.Period = time.Duration(float64(p.Arrivals.Period) / factor)
		}
	}
	return c, c.Validate()
}

// Validate checks the scenario's consistency (Parse already did for
// parsed scenarios; call it after editing one). It fills the classes'
// defaults and their mean turns.
func (sc *Scenario) Validate() error {
	for _, check := range []func() *invalid{sc.validateFleet, sc.validateEPP, sc.validateSources, sc.validateClasses, sc.validatePhases} {
		if e := check(); e != nil {
			return fmt.Errorf("scenario %s: %s: %s", sc.Name, e.field, e.msg)
		}
	}
	return nil
}

// invalid is what Validate found wrong: the field and why.
type invalid struct{ field, msg string }

func fail(field, format string, a ...any) *invalid {
	return &invalid{field: field, msg: fmt.Sprintf(format, a...)}
}

// validateFleet checks the name, the scrape interval and the pods.
func (sc *Scenario) validateFleet() *invalid {
	switch {
	case sc.Name == "":
		return fail("name", "is required")
	case sc.ScrapeInterval < time.Millisecond:
		return fail("scrapeInterval", "must be >= 1ms, got %v", sc.ScrapeInterval)
	case sc.Pods.Count < 1 || sc.Pods.Count > 4096:
		return fail("pods.count", "must be in [1, 4096], got %d", sc.Pods.Count)
	}
	if err := sc.Pods.Engine.validate(); err != nil {
		return fail("pods.engine", "%v", err)
	}
	return nil
}

// validateEPP checks the prefix index and the picker.
func (sc *Scenario) validateEPP() *invalid {
	pi := sc.EPP.PrefixIndex
	switch {
	case pi.BlockSizeTokens < 64:
		return fail("epp.prefixIndex.blockSizeTokens", "must be >= 64 (the approximate producer's minimum), got %d", pi.BlockSizeTokens)
	case pi.LRUCapacityPerServer < 1:
		return fail("epp.prefixIndex.lruCapacityPerServer", "must be >= 1, got %d", pi.LRUCapacityPerServer)
	case sc.EPP.Picker != PickerLeastTokens && sc.EPP.Picker != PickerLeastTokensThenRequests:
		return fail("epp.picker", "must be %s or %s, got %q", PickerLeastTokens, PickerLeastTokensThenRequests, sc.EPP.Picker)
	case pi.MaxPrefixBlocksToMatch < 0:
		return fail("epp.prefixIndex.maxPrefixBlocksToMatch", "must be >= 0, got %d", pi.MaxPrefixBlocksToMatch)
	}
	return nil
}

// validateSources checks that requests come from somewhere: session classes
// or a trace (and the trace).
func (sc *Scenario) validateSources() *invalid {
	if len(sc.Classes) == 0 && sc.Trace == nil {
		return fail("classes", "at least one session class (or a trace) is required")
	}
	if sc.Trace != nil {
		if err := sc.Trace.validate(sc); err != nil {
			return fail("trace", "%v", err)
		}
	}
	return nil
}

// validateClasses checks every session class, filling its defaults and
// its mean turns.
func (sc *Scenario) validateClasses() *invalid {
	seen := map[string]bool{}
	for i := range sc.Classes {
		c := &sc.Classes[i]
		if c.Name == "" || seen[c.Name] {
			return fail(fmt.Sprintf("classes[%d].name", i), "must be non-empty and unique, got %q", c.Name)
		}
		seen[c.Name] = true
		if e := c.validate(fmt.Sprintf("classes[%d]", i)); e != nil {
			return e
		}
	}
	return nil
}

// validate checks the class's distributions and pools (field names it),
// filling the defaults of turns, thinkSeconds and pace and its mean turns.
func (c *SessionClass) validate(field string) *invalid {
	for _, d := range []*Dist{&c.Turns, &c.ThinkSeconds, &c.Pace} {
		if d.Kind == "" && *d == (Dist{}) {
			*d = ConstDist(1)
			if d == &c.ThinkSeconds {
				*d = ConstDist(0)
			}
		}
	}
	for _, d := range []struct {
		n string
		d *Dist
	}{{"turns", &c.Turns}, {"userTokens", &c.UserTokens}, {"outputTokens", &c.OutputTokens}, {"thinkSeconds", &c.ThinkSeconds}, {"pace", &c.Pace}, {"firstUserTokens", c.FirstUserTokens}} {
		if d.d == nil {
			continue
		}
		if err := d.d.validate(); err != nil {
			return fail(field+"."+d.n, "%v", err)
		}
	}
	for _, p := range []struct {
		n string
		p *PoolSpec
	}{{"systemPrompt", c.SystemPrompt}, {"document", c.Document}} {
		if p.p == nil {
			continue
		}
		if e := p.p.validate(field + "." + p.n); e != nil {
			return e
		}
	}
	c.meanTurns = c.Turns.empiricalMeanInt(1)
	return nil
}

// validate checks the pool (field names it).
func (p *PoolSpec) validate(field string) *invalid {
	switch {
	case p.Count < 0 || p.Count > 1_000_000:
		return fail(field+".count", "must be in [0, 1000000], got %d", p.Count)
	case p.Churn < 0:
		return fail(field+".churn", "must be >= 0, got %v", p.Churn)
	case p.Zipf < 0 || math.IsNaN(p.Zipf) || math.IsInf(p.Zipf, 0):
		return fail(field+".zipf", "must be >= 0, got %v", p.Zipf)
	}
	if err := p.Tokens.validate(); err != nil {
		return fail(field+".tokens", "%v", err)
	}
	return nil
}

// validatePhases checks every phase.
func (sc *Scenario) validatePhases() *invalid {
	if len(sc.Phases) == 0 {
		return fail("phases", "at least one phase is required")
	}
	seen := map[string]bool{}
	for i := range sc.Phases {
		p := &sc.Phases[i]
		field := fmt.Sprintf("phases[%d]", i)
		if p.Name == "" || seen[p.Name] {
			return fail(field+".name", "must be non-empty and unique, got %q", p.Name)
		}
		seen[p.Name] = true
		if e := p.validate(field, len(sc.Classes)); e != nil {
			return e
		}
	}
	return nil
}

// validate checks the phase (field names it) of a scenario with classes
// session classes.
func (p *Phase) validate(field string, classes int) *invalid {
	f := func(name string) string { return field + "." + name }
	switch {
	case p.Duration <= 0:
		return fail(f("duration"), "must be > 0, got %v", p.Duration)
	case p.RequestRate < 0 || math.IsNaN(p.RequestRate) || math.IsInf(p.RequestRate, 0):
		return fail(f("requestRate"), "must be a finite number >= 0, got %v", p.RequestRate)
	case len(p.Mix) != classes:
		return fail(f("mix"), "has %d weights for %d classes", len(p.Mix), classes)
	}
	var sum float64
	for _, w := range p.Mix {
		if w < 0 || math.IsNaN(w) || math.IsInf(w, 0) {
			return fail(f("mix"), "weights must be finite and >= 0")
		}
		sum += w
	}
	switch {
	case p.RequestRate > 0 && classes == 0:
		return fail(f("requestRate"), "must be 0 without session classes (the trace has its own rate), got %v", p.RequestRate)
	case p.RequestRate > 0 && sum <= 0:
		return fail(f("mix"), "needs a positive weight when requestRate > 0")
	}
	if err := p.Arrivals.validate(); err != nil {
		return fail(f("arrivals"), "%v", err)
	}
	return nil
}

func (e *EngineSpec) validate() error {
	switch {
	case !(e.NominalRate > 0) || math.IsInf(e.NominalRate, 0):
		return fmt.Errorf("nominalRate must be > 0, got %v", e.NominalRate)
	case e.MaxNumBatchedTokens < 1:
		return fmt.Errorf("maxNumBatchedTokens must be >= 1, got %d", e.MaxNumBatchedTokens)
	case e.MaxNumSeqs < 1 || e.MaxNumSeqs > e.MaxNumBatchedTokens:
		return fmt.Errorf("maxNumSeqs must be in [1, maxNumBatchedTokens], got %d", e.MaxNumSeqs)
	case e.StepOverhead < 0:
		return fmt.Errorf("stepOverhead must be >= 0, got %v", e.StepOverhead)
	case e.PrefillTokenSeconds() <= 0:
		return fmt.Errorf("stepOverhead %v leaves no time for a full chunk at nominalRate (a chunk takes %v)",
			e.StepOverhead, time.Duration(float64(e.MaxNumBatchedTokens)/e.NominalRate*1e9))
	case e.DecodeCost < 0 || math.IsNaN(e.DecodeCost) || math.IsInf(e.DecodeCost, 0):
		return fmt.Errorf("decodeCost must be >= 0, got %v", e.DecodeCost)
	case e.BlockSize < 1 || e.BlockSize > 4096:
		return fmt.Errorf("blockSize must be in [1, 4096], got %d", e.BlockSize)
	case e.MaxModelLen < 2:
		return fmt.Errorf("maxModelLen must be >= 2, got %d", e.MaxModelLen)
	case int64(e.NumGPUBlocks)*int64(e.BlockSize) < int64(e.MaxModelLen)+int64(e.BlockSize):
		return fmt.Errorf("numGPUBlocks %d x blockSize %d cannot hold one request of maxModelLen %d", e.NumGPUBlocks, e.BlockSize, e.MaxModelLen)
	}
	return nil
}

func (a *ArrivalSpec) validate() error {
	switch a.Process {
	case ArrivalPoisson:
	case ArrivalBursts:
		if !(a.BurstFactor >= 1) || math.IsInf(a.BurstFactor, 0) {
			return fmt.Errorf("burstFactor must be >= 1, got %v", a.BurstFactor)
		}
		if a.BurstDuration <= 0 || a.BurstEvery <= 0 || a.BurstDuration > a.BurstEvery {
			return fmt.Errorf("bursts need 0 < burstDuration <= burstEvery, got %v and %v", a.BurstDuration, a.BurstEvery)
		}
	case ArrivalDiurnal:
		if !(a.PeakToTrough >= 1) || math.IsInf(a.PeakToTrough, 0) {
			return fmt.Errorf("peakToTrough must be >= 1, got %v", a.PeakToTrough)
		}
		if a.Period <= 0 {
			return fmt.Errorf("period must be > 0, got %v", a.Period)
		}
	default:
		return fmt.Errorf("process must be poisson, bursts or diurnal, got %q", a.Process)
	}
	return nil
}

// LoadFile parses a scenario file.
func LoadFile(file string) (*Scenario, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read scenario: %w", err)
	}
	return Parse(file, data)
}
