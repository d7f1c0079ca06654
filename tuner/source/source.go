// Package source holds the tuner's decision sources: the gate decisions a
// shadow window replays, exact (gate records from a file or a stream) or
// modelled from Prometheus (Model).
package source

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/decide"
	"github.com/gatetuner/gatetuner/tuner/records"
)

// Decision source kinds, as reported in evidence and metrics (package decide).
const (
	KindRecords = decide.SourceKindRecords
	KindModel   = decide.SourceKindModel
)

// Decision is one decision's input, as a source yields it (package decide
// consumes it). Slices are valid only during the callback.
type Decision = decide.Decision

// DecisionSource yields the decisions of a shadow window.
type DecisionSource interface {
	// Kind is KindRecords or KindModel.
	Kind() string
	// Replay calls fn for each decision with from ≤ TS < to, in time order.
	Replay(ctx context.Context, from, to time.Time, fn func(*Decision) error) error
}

// Mark is where a resumable source stopped; the zero Mark is its start.
type Mark struct {
	// Pos is the source's position: a records file's byte offset of the
	// first line not yet consumed, a records stream's next sequence number.
	Pos int64
	// Resumable: a later ReplayAfter may continue from the mark (false: the
	// source cannot resume — a gzip file — and is replayed in full).
	Resumable bool
	// file is the records file the offset is in (a replaced file is stale).
	file os.FileInfo
}

// ErrStaleMark is returned when a source no longer continues a mark (the
// file was replaced or truncated, or the stream dropped records not yet
// replayed): the caller replays from the zero Mark.
var ErrStaleMark = decide.ErrStaleMark

// MaxAhead is how far after a replay's end a record's time may be. A
// replay stops at the first record at or after its end (records are in
// time order), so a record far ahead — a writer whose clock runs ahead —
// would stop every later replay at it, silently; past MaxAhead it is
// ErrRecordAhead instead.
const MaxAhead = 5 * time.Minute

// ErrRecordAhead is returned for a record more than MaxAhead after the
// replay's end.
var ErrRecordAhead = errors.New("a gate record is stamped ahead of the cycle's time")

// checkAhead returns ErrRecordAhead, saying where, when ts is more than
// MaxAhead after to.
func checkAhead(where string, ts, to time.Time) error {
	if ahead := ts.Sub(to); ahead > MaxAhead {
		return fmt.Errorf("%w: %s at %s is %s after %s; records are read in time order, so the replay would stop there "+
			"until the clock reaches it — check the writer's clock", ErrRecordAhead, where, ts.Format(time.RFC3339), ahead.Round(time.Second), to.Format(time.RFC3339))
	}
	return nil
}

// Resumer is a decision source a later cycle can resume where an earlier
// one stopped. ReplayAfter calls fn, in order, for the decisions
// Replay(from, to) yields that come after mark, and returns where it
// stopped: replaying from the zero Mark and then from each returned mark,
// with non-decreasing to, yields exactly the decisions one Replay(from, to)
// with the last to yields, in the same order.
type Resumer interface {
	DecisionSource
	ReplayAfter(ctx context.Context, mark Mark, from, to time.Time, fn func(*Decision) error) (Mark, error)
}

// RecordsFile is an exact source: gate records read from a file — in full
// by Replay, or only the lines appended since a mark by ReplayAfter.
type RecordsFile struct {
	Path           string
	Target, Plugin string
}

// Kind returns KindRecords.
func (s *RecordsFile) Kind() string { return KindRecords }

// Replay streams the file in file order, yielding the records with
// from ≤ TS < to up to the first record at or after to (the records after
// it belong to a later window: a file is written in time order).
func (s *RecordsFile) Replay(ctx context.Context, from, to time.Time, fn func(*Decision) error) error {
	_, err := s.ReplayAfter(ctx, Mark{}, from, to, fn)
	return err
}

// gzipMagic starts a gzip stream.
var gzipMagic = [2]byte{0x1f, 0x8b}

