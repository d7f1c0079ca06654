package shadow

import (
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/jsonenc"
)

// AppendDecisionJSON appends one --decisions-out line: requestId, outcome,
// reason, kept (endpoint names in order), gapTokens, matchedTokens,
// penaltyMs and verdict (numbers null when the decision did not reach them).
func AppendDecisionJSON(dst []byte, line int, requestID []byte, names [][]byte, s *gate.Settings, eps []gate.Endpoint, d *gate.Decision) []byte {
	dst = append(dst, `{"line":`...)
	dst = strconv.AppendInt(dst, int64(line), 10)
	dst = append(dst, `,"requestId":`...)
	dst = appendJSONString(dst, requestID)
	dst = append(dst, `,"outcome":"`...)
	dst = append(dst, d.Outcome.String()...)
	dst = append(dst, `","reason":"`...)
	dst = append(dst, d.Reason.String()...)
	dst = append(dst, `","kept":[`...)
	first := true
	for i := range eps {
		if !d.Keeps(s, &eps[i]) {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		var name []byte
		if i < len(names) {
			name = names[i]
		}
		if name == nil {
			dst = append(dst, '"', '#')
			dst = strconv.AppendInt(dst, int64(i), 10)
			dst = append(dst, '"')
			continue
		}
		dst = appendJSONString(dst, name)
	}
	dst = append(dst, `],"gapTokens":`...)
	if d.BestSticky >= 0 && d.BestNonSticky >= 0 {
		dst = strconv.AppendInt(dst, d.GapTokens, 10)
		dst = append(dst, `,"matchedTokens":`...)
		dst = strconv.AppendInt(dst, d.MatchedTokens, 10)
	} else {
		dst = append(dst, `null,"matchedTokens":null`...)
	}
	dst = append(dst, `,"penaltyMs":`...)
	switch {
	case d.TTFTCompared && (math.IsNaN(d.PenaltyMs) || math.IsInf(d.PenaltyMs, 0)):
		dst = append(dst, jsonenc.Float(d.PenaltyMs, 64)...)
	case d.TTFTCompared:
		dst = strconv.AppendFloat(dst, d.PenaltyMs, 'g', -1, 64)
	default:
		dst = append(dst, `null`...)
	}
	v, excess := gate.Judge(d)
	dst = append(dst, `,"verdict":"`...)
	dst = append(dst, v.String()...)
	dst = append(dst, `","excessTokens":`...)
	dst = strconv.AppendInt(dst, excess, 10)
	if d.ExplorationPossible {
		dst = append(dst, `,"explorationPossible":true`...)
	}
	return append(dst, "}\n"...)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string (invalid UTF-8 becomes U+FFFD).
func appendJSONString(dst, s []byte) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, `\ufffd`...)
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}
