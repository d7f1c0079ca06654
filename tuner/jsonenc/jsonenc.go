// Package jsonenc writes JSON like encoding/json, except that a non-finite
// float (NaN, +Inf, -Inf), which encoding/json refuses, is written as the
// string "NaN", "+Inf" or "-Inf" — the convention of the gate-record
// contract (docs/records.md) — so that output never fails on a number.
//
// Struct fields follow encoding/json's tags (name, omitempty, "-", string),
// embedded structs are inlined, maps are written with sorted keys, and types
// with their own MarshalJSON or MarshalText are asked for it.
package jsonenc

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// Marshal returns the JSON encoding of v.
func Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	if err := encode(&b, reflect.ValueOf(v), 0); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Encode writes v to w as one JSON value followed by a newline, indented by
// indent per level when indent is not "" (like json.Encoder with SetIndent).
func Encode(w io.Writer, v any, indent string) error {
	b, err := Marshal(v)
	if err != nil {
		return err
	}
	if indent != "" {
		var out bytes.Buffer
		if err := json.Indent(&out, b, "", indent); err != nil {
			return err
		}
		b = out.Bytes()
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// Float returns the JSON text of a float: a number, or the string "NaN",
// "+Inf" or "-Inf".
func Float(f float64, bits int) string {
	switch {
	case math.IsNaN(f):
		return `"NaN"`
	case math.IsInf(f, 1):
		return `"+Inf"`
	case math.IsInf(f, -1):
		return `"-Inf"`
	}
	b, _ := json.Marshal(f)
	if bits == 32 {
		b, _ = json.Marshal(float32(f))
	}
	return string(b)
}

var (
	marshalerType     = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

// maxDepth bounds recursion (cyclic values).
const maxDepth = 1000

func encode(b *bytes.Buffer, v reflect.Value, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("jsonenc: value nested more than %d levels (a cycle?)", maxDepth)
	}
	if !v.IsValid() {
		b.WriteString("null")
		return nil
	}
	if ok, err := encodeMarshaler(b, v); ok {
		return err
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			b.WriteString("null")
			return nil
		}
		return encode(b, v.Elem(), depth+1)
	case reflect.Bool:
		b.WriteString(strconv.FormatBool(v.Bool()))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		b.WriteString(strconv.FormatInt(v.Int(), 10))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		b.WriteString(strconv.FormatUint(v.Uint(), 10))
	case reflect.Float32, reflect.Float64:
		b.WriteString(Float(v.Float(), v.Type().Bits()))
	case reflect.String:
		writeString(b, v.String())
	case reflect.Struct:
		return encodeStruct(b, v, depth)
	case reflect.Map:
		return encodeMap(b, v, depth)
	case reflect.Slice:
		if v.IsNil() {
			b.WriteString("null")
			return nil
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			j, err := json.Marshal(v.Bytes())
			b.Write(j)
			return err
		}
		fallthrough
	case reflect.Array:
		b.WriteByte('[')
		for i := 0; i < v.Len(); i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := encode(b, v.Index(i), depth+1); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	default:
		return fmt.Errorf("jsonenc: unsupported type %s", v.Type())
	}
	return nil
}

// encodeMarshaler writes v through its MarshalJSON or MarshalText, if it has one.
func encodeMarshaler(b *bytes.Buffer, v reflect.Value) (bool, error) {
	if v.Kind() == reflect.Pointer && v.IsNil() {
		return false, nil
	}
	m := v
	if !m.Type().Implements(marshalerType) && !m.Type().Implements(textMarshalerType) && m.CanAddr() {
		m = m.Addr()
	}
	switch {
	case m.Type().Implements(marshalerType):
		j, err := m.Interface().(json.Marshaler).MarshalJSON()
		if err != nil {
			return true, fmt.Errorf("jsonenc: %s.MarshalJSON: %w", v.Type(), err)
		}
		var c bytes.Buffer
		if err := json.Compact(&c, j); err != nil {
			return true, fmt.Errorf("jsonenc: %s.MarshalJSON: %w", v.Type(), err)
		}
		b.Write(c.Bytes())
		return true, nil
	case m.Type().Implements(textMarshalerType):
		t, err := m.Interface().(encoding.TextMarshaler).MarshalText()
		if err != nil {
			return true, fmt.Errorf("jsonenc: %s.MarshalText: %w", v.Type(), err)
		}
		writeString(b, string(t))
		return true, nil
	}
	return false, nil
}

func writeString(b *bytes.Buffer, s string) {
	j, _ := json.Marshal(s)
	b.Write(j)
}

// field is one JSON member of a struct type.
type field struct {
	name      string
	index     []int
	omitEmpty bool
	quoted    bool
}

func fieldsOf(t reflect.Type, index []int, out *[]field, seen map[string]bool) {
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		idx := append(append([]int(nil), index...), i)
		ft := sf.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if sf.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			fieldsOf(ft, idx, out, seen)
			continue
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		if seen[name] {
			continue
		}
		seen[name] = true
		*out = append(*out, field{name: name, index: idx, omitEmpty: strings.Contains(","+opts+",", ",omitempty,"),
			quoted: strings.Contains(","+opts+",", ",string,")})
	}
}