// ReplayAfter replays the lines after mark (Replay's rules) and returns the
// offset of the first line not consumed: the first record at or after to,
// else the end of the file — less an unterminated last line that is not a
// record yet (a writer in mid-line). A gzip file is replayed in full and
// returns a mark that is not resumable.
func (s *RecordsFile) ReplayAfter(ctx context.Context, mark Mark, from, to time.Time, fn func(*Decision) error) (Mark, error) {
	f, err := os.Open(s.Path)
	if err != nil {
		return mark, fmt.Errorf("open records %s: %w", s.Path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return mark, fmt.Errorf("records %s: %w", s.Path, err)
	}
	var magic [2]byte
	if n, _ := f.ReadAt(magic[:], 0); n == 2 && magic == gzipMagic {
		_, err := replayLines(ctx, f, 0, false, s.Target, s.Plugin, from, to, fn)
		if errors.Is(err, ErrRecordAhead) {
			err = fmt.Errorf("records file %s: %w", s.Path, err)
		}
		return Mark{}, err
	}
	start := int64(0)
	if mark.Resumable {
		if mark.file == nil || !os.SameFile(mark.file, fi) || fi.Size() < mark.Pos {
			return Mark{}, fmt.Errorf("%w: records file %s was replaced or truncated", ErrStaleMark, s.Path)
		}
		start = mark.Pos
	}
	pos, err := replayLines(ctx, io.NewSectionReader(f, start, fi.Size()-start), start, true, s.Target, s.Plugin, from, to, fn)
	if errors.Is(err, ErrRecordAhead) {
		err = fmt.Errorf("records file %s: %w", s.Path, err)
	}
	if err != nil {
		return mark, err
	}
	return Mark{Pos: pos, Resumable: true, file: fi}, nil
}

// replayLines replays the records of r, whose first byte is at offset base
// of the file, and returns the offset of the first line not consumed. With
// track false (a compressed file) offsets are not followed and 0 is returned.
func replayLines(ctx context.Context, r io.Reader, base int64, track bool, target, plugin string, from, to time.Time, fn func(*Decision) error) (int64, error) {
	lt := &lineTracker{r: r, base: base, pos: base, first: 1}
	in := io.Reader(lt)
	if !track {
		in = r
	}
	rd := records.NewReader(in, records.Options{Target: target, Plugin: plugin})
	var d Decision
	last := 0 // the line of the last record consumed
	for n := 0; ; n++ {
		if n%4096 == 0 && ctx.Err() != nil {
			return 0, ctx.Err()
		}
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			if !track {
				return 0, nil
			}
			return lt.end(last), nil
		}
		if err != nil {
			return 0, err
		}
		if track {
			lt.forget(rec.Line)
		}
		if !rec.TS.IsZero() && !rec.TS.Before(to) {
			where := fmt.Sprintf("line %d", rec.Line)
			if track && base > 0 { // a resumed read counts lines from base
				where = fmt.Sprintf("the line at byte offset %d", lt.start(rec.Line))
			}
			if err := checkAhead(where, rec.TS, to); err != nil {
				return 0, err
			}
			if !track {
				return 0, nil
			}
			return lt.start(rec.Line), nil
		}
		last = rec.Line
		if rec.TS.IsZero() || rec.TS.Before(from) {
			continue
		}
		d = Decision{TS: rec.TS, Endpoints: rec.Endpoints, Names: rec.Names, Observed: rec.Observed.Outcome,
			Chosen: rec.Observed.Chosen, PromptTokens: rec.PromptTokens}
		if err := fn(&d); err != nil {
			return 0, err
		}
	}
}

// lineTracker passes a file's bytes to the records reader and notes where
// each line ends, so a record's line number (records.Record.Line, 1-based
// from base) gives the byte offset where its line starts.
type lineTracker struct {
	r    io.Reader
	base int64
	pos  int64 // offset of the next byte read
	nls  int   // '\n'-terminated lines read so far
	// ends[i] is the offset just past the '\n' ending line first+i.
	ends  []int64
	first int
	// tail: the input read so far ends in bytes after the last '\n'.
	tail bool
}

func (t *lineTracker) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	for i := 0; i < n; {
		j := bytes.IndexByte(p[i:n], '\n')
		if j < 0 {
			break
		}
		t.nls++
		t.ends = append(t.ends, t.pos+int64(i+j)+1)
		i += j + 1
	}
	t.pos += int64(n)
	if n > 0 {
		t.tail = p[n-1] != '\n'
	}
	return n, err
}

