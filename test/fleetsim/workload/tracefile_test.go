package workload

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

type readTrace struct {
	recs []TraceRecord
	r    *TraceReader
	err  error
}

func readTraceAll(t testing.TB, data []byte, opts TraceReaderOptions) readTrace {
	t.Helper()
	r, err := NewTraceReader(bytes.NewReader(data), opts)
	if err != nil {
		return readTrace{err: err}
	}
	out := readTrace{r: r}
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			out.err = err
			return out
		}
		c := *rec
		c.HashIDs = append([]int64(nil), rec.HashIDs...)
		out.recs = append(out.recs, c)
	}
}

func gz(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

const twoTraceLines = `{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}
{"timestamp": 1500, "input_length": 512, "output_length": 0, "hash_ids": [0], "extra": {"x": [1]}}
`

func TestTraceReaderReadsPlainAndGzip(t *testing.T) {
	for name, data := range map[string][]byte{"plain": []byte(twoTraceLines), "gzip": gz(t, []byte(twoTraceLines)),
		"no final newline": []byte(strings.TrimSuffix(twoTraceLines, "\n"))} {
		t.Run(name, func(t *testing.T) {
			got := readTraceAll(t, data, TraceReaderOptions{Strict: true})
			if got.err != nil || len(got.recs) != 2 {
				t.Fatalf("records %d, err %v", len(got.recs), got.err)
			}
			a, b := got.recs[0], got.recs[1]
			if a.Line != 1 || a.TimestampMs != 0 || a.InputLength != 600 || a.OutputLength != 5 || len(a.HashIDs) != 2 || a.HashIDs[1] != 1 {
				t.Errorf("first = %+v", a)
			}
			if b.Line != 2 || b.TimestampMs != 1500 || b.InputLength != 512 || b.OutputLength != 0 || len(b.HashIDs) != 1 {
				t.Errorf("second = %+v", b)
			}
		})
	}
}

func TestTraceReaderBadLines(t *testing.T) {
	good := `{"timestamp": 10, "input_length": 10, "output_length": 1, "hash_ids": [7]}`
	for _, tc := range []struct {
		name, line, reason string
	}{
		{"not JSON", `{"timestamp": 1,`, "not valid JSON"},
		{"not an object", `[1, 2]`, "not a JSON object"},
		{"timestamp missing", `{"input_length": 10, "output_length": 1, "hash_ids": [7]}`, "timestamp: missing"},
		{"timestamp a string", `{"timestamp": "5", "input_length": 10, "output_length": 1, "hash_ids": [7]}`, `timestamp: not a number: "5"`},
		{"timestamp fractional", `{"timestamp": 5.5, "input_length": 10, "output_length": 1, "hash_ids": [7]}`, "timestamp: not an integer: 5.5"},
		{"timestamp goes back", `{"timestamp": 3, "input_length": 10, "output_length": 1, "hash_ids": [7]}`, "timestamp: 3 goes back before the previous record's 10 (records must be in arrival order)"},
		{"input zero", `{"timestamp": 10, "input_length": 0, "output_length": 1, "hash_ids": [7]}`, "input_length: 0 out of range [1, 2147483647]"},
		{"output negative", `{"timestamp": 10, "input_length": 10, "output_length": -1, "hash_ids": [7]}`, "output_length: -1 out of range [0, 2147483647]"},
		{"ids missing", `{"timestamp": 10, "input_length": 10, "output_length": 1}`, "hash_ids: missing"},
		{"ids empty", `{"timestamp": 10, "input_length": 10, "output_length": 1, "hash_ids": []}`, "hash_ids: empty"},
		{"ids not integers", `{"timestamp": 10, "input_length": 10, "output_length": 1, "hash_ids": [1.5]}`, "hash_ids: not a list of integers"},
		{"ids with null", `{"timestamp": 10, "input_length": 10, "output_length": 1, "hash_ids": [null]}`, "hash_ids: not a list of integers"},
		{"id negative", `{"timestamp": 10, "input_length": 10, "output_length": 1, "hash_ids": [-2]}`, "hash_ids[0]: negative id -2"},
		{"too many ids", `{"timestamp": 10, "input_length": 512, "output_length": 1, "hash_ids": [1, 2]}`, "input_length: 512 tokens do not fit 2 hash_ids of 512 tokens (want 513..1024)"},
		{"too few ids", `{"timestamp": 10, "input_length": 513, "output_length": 1, "hash_ids": [1]}`, "input_length: 513 tokens do not fit 1 hash_ids of 512 tokens (want 1..512)"},
		{"too long", `{"timestamp": 10, "input_length": 10, "output_length": 1, "hash_ids": [7], "pad": "` + strings.Repeat("x", 200) + `"}`, "line longer than 128 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(good + "\n" + tc.line + "\n\n" + good + "\n")
			opts := TraceReaderOptions{MaxLineBytes: 128}
			got := readTraceAll(t, in, opts)
			if got.err != nil || len(got.recs) != 2 || got.recs[1].Line != 4 {
				t.Fatalf("tolerant read: %d records, err %v", len(got.recs), got.err)
			}
			if s := got.r.Stats(); s != (TraceReadStats{Read: 2, Bad: 1}) {
				t.Errorf("stats = %+v", s)
			}
			if bad := got.r.BadLines(); len(bad) != 1 || bad[0] != (LineError{Line: 2, Reason: tc.reason}) {
				t.Errorf("bad lines = %+v, want line 2: %s", bad, tc.reason)
			}
			opts.Strict = true
			got = readTraceAll(t, in, opts)
			var le *LineError
			if !errors.As(got.err, &le) || le.Line != 2 || len(got.recs) != 1 {
				t.Errorf("strict read: %d records, err %v; want a LineError on line 2", len(got.recs), got.err)
			}
		})
	}
}

