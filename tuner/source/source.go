// Package source holds the tuner's decision sources: the gate decisions a
// shadow window replays, exact (gate records from a file or a stream) or
// modelled from Prometheus (Model).
package source

import (
	"bufio"
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
	"github.com/gatetuner/gatetuner/tuner/records"
)

// Decision source kinds, as reported in evidence and metrics.
const (
	KindRecords = "records"
	KindModel   = "prometheus-model"
)

// Decision is one decision's input, as a source yields it. Slices are valid
// only during the callback.
type Decision struct {
	TS        time.Time
	Endpoints []gate.Endpoint
	Names     [][]byte
	// Observed is the live EPP's outcome when recorded (records only).
	Observed []byte
	// Chosen names the endpoint the live EPP picked, when recorded.
	Chosen []byte
	// PromptTokens is the request's prompt length (< 0: unknown).
	PromptTokens int64
	// Weight is how many real requests the decision stands for (0: one);
	// the Prometheus model's draws each stand for several.
	Weight float64
}

// DecisionSource yields the decisions of a shadow window.
type DecisionSource interface {
	// Kind is KindRecords or KindModel.
	Kind() string
	// Replay calls fn for each decision with from ≤ TS < to, in time order.
	Replay(ctx context.Context, from, to time.Time, fn func(*Decision) error) error
}

// RecordsFile is an exact source: gate records re-read from a file each cycle.
type RecordsFile struct {
	Path           string
	Target, Plugin string
}

// Kind returns KindRecords.
func (s *RecordsFile) Kind() string { return KindRecords }

// Replay streams the file, keeping records inside the window.
func (s *RecordsFile) Replay(ctx context.Context, from, to time.Time, fn func(*Decision) error) error {
	f, err := os.Open(s.Path)
	if err != nil {
		return fmt.Errorf("open records %s: %w", s.Path, err)
	}
	defer f.Close()
	return replayReader(ctx, f, s.Target, s.Plugin, from, to, fn)
}

func replayReader(ctx context.Context, r io.Reader, target, plugin string, from, to time.Time, fn func(*Decision) error) error {
	rd := records.NewReader(r, records.Options{Target: target, Plugin: plugin})
	var d Decision
	for n := 0; ; n++ {
		if n%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if rec.TS.IsZero() || rec.TS.Before(from) || !rec.TS.Before(to) {
			continue
		}
		d = Decision{TS: rec.TS, Endpoints: rec.Endpoints, Names: rec.Names, Observed: rec.Observed.Outcome,
			Chosen: rec.Observed.Chosen, PromptTokens: rec.PromptTokens}
		if err := fn(&d); err != nil {
			return err
		}
	}
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

	mu        sync.Mutex
	buf       []storedRecord
	lastErr   error
	started   bool
	connected bool
}

type storedRecord struct {
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
		if rec.TS.IsZero() {
			continue
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
		s.mu.Unlock()
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

// Replay yields the held records inside the window.
func (s *RecordsStream) Replay(ctx context.Context, from, to time.Time, fn func(*Decision) error) error {
	s.mu.Lock()
	held := append([]storedRecord(nil), s.buf...)
	s.mu.Unlock()
	sort.SliceStable(held, func(i, j int) bool { return held[i].ts.Before(held[j].ts) })
	for _, r := range held {
		if r.ts.Before(from) || !r.ts.Before(to) {
			continue
		}
		if err := fn(&Decision{TS: r.ts, Endpoints: r.eps, Names: r.names, Observed: r.observed, Chosen: r.chosen, PromptTokens: r.prompt}); err != nil {
			return err
		}
	}
	return ctx.Err()
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
	// rate × snapshot step, at least 1, at most maxPerSnapshot).
	PerSnapshot int
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

// Kind returns KindModel.
func (m *Model) Kind() string { return KindModel }

// ErrModelData is returned when the estimates lack what the model needs.
var ErrModelData = errors.New("prometheus model: missing data")

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

// Replay draws decisions for the snapshots inside the window, each span's
// from its own estimates.
func (m *Model) Replay(ctx context.Context, from, to time.Time, fn func(*Decision) error) error {
	if err := m.Usable(); err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(m.Seed, 0x6761746574756e72))
	spans := m.Spans
	if len(spans) == 0 {
		spans = []Span{{From: from, To: to, Est: m.Est}}
	}
	for _, sp := range spans {
		if SpanUsable(sp.Est) != nil {
			continue
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
	per := m.PerSnapshot
	if per <= 0 {
		per = int(math.Round(rate * step))
		per = min(max(per, 1), maxPerSnapshot)
	}
	// Each draw stands for rate × step / per real requests, and the draws
	// are spread over the step (the snapshot stands for it).
	weight := 0.0
	if rate > 0 && step > 0 {
		weight = rate * step / float64(per)
	}
	spacing := time.Duration(0)
	if step > 0 {
		spacing = time.Duration(step / float64(per) * float64(time.Second))
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
