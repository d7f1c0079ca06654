package scenario

import (
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// ParseError is a scenario error located in its file.
type ParseError struct {
	File   string
	Line   int
	Column int
	// Field is the dotted path of the offending field, e.g. "phases[2].duration".
	Field string
	Msg   string
}

// Error renders "file:line:col: field: message".
func (e *ParseError) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc = fmt.Sprintf("%s:%d:%d", e.File, e.Line, e.Column)
	}
	if e.Field == "" {
		return loc + ": " + e.Msg
	}
	return fmt.Sprintf("%s: %s: %s", loc, e.Field, e.Msg)
}

// A decoder decodes YAML nodes into structs by their tags, keeping every
// node's position for errors (*ParseError):
//
//   - `yaml:"key"` names a field's key; fields without one are not decoded,
//     and any other key is an unknown field, as is a repeated key;
//   - `required:"true"` makes a key required;
//   - `check:">0"` or `check:">=0"` bounds a number or duration.
//
// Scalars decode into strings, ints (32-bit), float64s (finite), bools,
// time.Durations and []float64; a struct from a mapping; a pointer allocates
// its value when its key is present; a *yaml.Node field keeps the node for
// later. A type with a decodeNode method decodes itself, and a struct with a
// checkNode method checks itself once its keys are decoded.
type decoder struct {
	file string
	// classes are the scenario's classes, for the phases' mixes.
	classes []SessionClass
	classIx map[string]int
}

// nodeDecoder is a type that decodes itself from its node.
type nodeDecoder interface {
	decodeNode(d *decoder, n *yaml.Node, field string) error
}

// nodeChecker is a struct that checks itself once its keys are decoded.
type nodeChecker interface {
	checkNode(d *decoder, n *yaml.Node, field string) error
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	nodeType     = reflect.TypeFor[*yaml.Node]()
)

func (d *decoder) errf(n *yaml.Node, field, format string, a ...any) error {
	e := &ParseError{File: d.file, Field: field, Msg: fmt.Sprintf(format, a...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	return e
}

// decode decodes n into v (addressable).
func (d *decoder) decode(n *yaml.Node, field string, v reflect.Value) error {
	if nd, ok := v.Addr().Interface().(nodeDecoder); ok {
		return nd.decodeNode(d, n, field)
	}
	switch v.Type() {
	case durationType:
		x, err := d.duration(n, field)
		v.SetInt(int64(x))
		return err
	case nodeType:
		v.Set(reflect.ValueOf(n))
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		x, err := d.str(n, field)
		v.SetString(x)
		return err
	case reflect.Int:
		x, err := d.int(n, field)
		v.SetInt(int64(x))
		return err
	case reflect.Float64:
		x, err := d.float(n, field)
		v.SetFloat(x)
		return err
	case reflect.Bool:
		x, err := d.bool(n, field)
		v.SetBool(x)
		return err
	case reflect.Slice:
		x, err := d.floats(n, field)
		v.Set(reflect.ValueOf(x))
		return err
	case reflect.Struct:
		return d.mapping(n, field, v)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		if err := d.decode(n, field, p.Elem()); err != nil {
			return err
		}
		v.Set(p)
		return nil
	}
	panic(fmt.Sprintf("scenario: no YAML decoding into %s", v.Type()))
}

// structField is one decoded field of a struct type.
type structField struct {
	index    int
	key      string
	required bool
	check    string
}

// structFields are a struct type's decoded fields, by key and in order, and
// their keys sorted (for errors).
type structFields struct {
	list  []structField
	byKey map[string]structField
	known string
}

func fieldsOf(t reflect.Type) *structFields {
	fs := &structFields{byKey: map[string]structField{}}
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		key, ok := f.Tag.Lookup("yaml")
		if !ok || key == "-" {
			continue
		}
		sf := structField{index: i, key: key, required: f.Tag.Get("required") == "true", check: f.Tag.Get("check")}
		fs.list = append(fs.list, sf)
		fs.byKey[key] = sf
		keys = append(keys, key)
	}
	sort.Strings(keys)
	fs.known = strings.Join(keys, ", ")
	return fs
}

// mapping decodes a mapping node into struct v: every key in document
// order, then the required keys, then the struct's own check.
func (d *decoder) mapping(n *yaml.Node, field string, v reflect.Value) error {
	if n.Kind != yaml.MappingNode {
		return d.errf(n, field, "must be a mapping, got %s", kindName(n))
	}
	fs := fieldsOf(v.Type())
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		sub := join(field, k.Value)
		if seen[k.Value] {
			return d.errf(k, sub, "duplicate key")
		}
		seen[k.Value] = true
		f, ok := fs.byKey[k.Value]
		if !ok {
			return d.errf(k, sub, "unknown field (known: %s)", fs.known)
		}
		fv := v.Field(f.index)
		if err := d.decode(val, sub, fv); err != nil {
			return err
		}
		if err := d.check(val, sub, fv, f.check); err != nil {
			return err
		}
	}
	for _, f := range fs.list {
		if f.required && !seen[f.key] {
			return d.errf(n, join(field, f.key), "is required")
		}
	}
	if c, ok := v.Addr().Interface().(nodeChecker); ok {
		return c.checkNode(d, n, field)
	}
	return nil
}