func TestTraceReaderKeepsTheFirstBadLines(t *testing.T) {
	in := strings.Repeat("x\n", 5)
	got := readTraceAll(t, []byte(in), TraceReaderOptions{KeepBadLines: 2})
	if got.err != nil || got.r.Stats().Bad != 5 || len(got.r.BadLines()) != 2 || got.r.BadLines()[1].Line != 2 {
		t.Fatalf("err %v, stats %+v, bad %v", got.err, got.r.Stats(), got.r.BadLines())
	}
}

func TestTraceReaderCorruptGzipFails(t *testing.T) {
	data := gz(t, []byte(strings.Repeat(twoTraceLines, 100)))
	data[len(data)-6] ^= 0xff // the CRC
	if got := readTraceAll(t, data, TraceReaderOptions{}); got.err == nil || errors.As(got.err, new(*LineError)) {
		t.Fatalf("corrupt gzip: err %v, want an I/O error", got.err)
	}
}

// FuzzTraceReader: no panic; what the tolerant reader accepts obeys the
// format's invariants, and the gzip-compressed input reads the same.
func FuzzTraceReader(f *testing.F) {
	f.Add([]byte(twoTraceLines))
	f.Fuzz(func(t *testing.T, data []byte) {
		plain := readTraceAll(t, data, TraceReaderOptions{MaxLineBytes: 4096})
		if plain.err != nil {
			if len(data) >= 2 && data[0] == 0x1f && data[1] == 0x8b {
				return // a (broken) gzip stream
			}
			t.Fatalf("tolerant reader on plain input returned %v", plain.err)
		}
		last := int64(-1)
		for _, r := range plain.recs {
			n := int64(len(r.HashIDs))
			if r.TimestampMs < last || n == 0 || int64(r.InputLength) <= (n-1)*TraceBlockTokens || int64(r.InputLength) > n*TraceBlockTokens || r.OutputLength < 0 {
				t.Fatalf("accepted a record breaking the format: %+v", r)
			}
			for _, id := range r.HashIDs {
				if id < 0 {
					t.Fatalf("accepted a negative id: %+v", r)
				}
			}
			last = r.TimestampMs
		}
		if len(data) >= 2 && data[0] == 0x1f && data[1] == 0x8b {
			return
		}
		zipped := readTraceAll(t, gz(t, data), TraceReaderOptions{MaxLineBytes: 4096})
		if zipped.err != nil || len(zipped.recs) != len(plain.recs) || zipped.r.Stats() != plain.r.Stats() {
			t.Fatalf("gzip read differs: %d vs %d records, err %v", len(zipped.recs), len(plain.recs), zipped.err)
		}
	})
}

// TestTraceReaderLineBoundCountsTheContent: MaxLineBytes bounds a line's
// content, not its "\n" or "\r\n": a line of exactly the bound reads, one
// byte more is bad — for lines shorter and longer than the read buffer.
func TestTraceReaderLineBoundCountsTheContent(t *testing.T) {
	// line returns a valid record padded to exactly n bytes.
	line := func(n int) string {
		head := `{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1], "pad": "`
		return head + strings.Repeat("x", n-len(head)-2) + `"}`
	}
	for _, bound := range []int{200, 100 << 10} { // below and above the 64 KiB read buffer
		for _, tc := range []struct {
			name    string
			content int
			end     string
			bad     int64
		}{
			{"at the bound, \\n", bound, "\n", 0},
			{"at the bound, \\r\\n", bound, "\r\n", 0},
			{"at the bound, at EOF", bound, "", 0},
			{"one over, \\n", bound + 1, "\n", 1},
			{"one over, \\r\\n", bound + 1, "\r\n", 1},
			{"one over, at EOF", bound + 1, "", 1},
		} {
			t.Run(fmt.Sprintf("%d %s", bound, tc.name), func(t *testing.T) {
				data := line(tc.content) + tc.end
				if tc.end != "" {
					data += line(120) + "\n"
				}
				got := readTraceAll(t, []byte(data), TraceReaderOptions{MaxLineBytes: bound})
				if got.err != nil || got.r.Stats().Bad != tc.bad {
					t.Fatalf("err %v, stats %+v, want %d bad (%v)", got.err, got.r.Stats(), tc.bad, got.r.BadLines())
				}
			})
		}
	}
}

// TestTraceReaderOverlongBlankLineIsOneBadLine: an over-long line is bad
// even when it holds only blanks, and the bound's verdict stays with that
// line — the record after it is read (the reader before internal/lines
// skipped the blank line and charged its over-length to the next record).
func TestTraceReaderOverlongBlankLineIsOneBadLine(t *testing.T) {
	rec := `{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1]}`
	data := strings.Repeat(" ", 300) + "\n" + rec + "\n"
	got := readTraceAll(t, []byte(data), TraceReaderOptions{MaxLineBytes: 200})
	st, bad := got.r.Stats(), got.r.BadLines()
	if got.err != nil || st.Read != 1 || st.Bad != 1 || len(bad) != 1 || bad[0].Line != 1 {
		t.Fatalf("err %v, stats %+v, bad lines %v; want line 1 bad (over-long), line 2 read", got.err, st, bad)
	}
}
