package eppconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/gatetuner/gatetuner/gate"
	"gopkg.in/yaml.v3"
)

// FilterType is the plugin type of the prefix-cache-affinity filter.
const FilterType = "prefix-cache-affinity-filter"

// OwnedKeys returns the parameter keys gatetuner writes.
func OwnedKeys() []gate.Key {
	return []gate.Key{gate.KeyMaxTTFTPenaltyMs, gate.KeyPeakPrefillThroughput, gate.KeyPenaltyMode, gate.KeyMaxTokensInFlightPenalty}
}

// Target selects one filter instance of a File.
type Target struct {
	// Plugin is the instance's name; "" selects the only instance.
	Plugin string
	// DataKey restricts the search to one ConfigMap data key; "" searches all.
	DataKey string
}

// String renders the target for messages.
func (t Target) String() string {
	var parts []string
	if t.DataKey != "" {
		parts = append(parts, fmt.Sprintf("data key %q", t.DataKey))
	}
	if t.Plugin != "" {
		parts = append(parts, fmt.Sprintf("plugin %q", t.Plugin))
	} else {
		parts = append(parts, "the "+FilterType)
	}
	return strings.Join(parts, " ")
}

// Instance is one prefix-cache-affinity-filter plugin of a config.
type Instance struct {
	Config *Config
	Plugin *Plugin
	index  int
}

// String names the instance for messages, e.g. `data key "x.yaml" plugin "p" (line 31)`,
// with the document number when the file's configs span several documents.
func (in Instance) String() string {
	s := fmt.Sprintf("plugin %q (line %d)", in.Plugin.Name, in.Plugin.Line)
	if in.Config.DataKey != "" {
		s = fmt.Sprintf("data key %q %s", in.Config.DataKey, s)
	}
	if len(in.Config.file.configs) > 1 && in.Config.file.configs[0].Document != in.Config.file.configs[len(in.Config.file.configs)-1].Document {
		s = fmt.Sprintf("document %d %s", in.Config.Document+1, s)
	}
	return s
}

// Target returns the target that selects exactly this instance.
func (in Instance) Target() Target {
	return Target{Plugin: in.Plugin.Name, DataKey: in.Config.DataKey}
}

// Profiles returns the scheduling profiles that reference the instance.
func (in Instance) Profiles() []string { return in.Config.ProfilesReferencing(in.Plugin.Name) }

// Filters returns the config's prefix-cache-affinity-filter instances.
func (c *Config) Filters() []Instance {
	var out []Instance
	for i := range c.Plugins {
		if c.Plugins[i].Type == FilterType {
			out = append(out, Instance{Config: c, Plugin: &c.Plugins[i], index: i})
		}
	}
	return out
}

// Filters returns every prefix-cache-affinity-filter instance of the file.
func (f *File) Filters() []Instance {
	var out []Instance
	for _, c := range f.configs {
		out = append(out, c.Filters()...)
	}
	return out
}

// Select finds the one filter instance a target names; it refuses to guess
// when several match.
func (f *File) Select(t Target) (Instance, error) {
	fail := func(kind error, format string, a ...any) (Instance, error) {
		return Instance{}, &Error{Source: f.source, DataKey: t.DataKey, Err: errorf(kind, format, a...)}
	}
	configs := f.configs
	if t.DataKey != "" {
		configs = nil
		var keys []string
		for _, c := range f.configs {
			if c.DataKey == t.DataKey {
				configs = append(configs, c)
			}
			if c.DataKey != "" {
				keys = append(keys, fmt.Sprintf("%q", c.DataKey))
			}
		}
		if len(configs) == 0 {
			if len(keys) == 0 {
				return fail(ErrNotFound, "no such ConfigMap data key: the source holds a bare %s", Kind)
			}
			return fail(ErrNotFound, "no such ConfigMap data key holding a %s (keys holding one: %s)", Kind, strings.Join(keys, ", "))
		}
	}
	var all, match []Instance
	for _, c := range configs {
		for _, in := range c.Filters() {
			all = append(all, in)
			if t.Plugin == "" || in.Plugin.Name == t.Plugin {
				match = append(match, in)
			}
		}
	}
	if len(match) > 1 && t.DataKey == "" {
		// Helm values: the chart runs the file pluginsConfigFile names.
		var inUse []Instance
		for _, in := range match {
			if in.Config.InUse {
				inUse = append(inUse, in)
			}
		}
		if len(inUse) == 1 {
			match = inUse
		}
	}
	switch {
	case len(match) == 1:
		return match[0], nil
	case len(match) > 1 && t.Plugin == "":
		return fail(ErrAmbiguous, "%d instances of %s (%s); name the one to use", len(match), FilterType, listInstances(match))
	case len(match) > 1 && t.DataKey == "" && match[0].Config.DataKey != "":
		return fail(ErrAmbiguous, "plugin %q is defined in %d configs (%s); name the data key", t.Plugin, len(match), listInstances(match))
	case len(match) > 1:
		return fail(ErrAmbiguous, "plugin %q is defined in %d documents (%s); edit one document at a time", t.Plugin, len(match), listInstances(match))
	case t.Plugin == "":
		return fail(ErrNotFound, "no %s plugin", FilterType)
	}
	for _, c := range configs {
		if p, ok := c.Plugin(t.Plugin); ok {
			return Instance{}, &Error{Source: f.source, Line: p.Line, DataKey: c.DataKey, Plugin: p.Name,
				Err: errorf(ErrNotFound, "is of type %q, not %s", p.Type, FilterType)}
		}
	}
	if len(all) == 0 {
		return fail(ErrNotFound, "no plugin %q and no %s plugin at all", t.Plugin, FilterType)
	}
	return fail(ErrNotFound, "no plugin %q (%s instances: %s)", t.Plugin, FilterType, listInstances(all))
}

