// Package engine is the simulated vLLM V1 engine: its scheduler (chunked
// prefill, decode first, FIFO admissions, recompute preemption), its KV
// blocks shared by running requests and the block-level prefix cache, the
// KV connector of a P/D decode pod, and vLLM's counters and histograms.
package engine

import (
	"container/heap"
	"math"

	"github.com/gatetuner/gatetuner/test/fleetsim/epp"
	"github.com/gatetuner/gatetuner/test/fleetsim/prefix"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
)

// Request is one request's life in the EPP and in an engine.
type Request struct {
	ID      int64
	Arrival int64 // ns
	// Phase is the scenario phase the request arrived in.
	Phase  int16
	Leaf   int32
	Out    int32
	Prompt int32
	Output int32
	Pod    int32 // engine
	// Ticket is the EPP's routing of the request.
	Ticket epp.Ticket

	// Set by the engine: the cached tokens at the first admission, when it
	// was first scheduled and when it got its first token (ns, -1 until
	// then).
	FirstCached int32
	FirstSched  int64
	FirstToken  int64

	// Engine state.
	prev, next   *Request // running list, in admission order
	running      bool
	decoding     bool
	recompute    bool  // re-prefilling after a preemption
	effPrompt    int32 // prompt + output tokens to recompute
	computed     int32 // tokens with KV in the current prefill, cached included
	chunk        int32 // tokens scheduled in the current step
	cachedBlocks int32 // blocks hit in the prefix cache at (re)admission
	privBlocks   int32 // blocks allocated to the request alone (prefill)
	pinDepth     int32 // path nodes [0, pinDepth) are pinned
	gPre         int32 // tokens generated before the last preemption
	g0           int32 // tokens generated when decoding (re)started
	s0           int64 // step number decoding (re)started at
	finishStep   int64
	growKey      int32
	heapIdx      int32

	// VArr is when the request reached its vLLM engine (the arrival, or
	// for a disaggregated request's decode leg, when its prefill ended).
	VArr int64
	// P/D (nil/false without disaggregation): Peer is a disaggregated
	// request's prefill leg, and the leg's Peer the request (its decode
	// leg); IsLeg marks the prefill leg (one output token, its KV held until
	// the decode leg pulled it).
	Peer  *Request
	IsLeg bool
	// Remote: the decode leg loads the prompt's KV from the prefill pod on
	// admission; loaded once it has; Ext counts the tokens transferred (set
	// by the engine).
	Remote bool
	loaded bool
	Ext    int32
}

// Config is an EngineSpec in the units the step loop uses, with the export
// shape's counting rules.
type Config struct {
	budget      int32
	maxSeqs     int32
	bs          int32
	totalBlocks int64
	overheadNs  float64
	prefillNs   float64 // per prefill token
	decodeNs    float64 // per decode token
	// iterEveryStep observes iteration tokens on steps without an output too.
	iterEveryStep bool
	pcCount       pcCounting
}

// pcCounting is when vLLM adds to its prefix-cache query and hit counters.
type pcCounting uint8

const (
	// pcEveryAdmission counts every admission, re-admissions after a
	// preemption included (legacy-sim).
	pcEveryAdmission pcCounting = iota
	// pcEveryAttempt also counts the scheduling attempts that failed to
	// allocate (vLLM before PR #48860).
	pcEveryAttempt
	// pcOnce counts a request once, at its first admission.
	pcOnce
)

func prefixCounting(g scenario.VLLMGeneration) pcCounting {
	switch g {
	case scenario.VLLM011, scenario.VLLMMid2026:
		return pcEveryAttempt
	case scenario.VLLMLate2026:
		return pcOnce
	}
	return pcEveryAdmission
}

// NewConfig is engine e under export shape x (its vLLM generation's
// prefix-cache counting, its iteration-token observations).
func NewConfig(e *scenario.EngineSpec, x *scenario.ExportShape) Config {
	tp := e.PrefillTokenSeconds() * 1e9
	return Config{
		budget:        int32(e.MaxNumBatchedTokens),
		maxSeqs:       int32(e.MaxNumSeqs),
		bs:            int32(e.BlockSize),
		totalBlocks:   int64(e.NumGPUBlocks),
		overheadNs:    float64(e.StepOverhead),
		prefillNs:     tp,
		decodeNs:      tp * e.DecodeCost,
		iterEveryStep: x.IterationEveryStep,
		pcCount:       prefixCounting(x.VLLM),
	}
}

