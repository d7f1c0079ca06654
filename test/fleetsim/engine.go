package fleetsim

import (
	"container/heap"
	"math"
)

// request is one request's life in the EPP and in an engine.
type request struct {
	id      int64
	arrival int64 // ns
	phase   int16
	leaf    int32
	out     int32
	prompt  int32
	output  int32
	pod     int32 // engine
	ep      int32 // EPP endpoint

	// EPP accounting.
	eppTokens   int64
	eppEpoch    uint32
	eppRep      uint8
	eppTokHeld  bool
	eppReqHeld  bool
	eppCached   int32 // matched tokens on the chosen endpoint (EPP view)
	decisionIdx int32

	// Engine state.
	prev, next   *request // running list, in admission order
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
	firstCached  int32 // cached tokens at the first admission
	firstSched   int64 // ns, -1 until first scheduled
	firstToken   int64 // ns, -1 until the first token
	g0           int32 // tokens generated when decoding (re)started
	s0           int64 // step number decoding (re)started at
	finishStep   int64
	growKey      int32
	heapIdx      int32

	// vArr is when the request reached its vLLM engine (the arrival, or
	// for a disaggregated request's decode leg, when its prefill ended).
	vArr int64
	// P/D (nil/false without disaggregation): peer is a disaggregated
	// request's prefill leg, and the leg's peer the request (its decode
	// leg); isLeg marks the prefill leg (one output token, its KV held until
	// the decode leg pulled it).
	peer  *request
	isLeg bool
	// remote: the decode leg loads the prompt's KV from the prefill pod on
	// admission; loaded once it has; ext counts the tokens transferred.
	remote, loaded bool
	ext            int32
	// pfEp is the prefill endpoint the EPP charged (pfHeld while charged).
	pfEp      int32
	pfTokens  int64
	pfHeld    bool
	pfReqHeld bool
}

