package shadow

import (
	"math"

	"github.com/gatetuner/gatetuner/gate"
)

// FeedbackOptions configure a feedback replay.
type FeedbackOptions struct {
	// Rate is the drain rate (tok/s) of an endpoint without one in Rates.
	Rate float64
	// Rates are per-endpoint drain rates (tok/s) by endpoint name.
	Rates map[string]float64
	// Parts is the number of consecutive parts (sub-windows) tallied apart
	// (< 1: one).
	Parts int
	// PrefixReplicas: the decisions carry the live prefix producer's match
	// information (gate records), so a prefix that a settings' own release
	// placed on another endpoint is found there by the later requests that
	// match it (see Feedback). Off for modelled decisions, whose draws share
	// no prefixes.
	PrefixReplicas bool
}

// FeedbackDecision is one decision's input to the feedback replay.
type FeedbackDecision struct {
	// At is the decision time in seconds from any fixed origin; decisions
	// come in non-decreasing At.
	At float64
	// Weight is how many real requests the decision stands for (≤ 0: one).
	// Between a decision and the previous one the replay's clock advances
	// (At − previous At) / Weight: a sample of one request in Weight plays
	// as a stretch of consecutive requests, so its divergence meets the next
	// sampled decision as it would meet the next real one.
	Weight float64
	// Endpoints are the decision's endpoints as recorded; Names names them
	// (nil: endpoints are identified by position).
	Endpoints []gate.Endpoint
	Names     [][]byte
	// PromptTokens is the request's prompt length (< 0: unknown; the
	// prefix producer's TotalBlocks × BlockSizeTokens stands in).
	PromptTokens int64
	// Chosen names the endpoint the live EPP picked (nil: not recorded; the
	// picker model on the recorded state under settings entry 0 stands in).
	Chosen []byte
	// Part is the part (sub-window) the decision is tallied in.
	Part int
	// Decided, when set, are the filter's decisions on Endpoints under each
	// settings entry (an Accumulator's, index as the settings): a settings
	// whose trajectory has not diverged sees the recorded endpoints and
	// reuses its decision instead of deciding again.
	Decided []gate.Decision
}

// FeedbackOutcome is one settings entry's estimated outcome in the
// feedback replay.
type FeedbackOutcome struct {
	// Decisions is the weighted number of decisions (real requests).
	Decisions float64 `json:"decisions"`
	// MeanTTFTSeconds and P90TTFTSeconds summarise the estimated time to
	// first token of each decision: (in-flight tokens ahead at the endpoint
	// picked, the settings' own divergence included, + the request's
	// uncached tokens there) / that endpoint's drain rate. The p90 is over
	// decisions (each draw of the model counts once).
	MeanTTFTSeconds float64 `json:"meanTTFTSeconds"`
	P90TTFTSeconds  float64 `json:"p90TTFTSeconds"`
	// QueueTokens is the weighted sum of those tokens (ahead + own uncached).
	QueueTokens float64 `json:"queueTokens"`
	// Diverged is the share of decisions routed elsewhere than the recorded
	// trajectory.
	Diverged float64 `json:"diverged"`
}

// feedbackTally is one settings entry's sums in one part.
type feedbackTally struct {
	w, wTTFT, wTokens, wDiverged float64
	ttft                         Sketch
}

// replica is one entry of a settings' prefix-replica table: in the
// settings' own trajectory, the prefix that later requests match as
// key.blocks blocks on endpoint key.slot is placed differently from the
// recorded run.
type replica struct {
	key uint64 // slot<<32 | blocks, + 1 (0: empty)
	// gain ≥ 0: that slot holds the prefix too (a release of the settings'
	// own moved it there). lose ≥ 0: the key's endpoint does not hold it
	// (the recorded run released it there, the settings did not), its match
	// is lose blocks.
	gain, lose int32
}

// replicaTable is the size of a settings' direct-mapped replica table (a
// power of two): how many placements are remembered.
const replicaTable = 2048

func replicaKey(slot, blocks int) uint64 { return uint64(slot)<<32 | uint64(uint32(blocks)) + 1 }