func listInstances(ins []Instance) string {
	var parts []string
	for _, in := range ins {
		parts = append(parts, in.String())
	}
	return strings.Join(parts, ", ")
}

// fail wraps an error about this instance with its source position.
func (in Instance) fail(line int, err error) error {
	if line == 0 {
		line = in.Plugin.Line
	}
	return &Error{Source: in.Config.file.source, Line: line, DataKey: in.Config.DataKey, Plugin: in.Plugin.Name, Err: err}
}

// nodes returns the yaml.v3 nodes of the instance's entry and parameters
// (nil when absent).
func (in Instance) nodes() (entry, paramsKey, paramsVal *yaml.Node) {
	if in.Config.pluginsSeq == nil || in.index >= len(in.Config.pluginsSeq.Content) {
		return nil, nil, nil
	}
	entry = in.Config.pluginsSeq.Content[in.index]
	paramsKey, paramsVal = mapPair(resolve(entry), "parameters")
	return entry, paramsKey, paramsVal
}

// keyLine returns the file line of a parameter key as spelled, falling back
// to the parameters key and then the plugin entry.
func (in Instance) keyLine(spelling string) int {
	_, pk, pv := in.nodes()
	if k, _ := mapPair(resolve(pv), spelling); k != nil {
		return in.Config.tm.fileLine(k.Line)
	}
	if pk != nil {
		return in.Config.tm.fileLine(pk.Line)
	}
	return in.Plugin.Line
}

// paramObject decodes the instance's parameters into their keys and raw JSON
// values; nil when there are none. Keys differing only in case are refused.
func (in Instance) paramObject() (map[string]json.RawMessage, error) {
	raw := in.Plugin.Parameters
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, in.fail(in.keyLine(""), &gate.ParamError{Err: errors.New("must be a mapping")})
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	seen := make(map[string]string, len(keys))
	for _, k := range keys {
		fk := foldKey(k)
		if prev, ok := seen[fk]; ok {
			a, b := prev, k
			if in.keyLine(a) > in.keyLine(b) {
				a, b = b, a
			}
			return nil, in.fail(in.keyLine(b), errorf(ErrCaseConflict,
				"parameters %q (line %d) and %q (line %d) differ only in case; the EPP matches keys case-insensitively, refusing to guess which one it reads",
				a, in.keyLine(a), b, in.keyLine(b)))
		}
		seen[fk] = k
	}
	return m, nil
}

// Params returns the instance's parameters as the EPP with the given build
// profile would decode and validate them.
func (in Instance) Params(prof gate.Profile) (gate.Params, error) {
	if _, err := in.paramObject(); err != nil {
		return gate.Params{}, err
	}
	p, err := gate.ParseParams(in.Plugin.Parameters, prof)
	if err != nil {
		var pe *gate.ParamError
		line := 0
		if errors.As(err, &pe) {
			line = in.keyLine(pe.Key)
		}
		return p, in.fail(line, err)
	}
	return p, nil
}

// OwnedValue is the current state of one parameter key in the source.
type OwnedValue struct {
	Key      gate.Key
	Present  bool   // the key is written (possibly as null)
	Spelling string // the key as spelled in the source ("" when absent)
	Value    string // the value as the EPP receives it, in JSON ("" when absent)
}

// Owned returns the current state of the given keys (OwnedKeys when none are
// given), in the order asked. slices.Equal on two results reports whether the
// source holds the same keys, spellings and values (positions and comments
// are not part of them).
func (in Instance) Owned(keys ...gate.Key) ([]OwnedValue, error) {
	if len(keys) == 0 {
		keys = OwnedKeys()
	}
	m, err := in.paramObject()
	if err != nil {
		return nil, err
	}
	out := make([]OwnedValue, len(keys))
	for i, k := range keys {
		out[i] = OwnedValue{Key: k}
		for spelling, raw := range m {
			if lk, ok := gate.LookupKey(spelling); ok && lk == k {
				out[i] = OwnedValue{Key: k, Present: true, Spelling: spelling, Value: string(raw)}
			}
		}
	}
	return out, nil
}