// start is the offset where line l starts.
func (t *lineTracker) start(l int) int64 {
	if l <= 1 {
		return t.base
	}
	return t.ends[l-1-t.first]
}

// forget drops the ends of lines before l−1 (no later start needs them).
func (t *lineTracker) forget(l int) {
	k := l - 1 - t.first // index of line l−1's end
	if k > 4096 && k > len(t.ends)/2 {
		t.ends = append(t.ends[:0], t.ends[k:]...)
		t.first += k
	}
}

// end is the offset after the last line consumed: the end of the input,
// unless it ends in an unterminated line that was not consumed as a record
// (last is the line of the last record consumed).
func (t *lineTracker) end(last int) int64 {
	if t.tail && last != t.nls+1 {
		return t.start(t.nls + 1)
	}
	return t.pos
}

// RecordsStream is an exact source fed by an HTTP(S) endpoint streaming gate
// records; it keeps the most recent records (bounded) in memory and
// reconnects with backoff.
type RecordsStream struct {
	URL            string
	Target, Plugin string
	Client         *http.Client
	// Keep bounds the records held (default 500k) and Retention their age.
	Keep      int
	Retention time.Duration

	mu  sync.Mutex
	buf []storedRecord
	// next is the sequence number of the next record received.
	next      int64
	lastErr   error
	started   bool
	connected bool
}

type storedRecord struct {
	seq      int64
	ts       time.Time
	eps      []gate.Endpoint
	names    [][]byte
	observed []byte
	chosen   []byte
	prompt   int64
}

// Kind returns KindRecords.
func (s *RecordsStream) Kind() string { return KindRecords }

// Run connects and reads until ctx ends, reconnecting after failures.
func (s *RecordsStream) Run(ctx context.Context) {
	s.mu.Lock()
	s.started = true
	s.mu.Unlock()
	backoff := time.Second
	for ctx.Err() == nil {
		err := s.readOnce(ctx)
		s.mu.Lock()
		s.lastErr, s.connected = err, false
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		if backoff < time.Minute {
			backoff *= 2
		}
	}
}

func (s *RecordsStream) readOnce(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL, nil)
	if err != nil {
		return err
	}
	client := s.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("records stream %s: %w", s.URL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("records stream %s: HTTP %d", s.URL, resp.StatusCode)
	}
	s.mu.Lock()
	s.lastErr, s.connected = nil, true
	s.mu.Unlock()
	rd := records.NewReader(bufio.NewReader(resp.Body), records.Options{Target: s.Target, Plugin: s.Plugin})
	for {
		rec, err := rd.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("records stream %s: closed by the server", s.URL)
			}
			return fmt.Errorf("records stream %s: %w", s.URL, err)
		}
		s.store(rec)
	}
}

// store keeps a copy of rec (records without a time are dropped), then
// drops the oldest beyond Keep and Retention.
func (s *RecordsStream) store(rec *records.Record) {
	if rec.TS.IsZero() {
		return
	}
	st := storedRecord{ts: rec.TS, eps: append([]gate.Endpoint(nil), rec.Endpoints...), observed: append([]byte(nil), rec.Observed.Outcome...),
		chosen: append([]byte(nil), rec.Observed.Chosen...), prompt: rec.PromptTokens}
	if rec.Observed.Chosen == nil {
		st.chosen = nil
	}
	for _, n := range rec.Names {
		st.names = append(st.names, append([]byte(nil), n...))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st.seq = s.next
	s.next++
	s.buf = append(s.buf, st)
	keep, ret := s.Keep, s.Retention
	if keep <= 0 {
		keep = 500_000
	}
	drop := max(len(s.buf)-keep, 0)
	if ret > 0 {
		cut := rec.TS.Add(-ret)
		for drop < len(s.buf) && s.buf[drop].ts.Before(cut) {
			drop++
		}
	}
	if drop > 0 {
		s.buf = append(s.buf[:0], s.buf[drop:]...)
	}
}

// Err says why the stream is down: its last connection error, or that it
// was never started or has not connected yet; nil while connected.
func (s *RecordsStream) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.connected:
		return nil
	case s.lastErr != nil:
		return s.lastErr
	case !s.started:
		return fmt.Errorf("records stream %s: not started", s.URL)
	}
	return fmt.Errorf("records stream %s: not connected yet", s.URL)
}