func replicaHash(key uint64) int { return int((key * 0x9E3779B97F4A7C15) >> (64 - 11)) }

// Feedback replays decisions in time order for a list of settings (entry 0
// the settings the decisions were recorded under) and estimates each
// settings' time to first token with the load its own routing would have
// caused. Each entry carries, per endpoint, the in-flight tokens by which
// its trajectory differs from the recorded one: a request it routes
// elsewhere than the recorded run adds its uncached tokens at the endpoint
// it picks and removes the recorded uncached tokens from the recorded one.
// That difference is work: it drains only while one of the two
// trajectories has the endpoint idle (a fluid queue at the endpoint's drain
// rate), so a release that lands a whole prompt on an endpoint makes it
// look further behind to the next request pinned there — release chains
// and their queueing show. With PrefixReplicas, a release also places the
// prefix the request matched on its best sticky endpoint on the endpoint it
// lands on: later requests that match that prefix (the same number of
// blocks on the same endpoint) find it on both. The picker model is the
// EPP's: among the endpoints the filter kept, the fewest in-flight tokens,
// ties by fewer in-flight requests, then order. It does not allocate per
// decision once every endpoint has been seen.
type Feedback struct {
	settings []gate.Settings
	opt      FeedbackOptions
	parts    int
	// lo and hi bound the entries replayed and tallied (a shard's; entry 0
	// always decides the recorded choice).
	lo, hi int

	// Endpoint identity: names to slots (position when unnamed).
	slots map[string]int
	rates []float64 // per slot
	// delta[k][slot] is settings k's in-flight tokens minus the recorded
	// ones; dirty[k] says some entry is not zero.
	delta [][]float64
	dirty []bool
	// prevWork is the recorded work at each slot right after the previous
	// decision (its in-flight tokens plus the recorded request's).
	prevWork []float64
	prevAt   float64
	started  bool

	tallies [][]feedbackTally // [part][settings]
	// replicas[k] is settings k's replica table (nil until it places one).
	replicas [][]replica

	// Per-decision scratch.
	idx     []int // slot of each endpoint
	pos     []int // position of each slot in the decision, -1 when absent
	rdt     []float64
	idleRec []float64
	eps     []gate.Endpoint
	adj     []float64 // recorded tokens
	adjK    []float64 // a settings' tokens
	mod     []int
	sticky  []bool // recorded stickiness at settings 0's threshold
}

// NewFeedback returns a feedback replay for the settings (entry 0: the
// settings the decisions were recorded under).
func NewFeedback(settings []gate.Settings, opt FeedbackOptions) *Feedback {
	parts := max(opt.Parts, 1)
	f := &Feedback{settings: settings, opt: opt, parts: parts, slots: map[string]int{},
		delta: make([][]float64, len(settings)), dirty: make([]bool, len(settings)), tallies: make([][]feedbackTally, parts),
		replicas: make([][]replica, len(settings)), hi: len(settings)}
	for p := range f.tallies {
		f.tallies[p] = make([]feedbackTally, len(settings))
	}
	return f
}

// slot returns the slot of endpoint i of d, creating it when new.
func (f *Feedback) slot(d *FeedbackDecision, i int) int {
	if len(d.Names) == len(d.Endpoints) && d.Names[i] != nil {
		s, ok := f.slots[string(d.Names[i])]
		if !ok {
			s = len(f.rates)
			f.slots[string(d.Names[i])] = s
			f.addSlot(f.opt.Rates[string(d.Names[i])])
		}
		return s
	}
	// Unnamed endpoints are identified by position: "#i".
	var buf [24]byte
	key := appendInt(append(buf[:0], '#'), i)
	s, ok := f.slots[string(key)]
	if !ok {
		s = len(f.rates)
		f.slots[string(key)] = s
		f.addSlot(0)
	}
	return s
}

func appendInt(b []byte, v int) []byte {
	if v >= 10 {
		b = appendInt(b, v/10)
	}
	return append(b, byte('0'+v%10))
}

