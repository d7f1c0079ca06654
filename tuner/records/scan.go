package records

import (
	"errors"
	"math"
	"strconv"
	"unicode/utf8"
)

// scanner is a minimal JSON tokenizer over one line, enough to decode gate
// records without reflection or per-record allocation.
type scanner struct {
	b   []byte
	pos int
	// str is scratch space for strings with escapes.
	str []byte
}

var errSyntax = errors.New("not valid JSON")

func (s *scanner) reset(b []byte) { s.b, s.pos = b, 0 }

func (s *scanner) skipWS() {
	for s.pos < len(s.b) {
		switch s.b[s.pos] {
		case ' ', '\t', '\r', '\n':
			s.pos++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, or 0 at the end.
func (s *scanner) peek() byte {
	s.skipWS()
	if s.pos < len(s.b) {
		return s.b[s.pos]
	}
	return 0
}

func (s *scanner) expect(c byte) error {
	if s.peek() != c {
		return errSyntax
	}
	s.pos++
	return nil
}

// literal consumes "null", "true" or "false".
func (s *scanner) literal(lit string) bool {
	if len(s.b)-s.pos >= len(lit) && string(s.b[s.pos:s.pos+len(lit)]) == lit {
		s.pos += len(lit)
		return true
	}
	return false
}

// isNull consumes a null if one is next.
func (s *scanner) isNull() bool {
	if s.peek() == 'n' {
		return s.literal("null")
	}
	return false
}

// stringBytes reads a JSON string. The result aliases the line when the
// string has no escapes, else the scanner's scratch buffer (valid until the
// next string with escapes); copy it to keep it.
func (s *scanner) stringBytes() ([]byte, error) {
	if s.peek() != '"' {
		return nil, errSyntax
	}
	s.pos++
	start := s.pos
	for s.pos < len(s.b) {
		c := s.b[s.pos]
		switch {
		case c == '"':
			out := s.b[start:s.pos]
			s.pos++
			return out, nil
		case c == '\\':
			return s.escapedString(start)
		case c < 0x20:
			return nil, errSyntax
		}
		s.pos++
	}
	return nil, errSyntax
}

func (s *scanner) escapedString(start int) ([]byte, error) {
	s.str = append(s.str[:0], s.b[start:s.pos]...)
	for s.pos < len(s.b) {
		c := s.b[s.pos]
		switch {
		case c == '"':
			s.pos++
			return s.str, nil
		case c < 0x20:
			return nil, errSyntax
		case c != '\\':
			s.str = append(s.str, c)
			s.pos++
			continue
		}
		s.pos++
		if s.pos >= len(s.b) {
			return nil, errSyntax
		}
		e := s.b[s.pos]
		s.pos++
		switch e {
		case '"', '\\', '/':
			s.str = append(s.str, e)
		case 'b':
			s.str = append(s.str, '\b')
		case 'f':
			s.str = append(s.str, '\f')
		case 'n':
			s.str = append(s.str, '\n')
		case 'r':
			s.str = append(s.str, '\r')
		case 't':
			s.str = append(s.str, '\t')
		case 'u':
			r, ok := s.hex4()
			if !ok {
				return nil, errSyntax
			}
			if r >= 0xD800 && r < 0xDC00 { // surrogate pair
				if s.pos+1 < len(s.b) && s.b[s.pos] == '\\' && s.b[s.pos+1] == 'u' {
					s.pos += 2
					r2, ok := s.hex4()
					if !ok {
						return nil, errSyntax
					}
					if r2 >= 0xDC00 && r2 < 0xE000 {
						r = (r-0xD800)<<10 + (r2 - 0xDC00) + 0x10000
					} else {
						r = utf8.RuneError
					}
				} else {
					r = utf8.RuneError
				}
			}
			s.str = utf8.AppendRune(s.str, r)
		default:
			return nil, errSyntax
		}
	}
	return nil, errSyntax
}

func (s *scanner) hex4() (rune, bool) {
	if s.pos+4 > len(s.b) {
		return 0, false
	}
	var r rune
	for _, c := range s.b[s.pos : s.pos+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	s.pos += 4
	return r, true
}

// number returns the bytes of a JSON number.
func (s *scanner) number() ([]byte, error) {
	s.skipWS()
	start := s.pos
	if s.pos < len(s.b) && s.b[s.pos] == '-' {
		s.pos++
	}
	digits := func() int {
		n := 0
		for s.pos < len(s.b) && s.b[s.pos] >= '0' && s.b[s.pos] <= '9' {
			s.pos++
			n++
		}
		return n
	}
	intStart := s.pos
	if n := digits(); n == 0 || (n > 1 && s.b[intStart] == '0') {
		return nil, errSyntax
	}
	if s.pos < len(s.b) && s.b[s.pos] == '.' {
		s.pos++
		if digits() == 0 {
			return nil, errSyntax
		}
	}
	if s.pos < len(s.b) && (s.b[s.pos] == 'e' || s.b[s.pos] == 'E') {
		s.pos++
		if s.pos < len(s.b) && (s.b[s.pos] == '+' || s.b[s.pos] == '-') {
			s.pos++
		}
		if digits() == 0 {
			return nil, errSyntax
		}
	}
	return s.b[start:s.pos], nil
}

// errType marks a value of the wrong JSON type; errNegative a negative count.
var (
	errType     = errors.New("wrong type")
	errNegative = errors.New("negative")
	errRange    = errors.New("out of range")
)

// count reads a non-negative integer (a JSON number with no fraction or
// exponent).
func (s *scanner) count() (int64, error) {
	c := s.peek()
	if c != '-' && (c < '0' || c > '9') {
		if err := s.skipValue(); err != nil {
			return 0, err
		}
		return 0, errType
	}
	num, err := s.number()
	if err != nil {
		return 0, err
	}
	if num[0] == '-' {
		return 0, errNegative
	}
	var v int64
	for _, d := range num {
		if d < '0' || d > '9' {
			return 0, errType
		}
		if v > (math.MaxInt64-int64(d-'0'))/10 {
			return 0, errRange
		}
		v = v*10 + int64(d-'0')
	}
	return v, nil
}

// float reads a JSON number, or one of the strings "NaN", "+Inf", "-Inf"
// ("Inf" and "Infinity" spellings accepted).
func (s *scanner) float() (float64, error) {
	switch c := s.peek(); {
	case c == '"':
		str, err := s.stringBytes()
		if err != nil {
			return 0, err
		}
		switch string(str) {
		case "NaN":
			return math.NaN(), nil
		case "+Inf", "Inf", "+Infinity", "Infinity":
			return math.Inf(1), nil
		case "-Inf", "-Infinity":
			return math.Inf(-1), nil
		}
		return 0, errType
	case c == '-' || (c >= '0' && c <= '9'):
		num, err := s.number()
		if err != nil {
			return 0, err
		}
		f, err := strconv.ParseFloat(string(num), 64)
		if err != nil {
			return 0, errRange
		}
		return f, nil
	}
	if err := s.skipValue(); err != nil {
		return 0, err
	}
	return 0, errType
}

// skipValue consumes any JSON value, checking its syntax.
func (s *scanner) skipValue() error {
	switch c := s.peek(); {
	case c == '"':
		_, err := s.stringBytes()
		return err
	case c == '{':
		s.pos++
		if s.peek() == '}' {
			s.pos++
			return nil
		}
		for {
			if _, err := s.stringBytes(); err != nil {
				return err
			}
			if err := s.expect(':'); err != nil {
				return err
			}
			if err := s.skipValue(); err != nil {
				return err
			}
			switch s.peek() {
			case ',':
				s.pos++
			case '}':
				s.pos++
				return nil
			default:
				return errSyntax
			}
		}
	case c == '[':
		s.pos++
		if s.peek() == ']' {
			s.pos++
			return nil
		}
		for {
			if err := s.skipValue(); err != nil {
				return err
			}
			switch s.peek() {
			case ',':
				s.pos++
			case ']':
				s.pos++
				return nil
			default:
				return errSyntax
			}
		}
	case c == 't':
		if s.literal("true") {
			return nil
		}
	case c == 'f':
		if s.literal("false") {
			return nil
		}
	case c == 'n':
		if s.literal("null") {
			return nil
		}
	case c == '-' || (c >= '0' && c <= '9'):
		_, err := s.number()
		return err
	}
	return errSyntax
}

// object iterates the members of an object, calling fn with each key; fn
// must consume the value.
func (s *scanner) object(fn func(key []byte) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if s.peek() == '}' {
		s.pos++
		return nil
	}
	for {
		key, err := s.stringBytes()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := fn(key); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return nil
		default:
			return errSyntax
		}
	}
}