type decodeHeap []*Request

func (h decodeHeap) Len() int { return len(h) }
func (h decodeHeap) Less(i, j int) bool {
	if h[i].finishStep != h[j].finishStep {
		return h[i].finishStep < h[j].finishStep
	}
	return h[i].ID < h[j].ID
}
func (h decodeHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = int32(i)
	h[j].heapIdx = int32(j)
}
func (h *decodeHeap) Push(x any) {
	r := x.(*Request)
	r.heapIdx = int32(len(*h))
	*h = append(*h, r)
}
func (h *decodeHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	r.heapIdx = -1
	return r
}

// reqDeque is a FIFO with push-front (preempted requests go first).
type reqDeque struct {
	buf        []*Request
	head, size int
}

func (q *reqDeque) len() int { return q.size }
func (q *reqDeque) grow() {
	n := max(16, 2*len(q.buf))
	nb := make([]*Request, n)
	for i := 0; i < q.size; i++ {
		nb[i] = q.buf[(q.head+i)%len(q.buf)]
	}
	q.buf, q.head = nb, 0
}
func (q *reqDeque) pushBack(r *Request) {
	if q.size == len(q.buf) {
		q.grow()
	}
	q.buf[(q.head+q.size)%len(q.buf)] = r
	q.size++
}
func (q *reqDeque) pushFront(r *Request) {
	if q.size == len(q.buf) {
		q.grow()
	}
	q.head = (q.head - 1 + len(q.buf)) % len(q.buf)
	q.buf[q.head] = r
	q.size++
}
func (q *reqDeque) front() *Request { return q.buf[q.head] }
func (q *reqDeque) popFront() *Request {
	r := q.buf[q.head]
	q.buf[q.head] = nil
	q.head = (q.head + 1) % len(q.buf)
	q.size--
	return r
}

// Hooks receive an engine's request events.
type Hooks interface {
	FirstToken(p *Pod, r *Request, now int64)
	Finished(p *Pod, r *Request, now int64)
	// KVRequested: a decode leg was admitted and its KV transfer starts.
	KVRequested(p *Pod, r *Request, now int64)
	// Aborted: the engine died with the request on it.
	Aborted(p *Pod, r *Request, now int64)
}

// Pod is one vLLM engine: a waiting queue, a running set, chunked prefill
// that fills each step's token budget with decode tokens first and prefill
// chunks after, a KV block pool shared by running requests and the prefix
// cache, and vLLM's metrics.
type Pod struct {
	idx   int32
	cfg   Config
	tree  *prefix.Tree
	cache *prefix.Cache
	hooks Hooks
	path  []int32

	waiting    reqDeque
	runHead    *Request
	runTail    *Request
	nRunning   int32
	prefilling []*Request
	decoders   decodeHeap
	growCnt    []int32
	nDecode    int32
	private    int64 // KV blocks held by running requests alone
	grownFor   int64 // step whose decode growth is already reserved

	stepNo      int64
	outSteps    int64 // steps that emitted a request output
	busy        bool
	stepStart   int64
	stepEnd     int64
	stepPrefill int32
	stepDecode  int32
	stepChunks  []*Request

	// Engine accounting (truth).
	work     float64 // prefill tokens computed in completed steps
	busyNs   float64
	decodeNs float64

	// deferred counts decode legs waiting for their KV (P/D); sending the
	// finished prefill legs whose KV a decode pod has not pulled yet.
	deferred int32
	sending  int32
	// up: the engine runs (false after it departed, until it rejoins).
	up bool

	// Metrics are vLLM's counters and histograms.
	Metrics Metrics
}

// NewPod returns engine idx with its prefix cache in cache (shared by the
// engines, one LRU each), building on tree, its request events going to
// hooks.
func NewPod(idx int, cfg Config, tree *prefix.Tree, cache *prefix.Cache, hooks Hooks, maxModelLen int) *Pod {
	p := &Pod{idx: int32(idx), cfg: cfg, tree: tree, cache: cache, hooks: hooks, growCnt: make([]int32, cfg.bs), grownFor: -1, up: true}
	p.Metrics.init(maxModelLen)
	return p
}

// UsedBlocks is the KV blocks running requests hold (what kv_cache_usage_perc reports).
func (p *Pod) UsedBlocks() int64 { return p.cache.Pinned(p.idx) + p.private }