func (f *Feedback) addSlot(rate float64) {
	if !(rate > 0) || math.IsInf(rate, 0) {
		rate = f.opt.Rate
	}
	f.rates = append(f.rates, rate)
	f.prevWork = append(f.prevWork, 0)
	for k := range f.delta {
		f.delta[k] = append(f.delta[k], 0)
	}
	f.rdt = append(f.rdt, 0)
	f.idleRec = append(f.idleRec, 0)
	f.pos = append(f.pos, -1)
}

// uncached is the prompt tokens a request must compute at endpoint e, as
// the in-flight producer charges them: the prompt (at least TotalBlocks
// whole blocks) minus the prefix e holds.
func uncached(e *gate.Endpoint, prompt int64) float64 {
	full, hit := prompt, int64(0)
	if e.HasMatch && e.BlockSizeTokens > 0 {
		full = max(full, int64(e.TotalBlocks)*int64(e.BlockSizeTokens))
		hit = int64(e.MatchBlocks) * int64(e.BlockSizeTokens)
	}
	return float64(max(full-hit, 0))
}

// pick is the picker model: the fewest in-flight tokens among the kept
// endpoints, ties by fewer in-flight requests, then order; -1 when none.
func pick(s *gate.Settings, eps []gate.Endpoint, d *gate.Decision) int {
	best := -1
	for i := range eps {
		e := &eps[i]
		if !d.Keeps(s, e) {
			continue
		}
		if best < 0 || e.InFlightTokens < eps[best].InFlightTokens ||
			(e.InFlightTokens == eps[best].InFlightTokens && e.InFlightRequests < eps[best].InFlightRequests) {
			best = i
		}
	}
	return best
}

func kept(s *gate.Settings, eps []gate.Endpoint, d *gate.Decision, i int) bool {
	return i >= 0 && i < len(eps) && d.Keeps(s, &eps[i])
}

// Add replays one decision for every settings entry.
func (f *Feedback) Add(d *FeedbackDecision) {
	n := len(d.Endpoints)
	if n == 0 || len(f.settings) == 0 {
		return
	}
	w := d.Weight
	if !(w > 0) || math.IsInf(w, 0) {
		w = 1
	}
	f.idx = f.idx[:0]
	for i := 0; i < n; i++ {
		f.idx = append(f.idx, f.slot(d, i))
	}
	for i, sl := range f.idx {
		f.pos[sl] = i
	}
	f.advance(d.At, w)
	lc := f.liveChoice(d)
	part := min(max(d.Part, 0), f.parts-1)
	tallies := f.tallies[part]
	f.recordedState(d)
	for k := f.lo; k < f.hi; k++ {
		f.replayFor(k, d, &lc, &tallies[k], w)
	}
	// The recorded work right after this decision.
	for i := 0; i < n; i++ {
		f.prevWork[f.idx[i]] = float64(d.Endpoints[i].InFlightTokens)
	}
	if lc.rec >= 0 {
		f.prevWork[f.idx[lc.rec]] += lc.uRec
	}
	for _, sl := range f.idx {
		f.pos[sl] = -1
	}
}

// liveRun is what the recorded run did with a decision: its gate decision
// under the recorded settings (entry 0), the endpoint it chose, whether
// the picker model explains that choice, and where the live prefix sits.
type liveRun struct {
	// reuse: the decision carries every settings entry's gate decision.
	reuse bool
	dec0  gate.Decision
	// rec is the chosen endpoint (-1: none) and uRec the tokens it computes.
	rec  int
	uRec float64
	// explained: the picker model explains the live choice.
	explained bool
	// home is the recorded best sticky endpoint (-1: none) and homeBlocks
	// its match; released: the recorded run released the request elsewhere.
	home, homeBlocks int
	released         bool
}

