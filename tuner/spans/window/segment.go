package window

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/gatetuner/gatetuner/tuner/spans"
)

// Segment file format (version 1), all integers little-endian:
//
//	header: "GTSPANS\x00" | version u16 | name length u16 | name | CRC-32C u32 of all before
//	record frame: 'R' | spans.Record (48 bytes) | CRC-32C u32 of the 49 bytes before
//	table frame:  'T' | table u8 | index u16 | length u16 | value | CRC-32C u32 of all before
//
// A threshold's value is its 8 float64 bytes, a model's or pod's its UTF-8.
// Every segment starts with the table entries in use when it was opened, so
// it reads back without the segments before it.
const (
	magic        = "GTSPANS\x00"
	version      = 1
	frameRecord  = 'R'
	frameTable   = 'T'
	recordFrame  = 1 + spans.RecordSize + 4
	maxTableText = 4096
	segPrefix    = "seg-"
	segSuffix    = ".gts"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func segName(n uint64) string { return fmt.Sprintf("%s%016x%s", segPrefix, n, segSuffix) }

// listSegments returns the segment numbers in dir, oldest first.
func listSegments(dir string) ([]uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list segments: %w", err)
	}
	var out []uint64
	for _, e := range ents {
		var n uint64
		name := e.Name()
		if !strings.HasPrefix(name, segPrefix) || !strings.HasSuffix(name, segSuffix) {
			continue
		}
		if _, err := fmt.Sscanf(strings.TrimSuffix(strings.TrimPrefix(name, segPrefix), segSuffix), "%016x", &n); err != nil {
			continue
		}
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

func appendHeader(b []byte, name string) []byte {
	start := len(b)
	b = append(b, magic...)
	b = binary.LittleEndian.AppendUint16(b, version)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(name)))
	b = append(b, name...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

func appendRecordFrame(b []byte, r *spans.Record) []byte {
	start := len(b)
	b = append(b, frameRecord)
	b = r.AppendBinary(b)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

func appendTableFrame(b []byte, t spans.Table, i uint16, val []byte) []byte {
	start := len(b)
	b = append(b, frameTable, byte(t))
	b = binary.LittleEndian.AppendUint16(b, i)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(val)))
	b = append(b, val...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// appendTableEntry appends entry i of table t of in.
func appendTableEntry(b []byte, in *spans.Interner, t spans.Table, i int) []byte {
	switch t {
	case spans.TableThreshold:
		return appendTableFrame(b, t, uint16(i), binary.LittleEndian.AppendUint64(nil, math.Float64bits(in.Thresholds[i])))
	case spans.TableModel:
		return appendTableFrame(b, t, uint16(i), []byte(clip(in.Models[i])))
	default:
		return appendTableFrame(b, t, uint16(i), []byte(clip(in.Pods[i])))
	}
}

// clip bounds a table string on disk (a longer one reads back cut).
func clip(s string) string {
	if len(s) > maxTableText {
		return s[:maxTableText]
	}
	return s
}

// errTorn marks where a segment stops being readable.
var errTorn = errors.New("torn or corrupt frame")

// segReader reads one segment's frames.
type segReader struct {
	br   *bufio.Reader
	off  int64
	buf  []byte
	name string
}

func (s *segReader) readHeader() error {
	h := make([]byte, len(magic)+4)
	if _, err := io.ReadFull(s.br, h); err != nil {
		return fmt.Errorf("header: %w", errTorn)
	}
	if string(h[:len(magic)]) != magic {
		return errors.New("not a span segment (bad magic)")
	}
	if v := binary.LittleEndian.Uint16(h[len(magic):]); v != version {
		return fmt.Errorf("segment version %d, this build reads %d", v, version)
	}
	name := make([]byte, binary.LittleEndian.Uint16(h[len(magic)+2:]))
	sum := make([]byte, 4)
	if _, err := io.ReadFull(s.br, name); err != nil {
		return fmt.Errorf("header: %w", errTorn)
	}
	if _, err := io.ReadFull(s.br, sum); err != nil {
		return fmt.Errorf("header: %w", errTorn)
	}
	all := append(h, name...)
	if crc32.Checksum(all, castagnoli) != binary.LittleEndian.Uint32(sum) {
		return fmt.Errorf("header checksum: %w", errTorn)
	}
	s.off = int64(len(all) + 4)
	s.name = string(name)
	return nil
}

// frame is one decoded frame.
type frame struct {
	kind  byte
	rec   spans.Record
	table spans.Table
	index uint16
	val   []byte
}

// next reads one frame; io.EOF at a clean end, errTorn at a partial or
// corrupt frame.
func (s *segReader) next(f *frame) error {
	kind, err := s.br.ReadByte()
	if err == io.EOF {
		return io.EOF
	}
	if err != nil {
		return fmt.Errorf("read frame: %w", err)
	}
	s.buf = append(s.buf[:0], kind)
	switch kind {
	case frameRecord:
		if err := s.fill(spans.RecordSize); err != nil {
			return err
		}
		f.rec = spans.DecodeRecord(s.buf[1:])
	case frameTable:
		if err := s.fill(5); err != nil {
			return err
		}
		n := int(binary.LittleEndian.Uint16(s.buf[4:]))
		if n > maxTableText {
			return errTorn
		}
		if err := s.fill(n); err != nil {
			return err
		}
		f.table, f.index, f.val = spans.Table(s.buf[1]), binary.LittleEndian.Uint16(s.buf[2:]), s.buf[6:]
	default:
		return errTorn
	}
	body := len(s.buf)
	if err := s.fill(4); err != nil {
		return err
	}
	if crc32.Checksum(s.buf[:body], castagnoli) != binary.LittleEndian.Uint32(s.buf[body:]) {
		return errTorn
	}
	f.kind = kind
	s.off += int64(len(s.buf))
	return nil
}

func (s *segReader) fill(n int) error {
	l := len(s.buf)
	s.buf = slices.Grow(s.buf, n)[:l+n]
	if _, err := io.ReadFull(s.br, s.buf[l:]); err != nil {
		return errTorn
	}
	return nil
}

func segPath(dir string, n uint64) string { return filepath.Join(dir, segName(n)) }