func encodeStruct(b *bytes.Buffer, v reflect.Value, depth int) error {
	var fields []field
	fieldsOf(v.Type(), nil, &fields, map[string]bool{})
	b.WriteByte('{')
	first := true
	for _, f := range fields {
		fv, ok := fieldByIndex(v, f.index)
		if !ok || (f.omitEmpty && isEmpty(fv)) {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		writeString(b, f.name)
		b.WriteByte(':')
		if f.quoted && isScalar(fv) {
			var inner bytes.Buffer
			if err := encode(&inner, fv, depth+1); err != nil {
				return err
			}
			if fv.Kind() == reflect.String {
				writeString(b, inner.String())
			} else {
				writeString(b, strings.Trim(inner.String(), `"`))
			}
			continue
		}
		if err := encode(b, fv, depth+1); err != nil {
			return err
		}
	}
	b.WriteByte('}')
	return nil
}

// fieldByIndex follows an index path through embedded pointers; ok is false
// when a nil embedded pointer hides the field.
func fieldByIndex(v reflect.Value, index []int) (reflect.Value, bool) {
	for i, x := range index {
		if i > 0 && v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return reflect.Value{}, false
			}
			v = v.Elem()
		}
		v = v.Field(x)
	}
	return v, true
}

func isScalar(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.String:
		return true
	}
	return false
}

func isEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool:
		return !v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int() == 0
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return v.Uint() == 0
	case reflect.Float32, reflect.Float64:
		return v.Float() == 0
	case reflect.Interface, reflect.Pointer:
		return v.IsNil()
	}
	return false
}

func encodeMap(b *bytes.Buffer, v reflect.Value, depth int) error {
	if v.IsNil() {
		b.WriteString("null")
		return nil
	}
	type kv struct {
		key string
		val reflect.Value
	}
	pairs := make([]kv, 0, v.Len())
	it := v.MapRange()
	for it.Next() {
		k, err := mapKey(it.Key())
		if err != nil {
			return err
		}
		pairs = append(pairs, kv{k, it.Value()})
	}
	sort.Slice(pairs, func(i, j int) bool { return pairs[i].key < pairs[j].key })
	b.WriteByte('{')
	for i, p := range pairs {
		if i > 0 {
			b.WriteByte(',')
		}
		writeString(b, p.key)
		b.WriteByte(':')
		if err := encode(b, p.val, depth+1); err != nil {
			return err
		}
	}
	b.WriteByte('}')
	return nil
}

// mapKey renders a map key as encoding/json does.
func mapKey(k reflect.Value) (string, error) {
	if k.Kind() == reflect.String {
		return k.String(), nil
	}
	if tm, ok := k.Interface().(encoding.TextMarshaler); ok {
		t, err := tm.MarshalText()
		return string(t), err
	}
	switch k.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(k.Int(), 10), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.FormatUint(k.Uint(), 10), nil
	}
	return "", fmt.Errorf("jsonenc: unsupported map key type %s", k.Type())
}