// check applies a field's check tag to its decoded value v.
func (d *decoder) check(n *yaml.Node, field string, v reflect.Value, check string) error {
	if check == "" {
		return nil
	}
	var x float64
	switch v.Kind() {
	case reflect.Int, reflect.Int64:
		x = float64(v.Int())
	case reflect.Float64:
		x = v.Float()
	}
	switch {
	case check == ">0" && !(x > 0):
		return d.errf(n, field, "must be > 0, got %v", v.Interface())
	case check == ">=0" && x < 0:
		return d.errf(n, field, "must be >= 0, got %v", v.Interface())
	case check != ">0" && check != ">=0":
		panic("scenario: unknown check " + check)
	}
	return nil
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "null"
		}
		return fmt.Sprintf("%q", n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "a document"
}

func (d *decoder) scalar(n *yaml.Node, field string) error {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return d.errf(n, field, "must be a scalar, got %s", kindName(n))
	}
	return nil
}

func (d *decoder) str(n *yaml.Node, field string) (string, error) {
	if err := d.scalar(n, field); err != nil {
		return "", err
	}
	return n.Value, nil
}

func (d *decoder) float(n *yaml.Node, field string) (float64, error) {
	if err := d.scalar(n, field); err != nil {
		return 0, err
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, d.errf(n, field, "must be a finite number, got %q", n.Value)
	}
	return f, nil
}

func (d *decoder) int(n *yaml.Node, field string) (int, error) {
	if err := d.scalar(n, field); err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 10, 64)
	if err != nil || v > math.MaxInt32 || v < math.MinInt32 {
		return 0, d.errf(n, field, "must be an integer (32-bit), got %q", n.Value)
	}
	return int(v), nil
}

func (d *decoder) duration(n *yaml.Node, field string) (time.Duration, error) {
	if err := d.scalar(n, field); err != nil {
		return 0, err
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return 0, d.errf(n, field, "must be a duration such as 90s, 15m or 2h, got %q", n.Value)
	}
	return v, nil
}

func (d *decoder) bool(n *yaml.Node, field string) (bool, error) {
	if err := d.scalar(n, field); err != nil {
		return false, err
	}
	var b bool
	if n.Tag != "!!bool" || n.Decode(&b) != nil {
		return false, d.errf(n, field, "must be true or false, got %q", n.Value)
	}
	return b, nil
}

func (d *decoder) floats(n *yaml.Node, field string) ([]float64, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, d.errf(n, field, "must be a list of numbers, got %s", kindName(n))
	}
	out := make([]float64, len(n.Content))
	for i, c := range n.Content {
		var err error
		if out[i], err = d.float(c, field+"["+strconv.Itoa(i)+"]"); err != nil {
			return nil, err
		}
	}
	return out, nil
}