// Replay yields the held records inside the window in the order they
// arrived, up to the first one at or after to.
func (s *RecordsStream) Replay(ctx context.Context, from, to time.Time, fn func(*Decision) error) error {
	_, err := s.ReplayAfter(ctx, Mark{}, from, to, fn)
	return err
}

// ReplayAfter yields the held records received after mark (Replay's rules)
// and returns the sequence number of the first one not consumed. A mark
// older than the oldest held record is stale: records arrived and were
// dropped (Keep, Retention) before a cycle replayed them.
func (s *RecordsStream) ReplayAfter(ctx context.Context, mark Mark, from, to time.Time, fn func(*Decision) error) (Mark, error) {
	s.mu.Lock()
	i := 0
	if mark.Resumable {
		i = sort.Search(len(s.buf), func(j int) bool { return s.buf[j].seq >= mark.Pos })
		if mark.Pos < s.next && (len(s.buf) == 0 || s.buf[0].seq > mark.Pos) {
			s.mu.Unlock()
			return Mark{}, fmt.Errorf("%w: records stream %s dropped records %d–%d before they were replayed", ErrStaleMark, s.URL, mark.Pos, s.bufFirst()-1)
		}
	}
	held := append([]storedRecord(nil), s.buf[i:]...)
	next := s.next
	s.mu.Unlock()
	for n, r := range held {
		if n%4096 == 0 && ctx.Err() != nil {
			return mark, ctx.Err()
		}
		if !r.ts.Before(to) {
			if err := checkAhead(fmt.Sprintf("records stream %s: record %d", s.URL, r.seq), r.ts, to); err != nil {
				return mark, err
			}
			return Mark{Pos: r.seq, Resumable: true}, nil
		}
		if r.ts.Before(from) {
			continue
		}
		if err := fn(&Decision{TS: r.ts, Endpoints: r.eps, Names: r.names, Observed: r.observed, Chosen: r.chosen, PromptTokens: r.prompt}); err != nil {
			return mark, err
		}
	}
	return Mark{Pos: next, Resumable: true}, ctx.Err()
}

// bufFirst is the oldest held record's sequence number (the next one when
// none is held); s.mu is held.
func (s *RecordsStream) bufFirst() int64 {
	if len(s.buf) == 0 {
		return s.next
	}
	return s.buf[0].seq
}

// Model is the Prometheus-model source, for when no records exist: for each
// in-flight snapshot over the window it takes the real per-endpoint
// in-flight tokens, draws a home endpoint by routing share and a prompt with
// its cached prefix from the measured distributions (one uniform draw for
// both, so long prompts carry long prefixes), and builds the decision the
// EPP would have faced: the home endpoint holds the cached prefix, the
// others none. With Spans, each span's snapshots are drawn from that span's
// own estimates (a window of the day modelled with its own rate, prompt and
// cached distributions); else every snapshot from Est's.
type Model struct {
	Est *estimator.Estimates
	// Spans, in time order, each with its own estimates; spans whose
	// estimates the model cannot use are skipped (SpanUsable says why).
	Spans []Span
	// BlockSizeTokens is the EPP prefix producer's block size.
	BlockSizeTokens int
	// PerSnapshot bounds the decisions drawn per snapshot (default: request
	// rate × snapshot step, at least 1, at most maxPerSnapshot and at most
	// EndpointBudget / the snapshot's endpoints).
	PerSnapshot int
	// EndpointBudget bounds the default draws per snapshot by their size:
	// draws × endpoints ≤ EndpointBudget (≤ 0: DefaultEndpointBudget), so
	// the replay's cost stops growing with the pool past 16 endpoints and
	// its sampling error grows instead (docs/tuner.md, "Cost").
	EndpointBudget int
	// Seed makes the draws reproducible.
	Seed uint64
}

