package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// invalidKeys matches mapstructure's unknown-key errors ('targets[0]' has
// invalid keys: a, b); viper hands it the keys lower-cased.
var invalidKeys = regexp.MustCompile(`'([^']*)' has invalid keys: ([^\n;]+)`)

// unknownKeyError rewrites the unknown-key part of a decode error as one
// "file:line: path: unknown key "asWritten" (did you mean "x"?)" per key,
// in the user's spelling; nil when err names no unknown key.
func unknownKeyError(file string, err error) error {
	ms := invalidKeys.FindAllStringSubmatch(err.Error(), -1)
	if len(ms) == 0 {
		return nil
	}
	var root *yaml.Node
	if data, rerr := os.ReadFile(file); rerr == nil {
		var doc yaml.Node
		if yaml.Unmarshal(data, &doc) == nil && len(doc.Content) > 0 {
			root = doc.Content[0]
		}
	}
	var out []string
	for _, m := range ms {
		path := m[1]
		if path == reflect.TypeOf(Config{}).String() {
			path = "" // the top level is named after the Go type
		}
		known := knownKeys(reflect.TypeOf(Config{}), path)
		for _, k := range strings.Split(strings.TrimSpace(m[2]), ", ") {
			written, line := k, 0
			if n := lookupKey(root, path, k); n != nil {
				written, line = n.Value, n.Line
			}
			where := file
			if line > 0 {
				where = fmt.Sprintf("%s:%d", file, line)
			}
			msg := fmt.Sprintf("%s: unknown key %q", where, written)
			if path != "" {
				msg = fmt.Sprintf("%s: %s: unknown key %q", where, path, written)
			}
			if s := closest(written, known); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			out = append(out, msg)
		}
	}
	return errors.New(strings.Join(out, "; "))
}

// pathPart is one step of a mapstructure path: a key and, for a list, an index.
var pathPart = regexp.MustCompile(`^([^\[]*)((?:\[\d+\])*)$`)

// lookupKey finds key k (case-insensitively) in the mapping at path
// ("targets[0].selector") and returns its key node.
func lookupKey(n *yaml.Node, path, k string) *yaml.Node {
	if n == nil {
		return nil
	}
	if path != "" {
		for _, part := range strings.Split(path, ".") {
			m := pathPart.FindStringSubmatch(part)
			if m == nil {
				return nil
			}
			if m[1] != "" {
				kn := mapKey(n, m[1])
				if kn == nil {
					return nil
				}
				n = mapValue(n, kn)
			}
			for _, idx := range regexp.MustCompile(`\d+`).FindAllString(m[2], -1) {
				i, _ := strconv.Atoi(idx)
				if n.Kind != yaml.SequenceNode || i >= len(n.Content) {
					return nil
				}
				n = n.Content[i]
			}
		}
	}
	return mapKey(n, k)
}

func mapKey(n *yaml.Node, k string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if strings.EqualFold(n.Content[i].Value, k) {
			return n.Content[i]
		}
	}
	return nil
}

func mapValue(n, key *yaml.Node) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i] == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// knownKeys lists the keys the struct at path accepts, as documented.
func knownKeys(t reflect.Type, path string) []string {
	if path != "" {
		for _, part := range strings.Split(path, ".") {
			m := pathPart.FindStringSubmatch(part)
			if m == nil {
				return nil
			}
			if m[1] != "" {
				if t = fieldType(t, m[1]); t == nil {
					return nil
				}
			}
			for range strings.Count(m[2], "[") {
				t = deref(t)
				if t.Kind() != reflect.Slice {
					return nil
				}
				t = t.Elem()
			}
		}
	}
	var keys []string
	collectKeys(deref(t), &keys)
	return keys
}

func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

func collectKeys(t reflect.Type, keys *[]string) {
	if t.Kind() != reflect.Struct {
		return
	}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("mapstructure")
		if tag == ",squash" {
			collectKeys(deref(f.Type), keys)
			continue
		}
		if name, _, _ := strings.Cut(tag, ","); name != "" {
			*keys = append(*keys, name)
		}
	}
}

func fieldType(t reflect.Type, key string) reflect.Type {
	t = deref(t)
	if t.Kind() != reflect.Struct {
		return nil
	}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("mapstructure")
		if tag == ",squash" {
			if ft := fieldType(f.Type, key); ft != nil {
				return ft
			}
			continue
		}
		if name, _, _ := strings.Cut(tag, ","); strings.EqualFold(name, key) {
			return f.Type
		}
	}
	return nil
}

// closest is the known key within two edits of k (case-insensitively), if any.
func closest(k string, known []string) string {
	best, bestD := "", 3
	for _, c := range known {
		if d := editDistance(strings.ToLower(k), strings.ToLower(c)); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
