package eppconfig

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// A config held in a double-quoted string (what Helm's toYaml and kubectl
// -o yaml write when a line has trailing whitespace) is edited inside the
// string: the edit is planned on the decoded text, each change's ends are
// mapped back to the bytes of the quoted scalar that produce them, and the
// new text is written with double-quoted escapes. The decoder below follows
// yaml.v3's scanner (yaml_parser_scan_flow_scalar) piece by piece, and its
// result must equal the value yaml.v3 decoded, or the config stays read-only.

// dqPiece is a run of a double-quoted scalar's decoded text and the source
// bytes that produce it.
type dqPiece struct {
	d0, d1 int // decoded bytes [d0, d1)
	s0, s1 int // source bytes [s0, s1) in the enclosing text
	// literal: the source bytes are the decoded bytes, so a change may
	// start or end anywhere inside; otherwise (an escape, a folded line
	// break) only at its ends.
	literal bool
}

// quotedMap maps the decoded text of a double-quoted scalar to its source.
type quotedMap struct {
	pieces []dqPiece
	close  int // offset of the closing quote
	size   int // decoded length
}

// quotedEmbed is how an embedded config held in a double-quoted scalar maps
// to the file.
type quotedEmbed struct {
	qm  *quotedMap
	enc *textMap // the enclosing text's map to the file
	key string   // the data key (or values key) holding the string
}

var errNoCloseQuote = errors.New("no closing quote")

// decodeDoubleQuoted decodes the double-quoted scalar whose opening quote is
// text[open], recording where each piece of the result comes from.
func decodeDoubleQuoted(text []byte, open int) (string, *quotedMap, error) {
	if byteAt(text, open) != '"' {
		return "", nil, errors.New("no opening quote")
	}
	d := &dqDecoder{text: text, q: &quotedMap{}, i: open + 1}
	for {
		foldStart, leadingBlanks, err := d.run()
		if err != nil {
			return "", nil, err
		}
		i := d.i
		if i >= len(text) || text[i] == 0 {
			return "", nil, errNoCloseQuote
		}
		if text[i] == '"' {
			d.q.close, d.q.size = i, len(d.out)
			return string(d.out), d.q, nil
		}
		if !leadingBlanks {
			foldStart = i
		}
		d.fold(foldStart, leadingBlanks)
	}
}

// dqDecoder is the state of decodeDoubleQuoted: the text, the position i,
// the decoded output and where its pieces come from.
type dqDecoder struct {
	text []byte
	q    *quotedMap
	out  []byte
	i    int
}

// add appends b, decoded from text[s0:s1], merging a literal piece with the
// literal piece it continues.
func (d *dqDecoder) add(s0, s1 int, b []byte, literal bool) {
	d0 := len(d.out)
	d.out = append(d.out, b...)
	if n := len(d.q.pieces); literal && n > 0 {
		if p := &d.q.pieces[n-1]; p.literal && p.s1 == s0 && p.d1 == d0 {
			p.s1, p.d1 = s1, len(d.out)
			return
		}
	}
	d.q.pieces = append(d.q.pieces, dqPiece{d0: d0, d1: len(d.out), s0: s0, s1: s1, literal: literal})
}

// run decodes up to a blank, a line break, the closing quote or an escaped
// line break; after an escaped line break it returns where the fold starts
// and leadingBlanks set.
func (d *dqDecoder) run() (foldStart int, leadingBlanks bool, err error) {
	text := d.text
	for d.i < len(text) && !isBlank(text[d.i]) && breakLen(text, d.i) == 0 && text[d.i] != 0 && text[d.i] != '"' {
		i := d.i
		if text[i] != '\\' {
			_, w := utf8.DecodeRune(text[i:])
			d.add(i, i+w, text[i:i+w], true)
			d.i += w
			continue
		}
		if n := breakLen(text, i+1); i+1 < len(text) && n > 0 { // an escaped line break
			d.i += 1 + n
			return i, true, nil
		}
		b, n, err := decodeEscape(text, i)
		if err != nil {
			return 0, false, err
		}
		d.add(i, i+n, b, false)
		d.i += n
	}
	return -1, false, nil
}

