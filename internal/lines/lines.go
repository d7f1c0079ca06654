// Package lines reads input one line at a time, plain or gzip-compressed
// (told by the magic bytes 1f 8b, whatever the input is called), with a
// bound on a line's content: the line reader shared by the gate records
// (tuner/records) and the request traces (test/fleetsim).
//
// Memory stays flat however long the input: a line is a slice of the read
// buffer (or of one reused buffer for a line longer than it), and a line
// over the bound is dropped as it is read, never gathered whole.
package lines

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
)

// Reader streams the lines of one input.
type Reader struct {
	br      *bufio.Reader
	gz      *gzip.Reader
	max     int
	line    int
	long    []byte // a line longer than the read buffer, gathered
	sniffed bool
}

// NewReader reads r through buffers of bufSize bytes; a line whose content
// (without its "\n" or "\r\n") is longer than maxLine bytes is over-long.
func NewReader(r io.Reader, bufSize, maxLine int) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, bufSize), max: maxLine}
}

// Sniff decompresses the input from here on when it starts with the gzip
// magic bytes. Next calls it before the first line; call it earlier to see
// a bad gzip header at once. Only the first call looks.
func (r *Reader) Sniff() error {
	if r.sniffed {
		return nil
	}
	r.sniffed = true
	if b, _ := r.br.Peek(2); len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		return nil
	}
	gz, err := gzip.NewReader(r.br)
	if err != nil {
		return fmt.Errorf("gzip header: %w", err)
	}
	gz.Multistream(true)
	r.gz = gz
	r.br = bufio.NewReaderSize(gz, r.br.Size())
	return nil
}

// Next returns the next line with its terminator ("\n", "\r\n", or none at
// the end of the input), valid until the next call. overlong reports a line
// whose content is longer than the bound: the whole line has been consumed
// and line is nil — an over-long line is one line, never cut into several.
// At the end of the input Next returns io.EOF; other errors are read or
// decompression failures, naming the line.
func (r *Reader) Next() (line []byte, overlong bool, err error) {
	if !r.sniffed {
		if err := r.Sniff(); err != nil {
			return nil, false, err
		}
	}
	r.line++
	line, err = r.br.ReadSlice('\n')
	if err == nil || (errors.Is(err, io.EOF) && len(line) > 0) {
		if ContentLen(line) > r.max {
			return nil, true, nil
		}
		return line, false, nil
	}
	if !errors.Is(err, bufio.ErrBufferFull) {
		if errors.Is(err, io.EOF) {
			return nil, false, io.EOF
		}
		return nil, false, fmt.Errorf("line %d: %w", r.line, err)
	}
	return r.longLine(line)
}

// longLine gathers a line longer than the read buffer, of which first is
// the first part, while it fits the bound; once over it, every later part
// of the line is dropped.
func (r *Reader) longLine(first []byte) ([]byte, bool, error) {
	// Room for the terminator, which the bound does not count.
	limit := r.max + len("\r\n")
	tooLong := len(first) > limit
	r.long = r.long[:0]
	if !tooLong {
		r.long = append(r.long, first...)
	}
	for {
		part, err := r.br.ReadSlice('\n')
		if !tooLong && len(r.long)+len(part) <= limit {
			r.long = append(r.long, part...)
		} else {
			tooLong = true
			r.long = r.long[:0]
		}
		switch {
		case err == nil || errors.Is(err, io.EOF):
			if tooLong || ContentLen(r.long) > r.max {
				return nil, true, nil
			}
			return r.long, false, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return nil, false, fmt.Errorf("line %d: %w", r.line, err)
		}
	}
}

// Line is the 1-based number of the line Next returned last.
func (r *Reader) Line() int { return r.line }

// Close releases the decompressor (the underlying reader is the caller's).
func (r *Reader) Close() error {
	if r.gz != nil {
		return r.gz.Close()
	}
	return nil
}

// ContentLen is a line's length without its "\n" or "\r\n" terminator: the
// bound counts what the line holds.
func ContentLen(line []byte) int {
	n := len(line)
	if n > 0 && line[n-1] == '\n' {
		n--
		if n > 0 && line[n-1] == '\r' {
			n--
		}
	}
	return n
}
