// Package window keeps one tuning target's window of gate-span records:
// bounded by count and by age in memory, and restart-safe on disk as
// append-only segment files whose frames carry checksums (the format is in
// segment.go and docs/spans.md). A window reloads what is within its age on
// open, skipping a torn tail, and deletes segments nothing in the window
// needs any more, so the disk it uses is bounded too.
package window

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/gatetuner/gatetuner/tuner/spans"
)

// Options bound a window.
type Options struct {
	// MaxSpans bounds the records kept (default 1<<20: 48 MiB in memory).
	MaxSpans int
	// MaxAge bounds the records' age by end time (default 6h).
	MaxAge time.Duration
	// FutureSkew is how far past now a span may end before it is refused
	// (default 5m): a sender with a wrong clock would otherwise pin
	// records in the window.
	FutureSkew time.Duration
	// SegmentBytes is the size at which a segment file is closed and the
	// next one opened (default 4 MiB).
	SegmentBytes int64
	// Now is the clock (default time.Now).
	Now func() time.Time
}

func (o *Options) defaults() {
	if o.MaxSpans <= 0 {
		o.MaxSpans = 1 << 20
	}
	if o.MaxAge <= 0 {
		o.MaxAge = 6 * time.Hour
	}
	if o.FutureSkew <= 0 {
		o.FutureSkew = 5 * time.Minute
	}
	if o.SegmentBytes <= 0 {
		o.SegmentBytes = 4 << 20
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Stats count what a window did since it was opened.
type Stats struct {
	// Appended records; Expired records refused as older than MaxAge or
	// later than FutureSkew at arrival; Evicted records dropped for the
	// count or the age bound.
	Appended, Expired, Future, Evicted uint64
	// Loaded records read back on open, LoadExpired those skipped as too
	// old, TornBytes the bytes of torn tails skipped, CorruptSegments
	// segments unreadable before their end or at their header.
	Loaded, LoadExpired, TornBytes, CorruptSegments uint64
	// WriteErrors counts failed writes (the records stay in memory).
	WriteErrors uint64
	// Segments and DiskBytes are the segment files now on disk.
	Segments  int
	DiskBytes int64
}

// segInfo tracks one segment on disk.
type segInfo struct {
	n       uint64
	records int
	maxEnd  int64
	bytes   int64
}

// Window is one target's window. It is safe for concurrent use.
type Window struct {
	name string
	dir  string // "" keeps the window in memory only
	o    Options

	mu    sync.Mutex
	ring  []spans.Record
	head  int // index of the oldest record
	n     int
	seq   uint64 // records appended since open, after the loaded ones
	epoch int64
	in    *spans.Interner
	segs  []segInfo
	// nextSeg numbers the next segment: above every number ever seen.
	nextSeg uint64
	file    *os.File
	buf     []byte
	stats   Stats
	err     error // the last write error
}

// Open opens the window of target name, in dir when dir is not "" (created
// if missing), reloading the records within MaxAge.
func Open(dir, name string, o Options) (*Window, error) {
	o.defaults()
	w := &Window{name: name, dir: dir, o: o, in: spans.NewInterner(), epoch: int64(rand.Uint64() >> 1)}
	if dir == "" {
		return w, nil
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("span window %s: %w", name, err)
	}
	if err := w.load(); err != nil {
		return nil, fmt.Errorf("span window %s: %w", name, err)
	}
	return w, nil
}

// Name is the target's name.
func (w *Window) Name() string { return w.name }

// load reads every segment back, oldest first.
func (w *Window) load() error {
	nums, err := listSegments(w.dir)
	if err != nil {
		return err
	}
	cut := w.o.Now().Add(-w.o.MaxAge).UnixNano()
	if len(nums) > 0 {
		w.nextSeg = nums[len(nums)-1] + 1
	}
	for i, n := range nums {
		info, err := w.loadSegment(n, cut, i == len(nums)-1)
		if err != nil {
			return err
		}
		w.segs = append(w.segs, info)
	}
	w.prune(cut)
	return nil
}

// loadSegment reads one segment. A torn frame ends it: at the last segment
// that is a torn tail (a write cut by a crash), earlier a corrupt segment.
func (w *Window) loadSegment(n uint64, cut int64, last bool) (segInfo, error) {
	info := segInfo{n: n, maxEnd: math.MinInt64}
	f, err := os.Open(segPath(w.dir, n))
	if err != nil {
		return info, fmt.Errorf("open segment: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return info, fmt.Errorf("stat segment: %w", err)
	}
	info.bytes = st.Size()
	sr := &segReader{br: bufio.NewReaderSize(f, 1<<16)}
	if err := sr.readHeader(); err != nil || sr.name != w.name {
		w.stats.CorruptSegments++
		return info, nil
	}
	var fr frame
	for {
		err := sr.next(&fr)
		if errors.Is(err, io.EOF) {
			return info, nil
		}
		if err != nil {
			if last {
				w.stats.TornBytes += uint64(info.bytes - sr.off)
			} else {
				w.stats.CorruptSegments++
			}
			return info, nil
		}
		if fr.kind == frameTable {
			if !w.define(&fr) {
				w.stats.CorruptSegments++
				return info, nil
			}
			continue
		}
		info.records++
		info.maxEnd = max(info.maxEnd, fr.rec.EndNano)
		if fr.rec.EndNano < cut {
			w.stats.LoadExpired++
			continue
		}
		w.push(fr.rec)
		w.stats.Loaded++
	}
}

func (w *Window) define(fr *frame) bool {
	switch fr.table {
	case spans.TableThreshold:
		if len(fr.val) != 8 {
			return false
		}
		return w.in.Define(fr.table, fr.index, "", math.Float64frombits(binary.LittleEndian.Uint64(fr.val)))
	case spans.TableModel, spans.TablePod:
		return w.in.Define(fr.table, fr.index, string(fr.val), 0)
	}
	return false
}

// push adds a record at the ring's end, evicting the oldest when full.
func (w *Window) push(r spans.Record) {
	if w.n == len(w.ring) && len(w.ring) < w.o.MaxSpans {
		w.grow()
	}
	if w.n == len(w.ring) {
		w.ring[w.head] = r
		w.head = (w.head + 1) % len(w.ring)
		w.stats.Evicted++
		return
	}
	w.ring[(w.head+w.n)%len(w.ring)] = r
	w.n++
}

func (w *Window) grow() {
	c := min(max(2*len(w.ring), 1024), w.o.MaxSpans)
	ring := make([]spans.Record, c)
	for i := range w.n {
		ring[i] = w.ring[(w.head+i)%len(w.ring)]
	}
	w.ring, w.head = ring, 0
}

// prune drops records older than cut from the ring's front (records behind
// a newer one stay until it goes; reads filter by time) and deletes the
// segments nothing needs: all older than cut, or all beyond MaxSpans.
func (w *Window) prune(cut int64) {
	for w.n > 0 && w.ring[w.head].EndNano < cut {
		w.head = (w.head + 1) % len(w.ring)
		w.n--
		w.stats.Evicted++
	}
	newer := 0
	kept := make([]segInfo, 0, len(w.segs))
	for i := len(w.segs) - 1; i >= 0; i-- {
		s := w.segs[i]
		open := w.file != nil && i == len(w.segs)-1
		if !open && (s.maxEnd < cut || newer >= w.o.MaxSpans) {
			if err := os.Remove(segPath(w.dir, s.n)); err != nil && !os.IsNotExist(err) {
				w.stats.WriteErrors++
				w.err = err
			}
			continue
		}
		newer += s.records
		kept = append(kept, s)
	}
	slices.Reverse(kept)
	w.segs = kept
}

// Appended is what one Append did.
type Appended struct {
	// Stored records; Old and Future spans refused by the age bound and
	// the clock skew bound.
	Stored, Old, Future int
}

// Append stores a batch of gate spans: in memory, and on disk with one
// write. A failed write leaves the records in memory and returns the error;
// the next Append starts a new segment.
func (w *Window) Append(batch []spans.GateSpan) (Appended, error) {
	var a Appended
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.o.Now()
	cut, future := now.Add(-w.o.MaxAge).UnixNano(), now.Add(w.o.FutureSkew).UnixNano()
	w.buf = w.buf[:0]
	for i := range batch {
		gs := &batch[i]
		switch {
		case gs.EndNano < cut:
			a.Old++
			w.stats.Expired++
			continue
		case gs.EndNano > future:
			a.Future++
			w.stats.Future++
			continue
		}
		r, added := w.in.Record(gs)
		if w.dir != "" {
			for t := range spans.NumTables {
				if added&(1<<t) != 0 {
					w.buf = appendTableEntry(w.buf, w.in, t, w.lastIndex(t))
				}
			}
			w.buf = appendRecordFrame(w.buf, &r)
		}
		w.push(r)
		w.seq++
		w.stats.Appended++
		a.Stored++
	}
	w.prune(cut)
	if w.dir == "" || len(w.buf) == 0 {
		return a, nil
	}
	return a, w.write()
}

func (w *Window) lastIndex(t spans.Table) int {
	switch t {
	case spans.TableThreshold:
		return len(w.in.Thresholds) - 1
	case spans.TableModel:
		return len(w.in.Models) - 1
	}
	return len(w.in.Pods) - 1
}

// write appends w.buf to the open segment, opening one first when needed,
// and rotates a full segment.
func (w *Window) write() error {
	if w.file == nil {
		if err := w.openSegment(); err != nil {
			return w.fail(err)
		}
	}
	if _, err := w.file.Write(w.buf); err != nil {
		_ = w.file.Close()
		w.file = nil
		return w.fail(fmt.Errorf("write segment: %w", err))
	}
	w.recount()
	s := &w.segs[len(w.segs)-1]
	s.bytes += int64(len(w.buf))
	if s.bytes >= w.o.SegmentBytes {
		return w.closeSegment()
	}
	return nil
}

// recount credits the open segment with the records framed in w.buf.
func (w *Window) recount() {
	s := &w.segs[len(w.segs)-1]
	for off := 0; off < len(w.buf); {
		switch w.buf[off] {
		case frameRecord:
			r := spans.DecodeRecord(w.buf[off+1:])
			s.records++
			s.maxEnd = max(s.maxEnd, r.EndNano)
			off += recordFrame
		default: // table frame: 'T' table index(2) len(2) value crc(4)
			off += 6 + int(binary.LittleEndian.Uint16(w.buf[off+4:])) + 4
		}
	}
}

func (w *Window) fail(err error) error {
	w.stats.WriteErrors++
	w.err = err
	return fmt.Errorf("span window %s: %w", w.name, err)
}

// openSegment starts the next segment with a header and every table entry.
func (w *Window) openSegment() error {
	n := w.nextSeg
	w.nextSeg++
	f, err := os.OpenFile(segPath(w.dir, n), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640)
	if err != nil {
		return fmt.Errorf("open segment: %w", err)
	}
	b := appendHeader(nil, w.name)
	for t := range spans.NumTables {
		for i := range w.lastIndex(t) + 1 {
			b = appendTableEntry(b, w.in, t, i)
		}
	}
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		return fmt.Errorf("write segment header: %w", err)
	}
	w.file = f
	w.segs = append(w.segs, segInfo{n: n, maxEnd: math.MinInt64, bytes: int64(len(b))})
	return nil
}

// closeSegment syncs and closes the open segment.
func (w *Window) closeSegment() error {
	if w.file == nil {
		return nil
	}
	f := w.file
	w.file = nil
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return w.fail(fmt.Errorf("sync segment: %w", err))
	}
	if err := f.Close(); err != nil {
		return w.fail(fmt.Errorf("close segment: %w", err))
	}
	return nil
}

// Sync makes what was appended durable (fsync of the open segment).
func (w *Window) Sync() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.file == nil {
		return nil
	}
	if err := w.file.Sync(); err != nil {
		return w.fail(fmt.Errorf("sync segment: %w", err))
	}
	return nil
}