// fold decodes the blanks and line breaks from d.i as YAML folds them in a
// double-quoted scalar: the piece starts at foldStart.
func (d *dqDecoder) fold(foldStart int, leadingBlanks bool) {
	text := d.text
	var leadingBreak, trailingBreaks []byte
	for d.i < len(text) && (isBlank(text[d.i]) || breakLen(text, d.i) > 0) {
		if isBlank(text[d.i]) {
			d.i++
			continue
		}
		n := breakLen(text, d.i)
		br := []byte{'\n'}
		if n == 3 { // LS and PS are kept as they are
			br = text[d.i : d.i+3]
		}
		if !leadingBlanks {
			leadingBreak, leadingBlanks = br, true
		} else {
			trailingBreaks = append(trailingBreaks, br...)
		}
		d.i += n
	}
	i := d.i
	switch {
	case !leadingBlanks: // blanks between words, kept as written
		d.add(foldStart, i, text[foldStart:i], true)
	case len(leadingBreak) > 0 && leadingBreak[0] == '\n' && len(trailingBreaks) == 0:
		d.add(foldStart, i, []byte{' '}, false)
	case len(leadingBreak) > 0 && leadingBreak[0] == '\n':
		d.add(foldStart, i, trailingBreaks, false)
	default:
		d.add(foldStart, i, append(append([]byte(nil), leadingBreak...), trailingBreaks...), false)
	}
}

// simpleEscapes are yaml.v3's one-character escapes and what they stand for.
var simpleEscapes = map[byte]string{'0': "\x00", 'a': "\a", 'b': "\b", 't': "\t", '\t': "\t", 'n': "\n", 'v': "\v", 'f': "\f",
	'r': "\r", 'e': "\x1b", ' ': " ", '"': "\"", '\'': "'", '\\': "\\", 'N': "\u0085", '_': "\u00a0", 'L': "\u2028", 'P': "\u2029"}

// decodeEscape decodes the escape sequence at text[i] ('\\') as yaml.v3
// does, returning its bytes and its source length.
func decodeEscape(text []byte, i int) ([]byte, int, error) {
	c := byteAt(text, i+1)
	if s, ok := simpleEscapes[c]; ok {
		return []byte(s), 2, nil
	}
	digits := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
	if digits == 0 {
		return nil, 0, fmt.Errorf("unknown escape character %q", c)
	}
	value := 0
	for k := 0; k < digits; k++ {
		h := byteAt(text, i+2+k)
		switch {
		case h >= '0' && h <= '9':
			value = value<<4 + int(h-'0')
		case h >= 'a' && h <= 'f':
			value = value<<4 + int(h-'a'+10)
		case h >= 'A' && h <= 'F':
			value = value<<4 + int(h-'A'+10)
		default:
			return nil, 0, errors.New("escape without its hexadecimal digits")
		}
	}
	if (value >= 0xD800 && value <= 0xDFFF) || value > 0x10FFFF {
		return nil, 0, errors.New("escape of an invalid Unicode character")
	}
	return utf8.AppendRune(nil, rune(value)), 2 + digits, nil
}

// start maps a decoded offset where a change begins to the source offset:
// inside a literal run, or at the first piece that produces text there
// (past pieces that produce none, such as an escaped line break).
func (q *quotedMap) start(d int) (int, bool) {
	for _, p := range q.pieces {
		switch {
		case p.d0 == d && p.d1 > p.d0:
			return p.s0, true
		case p.d0 < d && d < p.d1:
			return p.s0 + (d - p.d0), p.literal
		}
	}
	return q.close, d == q.size
}

// end maps a decoded offset where a change ends (or an insertion point) to
// the source offset: inside a literal run, or before the first piece at d.
func (q *quotedMap) end(d int) (int, bool) {
	for _, p := range q.pieces {
		switch {
		case p.d0 == d:
			return p.s0, true
		case p.d0 < d && d < p.d1:
			return p.s0 + (d - p.d0), p.literal
		}
	}
	return q.close, d == q.size
}