// Span is a stretch of time with its own estimates.
type Span struct {
	From, To time.Time
	Est      *estimator.Estimates
}

// maxPerSnapshot bounds the model's default draws per snapshot.
const maxPerSnapshot = 50

// DefaultEndpointBudget is the model's default EndpointBudget: the
// maxPerSnapshot draws of a 16-endpoint pool.
const DefaultEndpointBudget = maxPerSnapshot * 16

// Kind returns KindModel.
func (m *Model) Kind() string { return KindModel }

// ErrModelData is returned when the estimates lack what the model needs.
var ErrModelData = decide.ErrModelData

// Usable says why the model cannot run, or nil: with spans, when none of
// them is usable (each span's reason joined), else on Est.
func (m *Model) Usable() error {
	if len(m.Spans) == 0 {
		return SpanUsable(m.Est)
	}
	var why []string
	for _, sp := range m.Spans {
		err := SpanUsable(sp.Est)
		if err == nil {
			return nil
		}
		why = append(why, fmt.Sprintf("%s–%s: %v", sp.From.UTC().Format("15:04"), sp.To.UTC().Format("15:04"), err))
	}
	return fmt.Errorf("%w: no span of the history is usable (%s)", ErrModelData, strings.Join(why, "; "))
}

// SpanUsable says why the model cannot draw from e, or nil.
func SpanUsable(e *estimator.Estimates) error {
	switch {
	case e == nil:
		return fmt.Errorf("%w: no estimates", ErrModelData)
	case len(e.InFlight.Snapshots) == 0:
		return fmt.Errorf("%w: no in-flight snapshots (%s)", ErrModelData, ReasonsOf(e.InFlight.Reasons))
	case len(e.Prompt.Buckets) == 0 || e.Prompt.Status == estimator.StatusInconclusive:
		return fmt.Errorf("%w: no prompt-length distribution (%s)", ErrModelData, ReasonsOf(e.Prompt.Reasons))
	case len(e.Cached.Buckets) == 0 || e.Cached.Status == estimator.StatusInconclusive:
		return fmt.Errorf("%w: no cached-token distribution (%s)", ErrModelData, ReasonsOf(e.Cached.Reasons))
	case len(e.Routing.Endpoints) == 0:
		return fmt.Errorf("%w: no routing shares (%s)", ErrModelData, ReasonsOf(e.Routing.Reasons))
	}
	return nil
}

// ReasonsOf joins the estimator reasons' codes ("no reason given" when none).
func ReasonsOf(rs []estimator.Reason) string {
	if len(rs) == 0 {
		return "no reason given"
	}
	s := ""
	for i, r := range rs {
		if i > 0 {
			s += ", "
		}
		s += string(r.Code)
		if r.Detail != "" {
			s += ": " + r.Detail
		}
	}
	return s
}

// modelStream is the PCG stream of the model's draws.
const modelStream = 0x6761746574756e72

// spanRand is a span's own random source: its draws depend only on the
// seed, the span's start and its estimates, so a later cycle that replays
// the span again draws the same decisions.
func spanRand(seed uint64, from time.Time) *rand.Rand {
	return rand.New(rand.NewPCG(seed^uint64(from.UnixNano()), modelStream))
}

// Replay draws decisions for the snapshots inside the window, each span's
// from its own estimates. With Spans, each span draws from its own random
// source (spanRand): a span replayed whole draws the same decisions in
// every Replay.
func (m *Model) Replay(ctx context.Context, from, to time.Time, fn func(*Decision) error) error {
	if err := m.Usable(); err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(m.Seed, modelStream))
	spans := m.Spans
	if len(spans) == 0 {
		spans = []Span{{From: from, To: to, Est: m.Est}}
	}
	for _, sp := range spans {
		if SpanUsable(sp.Est) != nil {
			continue
		}
		if len(m.Spans) > 0 {
			rng = spanRand(m.Seed, sp.From)
		}
		f, t := sp.From, sp.To
		if from.After(f) {
			f = from
		}
		if to.Before(t) {
			t = to
		}
		if !f.Before(t) {
			continue
		}
		if err := m.replaySpan(ctx, sp.Est, f, t, rng, fn); err != nil {
			return err
		}
	}
	return nil
}

