package window_test

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/tuner/spans"
	"github.com/gatetuner/gatetuner/tuner/spans/spanstest"
	"github.com/gatetuner/gatetuner/tuner/spans/window"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

// clock is a settable test clock.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

// batch makes n gate spans ending from at, one per millisecond.
func batch(n int, at time.Time, model string) []spans.GateSpan {
	out := make([]spans.GateSpan, n)
	for i := range out {
		end := at.Add(time.Duration(i) * time.Millisecond).UnixNano()
		out[i] = spans.GateSpan{StartNano: end - 1000, EndNano: end, Outcome: 3, Candidates: 8, Sticky: 2, HasSticky: true,
			Threshold: 0.8, PenaltyMs: float64(i), HasPenalty: true, Model: model, RequestID: "r",
			Resource: spans.Resource{Pod: "epp-0"}}
		out[i].TraceID[15] = byte(i)
	}
	return out
}

func mustOpen(t *testing.T, dir string, o window.Options) *window.Window {
	t.Helper()
	w, err := window.Open(dir, "glm", o)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestWindowReloadsWhatItPersisted(t *testing.T) {
	dir := t.TempDir()
	c := &clock{now: t0}
	o := window.Options{Now: c.Now, MaxAge: time.Hour, SegmentBytes: 4096}
	w := mustOpen(t, dir, o)
	for i := range 10 {
		if _, err := w.Append(batch(30, t0.Add(time.Duration(i)*time.Second), "m"+string(rune('a'+i%3)))); err != nil {
			t.Fatal(err)
		}
	}
	before := w.View(time.Time{}, time.Time{})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	st := w.Stats()
	if st.Segments < 2 {
		t.Fatalf("4 KiB segments should have rotated: %+v", st)
	}
	back := mustOpen(t, dir, o)
	after := back.View(time.Time{}, time.Time{})
	if len(after.Records) != 300 || back.Stats().Loaded != 300 {
		t.Fatalf("reloaded %d records, stats %+v", len(after.Records), back.Stats())
	}
	for i := range before.Records {
		a, b := &before.Records[i], &after.Records[i]
		if *a != *b || before.Tables.Model(a) != after.Tables.Model(b) || after.Tables.Threshold(b) != 0.8 || after.Tables.Pod(b) != "epp-0" {
			t.Fatalf("record %d: %+v vs %+v", i, *a, *b)
		}
	}
	// Appending after a reopen goes on with the same table indexes.
	if _, err := back.Append(batch(1, t0.Add(20*time.Second), "mb")); err != nil {
		t.Fatal(err)
	}
	v := back.View(time.Time{}, time.Time{})
	if last := &v.Records[len(v.Records)-1]; v.Tables.Model(last) != "mb" || last.Model != 1 {
		t.Fatalf("model index after reopen: %+v", *last)
	}
	_ = back.Close()
}

func TestWindowSkipsATornTailAndCountsIt(t *testing.T) {
	dir := t.TempDir()
	c := &clock{now: t0}
	o := window.Options{Now: c.Now, MaxAge: time.Hour}
	w := mustOpen(t, dir, o)
	if _, err := w.Append(batch(100, t0, "m")); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	segs, _ := filepath.Glob(filepath.Join(dir, "seg-*.gts"))
	if len(segs) != 1 {
		t.Fatalf("segments %v", segs)
	}
	fi, _ := os.Stat(segs[0])
	// A crash in the middle of the last frame, then a flipped bit in the one before.
	if err := os.Truncate(segs[0], fi.Size()-20); err != nil {
		t.Fatal(err)
	}
	back := mustOpen(t, dir, o)
	st := back.Stats()
	if n := back.Len(); n != 99 || st.TornBytes != 53-20 {
		t.Fatalf("after a torn tail: %d records, stats %+v", n, st)
	}
	if _, err := back.Append(batch(5, t0.Add(time.Second), "m")); err != nil {
		t.Fatal(err)
	}
	_ = back.Close()
	f, _ := os.OpenFile(segs[0], os.O_RDWR, 0)
	_, _ = f.WriteAt([]byte{0xFF}, fi.Size()-60)
	_ = f.Close()
	again := mustOpen(t, dir, o)
	if st := again.Stats(); again.Len() != 98+5 || st.CorruptSegments != 1 {
		t.Fatalf("after a corrupt frame in an older segment: %d records, stats %+v", again.Len(), st)
	}
}

func TestWindowBoundsCountAgeAndDisk(t *testing.T) {
	dir := t.TempDir()
	c := &clock{now: t0}
	o := window.Options{Now: c.Now, MaxAge: time.Minute, MaxSpans: 1000, SegmentBytes: 8 << 10}
	w := mustOpen(t, dir, o)
	for i := range 50 {
		c.now = t0.Add(time.Duration(i) * time.Second)
		if _, err := w.Append(batch(100, c.now, "m")); err != nil {
			t.Fatal(err)
		}
	}
	st := w.Stats()
	if w.Len() != 1000 || st.Evicted != 4000 {
		t.Fatalf("count bound: %d records, %+v", w.Len(), st)
	}
	// Disk: the segments hold at most MaxSpans records plus one segment,
	// and the files on disk are the ones the window counts.
	if max := int64(1000*53 + 2*(8<<10)); st.DiskBytes > max {
		t.Fatalf("disk %d bytes over %d", st.DiskBytes, max)
	}
	if n, size := onDisk(t, dir); n != st.Segments || size != st.DiskBytes {
		t.Fatalf("%d files of %d bytes on disk, stats %+v", n, size, st)
	}
	a, _ := w.Append(batch(3, t0.Add(-time.Hour), "m"))
	b, _ := w.Append(batch(3, c.now.Add(time.Hour), "m"))
	if a.Old != 3 || b.Future != 3 {
		t.Fatalf("old %+v future %+v", a, b)
	}
	c.now = c.now.Add(2 * time.Minute)
	if _, err := w.Append(batch(1, c.now, "m")); err != nil {
		t.Fatal(err)
	}
	if w.Len() != 1 || w.Stats().Segments > 2 {
		t.Fatalf("age bound: %d records, %+v", w.Len(), w.Stats())
	}
	_ = w.Close()
	if back := mustOpen(t, dir, o); back.Len() != 1 {
		t.Fatalf("reload after the age bound: %d", back.Len())
	}
}

func TestWindowViewAndMarkReadIncrementally(t *testing.T) {
	c := &clock{now: t0.Add(time.Minute)}
	w := mustOpen(t, "", window.Options{Now: c.Now, MaxSpans: 2048})
	_, _ = w.Append(batch(10, t0, "m"))
	v := w.View(t0.Add(2*time.Millisecond), t0.Add(5*time.Millisecond))
	if len(v.Records) != 3 {
		t.Fatalf("[2ms,5ms): %d records", len(v.Records))
	}
	m := w.Mark()
	_, _ = w.Append(batch(4, t0.Add(time.Second), "m"))
	got, m2, lost := w.Since(m)
	if len(got.Records) != 4 || lost != 0 {
		t.Fatalf("since mark: %d records, lost %d", len(got.Records), lost)
	}
	if got, _, _ := w.Since(m2); len(got.Records) != 0 {
		t.Fatalf("nothing new: %d", len(got.Records))
	}
	// Evict past the mark: the read says how many it lost.
	_, _ = w.Append(batch(3000, t0.Add(2*time.Second), "m"))
	got, _, lost = w.Since(m2)
	if len(got.Records) != 2048 || lost != 3000-2048 {
		t.Fatalf("after eviction: %d records, lost %d", len(got.Records), lost)
	}
	if all, _, _ := w.Since(window.Mark{}); len(all.Records) != 2048 {
		t.Fatalf("zero mark: %d", len(all.Records))
	}
}

func TestSetRoutesSpansToTheirTargetsWindows(t *testing.T) {
	router, err := spans.NewRouter([]spans.Target{{Name: "a", PodPattern: "a-.*"}, {Name: "b", PodPattern: "b-.*"}, {Name: "ab", PodPattern: "ab-.*"}})
	if err != nil {
		t.Fatal(err)
	}
	set, err := window.OpenSet(t.TempDir(), router, window.Options{Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	d := []spanstest.Decision{spanstest.Sticky(5, "m", "r"), spanstest.Sticky(6, "m", "r")}
	for _, pod := range []string{"a-0", "b-1", "c-2"} {
		if _, err := set.Ingest(spanstest.Request(spans.Resource{Pod: pod}, d, t0.UnixNano(), rng)); err != nil {
			t.Fatal(err)
		}
	}
	// "ab-0" matches only "ab" (anchored); a pattern overlap makes it ambiguous.
	in, _ := set.Ingest(spanstest.Request(spans.Resource{Pod: "ab-0"}, d, t0.UnixNano(), rng))
	if in.Stored != 2 {
		t.Fatalf("ab-0: %+v", in)
	}
	st := set.Stats()
	if set.Window("a").Len() != 2 || set.Window("b").Len() != 2 || set.Window("ab").Len() != 2 || st.Unrouted != 2 || st.Gate != 8 {
		t.Fatalf("stats %+v", st)
	}
	amb, _ := spans.NewRouter([]spans.Target{{Name: "x", Namespace: "llm"}, {Name: "y", PodPattern: "a-.*"}})
	set2, _ := window.OpenSet("", amb, window.Options{Now: func() time.Time { return t0 }})
	in, _ = set2.Ingest(spanstest.Request(spans.Resource{Namespace: "llm", Pod: "a-1"}, d, t0.UnixNano(), rng))
	if in.Ambiguous != 2 || in.Stored != 0 || in.Rejected() != 2 {
		t.Fatalf("ambiguous: %+v", in)
	}
}

func onDisk(t *testing.T, dir string) (int, int64) {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "seg-*.gts"))
	if err != nil {
		t.Fatal(err)
	}
	var size int64
	for _, s := range segs {
		fi, err := os.Stat(s)
		if err != nil {
			t.Fatal(err)
		}
		size += fi.Size()
	}
	return len(segs), size
}