// Close syncs and closes the window's files; the window stays readable.
func (w *Window) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closeSegment()
}

// Stats returns the window's counts.
func (w *Window) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.stats
	s.Segments = len(w.segs)
	for _, g := range w.segs {
		s.DiskBytes += g.bytes
	}
	return s
}

// Err returns the last write error (nil when none).
func (w *Window) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Len returns the records in memory.
func (w *Window) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// View copies the records whose end time is in [from, to) (zero times are
// open bounds), in arrival order, with the tables.
func (w *Window) View(from, to time.Time) spans.View {
	lo, hi := bound(from, math.MinInt64), bound(to, math.MaxInt64)
	w.mu.Lock()
	defer w.mu.Unlock()
	v := spans.View{FromNano: lo, ToNano: hi, Tables: w.in.Tables}
	for i := range w.n {
		r := &w.ring[(w.head+i)%len(w.ring)]
		if r.EndNano >= lo && r.EndNano < hi {
			v.Records = append(v.Records, *r)
		}
	}
	return v
}

func bound(t time.Time, open int64) int64 {
	if t.IsZero() {
		return open
	}
	return t.UnixNano()
}

// Mark is a position in a window's stream of appended records, for
// incremental reads.
type Mark struct {
	epoch int64
	seq   uint64
}

