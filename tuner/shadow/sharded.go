package shadow

import (
	"sync"

	"github.com/gatetuner/gatetuner/gate"
)

// shardBatch is how many decisions a Sharded replay hands its shards at once.
const shardBatch = 512

// Sharded is a feedback replay split over shards, each replaying its own
// range of the settings entries in its own goroutine: every entry's
// trajectory depends only on the decisions and its own settings, so the
// tallies are exactly one Feedback's. Decisions are copied into batches; a
// batch is replayed by all shards while the next one fills. With one shard
// it is a Feedback, called directly. Call Flush before reading tallies (the
// methods that read them do).
type Sharded struct {
	shards []*Feedback
	// fill is the batch being filled; running says a batch is being replayed.
	fill, spare *batch
	wg          sync.WaitGroup
	running     bool
}

// batch is a run of copied decisions; their slices point into its arenas
// once it is sealed (the arenas no longer grow).
type batch struct {
	ds      []FeedbackDecision
	eps     []gate.Endpoint
	decided []gate.Decision
	bytes   []byte
	// names are the names' [start, end) offsets in bytes, then the slices.
	nameOff []int
	names   [][]byte
	at      []batchAt
}

// batchAt is where one decision's slices start in the arenas.
type batchAt struct {
	eps, neps, decided, ndecided, names, nnames, chosen, nchosen int
	hasChosen, hasNames                                          bool
}

// seal points every decision's slices into the arenas.
func (b *batch) seal() {
	b.names = b.names[:0]
	for i := 0; i < len(b.nameOff); i += 2 {
		var n []byte
		if lo, hi := b.nameOff[i], b.nameOff[i+1]; lo >= 0 {
			n = b.bytes[lo:hi:hi]
		}
		b.names = append(b.names, n)
	}
	for i := range b.ds {
		a, d := &b.at[i], &b.ds[i]
		d.Endpoints = b.eps[a.eps : a.eps+a.neps]
		if a.ndecided > 0 {
			d.Decided = b.decided[a.decided : a.decided+a.ndecided]
		}
		if a.hasNames {
			d.Names = b.names[a.names : a.names+a.nnames]
		}
		if a.hasChosen {
			d.Chosen = b.bytes[a.chosen : a.chosen+a.nchosen]
		}
	}
}

func (b *batch) reset() {
	b.ds, b.eps, b.decided, b.bytes, b.nameOff, b.names, b.at = b.ds[:0], b.eps[:0], b.decided[:0], b.bytes[:0], b.nameOff[:0], b.names[:0], b.at[:0]
}

// NewSharded returns a feedback replay of the settings on n shards (n ≤ 1:
// one Feedback, no goroutines).
func NewSharded(settings []gate.Settings, opt FeedbackOptions, n int) *Sharded {
	n = max(min(n, len(settings)), 1)
	s := &Sharded{}
	for i := range n {
		f := NewFeedback(settings, opt)
		f.lo, f.hi = i*len(settings)/n, (i+1)*len(settings)/n
		s.shards = append(s.shards, f)
	}
	return s
}

// Shards is the number of shards.
func (s *Sharded) Shards() int { return len(s.shards) }

// Add replays one decision (its slices are copied when sharded).
func (s *Sharded) Add(d *FeedbackDecision) {
	if len(s.shards) == 1 {
		s.shards[0].Add(d)
		return
	}
	if s.fill == nil {
		s.fill = &batch{}
	}
	b := s.fill
	a := batchAt{eps: len(b.eps), neps: len(d.Endpoints), decided: len(b.decided), ndecided: len(d.Decided),
		names: len(b.nameOff) / 2, nnames: len(d.Names), chosen: len(b.bytes), nchosen: len(d.Chosen),
		hasChosen: d.Chosen != nil, hasNames: d.Names != nil}
	b.eps = append(b.eps, d.Endpoints...)
	b.decided = append(b.decided, d.Decided...)
	b.bytes = append(b.bytes, d.Chosen...)
	for _, n := range d.Names {
		if n == nil { // an unnamed endpoint stays unnamed
			b.nameOff = append(b.nameOff, -1, -1)
			continue
		}
		start := len(b.bytes)
		b.bytes = append(b.bytes, n...)
		b.nameOff = append(b.nameOff, start, len(b.bytes))
	}
	b.ds = append(b.ds, FeedbackDecision{At: d.At, Weight: d.Weight, PromptTokens: d.PromptTokens, Part: d.Part})
	b.at = append(b.at, a)
	if len(b.ds) >= shardBatch {
		s.dispatch()
	}
}

// dispatch waits for the batch being replayed, then hands the filled one
// to the shards.
func (s *Sharded) dispatch() {
	s.wait()
	b := s.fill
	if b == nil || len(b.ds) == 0 {
		return
	}
	b.seal()
	s.fill, s.spare = s.spare, b
	s.running = true
	for _, f := range s.shards {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for i := range b.ds {
				f.Add(&b.ds[i])
			}
		}()
	}
}

func (s *Sharded) wait() {
	if s.running {
		s.wg.Wait()
		s.running = false
		if s.spare != nil {
			s.spare.reset()
		}
	}
}

// Flush replays every decision added so far and waits for it; the
// batches' memory is let go (a replay kept between cycles holds none).
func (s *Sharded) Flush() {
	if len(s.shards) == 1 {
		return
	}
	s.dispatch()
	s.wait()
	s.fill, s.spare = nil, nil
}

// Fork returns a copy of the carried state with empty tallies (Feedback.Fork).
func (s *Sharded) Fork() *Sharded {
	s.Flush()
	c := &Sharded{}
	for _, f := range s.shards {
		c.shards = append(c.shards, f.Fork())
	}
	return c
}

// AddPart adds a part with empty tallies to every shard and returns its index.
func (s *Sharded) AddPart() int {
	s.Flush()
	p := 0
	for _, f := range s.shards {
		p = f.AddPart()
	}
	return p
}

// ResetPart zeroes part p's tallies.
func (s *Sharded) ResetPart(p int) {
	s.Flush()
	for _, f := range s.shards {
		f.ResetPart(p)
	}
}

// MergeInto adds part q of the replay's tallies into part p of into, a
// Feedback of the same settings.
func (s *Sharded) MergeInto(into *Feedback, p, q int) {
	s.Flush()
	for _, f := range s.shards {
		into.mergeRange(p, f, q, f.lo, f.hi)
	}
}