func (p *Pod) freeBlocks() int64 {
	return p.cfg.totalBlocks - p.cache.Pinned(p.idx) - p.cache.LRUBlocks(p.idx) - p.private
}

// reserve allocates n private blocks, evicting cached blocks as needed.
func (p *Pod) reserve(n int64) bool {
	if n <= 0 {
		return true
	}
	if f := p.freeBlocks(); f < n {
		p.cache.EvictLRU(p.idx, n-f)
		if p.freeBlocks() < n {
			return false
		}
	}
	p.private += n
	return true
}

func ceilDiv(a, b int32) int32 { return (a + b - 1) / b }

// blocksFor is the number of new blocks r needs to hold `upto` tokens (plus
// the first output token's slot when the prefill completes).
func (p *Pod) blocksFor(r *Request, upto int32) int64 {
	t := upto
	if upto == r.effPrompt {
		t++
	}
	n := ceilDiv(t, p.cfg.bs) - r.cachedBlocks - r.privBlocks
	return int64(max(n, 0))
}

// decodePrivate is a decoding request's private blocks after g tokens.
func (p *Pod) decodePrivate(r *Request, g int32) int64 {
	bs := p.cfg.bs
	return int64(ceilDiv(r.Prompt+g, bs) - r.Prompt/bs)
}

// Enqueue adds r to the waiting queue at now.
func (p *Pod) Enqueue(r *Request, now int64) {
	r.Pod = p.idx
	r.effPrompt = r.Prompt
	p.waiting.pushBack(r)
	if !p.busy {
		p.schedule(now)
	}
}

func (p *Pod) runAppend(r *Request) {
	r.prev, r.next = p.runTail, nil
	if p.runTail != nil {
		p.runTail.next = r
	} else {
		p.runHead = r
	}
	p.runTail = r
	r.running = true
	p.nRunning++
}

func (p *Pod) runRemove(r *Request) {
	if r.prev != nil {
		r.prev.next = r.next
	} else {
		p.runHead = r.next
	}
	if r.next != nil {
		r.next.prev = r.prev
	} else {
		p.runTail = r.prev
	}
	r.prev, r.next = nil, nil
	r.running = false
	p.nRunning--
}

// matchAndPin looks r's prompt up in the prefix cache, pins the hit and
// returns the cached blocks used (at most (prompt-1)/bs: one token is always
// computed).
func (p *Pod) matchAndPin(r *Request) int32 {
	bs := p.cfg.bs
	p.path = p.tree.Path(r.Leaf, p.path)
	var matched int32
	depth := 0
	for i, n := range p.path {
		need := p.tree.Blocks(n, bs)
		if need == 0 {
			continue
		}
		e := p.cache.Find(p.idx, n)
		var have int32
		if e >= 0 {
			have = min(p.cache.Blocks(e), need)
		}
		if have > 0 {
			p.cache.Pin(e)
			depth = i + 1
		}
		matched += have
		if have < need {
			break
		}
	}
	r.pinDepth = int32(depth)
	return min(matched, (r.effPrompt-1)/bs)
}

func (p *Pod) unpinPath(r *Request) {
	if r.pinDepth == 0 {
		return
	}
	p.path = p.tree.Path(r.Leaf, p.path)
	for i := int(r.pinDepth) - 1; i >= 0; i-- {
		n := p.path[i]
		if p.tree.Blocks(n, p.cfg.bs) == 0 {
			continue
		}
		if e := p.cache.Find(p.idx, n); e >= 0 {
			p.cache.Unpin(e)
		}
	}
	r.pinDepth = 0
}