// liveChoice is the recorded choice: the live EPP's, else the picker
// model's under the settings the decisions were recorded with.
func (f *Feedback) liveChoice(d *FeedbackDecision) liveRun {
	n := len(d.Endpoints)
	cur := &f.settings[0]
	lc := liveRun{reuse: len(d.Decided) == len(f.settings), rec: -1, home: -1}
	if lc.reuse {
		lc.dec0 = d.Decided[0]
	} else {
		lc.dec0 = gate.Decide(cur, d.Endpoints)
	}
	model := pick(cur, d.Endpoints, &lc.dec0)
	if d.Chosen != nil && len(d.Names) == n {
		for i := range d.Names {
			if string(d.Names[i]) == string(d.Chosen) {
				lc.rec = i
				break
			}
		}
	}
	// When the picker model does not explain the live choice (other
	// scorers, an exploration draw), every settings follows the live choice
	// wherever its filter keeps that endpoint.
	lc.explained = lc.rec < 0 || lc.rec == model
	if lc.rec < 0 {
		lc.rec = model
	}
	if lc.rec >= 0 {
		lc.uRec = uncached(&d.Endpoints[lc.rec], d.PromptTokens)
	}
	// Where the live prefix sits: the recorded best sticky endpoint and its
	// match, and whether the recorded run released the request elsewhere.
	if lc.dec0.BestSticky >= 0 && d.Endpoints[lc.dec0.BestSticky].HasMatch {
		lc.home, lc.homeBlocks = lc.dec0.BestSticky, d.Endpoints[lc.dec0.BestSticky].MatchBlocks
	}
	lc.released = lc.rec >= 0 && !gate.IsSticky(&d.Endpoints[lc.rec], cur.AffinityThreshold)
	return lc
}

// recordedState fills the scratch views with the decision as recorded:
// stickiness at the recorded threshold, the endpoints, their tokens.
func (f *Feedback) recordedState(d *FeedbackDecision) {
	n := len(d.Endpoints)
	cur := &f.settings[0]
	f.sticky = f.sticky[:0]
	for i := range d.Endpoints {
		f.sticky = append(f.sticky, gate.IsSticky(&d.Endpoints[i], cur.AffinityThreshold))
	}
	f.eps = append(f.eps[:0], d.Endpoints...)
	f.adj, f.adjK = f.adj[:0], f.adjK[:0]
	for range n {
		f.adj, f.adjK = append(f.adj, 0), append(f.adjK, 0)
	}
	for i := 0; i < n; i++ {
		f.adj[i] = float64(d.Endpoints[i].InFlightTokens)
	}
}

// viewFor is the decision as settings entry k sees it: the recorded state
// while its trajectory has not diverged (clean), else the endpoints with
// its own loads (and prefix replicas; nmod of them changed in f.eps).
func (f *Feedback) viewFor(k int, d *FeedbackDecision) (eps []gate.Endpoint, adj []float64, nmod int, clean bool) {
	dk := f.delta[k]
	tbl := f.replicas[k]
	eps, adj = d.Endpoints, f.adj
	clean = !f.dirty[k] && tbl == nil
	if clean {
		return eps, adj, 0, true
	}
	eps, adj = f.eps, f.adjK
	for i := range d.Endpoints {
		sl := f.idx[i]
		rt := float64(d.Endpoints[i].InFlightTokens)
		x := dk[sl]
		if x < -rt { // the settings' own trajectory has the endpoint idle
			x = -rt
			dk[sl] = x
		}
		adj[i] = rt + x
		eps[i].InFlightTokens = int64(math.Round(rt + x))
	}
	if tbl != nil {
		nmod = f.applyReplicas(tbl, d, f.settings[k].AffinityThreshold)
	}
	return eps, adj, nmod, false
}

// replayFor replays the decision for settings entry k into its tally t.
func (f *Feedback) replayFor(k int, d *FeedbackDecision, lc *liveRun, t *feedbackTally, w float64) {
	s := &f.settings[k]
	dk := f.delta[k]
	eps, adj, nmod, clean := f.viewFor(k, d)
	var dec gate.Decision
	if lc.reuse && clean {
		dec = d.Decided[k]
	} else {
		dec = gate.Decide(s, eps)
	}
	var c int
	if !lc.explained && kept(s, eps, &dec, lc.rec) {
		c = lc.rec
	} else {
		c = pick(s, eps, &dec)
	}
	if c >= 0 {
		u := uncached(&eps[c], d.PromptTokens)
		ttft := 0.0
		if r := f.rates[f.idx[c]]; r > 0 {
			ttft = (adj[c] + u) / r
		}
		t.w += w
		t.wTTFT += w * ttft
		t.wTokens += w * (adj[c] + u)
		t.ttft.Add(ttft)
		if c != lc.rec && lc.rec >= 0 {
			t.wDiverged += w
			dk[f.idx[c]] += u
			dk[f.idx[lc.rec]] -= lc.uRec
			f.dirty[k] = true
			if f.opt.PrefixReplicas && lc.home >= 0 && lc.homeBlocks > 0 {
				f.place(k, d, c, lc.rec, lc.home, lc.homeBlocks, lc.released, s.AffinityThreshold)
			}
		}
	}
	for _, i := range f.mod[:nmod] {
		f.eps[i].MatchBlocks = d.Endpoints[i].MatchBlocks
	}
}

