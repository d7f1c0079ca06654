package source

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/tuner/records"
)

var base = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// line is one gate record at base + sec seconds whose prompt is sec tokens
// (so a replayed decision says which line it came from).
func line(sec int) string {
	return fmt.Sprintf(`{"ts":%q,"promptTokens":%d,"endpoints":[{"name":"a","matchBlocks":1,"totalBlocks":2,"blockSizeTokens":16,"inFlightTokens":%d},{"name":"b","matchBlocks":0,"totalBlocks":2,"blockSizeTokens":16,"inFlightTokens":0}]}`+"\n",
		base.Add(time.Duration(sec)*time.Second).Format(time.RFC3339Nano), sec, 100*sec)
}

func at(sec int) time.Time { return base.Add(time.Duration(sec) * time.Second) }

// collect returns the prompt tokens (the line's second) of what a replay yields.
func collect(out *[]int64) func(*Decision) error {
	return func(d *Decision) error {
		*out = append(*out, d.PromptTokens)
		return nil
	}
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// TestRecordsFileResumesAsOneReplay: a file written while cycles read it —
// appended lines, a line cut mid-write, a record stamped after the cycle's
// time, a blank line and another target's record — replayed from each
// cycle's mark yields exactly what one replay at the last cycle yields, in
// the same order.
func TestRecordsFileResumesAsOneReplay(t *testing.T) {
	path := filepath.Join(t.TempDir(), "records.jsonl")
	other := strings.Replace(line(7), `{"ts"`, `{"target":"other","ts"`, 1)
	writes := []string{
		line(1) + line(2) + "\n" + line(3),
		line(4) + line(30) + line(5) + line(6)[:40], // 30 is after the second cycle's time; 6 is cut mid-line
		line(6)[40:] + other + line(8),
		line(9), // unterminated but whole: consumed
		"\n" + line(10),
	}
	tos := []int{4, 20, 20, 40, 40}
	src := &RecordsFile{Path: path, Target: "t"}
	var mark Mark
	var got []int64
	for i, w := range writes {
		appendFile(t, path, w)
		var err error
		before := len(got)
		if mark, err = src.ReplayAfter(context.Background(), mark, at(0), at(tos[i]), collect(&got)); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		t.Logf("cycle %d to %ds: %v, mark %d", i, tos[i], got[before:], mark.Pos)
	}
	var full []int64
	if err := src.Replay(context.Background(), at(0), at(40), collect(&full)); err != nil {
		t.Fatal(err)
	}
	want := []int64{1, 2, 3, 4, 30, 5, 6, 8, 9, 10}
	if !slices.Equal(full, want) {
		t.Fatalf("full replay %v, want %v", full, want)
	}
	if !slices.Equal(got, full) {
		t.Fatalf("resumed replays %v, full replay %v", got, full)
	}
	st, _ := os.Stat(path)
	if mark.Pos != st.Size() || !mark.Resumable {
		t.Errorf("mark %+v, want the end of the file (%d)", mark, st.Size())
	}
}

// TestRecordsFileMarkIsTheLineOfTheFirstLaterRecord: over many lines and
// lines longer than the reader's buffer, the mark is the byte offset where
// the first record at or after to starts.
func TestRecordsFileMarkIsTheLineOfTheFirstLaterRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "records.jsonl")
	var b strings.Builder
	offsets := map[int]int{}
	long := strings.Repeat(" ", 3<<19)
	for i := 1; i <= 20000; i++ {
		offsets[i] = b.Len()
		l := line(i)
		if i%5000 == 0 {
			l = l[:1] + long + l[1:] // whitespace inside the object: a 1.5 MiB line, longer than the reader's buffer
		}
		b.WriteString(l)
	}
	appendFile(t, path, b.String())
	src := &RecordsFile{Path: path}
	for _, to := range []int{1, 2, 4999, 5000, 5001, 12345, 20000} {
		var got []int64
		mark, err := src.ReplayAfter(context.Background(), Mark{}, at(0), at(to), collect(&got))
		if err != nil {
			t.Fatal(err)
		}
		if mark.Pos != int64(offsets[to]) || len(got) != to-1 {
			t.Errorf("to %d: mark %d (want %d), %d records (want %d)", to, mark.Pos, offsets[to], len(got), to-1)
		}
		var rest []int64
		if _, err := src.ReplayAfter(context.Background(), mark, at(0), at(30000), collect(&rest)); err != nil {
			t.Fatal(err)
		}
		if len(rest) != 20001-to || rest[0] != int64(to) {
			t.Errorf("to %d: resumed at %v… (%d records)", to, rest[:1], len(rest))
		}
	}
}