// engineCfg is an EngineSpec in the units the step loop uses.
type engineCfg struct {
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

func prefixCounting(g VLLMGeneration) pcCounting {
	switch g {
	case VLLM011, VLLMMid2026:
		return pcEveryAttempt
	case VLLMLate2026:
		return pcOnce
	}
	return pcEveryAdmission
}

func newEngineCfg(e *EngineSpec) engineCfg {
	tp := e.prefillTokenSeconds() * 1e9
	return engineCfg{
		budget:      int32(e.MaxNumBatchedTokens),
		maxSeqs:     int32(e.MaxNumSeqs),
		bs:          int32(e.BlockSize),
		totalBlocks: int64(e.NumGPUBlocks),
		overheadNs:  float64(e.StepOverhead),
		prefillNs:   tp,
		decodeNs:    tp * e.DecodeCost,
	}
}

type decodeHeap []*request

func (h decodeHeap) Len() int { return len(h) }
func (h decodeHeap) Less(i, j int) bool {
	if h[i].finishStep != h[j].finishStep {
		return h[i].finishStep < h[j].finishStep
	}
	return h[i].id < h[j].id
}
func (h decodeHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = int32(i)
	h[j].heapIdx = int32(j)
}
func (h *decodeHeap) Push(x any) {
	r := x.(*request)
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
	buf        []*request
	head, size int
}

func (q *reqDeque) len() int { return q.size }
func (q *reqDeque) grow() {
	n := max(16, 2*len(q.buf))
	nb := make([]*request, n)
	for i := 0; i < q.size; i++ {
		nb[i] = q.buf[(q.head+i)%len(q.buf)]
	}
	q.buf, q.head = nb, 0
}
func (q *reqDeque) pushBack(r *request) {
	if q.size == len(q.buf) {
		q.grow()
	}
	q.buf[(q.head+q.size)%len(q.buf)] = r
	q.size++
}
func (q *reqDeque) pushFront(r *request) {
	if q.size == len(q.buf) {
		q.grow()
	}
	q.head = (q.head - 1 + len(q.buf)) % len(q.buf)
	q.buf[q.head] = r
	q.size++
}
func (q *reqDeque) front() *request { return q.buf[q.head] }
func (q *reqDeque) popFront() *request {
	r := q.buf[q.head]
	q.buf[q.head] = nil
	q.head = (q.head + 1) % len(q.buf)
	q.size--
	return r
}

// engineHooks receive an engine's request events.
type engineHooks interface {
	firstToken(p *pod, r *request, now int64)
	finished(p *pod, r *request, now int64)
	// kvRequested: a decode leg was admitted and its KV transfer starts.
	kvRequested(p *pod, r *request, now int64)
	// aborted: the engine died with the request on it.
	aborted(p *pod, r *request, now int64)
}

// pod is one vLLM engine: a waiting queue, a running set, chunked prefill
// that fills each step's token budget with decode tokens first and prefill
// chunks after, a KV block pool shared by running requests and the prefix
// cache, and vLLM's metrics.
type pod struct {
	idx   int32
	cfg   engineCfg
	tree  *nodeTree
	cache *blockCache
	hooks engineHooks
	path  []int32

	waiting    reqDeque
	runHead    *request
	runTail    *request
	nRunning   int32
	prefilling []*request
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
	stepChunks  []*request

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

	m podMetrics
}

func newPod(idx int, cfg engineCfg, tree *nodeTree, cache *blockCache, hooks engineHooks, maxModelLen int) *pod {
	p := &pod{idx: int32(idx), cfg: cfg, tree: tree, cache: cache, hooks: hooks, growCnt: make([]int32, cfg.bs), grownFor: -1, up: true}
	p.m.init(maxModelLen)
	return p
}

// usedBlocks is the KV blocks running requests hold (what kv_cache_usage_perc reports).
func (p *pod) usedBlocks() int64 { return p.cache.pods[p.idx].pinned + p.private }

func (p *pod) freeBlocks() int64 {
	l := &p.cache.pods[p.idx]
	return p.cfg.totalBlocks - l.pinned - l.lruBlocks - p.private
}

// reserve allocates n private blocks, evicting cached blocks as needed.
func (p *pod) reserve(n int64) bool {
	if n <= 0 {
		return true
	}
	if f := p.freeBlocks(); f < n {
		p.cache.evictLRU(p.idx, n-f)
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
func (p *pod) blocksFor(r *request, upto int32) int64 {
	t := upto
	if upto == r.effPrompt {
		t++
	}
	n := ceilDiv(t, p.cfg.bs) - r.cachedBlocks - r.privBlocks
	return int64(max(n, 0))
}

// decodePrivate is a decoding request's private blocks after g tokens.
func (p *pod) decodePrivate(r *request, g int32) int64 {
	bs := p.cfg.bs
	return int64(ceilDiv(r.prompt+g, bs) - r.prompt/bs)
}

func (p *pod) enqueue(r *request, now int64) {
	r.pod = p.idx
	r.effPrompt = r.prompt
	p.waiting.pushBack(r)
	if !p.busy {
		p.schedule(now)
	}
}

func (p *pod) runAppend(r *request) {
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

func (p *pod) runRemove(r *request) {
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
func (p *pod) matchAndPin(r *request) int32 {
	bs := p.cfg.bs
	p.path = p.tree.path(r.leaf, p.path)
	var matched int32
	depth := 0
	for i, n := range p.path {
		need := p.tree.blocks(n, bs)
		if need == 0 {
			continue
		}
		e := p.cache.find(p.idx, n)
		var have int32
		if e >= 0 {
			have = min(p.cache.entries[e].blocks, need)
		}
		if have > 0 {
			p.cache.pin(e)
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

func (p *pod) unpinPath(r *request) {
	if r.pinDepth == 0 {
		return
	}
	p.path = p.tree.path(r.leaf, p.path)
	for i := int(r.pinDepth) - 1; i >= 0; i-- {
		n := p.path[i]
		if p.tree.blocks(n, p.cfg.bs) == 0 {
			continue
		}
		if e := p.cache.find(p.idx, n); e >= 0 {
			p.cache.unpin(e)
		}
	}
	r.pinDepth = 0
}

// schedule builds the next step at time now: decode tokens first, then
// chunks of running prefills in admission order, then new admissions.
func (p *pod) schedule(now int64) {
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
		if r.remote {
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
				p.m.pcQueries += int64(r.effPrompt)
				p.m.pcHits += int64(r.cachedBlocks * bs)
			}
			p.unpinPath(r)
			r.cachedBlocks = 0
			break
		}
		p.waiting.popFront()
		r.privBlocks = int32(need)
		if p.cfg.pcCount != pcOnce || r.firstSched < 0 {
			p.m.pcQueries += int64(r.effPrompt)
			p.m.pcHits += int64(r.cachedBlocks * bs)
		}
		if r.firstSched < 0 {
			r.firstSched = now
			r.firstCached = r.cachedBlocks * bs
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
func (p *pod) admitRemote(r *request, now int64) (int32, bool) {
	bs := p.cfg.bs
	if !r.loaded {
		r.cachedBlocks = p.matchAndPin(r)
		r.privBlocks = 0
		r.computed = r.cachedBlocks * bs
		need := p.blocksFor(r, r.effPrompt)
		if !p.reserve(need) {
			if p.cfg.pcCount == pcEveryAttempt {
				p.m.pcQueries += int64(r.effPrompt)
				p.m.pcHits += int64(r.cachedBlocks * bs)
			}
			p.unpinPath(r)
			r.cachedBlocks = 0
			return 0, false
		}
		p.waiting.popFront()
		r.privBlocks = int32(need)
		p.m.pcQueries += int64(r.effPrompt)
		p.m.pcHits += int64(r.cachedBlocks * bs)
		r.ext = r.effPrompt - r.cachedBlocks*bs
		p.deferred++
		p.hooks.kvRequested(p, r, now)
		return 0, true
	}
	c := r.effPrompt - r.computed
	need := p.blocksFor(r, r.effPrompt)
	if !p.reserve(need) {
		return 0, false
	}
	p.waiting.popFront()
	r.privBlocks += int32(need)
	r.remote = false
	if r.firstSched < 0 {
		r.firstSched = now
		r.firstCached = r.computed
	}
	p.runAppend(r)
	p.prefilling = append(p.prefilling, r)
	r.chunk = c
	return c, true
}

// kvLoaded moves a decode leg whose KV arrived back to the head of the
// waiting queue with every prompt token but the last computed.
func (p *pod) kvLoaded(r *request, now int64) {
	p.deferred--
	r.loaded = true
	r.computed = r.effPrompt - 1
	p.waiting.pushFront(r)
	if !p.busy {
		p.schedule(now)
	}
}

// kvSent frees a finished prefill leg's KV once the decode pod pulled it
// (vLLM delays freeing a do_remote_decode request's blocks until then).
func (p *pod) kvSent(r *request, now int64) {
	p.sending--
	p.releaseKV(r)
	if !p.busy {
		p.schedule(now)
	}
}

// preempt sends a running request back to the front of the waiting queue,
// freeing its blocks (vLLM V1 recompute preemption).
func (p *pod) preempt(r *request) {
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
	r.effPrompt = r.prompt + r.gPre
	r.recompute = r.firstToken >= 0
	p.runRemove(r)
	p.waiting.pushFront(r)
	p.m.preemptions++
}

// endStep applies the step that ends at now and schedules the next.
func (p *pod) endStep(now int64) {
	k := p.stepNo + 1
	p.stepNo = k
	dur := float64(now - p.stepStart)
	p.work += float64(p.stepPrefill)
	p.busyNs += dur
	p.decodeNs += float64(p.stepDecode) * p.cfg.decodeNs
	iter := int64(p.stepDecode)
	if p.stepDecode > 0 {
		p.m.genTokens += int64(p.stepDecode)
		p.m.itl.observeN(dur/1e9, int64(p.stepDecode))
	}
	for len(p.decoders) > 0 && p.decoders[0].finishStep <= k {
		r := heap.Pop(&p.decoders).(*request)
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
					iter += int64(r.prompt)
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
		p.m.iter.observe(float64(iter))
	}
	p.busy = false
	p.schedule(now)
}

// prefillDone caches the prompt's full blocks (pinned until the request
// finishes), emits the first token and starts decoding.
func (p *pod) prefillDone(r *request, now int64) {
	bs := p.cfg.bs
	p.path = p.tree.path(r.leaf, p.path)
	for i, n := range p.path {
		need := p.tree.blocks(n, bs)
		if need == 0 {
			continue
		}
		e := p.cache.find(p.idx, n)
		if e < 0 {
			e = p.cache.create(p.idx, n)
		}
		if int32(i) >= r.pinDepth {
			p.cache.pin(e)
		}
		p.cache.grow(e, need)
	}
	r.pinDepth = int32(len(p.path))
	g0 := r.gPre + 1
	p.private -= int64(r.privBlocks)
	p.private += p.decodePrivate(r, g0)
	r.privBlocks = 0
	p.m.genTokens++
	if !r.recompute {
		computed := r.prompt - r.firstCached
		p.m.promptTokens += int64(r.prompt)
		p.m.localCompute += int64(computed)
		if r.ext > 0 {
			// vLLM's PromptTokenStats: the last token, cached by transfer
			// but recomputed, counts as a local cache hit too.
			recomputed := int32(0)
			if r.firstCached+1 == r.prompt {
				recomputed = 1
			}
			p.m.localCacheHit += int64(r.firstCached + recomputed - r.ext)
			p.m.extTransfer += int64(r.ext)
		} else {
			p.m.localCacheHit += int64(r.firstCached)
		}
		p.m.cachedTokens += int64(r.firstCached)
		r.firstToken = now
		p.m.ttft.observe(float64(now-r.vArr) / 1e9)
		p.hooks.firstToken(p, r, now)
	}
	r.recompute = false
	r.g0, r.s0 = g0, p.stepNo
	if g0 >= r.output {
		p.finish(r, now)
		return
	}
	r.decoding = true
	r.finishStep = p.stepNo + int64(r.output-g0)
	key := (int64(r.prompt+g0-1) - r.s0) % int64(bs)
	if key < 0 {
		key += int64(bs)
	}
	r.growKey = int32(key)
	p.growCnt[key]++
	p.nDecode++
	heap.Push(&p.decoders, r)
}

// finish releases a request that produced its last token at now. A
// prefill leg keeps its KV until the decode pod has pulled it (kvSent).
func (p *pod) finish(r *request, now int64) {
	if r.decoding {
		p.growCnt[r.growKey]--
		p.nDecode--
		r.decoding = false
	}
	if r.isLeg {
		p.sending++
	} else {
		p.releaseKV(r)
	}
	p.runRemove(r)
	m := &p.m
	m.success++
	m.promptTokensH.observe(float64(r.prompt))
	m.kvComputedH.observe(float64(r.prompt - r.firstCached))
	m.genTokensH.observe(float64(r.output))
	m.queueH.observe(float64(r.firstSched-r.vArr) / 1e9)
	m.prefillH.observe(float64(r.firstToken-r.firstSched) / 1e9)
	m.decodeH.observe(float64(now-r.firstToken) / 1e9)
	m.inferenceH.observe(float64(now-r.firstSched) / 1e9)
	m.e2eH.observe(float64(now-r.vArr) / 1e9)
	p.hooks.finished(p, r, now)
}

// releaseKV frees a finished request's blocks: the output's full blocks
// join the cache as the least recent of the request's blocks, then the
// prompt's from the tail to the root (vLLM frees blocks in reverse so the
// tail is evicted first).
func (p *pod) releaseKV(r *request) {
	bs := p.cfg.bs
	p.private -= p.decodePrivate(r, r.output)
	if r.out >= 0 {
		if nb := p.tree.blocks(r.out, bs); nb > 0 {
			e := p.cache.find(p.idx, r.out)
			if e < 0 {
				e = p.cache.create(p.idx, r.out)
				p.cache.entries[e].blocks = nb
				p.cache.pushMRU(e)
			}
		}
	}
	p.unpinPath(r)
}

// progress returns the engine's cumulative prefill work, busy time and
// decode time at time t, counting the running step pro rata.
func (p *pod) progress(t int64) (work, busy, decode float64) {
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

// abortAll kills the engine: every waiting and running request is dropped
// (its client sees an error), its KV freed and the prefix cache emptied.
func (p *pod) abortAll(now int64) {
	var rs []*request
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
	p.cache.evictLRU(p.idx, math.MaxInt64)
	for _, r := range rs {
		p.hooks.aborted(p, r, now)
	}
}

// restart brings a dead engine back as a new process: counters from zero.
func (p *pod) restart(maxModelLen int) {
	p.m = podMetrics{}
	p.m.init(maxModelLen)
	p.up = true
}
