package eppconfig

import (
	"bytes"
	"sort"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// lineTable indexes the lines of a text the way yaml.v3 counts them: CR LF,
// CR, LF, NEL, LS and PS each end a line, and a leading BOM is not part of
// line 1.
type lineTable struct {
	text  []byte
	start []int // offset of each line's first byte
	end   []int // offset of the end of each line's content (before its break)
	brk   []int // byte length of each line's break (0 for the last line)
}

func newLineTable(text []byte) *lineTable {
	t := &lineTable{text: text}
	s := 0
	if bytes.HasPrefix(text, utf8BOM) {
		s = len(utf8BOM)
	}
	i := s
	for i < len(text) {
		n := breakLen(text, i)
		if n == 0 {
			i++
			continue
		}
		t.start = append(t.start, s)
		t.end = append(t.end, i)
		t.brk = append(t.brk, n)
		i += n
		s = i
	}
	t.start = append(t.start, s)
	t.end = append(t.end, len(text))
	t.brk = append(t.brk, 0)
	return t
}

// breakLen returns the length of the line break at text[i], or 0.
func breakLen(text []byte, i int) int {
	switch c := text[i]; {
	case c == '\n':
		return 1
	case c == '\r':
		if i+1 < len(text) && text[i+1] == '\n' {
			return 2
		}
		return 1
	case c == 0xC2 && i+1 < len(text) && text[i+1] == 0x85:
		return 2
	case c == 0xE2 && i+2 < len(text) && text[i+1] == 0x80 && (text[i+2] == 0xA8 || text[i+2] == 0xA9):
		return 3
	}
	return 0
}

func (t *lineTable) lines() int { return len(t.start) }

// content returns line l's bytes without the break (l is 0-based).
func (t *lineTable) content(l int) []byte { return t.text[t.start[l]:t.end[l]] }

// lineBreak returns line l's break, "" for the last line.
func (t *lineTable) lineBreak(l int) string { return string(t.text[t.end[l] : t.end[l]+t.brk[l]]) }

// offset converts a yaml.v3 position (1-based line, 1-based column counted in
// characters) to a byte offset.
func (t *lineTable) offset(line, col int) (int, bool) {
	if line < 1 || line > len(t.start) || col < 1 {
		return 0, false
	}
	off, end := t.start[line-1], t.end[line-1]
	for c := 1; c < col; c++ {
		if off >= end {
			return 0, false
		}
		_, w := utf8.DecodeRune(t.text[off:end])
		off += w
	}
	return off, true
}

// lineOf returns the 0-based line holding offset off.
func (t *lineTable) lineOf(off int) int {
	l := sort.Search(len(t.start), func(i int) bool { return t.start[i] > off }) - 1
	if l < 0 {
		return 0
	}
	return l
}

// newline returns the text's dominant line break ("\r\n" or "\n").
func (t *lineTable) newline() string {
	crlf, lf := 0, 0
	for l := range t.start {
		switch t.lineBreak(l) {
		case "\r\n":
			crlf++
		case "\n":
			lf++
		}
	}
	if crlf > lf {
		return "\r\n"
	}
	return "\n"
}

// textMap maps positions in the text the EPP reads (a whole file, or the
// content of a ConfigMap literal block scalar) to offsets in the file.
type textMap struct {
	in     *lineTable // the config text; node positions refer to it
	out    *lineTable // the file
	first  int        // 0-based file line of the config text's line 0
	indent int        // block indentation stripped from each line (0 for a whole file)
	block  bool
	fixed  int // when > 0, the file line every position reports (lines cannot be mapped)
	// lines, when set, is the 1-based file line of each 0-based line of the
	// text (a config decoded from a double-quoted string).
	lines []int
}

func identityMap(t *lineTable) *textMap { return &textMap{in: t, out: t} }

// fileLine returns the 1-based file line of the config text's 1-based line.
func (m *textMap) fileLine(line int) int {
	if m.fixed > 0 {
		return m.fixed
	}
	if m.lines != nil {
		return m.lines[max(0, min(line, len(m.lines))-1)]
	}
	if line <= 0 {
		return 0
	}
	return m.first + line
}

// outer maps an offset in the config text to an offset in the file.
func (m *textMap) outer(off int) int {
	if !m.block {
		return off
	}
	l := m.in.lineOf(off)
	col := off - m.in.start[l]
	ol := m.first + l
	if ol >= m.out.lines() {
		return len(m.out.text)
	}
	s := m.out.start[ol]
	if m.out.end[ol]-s >= m.indent {
		s += m.indent
	} else {
		s = m.out.end[ol]
	}
	return s + col
}

// breakAfter returns the line break to use for a line inserted after the
// config text's 0-based line l: that line's own break, or the file's.
func (m *textMap) breakAfter(l int) string {
	switch b := m.out.lineBreak(m.first + l); b {
	case "\n", "\r\n", "\r":
		return b
	}
	return m.out.newline()
}

// insertLines returns a splice adding lines after the config text's 0-based
// line l. Each line is given relative to the config text; the block
// indentation is added.
func (m *textMap) insertLines(l int, lines []string) splice {
	var b strings.Builder
	brk := m.breakAfter(l)
	prefix := strings.Repeat(" ", m.indent)
	for _, s := range lines {
		b.WriteString(brk)
		b.WriteString(prefix)
		b.WriteString(s)
	}
	at := m.out.end[m.first+l]
	return splice{start: at, end: at, text: b.String()}
}

// deleteLines returns a splice removing the config text's 0-based lines
// l1..l2 with their breaks.
func (m *textMap) deleteLines(l1, l2 int) splice {
	o1, o2 := m.first+l1, m.first+l2
	if m.out.brk[o2] > 0 {
		return splice{start: m.out.start[o1], end: m.out.end[o2] + m.out.brk[o2]}
	}
	if o1 > 0 {
		return splice{start: m.out.end[o1-1], end: m.out.end[o2]}
	}
	return splice{start: m.out.start[o1], end: m.out.end[o2]}
}

// pos returns the config-text offset of a node's start.
func (m *textMap) pos(n *yaml.Node) (int, error) {
	off, ok := m.in.offset(n.Line, n.Column)
	if !ok {
		return 0, errorf(ErrUnsupported, "cannot locate line %d column %d in the text", n.Line, n.Column)
	}
	return off, nil
}

// splice replaces file bytes [start, end) with text.
type splice struct {
	start, end int
	text       string
}

// applySplices applies non-overlapping splices to data.
func applySplices(data []byte, ss []splice) ([]byte, error) {
	sort.SliceStable(ss, func(i, j int) bool {
		if ss[i].start != ss[j].start {
			return ss[i].start < ss[j].start
		}
		return ss[i].end < ss[j].end
	})
	var out bytes.Buffer
	out.Grow(len(data) + 256)
	prev := 0
	for _, s := range ss {
		if s.start < prev || s.end < s.start || s.end > len(data) {
			return nil, errorf(ErrUnsupported, "internal error: overlapping edits at byte %d", s.start)
		}
		out.Write(data[prev:s.start])
		out.WriteString(s.text)
		prev = s.end
	}
	out.Write(data[prev:])
	return out.Bytes(), nil
}

// byteAt returns text[i], or 0 when i is out of range.
func byteAt(text []byte, i int) byte {
	if i < 0 || i >= len(text) {
		return 0
	}
	return text[i]
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

func isFlowIndicator(c byte) bool {
	return c == ',' || c == '[' || c == ']' || c == '{' || c == '}'
}

// scanPlain returns the end of a single-line plain scalar starting at off.
func scanPlain(t *lineTable, off int, flow bool) int {
	lineEnd := t.end[t.lineOf(off)]
	text := t.text
	end, i := off, off
	for i < lineEnd {
		c := text[i]
		switch {
		case isBlank(c):
			i++
			continue
		case c == '#' && i > off && isBlank(text[i-1]):
			return end
		case c == ':' && (i+1 >= lineEnd || isBlank(text[i+1]) || (flow && isFlowIndicator(text[i+1]))):
			return end
		case flow && isFlowIndicator(c):
			return end
		}
		_, w := utf8.DecodeRune(text[i:lineEnd])
		i += w
		end = i
	}
	return end
}

// scanQuoted returns the offset just past the quoted scalar starting at off.
func scanQuoted(text []byte, off int) (int, bool) {
	q := text[off]
	for i := off + 1; i < len(text); i++ {
		switch c := text[i]; {
		case q == '"' && c == '\\':
			i++
		case c == q && q == '\'' && i+1 < len(text) && text[i+1] == '\'':
			i++
		case c == q:
			return i + 1, true
		}
	}
	return 0, false
}

// scanFlow returns the offset just past the flow collection starting at off.
func scanFlow(text []byte, off int) (int, bool) {
	depth := 0
	prev := byte(' ')
	for i := off; i < len(text); i++ {
		c := text[i]
		switch {
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
			if depth == 0 {
				return i + 1, true
			}
		case (c == '"' || c == '\'') && (isBlank(prev) || isFlowIndicator(prev) || prev == ':' || prev == '\n' || prev == '\r'):
			end, ok := scanQuoted(text, i)
			if !ok {
				return 0, false
			}
			i = end - 1
			c = text[i]
		case c == '#' && (isBlank(prev) || prev == '\n' || prev == '\r'):
			for i < len(text) && text[i] != '\n' && text[i] != '\r' {
				i++
			}
			if i >= len(text) {
				return 0, false
			}
			c = text[i]
		}
		prev = c
	}
	return 0, false
}

// scanAlias returns the end of the alias token "*name" starting at off.
func scanAlias(t *lineTable, off int) int {
	lineEnd := t.end[t.lineOf(off)]
	i := off + 1
	for i < lineEnd && !isBlank(t.text[i]) && !isFlowIndicator(t.text[i]) {
		i++
	}
	return i
}