// schedule builds the next step at time now: decode tokens first, then
// chunks of running prefills in admission order, then new admissions.
func (p *Pod) schedule(now int64) {
	k := p.stepNo + 1
	bs := p.cfg.bs
	for p.nDecode > 0 && p.grownFor != k {
		need := int64(p.growCnt[int((int64(bs)-k%int64(bs))%int64(bs))])
		if p.reserve(need) {
			p.grownFor = k
			break
		}
		if p.runTail == nil {
			p.private += need
			p.grownFor = k
			break
		}
		p.preempt(p.runTail)
	}
	budget := p.cfg.budget - p.nDecode
	chunks := p.stepChunks[:0]
	var prefill int32
	for i := 0; i < len(p.prefilling) && budget > 0; {
		r := p.prefilling[i]
		c := min(r.effPrompt-r.computed, budget)
		need := p.blocksFor(r, r.computed+c)
		if !p.reserve(need) {
			victim := p.runTail
			p.preempt(victim)
			if victim == r {
				break
			}
			continue
		}
		r.privBlocks += int32(need)
		r.chunk = c
		chunks = append(chunks, r)
		budget -= c
		prefill += c
		i++
	}
	for budget > 0 && p.nRunning < p.cfg.maxSeqs && p.waiting.len() > 0 {
		r := p.waiting.front()
		if r.Remote {
			c, ok := p.admitRemote(r, now)
			if !ok {
				break
			}
			if c > 0 {
				chunks = append(chunks, r)
				budget -= c
				prefill += c
			}
			continue
		}
		r.cachedBlocks = p.matchAndPin(r)
		r.privBlocks = 0
		r.computed = r.cachedBlocks * bs
		c := min(r.effPrompt-r.computed, budget)
		need := p.blocksFor(r, r.computed+c)
		if !p.reserve(need) {
			if p.cfg.pcCount == pcEveryAttempt {
				p.Metrics.PCQueries += int64(r.effPrompt)
				p.Metrics.PCHits += int64(r.cachedBlocks * bs)
			}
			p.unpinPath(r)
			r.cachedBlocks = 0
			break
		}
		p.waiting.popFront()
		r.privBlocks = int32(need)
		if p.cfg.pcCount != pcOnce || r.FirstSched < 0 {
			p.Metrics.PCQueries += int64(r.effPrompt)
			p.Metrics.PCHits += int64(r.cachedBlocks * bs)
		}
		if r.FirstSched < 0 {
			r.FirstSched = now
			r.FirstCached = r.cachedBlocks * bs
		}
		p.runAppend(r)
		p.prefilling = append(p.prefilling, r)
		r.chunk = c
		chunks = append(chunks, r)
		budget -= c
		prefill += c
	}
	p.stepChunks = chunks
	if len(chunks) == 0 && p.nDecode == 0 {
		p.busy = false
		return
	}
	dur := p.cfg.overheadNs + float64(prefill)*p.cfg.prefillNs + float64(p.nDecode)*p.cfg.decodeNs
	d := int64(dur + 0.5)
	if d < 1 {
		d = 1
	}
	p.busy = true
	p.stepStart, p.stepEnd = now, now+d
	p.stepPrefill, p.stepDecode = prefill, p.nDecode
}

// admitRemote admits a disaggregated request's decode leg at the head of
// the waiting queue, as vLLM does with a KV connector: the first time it
// looks the prompt up in the local prefix cache, allocates blocks for the
// whole prompt and defers the request while the rest of its KV is pulled
// from the prefill pod (WAITING_FOR_REMOTE_KVS); once loaded (all but the
// last token, which vLLM recomputes) it runs, computing that one token.
// It returns the tokens scheduled this step and false when the blocks
// could not be allocated (the request stays at the head).
func (p *Pod) admitRemote(r *Request, now int64) (int32, bool) {
	bs := p.cfg.bs
	if !r.loaded {
		r.cachedBlocks = p.matchAndPin(r)
		r.privBlocks = 0
		r.computed = r.cachedBlocks * bs
		need := p.blocksFor(r, r.effPrompt)
		if !p.reserve(need) {
			if p.cfg.pcCount == pcEveryAttempt {
				p.Metrics.PCQueries += int64(r.effPrompt)
				p.Metrics.PCHits += int64(r.cachedBlocks * bs)
			}
			p.unpinPath(r)
			r.cachedBlocks = 0
			return 0, false
		}
		p.waiting.popFront()
		r.privBlocks = int32(need)
		p.Metrics.PCQueries += int64(r.effPrompt)
		p.Metrics.PCHits += int64(r.cachedBlocks * bs)
		r.Ext = r.effPrompt - r.cachedBlocks*bs
		p.deferred++
		p.hooks.KVRequested(p, r, now)
		return 0, true
	}
	c := r.effPrompt - r.computed
	need := p.blocksFor(r, r.effPrompt)
	if !p.reserve(need) {
		return 0, false
	}
	p.waiting.popFront()
	r.privBlocks += int32(need)
	r.Remote = false
	if r.FirstSched < 0 {
		r.FirstSched = now
		r.FirstCached = r.computed
	}
	p.runAppend(r)
	p.prefilling = append(p.prefilling, r)
	r.chunk = c
	return c, true
}

