package eppconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"
)

// This file holds a check of edits that is independent of the package's own
// verifier: it decodes both streams with yaml.v3's Unmarshal into plain Go
// values (ConfigMap data values holding a config decoded as YAML too) and
// compares them after applying the intended updates to the original.

// intended is the update of one filter instance's parameters.
type intended struct {
	doc     int
	dataKey string
	path    []any // when set: where the config text sits (map keys, sequence indices, through nested texts)
	plugin  int
	set     map[string]any // canonical key -> float64, string or bool
	remove  []string       // canonical keys
}

func decodeAll(data []byte) ([]any, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []any
	for {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		docs = append(docs, stringKeys(v))
	}
	for i := range docs {
		docs[i] = decodeEmbedded(docs[i])
	}
	return docs, nil
}

// decodeEmbedded decodes, in place, every string value that holds an
// EndpointPickerConfig (ConfigMap data, Helm values, an Application's values
// string), recursively.
func decodeEmbedded(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			t[k] = decodeEmbedded(x)
		}
	case []any:
		for i, x := range t {
			t[i] = decodeEmbedded(x)
		}
	case string:
		if strings.Contains(t, Kind) {
			var inner any
			if err := yaml.Unmarshal([]byte(t), &inner); err == nil {
				if _, ok := inner.(map[string]any); ok {
					return decodeEmbedded(stringKeys(inner))
				}
			}
		}
	}
	return v
}

// stringKeys turns maps with non-string keys into string-keyed maps (keys
// rendered with their type, so 0 and "0" stay apart).
func stringKeys(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			t[k] = stringKeys(x)
		}
	case map[any]any:
		m := make(map[string]any, len(t))
		for k, x := range t {
			key, ok := k.(string)
			if !ok {
				key = fmt.Sprintf("%T:%v", k, k)
			}
			m[key] = stringKeys(x)
		}
		return m
	case []any:
		for i, x := range t {
			t[i] = stringKeys(x)
		}
	}
	return v
}

// entryOf returns the plugin entry addressed by an update.
func entryOf(docs []any, u intended) (map[string]any, error) {
	if u.doc >= len(docs) {
		return nil, fmt.Errorf("document %d missing", u.doc)
	}
	cfg, _ := docs[u.doc].(map[string]any)
	if u.path != nil {
		var cur any = cfg
		for _, e := range u.path {
			switch k := e.(type) {
			case string:
				m, _ := cur.(map[string]any)
				x, ok := m[k]
				if !ok {
					var typed any
					if yaml.Unmarshal([]byte(k), &typed) == nil {
						x = m[fmt.Sprintf("%T:%v", typed, typed)]
					}
				}
				cur = x
			case int:
				l, _ := cur.([]any)
				if k >= len(l) {
					return nil, fmt.Errorf("%v: index %d missing", u.path, k)
				}
				cur = l[k]
			}
		}
		cfg, _ = cur.(map[string]any)
	} else if u.dataKey != "" {
		data, _ := cfg["data"].(map[string]any)
		v, ok := data[u.dataKey]
		if !ok {
			// A plain key such as 00 decodes as a number.
			var k any
			if yaml.Unmarshal([]byte(u.dataKey), &k) == nil {
				v = data[fmt.Sprintf("%T:%v", k, k)]
			}
		}
		cfg, _ = v.(map[string]any)
	}
	plugins, _ := cfg["plugins"].([]any)
	if u.plugin >= len(plugins) {
		return nil, fmt.Errorf("plugins[%d] missing", u.plugin)
	}
	entry, ok := plugins[u.plugin].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("plugins[%d] is not a mapping", u.plugin)
	}
	return entry, nil
}

// takeKey removes a key (matched case-insensitively) from an entry's
// parameters and returns its value.
func takeKey(entry map[string]any, key string) (any, bool) {
	params, _ := entry["parameters"].(map[string]any)
	for k, v := range params {
		if strings.EqualFold(k, key) {
			delete(params, k)
			return v, true
		}
	}
	return nil, false
}

func normalizeParams(entry map[string]any) {
	if p, ok := entry["parameters"]; ok {
		if m, isMap := p.(map[string]any); p == nil || (isMap && len(m) == 0) {
			delete(entry, "parameters")
		}
	}
}

func sameScalar(got, want any) bool {
	switch w := want.(type) {
	case float64:
		switch g := got.(type) {
		case int:
			return float64(g) == w
		case float64:
			return g == w
		case uint64:
			return float64(g) == w
		}
		return false
	}
	return reflect.DeepEqual(got, want)
}

// semanticDelta returns "" when b decodes to a with exactly the updates
// applied, else what differs.
func semanticDelta(a, b []byte, updates []intended) string {
	da, err := decodeAll(a)
	if err != nil {
		return "original does not decode: " + err.Error()
	}
	db, err := decodeAll(b)
	if err != nil {
		return "edited output does not decode: " + err.Error()
	}
	for _, u := range updates {
		ea, err := entryOf(da, u)
		if err != nil {
			return "original: " + err.Error()
		}
		eb, err := entryOf(db, u)
		if err != nil {
			return "edited: " + err.Error()
		}
		for k, want := range u.set {
			takeKey(ea, k)
			got, ok := takeKey(eb, k)
			if !ok || !sameScalar(got, want) {
				return fmt.Sprintf("%s = %#v after the edit, want %#v", k, got, want)
			}
		}
		for _, k := range u.remove {
			takeKey(ea, k)
			if got, ok := takeKey(eb, k); ok && got != nil {
				return fmt.Sprintf("%s = %#v after removing it", k, got)
			}
		}
		normalizeParams(ea)
		normalizeParams(eb)
	}
	if !reflect.DeepEqual(da, db) {
		return fmt.Sprintf("documents differ beyond the updates:\n%#v\n%#v", da, db)
	}
	return ""
}