// advance moves every settings entry's difference over the time since the
// previous decision: work drains at the rate while an endpoint is busy, so
// the difference changes only by the idle time of either trajectory.
func (f *Feedback) advance(at, w float64) {
	if math.IsNaN(at) || math.IsInf(at, 0) {
		at = f.prevAt // a decision without a usable time does not move the clock
	}
	dt := 0.0
	if f.started && at > f.prevAt {
		dt = (at - f.prevAt) / w
	}
	if !f.started || at > f.prevAt {
		f.prevAt = at // out-of-order decisions do not move the clock back
	}
	f.started = true
	if dt <= 0 {
		return
	}
	for s := range f.rates {
		f.rdt[s] = f.rates[s] * dt
		f.idleRec[s] = max(0, f.rdt[s]-f.prevWork[s])
	}
	for k, dk := range f.delta {
		if !f.dirty[k] {
			continue
		}
		dirty := false
		for s, x := range dk {
			if x == 0 {
				continue
			}
			idle := max(0, f.rdt[s]-(f.prevWork[s]+x))
			x += idle - f.idleRec[s]
			if math.Abs(x) < 0.5 {
				x = 0
			}
			dk[s] = x
			dirty = dirty || x != 0
		}
		f.dirty[k] = dirty
	}
}

// applyReplicas rewrites f.eps' match blocks where the settings' own
// trajectory placed the decision's prefix differently from the recorded
// run, and returns how many indexes it noted in f.mod (to restore).
func (f *Feedback) applyReplicas(tbl []replica, d *FeedbackDecision, threshold float64) int {
	f.mod = f.mod[:0]
	same := threshold == f.settings[0].AffinityThreshold
	for i := range d.Endpoints {
		e := &d.Endpoints[i]
		if !e.HasMatch || e.MatchBlocks <= 0 || (same && !f.sticky[i]) || (!same && !gate.IsSticky(e, threshold)) {
			continue
		}
		key := replicaKey(f.idx[i], e.MatchBlocks)
		r := &tbl[replicaHash(key)]
		if r.key != key {
			continue
		}
		if r.gain >= 0 {
			if j := f.pos[r.gain]; j >= 0 && f.eps[j].MatchBlocks < e.MatchBlocks {
				f.eps[j].MatchBlocks = e.MatchBlocks
				f.mod = append(f.mod, j)
			}
		}
		if r.lose >= 0 && int(r.lose) < f.eps[i].MatchBlocks {
			f.eps[i].MatchBlocks = int(r.lose)
			f.mod = append(f.mod, i)
		}
	}
	return len(f.mod)
}

// place notes, for settings k that sent the request to c where the
// recorded run sent it to rec, where its prefix (homeBlocks blocks on the
// recorded best sticky endpoint home) sits in the settings' trajectory:
// on c too when c did not hold it (the settings released the request), and
// not on rec when the recorded run released it there.
func (f *Feedback) place(k int, d *FeedbackDecision, c, rec, home, homeBlocks int, recReleased bool, threshold float64) {
	tbl := f.replicas[k]
	put := func(r replica) {
		if tbl == nil {
			tbl = make([]replica, replicaTable)
			f.replicas[k] = tbl
		}
		tbl[replicaHash(r.key)] = r
	}
	if !gate.IsSticky(&d.Endpoints[c], threshold) {
		put(replica{key: replicaKey(f.idx[home], homeBlocks), gain: int32(f.idx[c]), lose: -1})
	}
	if recReleased {
		put(replica{key: replicaKey(f.idx[rec], homeBlocks), gain: -1, lose: int32(d.Endpoints[rec].MatchBlocks)})
	}
}