// lineStart returns the source offset of the piece holding decoded offset d.
func (q *quotedMap) lineStart(d int) int {
	for _, p := range q.pieces {
		if p.d0 <= d && d < p.d1 {
			if p.literal {
				return p.s0 + (d - p.d0)
			}
			return p.s0
		}
	}
	return q.close
}

// encodeDoubleQuoted writes text for the inside of a double-quoted scalar:
// backslash, quote and control characters escaped, and a blank at either end
// escaped so that no line folding next to it can absorb it.
func encodeDoubleQuoted(s string) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == '"':
			b.WriteString(`\"`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == ' ' && (i == 0 || i == len(s)-1):
			b.WriteString(`\ `)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r == 0x85:
			b.WriteString(`\N`)
		case r == 0x2028:
			b.WriteString(`\L`)
		case r == 0x2029:
			b.WriteString(`\P`)
		case r == 0xFEFF:
			b.WriteString(`\uFEFF`)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// quotedTextMap maps the double-quoted scalar v (key k) of text (mapped to
// the file by enc) for editing: an identity map over the decoded text whose
// lines report the file lines their bytes are on. It fails when the value
// cannot be decoded byte for byte as yaml.v3 did.
func quotedTextMap(text *lineTable, enc *textMap, k, v *yaml.Node) (*textMap, *quotedEmbed, error) {
	if v.Style&yaml.DoubleQuotedStyle == 0 || v.Style&yaml.TaggedStyle != 0 || v.Anchor != "" {
		return nil, nil, errors.New("not a plain double-quoted scalar")
	}
	open, ok := text.offset(v.Line, v.Column)
	if !ok {
		return nil, nil, errors.New("its opening quote cannot be located")
	}
	s, qm, err := decodeDoubleQuoted(text.text, open)
	if err != nil {
		return nil, nil, err
	}
	if s != v.Value {
		return nil, nil, errors.New("it does not decode here as the YAML parser decoded it")
	}
	in := newLineTable([]byte(s))
	lines := make([]int, in.lines())
	for l := range lines {
		lines[l] = enc.fileLine(text.lineOf(qm.lineStart(in.start[l])) + 1)
	}
	return &textMap{in: in, out: in, lines: lines}, &quotedEmbed{qm: qm, enc: enc, key: k.Value}, nil
}

// translate turns splices of the decoded text into splices of the file.
func (e *quotedEmbed) translate(ss []splice) error {
	for i, s := range ss {
		var a, b int
		var okA, okB bool
		if s.start == s.end {
			a, okA = e.qm.end(s.start)
			b, okB = a, okA
		} else {
			a, okA = e.qm.start(s.start)
			b, okB = e.qm.end(s.end)
		}
		if !okA || !okB {
			return errorf(ErrUnsupported, "the value of key %q is a double-quoted string and the change would begin or end inside "+
				"an escape sequence or a folded line break of it; rewrite it as a literal block scalar (%s: |, the config lines "+
				"indented below it, trailing spaces removed) or edit it by hand", e.key, e.key)
		}
		ss[i] = splice{start: e.enc.outer(a), end: e.enc.outer(b), text: encodeDoubleQuoted(s.text)}
	}
	return nil
}

// checkQuoted checks that every edited double-quoted config of g reads back
// as exactly its original text with the planned changes.
func (p *plan) checkQuoted(f, g *File) error {
	for _, c := range f.configs {
		dec, ok := p.decoded[c]
		if !ok {
			continue
		}
		want, err := applySplices(c.tm.in.text, append([]splice(nil), dec...))
		if err != nil {
			return &Error{Source: f.source, Err: err}
		}
		gc := g.config(c.id)
		if gc == nil || !bytes.Equal(gc.tm.in.text, want) {
			return &Error{Source: f.source, Line: c.dataKeyLn, DataKey: c.DataKey, Err: errorf(ErrUnintended,
				"edit refused: the double-quoted value of key %q does not read back as the intended text; rewrite it as a "+
					"literal block scalar (%s: |) or edit it by hand", c.quoted.key, c.quoted.key)}
		}
	}
	return nil
}
