package records

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"testing"
)

// TestGzipDetectedByMagicBytes: compressed input is read whatever it is
// called (stdin has no name), and a truncated stream is an I/O error, not a
// run of bad lines.
func TestGzipDetectedByMagicBytes(t *testing.T) {
	plain, err := os.ReadFile("testdata/design-example.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(plain)
	zw.Close()
	for _, tc := range []struct {
		name    string
		in      []byte
		records int
		bad     int64
		ioErr   bool
	}{
		{"plain", plain, 1, 0, false},
		{"gzip", gz.Bytes(), 1, 0, false},
		{"truncated gzip", gz.Bytes()[:gz.Len()/2], 0, 0, true},
		{"one byte is a bad line, not gzip", []byte{0x1f}, 0, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(bytes.NewReader(tc.in), Options{})
			n := 0
			var err error
			for {
				if _, err = r.Next(); err != nil {
					break
				}
				n++
			}
			if n != tc.records || r.Stats().Bad != tc.bad {
				t.Fatalf("records %d (want %d), bad %d: %v", n, tc.records, r.Stats().Bad, r.BadLines())
			}
			if gotIO := !errors.Is(err, io.EOF); gotIO != tc.ioErr {
				t.Fatalf("err %v, want an I/O error: %v", err, tc.ioErr)
			}
		})
	}
}