// Fork returns a copy of f's carried state — each settings entry's
// divergence and prefix-replica table, the recorded work and the clock —
// with empty tallies in as many parts: decisions replayed into the fork
// continue f's trajectories and leave f as it was (a cycle replays the
// open window on a fork and keeps f at the last completed span).
func (f *Feedback) Fork() *Feedback {
	c := &Feedback{settings: f.settings, opt: f.opt, parts: f.parts, lo: f.lo, hi: f.hi, slots: make(map[string]int, len(f.slots)),
		rates: append([]float64(nil), f.rates...), delta: make([][]float64, len(f.delta)), dirty: append([]bool(nil), f.dirty...),
		prevWork: append([]float64(nil), f.prevWork...), prevAt: f.prevAt, started: f.started,
		tallies: make([][]feedbackTally, len(f.tallies)), replicas: make([][]replica, len(f.replicas)),
		pos: make([]int, len(f.pos)), rdt: make([]float64, len(f.rdt)), idleRec: make([]float64, len(f.idleRec))}
	for k, v := range f.slots {
		c.slots[k] = v
	}
	for k, d := range f.delta {
		c.delta[k] = append([]float64(nil), d...)
	}
	for k, r := range f.replicas {
		if r != nil {
			c.replicas[k] = append([]replica(nil), r...)
		}
	}
	for p := range c.tallies {
		c.tallies[p] = make([]feedbackTally, len(f.settings))
	}
	for i := range c.pos {
		c.pos[i] = -1
	}
	return c
}

// AddPart adds a part with empty tallies and returns its index.
func (f *Feedback) AddPart() int {
	f.tallies = append(f.tallies, make([]feedbackTally, len(f.settings)))
	f.parts++
	return f.parts - 1
}

// ResetPart zeroes part p's tallies (the part is reused for other decisions).
func (f *Feedback) ResetPart(p int) {
	for i := range f.tallies[p] {
		f.tallies[p][i] = feedbackTally{}
	}
}

// MergePart adds part q of o's tallies into part p of f; o replays the same
// settings (in order).
func (f *Feedback) MergePart(p int, o *Feedback, q int) { f.mergeRange(p, o, q, 0, len(f.tallies[p])) }

// mergeRange is MergePart for the entries lo ≤ i < hi.
func (f *Feedback) mergeRange(p int, o *Feedback, q, lo, hi int) {
	for i := lo; i < hi; i++ {
		t, x := &f.tallies[p][i], &o.tallies[q][i]
		t.w += x.w
		t.wTTFT += x.wTTFT
		t.wTokens += x.wTokens
		t.wDiverged += x.wDiverged
		t.ttft.Merge(&x.ttft)
	}
}

// Outcome returns settings entry i's outcome over every part.
func (f *Feedback) Outcome(i int) FeedbackOutcome {
	var t feedbackTally
	for p := range f.tallies {
		x := &f.tallies[p][i]
		t.w += x.w
		t.wTTFT += x.wTTFT
		t.wTokens += x.wTokens
		t.wDiverged += x.wDiverged
		t.ttft.Merge(&x.ttft)
	}
	return t.outcome()
}

// PartOutcome returns settings entry i's outcome in part p.
func (f *Feedback) PartOutcome(p, i int) FeedbackOutcome { return f.tallies[p][i].outcome() }

// Parts is the number of parts tallied apart.
func (f *Feedback) Parts() int { return f.parts }

func (t *feedbackTally) outcome() FeedbackOutcome {
	o := FeedbackOutcome{Decisions: t.w, QueueTokens: t.wTokens}
	if t.w > 0 {
		o.MeanTTFTSeconds = t.wTTFT / t.w
		o.Diverged = t.wDiverged / t.w
	}
	if t.ttft.Count() > 0 {
		o.P90TTFTSeconds = t.ttft.Quantile(0.9)
	}
	return o
}