func TestRecordsFileMarkGoesStale(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "records.jsonl")
	appendFile(t, path, line(1)+line(2))
	src := &RecordsFile{Path: path}
	var n []int64
	mark, err := src.ReplayAfter(context.Background(), Mark{}, at(0), at(10), collect(&n))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		change func()
	}{
		{"truncated", func() {
			if err := os.Truncate(path, 10); err != nil {
				t.Fatal(err)
			}
		}},
		{"replaced (rotated)", func() {
			if err := os.Rename(path, path+".1"); err != nil {
				t.Fatal(err)
			}
			appendFile(t, path, line(1)+line(2)+line(3))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.change()
			if _, err := src.ReplayAfter(context.Background(), mark, at(0), at(10), collect(&n)); !errors.Is(err, ErrStaleMark) {
				t.Fatalf("err %v, want ErrStaleMark", err)
			}
		})
	}
}

func TestRecordsFileGzipIsReplayedInFull(t *testing.T) {
	path := filepath.Join(t.TempDir(), "records.jsonl.gz")
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(line(1) + line(2) + line(3))); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var got []int64
	mark, err := (&RecordsFile{Path: path}).ReplayAfter(context.Background(), Mark{}, at(0), at(3), collect(&got))
	if err != nil || mark.Resumable || !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("got %v mark %+v err %v; want records 1, 2 and a mark that cannot resume", got, mark, err)
	}
}

// streamRecord is a stored record at base + sec.
func streamRecord(sec int) *records.Record {
	return &records.Record{TS: at(sec), PromptTokens: int64(sec)}
}

func TestRecordsStreamResumesAsOneReplay(t *testing.T) {
	s := &RecordsStream{URL: "http://records"}
	var mark Mark
	var got []int64
	for i, batch := range [][]int{{1, 2, 3}, {4, 30, 5}, {6}, {7, 8}} {
		for _, sec := range batch {
			s.store(streamRecord(sec))
		}
		var err error
		if mark, err = s.ReplayAfter(context.Background(), mark, at(0), at([]int{10, 10, 40, 40}[i]), collect(&got)); err != nil {
			t.Fatal(err)
		}
	}
	var full []int64
	if err := s.Replay(context.Background(), at(0), at(40), collect(&full)); err != nil {
		t.Fatal(err)
	}
	if want := []int64{1, 2, 3, 4, 30, 5, 6, 7, 8}; !slices.Equal(full, want) || !slices.Equal(got, full) {
		t.Fatalf("resumed %v, full %v, want %v (arrival order)", got, full, want)
	}
	// Records dropped before a cycle replayed them make the mark stale.
	s.Keep = 2
	for sec := 50; sec < 55; sec++ {
		s.store(streamRecord(sec))
	}
	if _, err := s.ReplayAfter(context.Background(), mark, at(0), at(100), collect(&got)); !errors.Is(err, ErrStaleMark) {
		t.Fatalf("err %v, want ErrStaleMark", err)
	}
}

// TestRecordAheadOfTheCycleIsNamed: a record stamped more than MaxAhead
// after the replay's end would stop every later replay at it (records are
// read in time order); the file and the stream name it instead, with its
// line or sequence number, while one within MaxAhead is only where the
// replay stops.
func TestRecordAheadOfTheCycleIsNamed(t *testing.T) {
	ahead := 10*60 + 30 // ten and a half minutes after the replay's end at 30 s
	path := filepath.Join(t.TempDir(), "records.jsonl")
	appendFile(t, path, line(1)+line(2)+line(40)+line(ahead))
	src := &RecordsFile{Path: path, Target: "t"}
	var got []int64
	mark, err := src.ReplayAfter(context.Background(), Mark{}, at(0), at(30), collect(&got))
	if err != nil || !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("within MaxAhead: %v, err %v", got, err)
	}
	// Resumed from the mark (line 3), the record is named by its offset.
	off := len(line(1) + line(2) + line(40))
	_, err = src.ReplayAfter(context.Background(), mark, at(0), at(50), collect(&got))
	if want := fmt.Sprintf("byte offset %d", off); !errors.Is(err, ErrRecordAhead) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), want) {
		t.Fatalf("err %v, want ErrRecordAhead naming %s %s", err, path, want)
	}
	// Read whole, by its line number.
	if err := src.Replay(context.Background(), at(0), at(50), collect(&got)); !errors.Is(err, ErrRecordAhead) || !strings.Contains(err.Error(), "line 4") {
		t.Fatalf("err %v, want ErrRecordAhead naming line 4", err)
	}

	s := &RecordsStream{URL: "http://records"}
	for _, sec := range []int{1, ahead} {
		s.store(streamRecord(sec))
	}
	if _, err := s.ReplayAfter(context.Background(), Mark{}, at(0), at(30), collect(&got)); !errors.Is(err, ErrRecordAhead) || !strings.Contains(err.Error(), "record 1") {
		t.Fatalf("stream: err %v, want ErrRecordAhead naming record 1", err)
	}
}