// replaySpan draws the decisions of e's snapshots inside [from, to).
func (m *Model) replaySpan(ctx context.Context, e *estimator.Estimates, from, to time.Time, rng *rand.Rand, fn func(*Decision) error) error {
	bs := m.BlockSizeTokens
	if bs <= 0 {
		bs = 64
	}
	rate := 0.0
	if e.RequestRate.Value != nil && *e.RequestRate.Value > 0 && !math.IsInf(*e.RequestRate.Value, 0) {
		rate = *e.RequestRate.Value
	}
	step := e.InFlight.StepSeconds
	budget := m.EndpointBudget
	if budget <= 0 {
		budget = DefaultEndpointBudget
	}
	// perOf is the draws of a snapshot of n endpoints.
	perOf := func(n int) int {
		if m.PerSnapshot > 0 {
			return m.PerSnapshot
		}
		per := int(math.Round(rate * step))
		return min(max(per, 1), maxPerSnapshot, max(budget/n, 1))
	}
	// Routing shares as a cumulative table over endpoint names.
	type share struct {
		name string
		cum  float64
	}
	var shares []share
	total := 0.0
	for _, s := range e.Routing.Endpoints {
		if s.Share > 0 {
			total += s.Share
			shares = append(shares, share{s.Endpoint, total})
		}
	}
	if total <= 0 {
		return fmt.Errorf("%w: routing shares are all zero", ErrModelData)
	}
	var d Decision
	for _, snap := range e.InFlight.Snapshots {
		if snap.Time.Before(from) || !snap.Time.Before(to) || len(snap.Endpoints) < 2 {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		eps := make([]gate.Endpoint, len(snap.Endpoints))
		names := make([][]byte, len(snap.Endpoints))
		index := make(map[string]int, len(snap.Endpoints))
		for i, l := range snap.Endpoints {
			eps[i] = gate.Endpoint{HasMatch: true, BlockSizeTokens: bs, HasLoad: true, InFlightTokens: int64(math.Round(l.Tokens))}
			if l.Requests != nil {
				eps[i].InFlightRequests = int64(math.Round(*l.Requests))
			}
			names[i] = []byte(l.Endpoint)
			index[l.Endpoint] = i
		}
		// Where requests were pinned around this snapshot, when known:
		// endpoints busy now are home to the requests arriving now.
		var local []share
		ltotal := 0.0
		for _, l := range snap.Endpoints {
			if l.Routed != nil && *l.Routed > 0 {
				ltotal += *l.Routed
				local = append(local, share{l.Endpoint, ltotal})
			}
		}
		table, tsum := shares, total
		if ltotal > 0 {
			table, tsum = local, ltotal
		}
		// Each draw stands for rate × step / per real requests, and the
		// draws are spread over the step (the snapshot stands for it).
		per := perOf(len(eps))
		weight := 0.0
		if rate > 0 && step > 0 {
			weight = rate * step / float64(per)
		}
		spacing := time.Duration(0)
		if step > 0 {
			spacing = time.Duration(step / float64(per) * float64(time.Second))
		}
		for k := 0; k < per; k++ {
			x := rng.Float64() * tsum
			j := sort.Search(len(table), func(i int) bool { return table[i].cum > x })
			home, ok := index[table[min(j, len(table)-1)].name]
			if !ok {
				continue // routed to an endpoint without a snapshot value
			}
			u := rng.Float64()
			prompt := math.Max(1, e.Prompt.Quantile(u))
			cached := math.Min(prompt, math.Max(0, e.Cached.Quantile(u)))
			totalBlocks := int(math.Ceil(prompt / float64(bs)))
			for i := range eps {
				eps[i].TotalBlocks, eps[i].MatchBlocks = totalBlocks, 0
			}
			eps[home].MatchBlocks = int(cached / float64(bs))
			d = Decision{TS: snap.Time.Add(time.Duration(k) * spacing), Endpoints: eps, Names: names,
				PromptTokens: int64(math.Round(prompt)), Weight: weight}
			if err := fn(&d); err != nil {
				return err
			}
		}
	}
	return nil
}