// Mark returns the position after the last record appended.
func (w *Window) Mark() Mark {
	w.mu.Lock()
	defer w.mu.Unlock()
	return Mark{epoch: w.epoch, seq: w.seq}
}

// Since copies the records appended after mark m (a zero Mark, or one from
// before a reopen, reads the whole window) and returns the new mark; lost
// counts records appended after m but evicted before this read.
func (w *Window) Since(m Mark) (v spans.View, next Mark, lost uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	v = spans.View{FromNano: math.MinInt64, ToNano: math.MaxInt64, Tables: w.in.Tables}
	skip := 0
	switch {
	case m.epoch == w.epoch && m.seq >= w.seq:
		skip = w.n
	case m.epoch == w.epoch:
		// The ring's newest min(n, seq) records are the ones appended since
		// open; older ones were loaded from disk.
		fresh := uint64(min(w.n, int(min(w.seq, uint64(math.MaxInt)))))
		first := w.seq - fresh // seq of the oldest fresh record in the ring
		if m.seq > first {
			skip = w.n - int(w.seq-m.seq)
		} else {
			skip = w.n - int(fresh)
			lost = first - m.seq
		}
	}
	for i := skip; i < w.n; i++ {
		v.Records = append(v.Records, w.ring[(w.head+i)%len(w.ring)])
	}
	return v, Mark{epoch: w.epoch, seq: w.seq}, lost
}
