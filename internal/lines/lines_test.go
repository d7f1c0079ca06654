package lines

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// got is one line as a reader returned it: its bytes, or over-long.
type got struct {
	line     string
	overlong bool
}

func readAll(t testing.TB, r *Reader) ([]got, error) {
	t.Helper()
	var out []got
	for {
		line, over, err := r.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, err
		}
		if over && line != nil {
			t.Fatalf("line %d: over-long with %d bytes", r.Line(), len(line))
		}
		out = append(out, got{string(line), over})
		if r.Line() != len(out) {
			t.Fatalf("Line() = %d after %d lines", r.Line(), len(out))
		}
	}
}

// want splits input as the reader must: lines end after "\n" (the last may
// have none), a line whose content (without "\n" or "\r\n") is longer than
// max is over-long.
func want(in string, max int) []got {
	var out []got
	for len(in) > 0 {
		i := strings.IndexByte(in, '\n')
		line := in
		if i >= 0 {
			line = in[:i+1]
		}
		in = in[len(line):]
		content := strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		if !strings.HasSuffix(line, "\n") {
			content = line
		}
		if len(content) > max {
			out = append(out, got{"", true})
		} else {
			out = append(out, got{line, false})
		}
	}
	return out
}

func gz(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestBoundCountsTheContent: the bound counts a line's content, not its
// terminator, on the short path (a line inside the read buffer) and the
// long one (longer than the buffer, gathered or dropped); an over-long line
// is one line however many buffers it spans, blank or not; the line after
// it is read whole.
func TestBoundCountsTheContent(t *testing.T) {
	const buf = 16 // bufio's smallest buffer
	x := func(n int) string { return strings.Repeat("x", n) }
	for _, tc := range []struct {
		name string
		max  int
		in   string
	}{
		{"at the bound with \\n", 8, "a\n" + x(8) + "\nb\n"},
		{"at the bound with \\r\\n", 8, "a\n" + x(8) + "\r\nb\n"},
		{"at the bound at the end of input", 8, "a\n" + x(8)},
		{"one over, inside the buffer", 8, "a\n" + x(9) + "\nb\n"},
		{"one over with \\r\\n", 8, "a\n" + x(9) + "\r\nb\n"},
		{"one over at the end of input", 8, "a\n" + x(9)},
		{"a bare \\r is content", 8, "a\n" + x(8) + "\r\r\nb\n"},
		{"over-long blank line", 8, "  \n" + strings.Repeat(" ", 12) + "\nb\n"},
		{"longer than the buffer, at the bound", 40, "a\n" + x(40) + "\r\nb\n"},
		{"longer than the buffer, one over", 40, "a\n" + x(41) + "\nb\n"},
		{"longer than the buffer, at the bound at the end", 40, "a\n" + x(40)},
		{"longer than the buffer, one over at the end", 40, "a\n" + x(41)},
		{"over the bound by many buffers", 20, "a\n" + x(200) + "\nb\n"},
		{"the buffer's first part is over the bound", 4, "a\n" + x(100) + "\nb\n"},
		{"bound below the buffer, line just past the buffer", 15, x(17) + "\n" + x(15) + "\n"},
		{"empty lines", 8, "\n\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, z := range []bool{false, true} {
				in := []byte(tc.in)
				if z {
					in = gz(t, in)
				}
				got, err := readAll(t, NewReader(bytes.NewReader(in), buf, tc.max))
				if err != nil {
					t.Fatalf("gzip %v: %v", z, err)
				}
				if w := want(tc.in, tc.max); !equal(got, w) {
					t.Fatalf("gzip %v:\n got %+v\nwant %+v", z, got, w)
				}
			}
		})
	}
}

func equal(a, b []got) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestGzipByMagicBytes: compressed input is read whatever it is called,
// multi-member streams are read on, a bad header is an error from Sniff, a
// truncated stream is a read error naming the line (not a short line), and
// input that merely starts like gzip is plain.
func TestGzipByMagicBytes(t *testing.T) {
	plain := []byte("one\ntwo\nthree\n")
	two := append(gz(t, plain[:4]), gz(t, plain[4:])...)
	r := NewReader(bytes.NewReader(two), 16, 100)
	got, err := readAll(t, r)
	if err != nil || !equal(got, want(string(plain), 100)) {
		t.Fatalf("two members: %+v, %v", got, err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}

	if err := NewReader(bytes.NewReader([]byte{0x1f, 0x8b, 0, 0}), 16, 100).Sniff(); err == nil {
		t.Fatal("a bad gzip header sniffed fine")
	}

	z := gz(t, bytes.Repeat([]byte("a line of text\n"), 1000))
	r = NewReader(bytes.NewReader(z[:len(z)/2]), 16, 100)
	got, err = readAll(t, r)
	if err == nil || !strings.HasPrefix(err.Error(), "line ") || len(got) == 0 {
		t.Fatalf("truncated: %d lines, err %v; want lines, then an error naming the line", len(got), err)
	}

	for _, in := range []string{"\x1f", "\x1f\x8a\n"} {
		got, err := readAll(t, NewReader(strings.NewReader(in), 16, 100))
		if err != nil || !equal(got, want(in, 100)) {
			t.Fatalf("%q: %+v, %v", in, got, err)
		}
	}
}

// TestReadErrorNamesTheLine: a read failure past the first line is an
// error naming the line being read, on both paths.
func TestReadErrorNamesTheLine(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		line     string
	}{
		{"short line", "a\nb", "line 2: "},
		{"long line", "a\n" + strings.Repeat("x", 100), "line 2: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			boom := errors.New("boom")
			r := NewReader(io.MultiReader(strings.NewReader(tc.in), iotest.ErrReader(boom)), 16, 1000)
			_, err := readAll(t, r)
			if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), tc.line) {
				t.Fatalf("err %v, want boom naming %q", err, tc.line)
			}
		})
	}
}

// FuzzReader: any input, plain or compressed, any bound, splits as want
// says, through the smallest buffer so that both paths are taken.
func FuzzReader(f *testing.F) {
	f.Add([]byte("a\nbb\r\nccc"), 2)
	f.Add([]byte(strings.Repeat("x", 40)+"\n\n"+strings.Repeat(" ", 20)+"\r\n"), 17)
	f.Add([]byte("\r\n\r\r\n\n"), 0)
	f.Fuzz(func(t *testing.T, in []byte, max int) {
		if max < 0 || max > 1<<16 {
			return
		}
		if len(in) >= 2 && in[0] == 0x1f && in[1] == 0x8b {
			return // would be read as gzip: the compressed case below covers it
		}
		w := want(string(in), max)
		for _, src := range [][]byte{in, gz(t, in)} {
			got, err := readAll(t, NewReader(bytes.NewReader(src), 16, max))
			if err != nil {
				t.Fatal(err)
			}
			if !equal(got, w) {
				t.Fatalf("max %d:\n got %+v\nwant %+v", max, got, w)
			}
		}
	})
}