// KVLoaded moves a decode leg whose KV arrived back to the head of the
// waiting queue with every prompt token but the last computed.
func (p *Pod) KVLoaded(r *Request, now int64) {
	p.deferred--
	r.loaded = true
	r.computed = r.effPrompt - 1
	p.waiting.pushFront(r)
	if !p.busy {
		p.schedule(now)
	}
}

// KVSent frees a finished prefill leg's KV once the decode pod pulled it
// (vLLM delays freeing a do_remote_decode request's blocks until then).
func (p *Pod) KVSent(r *Request, now int64) {
	p.sending--
	p.releaseKV(r)
	if !p.busy {
		p.schedule(now)
	}
}

// preempt sends a running request back to the front of the waiting queue,
// freeing its blocks (vLLM V1 recompute preemption).
func (p *Pod) preempt(r *Request) {
	if r.decoding {
		heap.Remove(&p.decoders, int(r.heapIdx))
		p.growCnt[r.growKey]--
		p.nDecode--
		g := r.g0 + int32(p.stepNo-r.s0)
		held := g
		if p.grownFor == p.stepNo+1 {
			held++ // this step's slot was already reserved
		}
		p.private -= p.decodePrivate(r, held)
		r.gPre = g
		r.decoding = false
	} else {
		for i, q := range p.prefilling {
			if q == r {
				p.prefilling = append(p.prefilling[:i], p.prefilling[i+1:]...)
				break
			}
		}
		p.private -= int64(r.privBlocks)
	}
	p.unpinPath(r)
	r.privBlocks, r.cachedBlocks, r.computed, r.chunk = 0, 0, 0, 0
	r.effPrompt = r.Prompt + r.gPre
	r.recompute = r.FirstToken >= 0
	p.runRemove(r)
	p.waiting.pushFront(r)
	p.Metrics.Preemptions++
}

// EndStep applies the step that ends at now and schedules the next.
func (p *Pod) EndStep(now int64) {
	k := p.stepNo + 1
	p.stepNo = k
	dur := float64(now - p.stepStart)
	p.work += float64(p.stepPrefill)
	p.busyNs += dur
	p.decodeNs += float64(p.stepDecode) * p.cfg.decodeNs
	iter := int64(p.stepDecode)
	if p.stepDecode > 0 {
		p.Metrics.GenTokens += int64(p.stepDecode)
		p.Metrics.ITL.ObserveN(dur/1e9, int64(p.stepDecode))
	}
	for len(p.decoders) > 0 && p.decoders[0].finishStep <= k {
		r := heap.Pop(&p.decoders).(*Request)
		p.finish(r, now)
	}
	done := 0
	emitted := p.stepDecode > 0
	for _, r := range p.stepChunks {
		r.computed += r.chunk
		r.chunk = 0
		if r.computed >= r.effPrompt {
			done++
		}
	}
	if done > 0 {
		keep := p.prefilling[:0]
		for _, r := range p.prefilling {
			if r.computed < r.effPrompt {
				keep = append(keep, r)
			}
		}
		for i := len(keep); i < len(p.prefilling); i++ {
			p.prefilling[i] = nil
		}
		p.prefilling = keep
		for _, r := range p.stepChunks {
			if r.computed >= r.effPrompt && !r.decoding && r.running {
				if !r.recompute {
					iter += int64(r.Prompt)
				}
				iter++
				emitted = true
				p.prefillDone(r, now)
			}
		}
	}
	for i := range p.stepChunks {
		p.stepChunks[i] = nil
	}
	p.stepChunks = p.stepChunks[:0]
	if emitted {
		p.outSteps++
	}
	if emitted || p.cfg.iterEveryStep {
		// vLLM observes iteration tokens once per IterationStats, which
		// only a step with request outputs makes.
		p.Metrics.Iter.Observe(float64(iter))
	}
	p.busy = false
	p.schedule(now)
}

