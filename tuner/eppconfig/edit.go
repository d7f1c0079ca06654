package eppconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gatetuner/gatetuner/gate"
	"gopkg.in/yaml.v3"
)

// Value is a parameter value to write: a number, a string or a boolean.
type Value struct {
	kind valueKind
	num  float64
	str  string
	b    bool
}

type valueKind uint8

const (
	kindInvalid valueKind = iota
	kindNumber
	kindString
	kindBool
)

// Number returns a numeric value; it is written in the shortest form that
// reads back exactly, without exponent for ordinary magnitudes.
func Number(v float64) Value { return Value{kind: kindNumber, num: v} }

// String returns a string value.
func String(s string) Value { return Value{kind: kindString, str: s} }

// Bool returns a boolean value.
func Bool(b bool) Value { return Value{kind: kindBool, b: b} }

// String renders the value as it would be written in plain style.
func (v Value) String() string {
	s, err := v.render(0)
	if err != nil {
		return "<invalid: " + err.Error() + ">"
	}
	return s
}

var plainSafe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_./-]*$`)

// yaml11Words are plain scalars YAML 1.1 (which the EPP's YAML library
// implements) reads as booleans or null.
var yaml11Words = map[string]bool{"y": true, "n": true, "yes": true, "no": true, "on": true, "off": true,
	"true": true, "false": true, "null": true}

// render writes the value as a YAML scalar; style is the style of the scalar
// it replaces (quoted strings keep their quoting).
func (v Value) render(style yaml.Style) (string, error) {
	switch v.kind {
	case kindNumber:
		return formatNumber(v.num)
	case kindBool:
		return strconv.FormatBool(v.b), nil
	case kindString:
		s := v.str
		if !utf8.ValidString(s) {
			return "", errors.New("string value is not valid UTF-8")
		}
		printable := !strings.ContainsFunc(s, func(r rune) bool {
			return r < 0x20 || r == 0x7f || r == 0x85 || r == 0x2028 || r == 0x2029 || r == 0xFEFF
		})
		switch {
		case style&yaml.SingleQuotedStyle != 0 && printable:
			return "'" + strings.ReplaceAll(s, "'", "''") + "'", nil
		case style&yaml.DoubleQuotedStyle == 0 && plainSafe.MatchString(s) && !yaml11Words[strings.ToLower(s)]:
			return s, nil
		}
		return strconv.Quote(s), nil
	}
	return "", errors.New("no value given")
}

// formatNumber writes a finite number in the shortest exact form, without
// exponent for magnitudes in [1e-6, 1e21).
func formatNumber(f float64) (string, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "", fmt.Errorf("number %v is not finite", f)
	}
	if f == 0 {
		return "0", nil
	}
	if a := math.Abs(f); a >= 1e-6 && a < 1e21 {
		return strconv.FormatFloat(f, 'f', -1, 64), nil
	}
	return strconv.FormatFloat(f, 'g', -1, 64), nil
}

// matches reports whether a JSON value (as the EPP receives it) equals v.
func (v Value) matches(raw json.RawMessage) bool {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var x any
	if dec.Decode(&x) != nil {
		return false
	}
	switch t := x.(type) {
	case json.Number:
		f, err := strconv.ParseFloat(string(t), 64)
		return v.kind == kindNumber && err == nil && f == v.num
	case string:
		return v.kind == kindString && t == v.str
	case bool:
		return v.kind == kindBool && t == v.b
	}
	return false
}

// Change sets or removes parameter keys of one filter instance.
type Change struct {
	Target
	// Set writes these keys: in place when present (any spelling), else on a
	// new line after the last parameter.
	Set map[gate.Key]Value
	// Remove deletes these keys' lines; absent keys are ignored.
	Remove []gate.Key
}

// Edit applies changes to the original bytes by splicing and returns the
// edited bytes. The result is parsed again and must differ from the original
// only by the changes, and every edited instance must pass the EPP's
// validation for prof; otherwise Edit returns an error and no bytes.
func (f *File) Edit(changes []Change, prof gate.Profile) ([]byte, error) {
	type job struct {
		in     Instance
		set    map[gate.Key]Value
		remove map[gate.Key]bool
	}
	var jobs []*job
	for _, ch := range changes {
		in, err := f.Select(ch.Target)
		if err != nil {
			return nil, err
		}
		var j *job
		for _, x := range jobs {
			if x.in == in {
				j = x
			}
		}
		if j == nil {
			j = &job{in: in, set: map[gate.Key]Value{}, remove: map[gate.Key]bool{}}
			jobs = append(jobs, j)
		}
		invalid := func(format string, a ...any) error {
			return in.fail(0, errorf(ErrInvalidChange, format, a...))
		}
		for k, v := range ch.Set {
			if !knownKey(k) {
				return nil, invalid("unknown parameter key %s", k)
			}
			if _, err := v.render(0); err != nil {
				return nil, invalid("%s: %v", k, err)
			}
			if !prof.Accepts(k) {
				return nil, in.fail(in.keyLine(k.String()), &gate.ParamError{Key: k.String(),
					Err: fmt.Errorf("%w: build profile %s does not accept %s; an EPP of that build would crash-loop on it", gate.ErrUnknownKey, prof.Name, k)})
			}
			if prev, ok := j.set[k]; (ok && prev != v) || j.remove[k] {
				return nil, invalid("conflicting changes to %s", k)
			}
			j.set[k] = v
		}
		for _, k := range ch.Remove {
			if !knownKey(k) {
				return nil, invalid("unknown parameter key %s", k)
			}
			if _, ok := j.set[k]; ok {
				return nil, invalid("conflicting changes to %s (set and removed)", k)
			}
			j.remove[k] = true
		}
	}
	var p plan
	for _, j := range jobs {
		if err := p.instance(j.in, j.set, j.remove); err != nil {
			return nil, err
		}
	}
	out, err := applySplices(f.data, p.splices)
	if err != nil {
		return nil, &Error{Source: f.source, Err: err}
	}
	g, err := ParseFor(out, f.source, f.loader)
	if err != nil {
		return nil, &Error{Source: f.source, Err: errorf(ErrUnintended, "edit refused: the edited text does not parse (%v)", err)}
	}
	if err := f.verify(g, p.expects); err != nil {
		return nil, err
	}
	if err := p.checkQuoted(f, g); err != nil {
		return nil, err
	}
	for _, j := range jobs {
		if err := checkEdited(g, j.in, j.set, j.remove, prof); err != nil {
			return nil, err
		}
		if err := g.config(j.in.Config.id).CheckStartup(prof); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func knownKey(k gate.Key) bool {
	lk, ok := gate.LookupKey(k.String())
	return ok && lk == k
}

// checkEdited validates an edited instance with the build profile and checks
// that the EPP reads exactly the requested values.
func checkEdited(g *File, in Instance, set map[gate.Key]Value, remove map[gate.Key]bool, prof gate.Profile) error {
	gc := g.config(in.Config.id)
	if gc == nil || in.index >= len(gc.Plugins) || gc.Plugins[in.index].Name != in.Plugin.Name {
		return in.fail(0, errorf(ErrUnintended, "edit refused: the plugin is not where it was after the edit"))
	}
	gin := Instance{Config: gc, Plugin: &gc.Plugins[in.index], index: in.index}
	obj, err := gin.paramObject()
	if err != nil {
		return in.fail(0, errorf(ErrUnintended, "edit refused: %v", err))
	}
	if _, err := gate.ParseParams(gin.Plugin.Parameters, prof); err != nil {
		var pe *gate.ParamError
		line := 0
		if errors.As(err, &pe) {
			line = in.keyLine(pe.Key)
		}
		return in.fail(line, fmt.Errorf("edit refused: %w", err))
	}
	lookup := func(k gate.Key) (json.RawMessage, bool) {
		for s, raw := range obj {
			if lk, ok := gate.LookupKey(s); ok && lk == k {
				return raw, true
			}
		}
		return nil, false
	}
	for k, v := range set {
		if raw, ok := lookup(k); !ok || !v.matches(raw) {
			return in.fail(0, errorf(ErrUnintended, "edit refused: after the edit the EPP reads %s as %s, not %s", k, raw, v))
		}
	}
	for k := range remove {
		if raw, ok := lookup(k); ok && string(raw) != "null" {
			return in.fail(0, errorf(ErrUnintended, "edit refused: %s is still set after removing it", k))
		}
	}
	return nil
}

// config returns the config with the given id (document and path).
func (f *File) config(id string) *Config {
	for _, c := range f.configs {
		if c.id == id {
			return c
		}
	}
	return nil
}

// plan collects the splices and expected results of an edit.
type plan struct {
	splices []splice
	expects []*expectation
	// decoded holds, for a config in a double-quoted string, its splices
	// on the decoded text (p.splices has them translated to the file).
	decoded map[*Config][]splice
}

// expectation is what an edited instance's parameters must be afterwards.
type expectation struct {
	cfg      *Config
	index    int
	created  bool      // a parameters key was added to the entry
	emptied  bool      // a block mapping lost all its keys: parameters is now null
	pairs    []expPair // the resulting parameters, in order
	original *yaml.Node
}

// expPair is one key of an expected parameters mapping: a kept original value
// (val) or newly written text.
type expPair struct {
	key  *yaml.Node // original key node; nil for a new key
	val  *yaml.Node // original value node; nil when text was written
	name string
	text string
}

type newPair struct {
	key  gate.Key
	text string
}

func (p *plan) add(s splice) { p.splices = append(p.splices, s) }

// instance plans the splices for one filter instance; for a config in a
// double-quoted string they are planned on the decoded text and translated.
func (p *plan) instance(in Instance, set map[gate.Key]Value, remove map[gate.Key]bool) error {
	first := len(p.splices)
	if err := p.planInstance(in, set, remove); err != nil {
		return err
	}
	c := in.Config
	if c.quoted == nil || len(p.splices) == first {
		return nil
	}
	if p.decoded == nil {
		p.decoded = map[*Config][]splice{}
	}
	p.decoded[c] = append(p.decoded[c], p.splices[first:]...)
	if err := c.quoted.translate(p.splices[first:]); err != nil {
		return in.fail(c.dataKeyLn, err)
	}
	return nil
}

// replace plans the replacement of an existing value and returns the text written.
func (p *plan) replace(m *textMap, in Instance, k, v *yaml.Node, val Value, flow bool) (string, error) {
	unsupported := func(format string, a ...any) (string, error) {
		return "", in.fail(m.fileLine(v.Line), errorf(ErrUnsupported, "parameter %q: "+format, append([]any{k.Value}, a...)...))
	}
	switch {
	case v.Kind == yaml.AliasNode:
		return unsupported("the value is an alias (*%s); edit it by hand", v.Value)
	case v.Anchor != "" || v.Style&yaml.TaggedStyle != 0:
		return unsupported("the value carries an anchor or tag; edit it by hand")
	case v.Kind != yaml.ScalarNode:
		return unsupported("the value is not a scalar")
	case v.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0:
		return unsupported("the value is a block scalar; edit it by hand")
	}
	style := v.Style
	if isEmptyNull(v) || v.ShortTag() == "!!null" {
		style = 0
	}
	text, err := val.render(style)
	if err != nil {
		return "", in.fail(0, errorf(ErrInvalidChange, "%s: %v", k.Value, err))
	}
	if isEmptyNull(v) {
		colon, err := keyColon(m, k, flow)
		if err != nil {
			return "", in.fail(0, err)
		}
		p.add(splice{start: m.outer(colon), end: m.outer(colon), text: " " + text})
		return text, nil
	}
	s, err := m.pos(v)
	if err != nil {
		return "", in.fail(0, err)
	}
	e, err := valueEnd(m, k, v, flow)
	if err != nil {
		return "", in.fail(0, err)
	}
	p.add(splice{start: m.outer(s), end: m.outer(e), text: text})
	return text, nil
}

// indentStep returns the indentation step of the config's parameters blocks
// (2 when no block-style parameters show one).
func (c *Config) indentStep() int {
	if c.pluginsSeq == nil {
		return 2
	}
	for _, e := range c.pluginsSeq.Content {
		pk, pv := mapPair(resolve(e), "parameters")
		if pk != nil && pv != nil && pv.Kind == yaml.MappingNode && pv.Style&yaml.FlowStyle == 0 && len(pv.Content) > 0 {
			if step := pv.Content[0].Column - pk.Column; step > 0 {
				return step
			}
		}
	}
	return 2
}

func isEmptyNull(v *yaml.Node) bool {
	return v.Kind == yaml.ScalarNode && v.Value == "" && v.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.TaggedStyle) == 0 &&
		v.ShortTag() == "!!null"
}

func hasMerge(m *yaml.Node) bool {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].ShortTag() == "!!merge" {
			return true
		}
	}
	return false
}

// linePrefix returns the whitespace before a key on its line, or as many
// spaces as the key's column when other text (a "- ") precedes it.
func linePrefix(m *textMap, k *yaml.Node) (string, error) {
	off, err := m.pos(k)
	if err != nil {
		return "", err
	}
	pre := m.in.text[m.in.start[m.in.lineOf(off)]:off]
	if len(bytes.Trim(pre, " \t")) == 0 {
		return string(pre), nil
	}
	return strings.Repeat(" ", utf8.RuneCount(pre)), nil
}

// keyColon returns the offset just past the ':' that follows a mapping key.
func keyColon(m *textMap, k *yaml.Node, flow bool) (int, error) {
	if k.Kind != yaml.ScalarNode || k.Style&yaml.TaggedStyle != 0 || k.Anchor != "" {
		return 0, errorf(ErrUnsupported, "key %q carries a tag or anchor or is not a scalar", k.Value)
	}
	t := m.in
	off, err := m.pos(k)
	if err != nil {
		return 0, err
	}
	var end int
	if k.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
		var ok bool
		if c := byteAt(t.text, off); c != '"' && c != '\'' {
			return 0, errorf(ErrUnsupported, "cannot locate key %q", k.Value)
		}
		if end, ok = scanQuoted(t.text, off); !ok {
			return 0, errorf(ErrUnsupported, "cannot find the end of key %q", k.Value)
		}
	} else {
		end = scanPlain(t, off, flow)
		if string(t.text[off:end]) != k.Value {
			return 0, errorf(ErrUnsupported, "cannot locate key %q (explicit or multi-line keys are not supported)", k.Value)
		}
	}
	lineEnd := t.end[t.lineOf(end)]
	for end < lineEnd && isBlank(t.text[end]) {
		end++
	}
	if end >= lineEnd || t.text[end] != ':' {
		return 0, errorf(ErrUnsupported, "cannot find the ':' after key %q", k.Value)
	}
	return end + 1, nil
}

// valueEnd returns the offset just past a mapping value (for an empty null
// value: just past its key's ':').
func valueEnd(m *textMap, k, v *yaml.Node, flow bool) (int, error) {
	t := m.in
	unsupported := func(why string) (int, error) {
		return 0, errorf(ErrUnsupported, "the value of %q %s; edit it by hand", k.Value, why)
	}
	if v.Kind != yaml.AliasNode && (v.Style&yaml.TaggedStyle != 0 || v.Anchor != "") {
		return unsupported("carries a tag or anchor")
	}
	if isEmptyNull(v) {
		return keyColon(m, k, flow)
	}
	off, err := m.pos(v)
	if err != nil {
		return 0, err
	}
	c := byteAt(t.text, off)
	switch {
	case v.Kind == yaml.AliasNode:
		if c != '*' {
			return unsupported("cannot be located")
		}
		return scanAlias(t, off), nil
	case v.Kind == yaml.ScalarNode && v.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0:
		if c != '"' && c != '\'' {
			return unsupported("cannot be located")
		}
		end, ok := scanQuoted(t.text, off)
		if !ok {
			return unsupported("has no closing quote")
		}
		return end, nil
	case v.Kind == yaml.ScalarNode && v.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0:
		return unsupported("is a block scalar")
	case v.Kind == yaml.ScalarNode:
		end := scanPlain(t, off, flow)
		if string(t.text[off:end]) != v.Value {
			return unsupported("spans several lines")
		}
		return end, nil
	case v.Style&yaml.FlowStyle != 0 && (c == '{' || c == '['):
		end, ok := scanFlow(t.text, off)
		if !ok {
			return unsupported("has no closing bracket")
		}
		return end, nil
	}
	return unsupported("is a block collection")
}