// prefillDone caches the prompt's full blocks (pinned until the request
// finishes), emits the first token and starts decoding.
func (p *Pod) prefillDone(r *Request, now int64) {
	bs := p.cfg.bs
	p.path = p.tree.Path(r.Leaf, p.path)
	for i, n := range p.path {
		need := p.tree.Blocks(n, bs)
		if need == 0 {
			continue
		}
		e := p.cache.Find(p.idx, n)
		if e < 0 {
			e = p.cache.Create(p.idx, n)
		}
		if int32(i) >= r.pinDepth {
			p.cache.Pin(e)
		}
		p.cache.Grow(e, need)
	}
	r.pinDepth = int32(len(p.path))
	g0 := r.gPre + 1
	p.private -= int64(r.privBlocks)
	p.private += p.decodePrivate(r, g0)
	r.privBlocks = 0
	p.Metrics.GenTokens++
	if !r.recompute {
		computed := r.Prompt - r.FirstCached
		p.Metrics.PromptTokens += int64(r.Prompt)
		p.Metrics.LocalCompute += int64(computed)
		if r.Ext > 0 {
			// vLLM's PromptTokenStats: the last token, cached by transfer
			// but recomputed, counts as a local cache hit too.
			recomputed := int32(0)
			if r.FirstCached+1 == r.Prompt {
				recomputed = 1
			}
			p.Metrics.LocalCacheHit += int64(r.FirstCached + recomputed - r.Ext)
			p.Metrics.ExtTransfer += int64(r.Ext)
		} else {
			p.Metrics.LocalCacheHit += int64(r.FirstCached)
		}
		p.Metrics.CachedTokens += int64(r.FirstCached)
		r.FirstToken = now
		p.Metrics.TTFT.Observe(float64(now-r.VArr) / 1e9)
		p.hooks.FirstToken(p, r, now)
	}
	r.recompute = false
	r.g0, r.s0 = g0, p.stepNo
	if g0 >= r.Output {
		p.finish(r, now)
		return
	}
	r.decoding = true
	r.finishStep = p.stepNo + int64(r.Output-g0)
	key := (int64(r.Prompt+g0-1) - r.s0) % int64(bs)
	if key < 0 {
		key += int64(bs)
	}
	r.growKey = int32(key)
	p.growCnt[key]++
	p.nDecode++
	heap.Push(&p.decoders, r)
}

// finish releases a request that produced its last token at now. A
// prefill leg keeps its KV until the decode pod has pulled it (KVSent).
func (p *Pod) finish(r *Request, now int64) {
	if r.decoding {
		p.growCnt[r.growKey]--
		p.nDecode--
		r.decoding = false
	}
	if r.IsLeg {
		p.sending++
	} else {
		p.releaseKV(r)
	}
	p.runRemove(r)
	m := &p.Metrics
	m.Success++
	m.PromptTokensH.Observe(float64(r.Prompt))
	m.KVComputedH.Observe(float64(r.Prompt - r.FirstCached))
	m.GenTokensH.Observe(float64(r.Output))
	m.QueueH.Observe(float64(r.FirstSched-r.VArr) / 1e9)
	m.PrefillH.Observe(float64(r.FirstToken-r.FirstSched) / 1e9)
	m.DecodeH.Observe(float64(now-r.FirstToken) / 1e9)
	m.InferenceH.Observe(float64(now-r.FirstSched) / 1e9)
	m.E2EH.Observe(float64(now-r.VArr) / 1e9)
	p.hooks.Finished(p, r, now)
}

// releaseKV frees a finished request's blocks: the output's full blocks
// join the cache as the least recent of the request's blocks, then the
// prompt's from the tail to the root (vLLM frees blocks in reverse so the
// tail is evicted first).
func (p *Pod) releaseKV(r *Request) {
	bs := p.cfg.bs
	p.private -= p.decodePrivate(r, r.Output)
	if r.Out >= 0 {
		if nb := p.tree.Blocks(r.Out, bs); nb > 0 {
			e := p.cache.Find(p.idx, r.Out)
			if e < 0 {
				e = p.cache.Create(p.idx, r.Out)
				p.cache.SetBlocks(e, nb)
				p.cache.PushMRU(e)
			}
		}
	}
	p.unpinPath(r)
}

// Progress returns the engine's cumulative prefill work, busy time and
// decode time at time t, counting the running step pro rata.
func (p *Pod) Progress(t int64) (work, busy, decode float64) {
	work, busy, decode = p.work, p.busyNs, p.decodeNs
	if p.busy && t > p.stepStart {
		f := float64(t-p.stepStart) / float64(p.stepEnd-p.stepStart)
		if f > 1 {
			f = 1
		}
		work += f * float64(p.stepPrefill)
		busy += f * float64(p.stepEnd-p.stepStart)
		decode += f * float64(p.stepDecode) * p.cfg.decodeNs
	}
	return work, busy, decode
}

// AbortAll kills the engine: every waiting and running request is dropped
// (its client sees an error), its KV freed and the prefix cache emptied.
func (p *Pod) AbortAll(now int64) {
	var rs []*Request
	for p.waiting.len() > 0 {
		rs = append(rs, p.waiting.popFront())
	}
	for r := p.runHead; r != nil; {
		next := r.next
		r.prev, r.next, r.running, r.decoding = nil, nil, false, false
		rs = append(rs, r)
		r = next
	}
	for _, r := range rs {
		p.unpinPath(r)
		r.heapIdx = -1
	}
	p.runHead, p.runTail, p.nRunning = nil, nil, 0
	p.prefilling = p.prefilling[:0]
	p.decoders = p.decoders[:0]
	for i := range p.growCnt {
		p.growCnt[i] = 0
	}
	for i := range p.stepChunks {
		p.stepChunks[i] = nil
	}
	p.stepChunks = p.stepChunks[:0]
	p.nDecode, p.private, p.grownFor, p.busy = 0, 0, -1, false
	p.cache.EvictLRU(p.idx, math.MaxInt64)
	for _, r := range rs {
		p.hooks.Aborted(p, r, now)
	}
}

// Restart brings a dead engine back as a new process: counters from zero.
func (p *Pod) Restart(maxModelLen int) {
	p.Metrics = Metrics{}
	p.Metrics.init(maxModelLen)
	p.up = true
}

// Index is the engine's index in the fleet.
func (p *Pod) Index() int32 { return p.idx }

// Running is the number of running requests.
func (p *Pod) Running() int32 { return p.nRunning }

// Waiting is the number of requests in the waiting queue.
func (p *Pod) Waiting() int { return p.waiting.len() }

// Deferred is the number of decode legs waiting for their KV (P/D).
func (p *Pod) Deferred() int32 { return p.deferred }

// TotalBlocks is the engine's KV capacity in blocks.
func (p *Pod) TotalBlocks() int64 { return p.cfg.totalBlocks }

// Busy reports whether a step is running.
func (p *Pod) Busy() bool { return p.busy }

// StepEnd is when the running step ends.
func (p *Pod) StepEnd() int64 { return p.stepEnd }

// Up reports whether the engine runs (false after it departed, until it
// rejoins).
func (p *Pod) Up() bool { return p.up }

// SetUp marks the engine up or down.
func (p *Pod) SetUp(up bool) { p.up = up }

// Steps is the number of steps the engine ran.
func (p *Pod) Steps() int64 { return p.stepNo }

// OutputSteps is the number of steps that emitted a request output.
func (p *Pod) OutputSteps() int64 { return p.outSteps }

// Private is the KV blocks held by running requests alone.
func (p *Pod) Private() int64 { return p.private }

// Decoding is the number of decoding requests.
func (p *Pod) Decoding() int32 { return p.nDecode }

// Prefilling is the number of requests in prefill.
func (p *Pod) Prefilling() int { return len(p.prefilling) }

// GrowthBuckets are the decoding requests counted by the step at which
// they next need a block (position modulo the block size).
func (p *Pod) GrowthBuckets() []int32 { return p.growCnt }

// Holds calls hold once for each prefix-tree node a request on the engine
// (running or waiting) holds: its output node.
func (p *Pod) Holds(hold func(n int32)) {
	for r := p.runHead; r != nil; r = r.next {
		hold(r.Out)
	}
	q := &p.waiting
	for i := range q.size {
		hold(q.buf[(q.head+i)%len(q.buf)].Out)
	}
}

// NewRequest returns request id as it arrives at arrival (ns) in phase: its
// prompt of prompt tokens ends at prefix-tree node leaf, its output of
// output tokens is node out.
func NewRequest(id, arrival int64, phase int16, leaf, out, prompt, output int32) *Request {
	return &Request{ID: id, Arrival: arrival, VArr: arrival, Phase: phase, Leaf: leaf, Out: out, Prompt: prompt, Output: output,
		FirstSched: -1, FirstToken: -1, heapIdx: -1}
}
