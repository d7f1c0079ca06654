package eppconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/gatetuner/gatetuner/gate"
)

// API versions under which an EPP loads an EndpointPickerConfig: every
// built-in profile's build loads the first two; llm-d.ai/v1 only a custom
// profile that declares it (gate.Profile.ConfigAPIVersions).
const (
	APIVersion           = gate.ConfigAPIVersionV1Alpha1
	DeprecatedAPIVersion = gate.ConfigAPIVersionDeprecated
	APIVersionV1         = gate.ConfigAPIVersionV1
	// Kind is the kind of an EPP config document.
	Kind = "EndpointPickerConfig"
)

// File is a parsed YAML stream holding one or more EndpointPickerConfigs,
// bare or inside ConfigMap data values, with the original bytes kept for
// splicing.
type File struct {
	source string
	// loader is the build profile whose loader's apiVersions the configs
	// must have (ParseFor; Parse: the built-in loader's, profile unnamed).
	loader  gate.Profile
	data    []byte
	lines   *lineTable
	docs    []*yaml.Node
	configs []*Config
}

// Config is one EndpointPickerConfig found in a File.
type Config struct {
	// Document is the 0-based index of the YAML document holding the config.
	Document int
	// DataKey is the ConfigMap data key holding the config; "" for a bare document.
	DataKey string
	// ConfigMapName and ConfigMapNamespace name the ConfigMap holding the config, if any.
	ConfigMapName      string
	ConfigMapNamespace string
	// Path is where the config text sits in its document, e.g.
	// `data["default-plugins.yaml"]` or
	// `spec.values.router.epp.pluginsCustomConfig["custom.yaml"]`; "" for a bare document.
	Path string
	// Form names what holds the config: "EndpointPickerConfig", "ConfigMap",
	// "Helm values", "HelmRelease", "Application", each "in a List" when so.
	Form string
	// InUse reports, for a config in Helm values, that the chart's
	// pluginsConfigFile names its key (the EPP runs it).
	InUse bool
	// APIVersion is the config's apiVersion.
	APIVersion string
	// Line is the 1-based source line where the config text starts.
	Line int
	// Plugins are the config's plugins in source order.
	Plugins []Plugin
	// SchedulingProfiles are the config's scheduling profiles in source order.
	SchedulingProfiles []SchedulingProfile

	file       *File
	tm         *textMap     // maps the config text to the file
	readOnly   error        // why the config cannot be spliced (nil if it can)
	docs       []*yaml.Node // yaml.v3 documents of the config text
	root       *yaml.Node   // the config's root mapping
	pluginsSeq *yaml.Node   // the plugins sequence (nil if absent)
	eppJSON    []byte       // the config as the EPP decodes it, in JSON
	dataKeyLn  int          // file line of the ConfigMap data key (0 for bare configs)
	id         string       // document and path: what identifies the config across a re-parse
	levels     []level      // the texts enclosing an embedded config, outermost first
	quoted     *quotedEmbed // set when the config text is a double-quoted string
}

// Plugin is one entry of a config's plugins list.
type Plugin struct {
	// Name is the plugin's name; it defaults to Type.
	Name string
	// Type is the plugin type.
	Type string
	// Named reports whether the entry sets a name explicitly.
	Named bool
	// Line is the 1-based source line of the entry.
	Line int
	// Parameters are the entry's parameters as the EPP receives them (JSON);
	// nil when the entry has no parameters key, "null" when it is empty.
	Parameters json.RawMessage
}

// SchedulingProfile is one entry of a config's schedulingProfiles list.
type SchedulingProfile struct {
	Name    string
	Line    int
	Plugins []ProfilePlugin
}

// ProfilePlugin is a plugin reference inside a scheduling profile.
type ProfilePlugin struct {
	PluginRef string
	Weight    *int // nil when not set
	Line      int  // 1-based source line of the reference
}

// Parse reads a YAML stream holding EndpointPickerConfig documents or
// ConfigMap manifests whose data values hold them. source names the input in
// errors. A config's apiVersion must be one every built-in profile's build
// loads; ParseFor takes them from the target's profile.
func Parse(data []byte, source string) (*File, error) {
	return ParseFor(data, source, gate.Profile{})
}

// ParseFor is Parse for a target of build profile prof: a config's
// apiVersion must be one prof's loader registers (prof.ConfigAPIVersions).
func ParseFor(data []byte, source string, prof gate.Profile) (*File, error) {
	data = bytes.Clone(data)
	f := &File{source: source, loader: prof, data: data}
	fail := func(line int, err error) (*File, error) {
		return nil, &Error{Source: source, Line: line, Err: err}
	}
	if !utf8.Valid(data) {
		return fail(0, errorf(ErrMalformed, "not UTF-8 text"))
	}
	f.lines = newLineTable(data)
	docs, err := parseStream(data)
	if err != nil {
		msg, line := yamlFailure(data, err)
		return fail(line, errorf(ErrMalformed, "malformed YAML: %s", msg))
	}
	f.docs = docs
	segs := splitDocuments(f.lines)
	for i, doc := range docs {
		root := docRoot(doc)
		if root == nil || root.Kind != yaml.MappingNode {
			continue
		}
		if scalarValue(root, "kind") == Kind {
			seg, ok := segmentOf(segs, root.Line-1)
			if !ok {
				return fail(root.Line, errorf(ErrUnsupported, "cannot isolate YAML document %d", i+1))
			}
			text := data[f.lines.start[seg.first]:min(f.lines.end[seg.last]+f.lines.brk[seg.last], len(data))]
			c := &Config{Document: i, file: f, tm: identityMap(f.lines), docs: []*yaml.Node{doc}, root: root, id: fmt.Sprint(i)}
			if err := c.load(text, seg.first); err != nil {
				return nil, err
			}
			f.configs = append(f.configs, c)
			continue
		}
		top := &scope{doc: i, id: strconv.Itoa(i), text: f.lines, tm: identityMap(f.lines)}
		if err := f.scanObject(top, root, nil); err != nil {
			return nil, err
		}
	}
	if len(f.configs) == 0 {
		return fail(0, errorf(ErrNoConfig, "no %s found (neither a bare document nor a ConfigMap data value)", Kind))
	}
	return f, nil
}

// Source returns the name the file was parsed under.
func (f *File) Source() string { return f.source }

// Bytes returns the original bytes; callers must not modify them.
func (f *File) Bytes() []byte { return f.data }

// Configs returns every EndpointPickerConfig in the file, in source order.
func (f *File) Configs() []*Config { return f.configs }

// Editable reports why the config cannot be spliced, or nil if it can.
func (c *Config) Editable() error { return c.readOnly }

// Plugin returns the plugin with the given name.
func (c *Config) Plugin(name string) (*Plugin, bool) {
	for i := range c.Plugins {
		if c.Plugins[i].Name == name {
			return &c.Plugins[i], true
		}
	}
	return nil, false
}

// ProfilesReferencing returns the names of the scheduling profiles that reference the named plugin.
func (c *Config) ProfilesReferencing(name string) []string {
	var out []string
	for _, p := range c.SchedulingProfiles {
		for _, r := range p.Plugins {
			if r.PluginRef == name {
				out = append(out, p.Name)
				break
			}
		}
	}
	return out
}

// load fills a config from its yaml.v3 root and the EPP's view of its text.
// first is the 0-based file line where text starts (bare documents).
func (c *Config) load(text []byte, first int) error {
	f := c.file
	c.Line = c.tm.fileLine(c.root.Line)
	if c.DataKey != "" {
		c.Line = c.tm.fileLine(1)
	}
	fail := func(line int, err error) error {
		return &Error{Source: f.source, Line: line, DataKey: c.DataKey, Err: err}
	}
	if k1, k2, ok := foldConflict(c.root); ok {
		return fail(c.tm.fileLine(k2.Line), errorf(ErrCaseConflict, "keys %q (line %d) and %q differ only in case", k1.Value, c.tm.fileLine(k1.Line), k2.Value))
	}
	j, err := eppJSON(text)
	if err != nil {
		msg, line := yamlMessage(err)
		if line > 0 {
			if c.DataKey == "" {
				line += first
			} else {
				line = c.tm.fileLine(line)
			}
		}
		return fail(line, errorf(ErrMalformed, "the EPP would reject the config: %s", msg))
	}
	c.eppJSON = j
	var top map[string]json.RawMessage
	if err := json.Unmarshal(j, &top); err != nil {
		return fail(c.Line, errorf(ErrMalformed, "the config is not a mapping"))
	}
	if err := jsonString(top["apiVersion"], &c.APIVersion); err != nil {
		return fail(c.Line, errorf(ErrMalformed, "apiVersion: %v", err))
	}
	if err := f.loader.LoadsConfigAPIVersion(c.APIVersion); err != nil {
		return fail(c.tm.fileLine(keyLine(c.root, "apiVersion", c.root.Line)), errorf(ErrMalformed, "%v", err))
	}
	if err := c.loadPlugins(top["plugins"]); err != nil {
		return err
	}
	return c.loadProfiles(top["schedulingProfiles"])
}

func (c *Config) loadPlugins(raw json.RawMessage) error {
	f := c.file
	fail := func(line int, err error) error {
		return &Error{Source: f.source, Line: line, DataKey: c.DataKey, Err: err}
	}
	var entries []json.RawMessage
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &entries); err != nil {
			return fail(c.tm.fileLine(keyLine(c.root, "plugins", c.root.Line)), errorf(ErrMalformed, "plugins must be a list"))
		}
	}
	seq := resolve(mapValue(c.root, "plugins"))
	if seq != nil && seq.Kind == yaml.SequenceNode {
		c.pluginsSeq = seq
	}
	n := 0
	if c.pluginsSeq != nil {
		n = len(c.pluginsSeq.Content)
	}
	if n != len(entries) {
		return fail(c.Line, errorf(ErrUnsupported, "the YAML parsers disagree on the plugins list (%d vs %d entries); refusing to guess", n, len(entries)))
	}
	seen := make(map[string]int, len(entries))
	for i, e := range entries {
		node := resolve(c.pluginsSeq.Content[i])
		line := c.tm.fileLine(node.Line)
		var m map[string]json.RawMessage
		if err := json.Unmarshal(e, &m); err != nil || m == nil {
			return fail(line, errorf(ErrMalformed, "plugins[%d] must be a mapping", i))
		}
		p := Plugin{Line: line}
		if err := jsonString(m["type"], &p.Type); err != nil {
			return fail(line, errorf(ErrMalformed, "plugins[%d].type: %v", i, err))
		}
		if err := jsonString(m["name"], &p.Name); err != nil {
			return fail(line, errorf(ErrMalformed, "plugins[%d].name: %v", i, err))
		}
		if node.Kind != yaml.MappingNode || scalarValue(node, "type") != p.Type || scalarValue(node, "name") != p.Name {
			return fail(line, errorf(ErrUnsupported, "the YAML parsers disagree on plugins[%d]; refusing to guess", i))
		}
		if k1, k2, ok := foldConflict(node); ok {
			return fail(c.tm.fileLine(k2.Line), errorf(ErrCaseConflict, "keys %q (line %d) and %q differ only in case", k1.Value, c.tm.fileLine(k1.Line), k2.Value))
		}
		p.Named = p.Name != ""
		if !p.Named {
			p.Name = p.Type
		}
		if p.Type == "" {
			return fail(line, errorf(ErrMalformed, "plugins[%d] has no type", i))
		}
		if prev, dup := seen[p.Name]; dup {
			return fail(line, errorf(ErrMalformed, "plugin name %q is used twice (lines %d and %d); the EPP requires unique names", p.Name, prev, line))
		}
		seen[p.Name] = line
		if ps, ok := m["parameters"]; ok {
			p.Parameters = ps
		}
		c.Plugins = append(c.Plugins, p)
	}
	return nil
}

func (c *Config) loadProfiles(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var profiles []struct {
		Name    string `json:"name"`
		Plugins []struct {
			PluginRef string `json:"pluginRef"`
			Weight    *int   `json:"weight"`
		} `json:"plugins"`
	}
	line := c.tm.fileLine(keyLine(c.root, "schedulingProfiles", c.root.Line))
	if err := json.Unmarshal(raw, &profiles); err != nil {
		return &Error{Source: c.file.source, Line: line, DataKey: c.DataKey, Err: errorf(ErrMalformed, "schedulingProfiles: %v", err)}
	}
	seq := resolve(mapValue(c.root, "schedulingProfiles"))
	for i, p := range profiles {
		sp := SchedulingProfile{Name: p.Name, Line: line}
		var refs *yaml.Node
		if seq != nil && seq.Kind == yaml.SequenceNode && len(seq.Content) == len(profiles) {
			pn := resolve(seq.Content[i])
			sp.Line = c.tm.fileLine(pn.Line)
			if r := resolve(mapValue(pn, "plugins")); r != nil && r.Kind == yaml.SequenceNode && len(r.Content) == len(p.Plugins) {
				refs = r
			}
		}
		for j, r := range p.Plugins {
			pp := ProfilePlugin{PluginRef: r.PluginRef, Weight: r.Weight, Line: sp.Line}
			if refs != nil {
				pp.Line = c.tm.fileLine(resolve(refs.Content[j]).Line)
			}
			sp.Plugins = append(sp.Plugins, pp)
		}
		c.SchedulingProfiles = append(c.SchedulingProfiles, sp)
	}
	return nil
}

func jsonString(raw json.RawMessage, dst *string) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return errors.New("must be a string")
	}
	return nil
}

// parseStream decodes every document of a YAML stream into yaml.v3 nodes.
func parseStream(data []byte) (docs []*yaml.Node, err error) {
	defer func() {
		// The daemon must survive any input: a parser panic becomes an error.
		if r := recover(); r != nil {
			docs, err = nil, fmt.Errorf("yaml: the parser failed: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		docs = append(docs, &n)
	}
}

// eppJSON converts a config text to JSON the way the EPP does (sigs.k8s.io/yaml,
// strict: duplicate keys are an error).
func eppJSON(text []byte) (j []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			j, err = nil, fmt.Errorf("yaml: the parser failed: %v", r)
		}
	}()
	return sigsyaml.YAMLToJSONStrict(text)
}

// yamlFailure returns a YAML syntax error's message and the 1-based line it is
// on. yaml.v3 reports some errors without a line or at the line where the
// enclosing construct starts, so the line is found as the shortest prefix of
// the text that fails with the same message.
func yamlFailure(text []byte, err error) (string, int) {
	msg, reported := yamlMessage(err)
	t := newLineTable(text)
	fails := func(n int) bool {
		end := t.end[n-1] + t.brk[n-1]
		_, e := parseStream(text[:end])
		if e == nil {
			return false
		}
		m, _ := yamlMessage(e)
		return m == msg
	}
	n := t.lines()
	if !fails(n) {
		return msg, reported
	}
	lo, hi := 1, n // fails(hi) holds
	for lo < hi {
		mid := (lo + hi) / 2
		if fails(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return msg, hi
}

// segment is a range of lines holding one YAML document.
type segment struct{ first, last int }

// splitDocuments splits a stream at document markers ("---", "...") at column 0.
func splitDocuments(t *lineTable) []segment {
	var segs []segment
	first := 0
	for l := 0; l < t.lines(); l++ {
		c := t.content(l)
		marker := func(m string) bool {
			return bytes.HasPrefix(c, []byte(m)) && (len(c) == 3 || isBlank(c[3]))
		}
		switch {
		case marker("---") && l > first:
			segs = append(segs, segment{first, l - 1})
			first = l
		case marker("..."):
			segs = append(segs, segment{first, l})
			first = l + 1
		}
	}
	if first < t.lines() {
		segs = append(segs, segment{first, t.lines() - 1})
	}
	return segs
}

func segmentOf(segs []segment, line int) (segment, bool) {
	i := sort.Search(len(segs), func(i int) bool { return segs[i].last >= line })
	if i < len(segs) && segs[i].first <= line {
		return segs[i], true
	}
	return segment{}, false
}

// blockMap maps the content of a ConfigMap data value written as a literal
// block scalar onto the file's lines.
func blockMap(out *lineTable, key, v *yaml.Node) (*textMap, error) {
	unsupported := func(why string) (*textMap, error) {
		return nil, errorf(ErrUnsupported, "the value of data key %q %s; cannot splice it", key.Value, why)
	}
	if v.Style&yaml.LiteralStyle == 0 {
		return unsupported("is not a literal block scalar (|)")
	}
	if v.Style&yaml.TaggedStyle != 0 || v.Anchor != "" {
		return unsupported("carries a tag or anchor")
	}
	hdr, ok := out.offset(v.Line, v.Column)
	if !ok || byteAt(out.text, hdr) != '|' {
		return unsupported("has a block header that cannot be located")
	}
	hl := out.lineOf(hdr)
	chomp, indent := byte(0), 0
	for i := hdr + 1; i < out.end[hl]; i++ {
		c := out.text[i]
		switch {
		case c == '+' || c == '-':
			chomp = c
		case c >= '1' && c <= '9':
			indent = key.Column - 1 + int(c-'0')
		default:
			i = out.end[hl]
		}
	}
	if indent == 0 {
		for l := hl + 1; l < out.lines(); l++ {
			if c := out.content(l); len(bytes.Trim(c, " ")) > 0 {
				indent = len(c) - len(bytes.TrimLeft(c, " "))
				break
			}
		}
	}
	if indent < 1 {
		return unsupported("has no indented content")
	}
	var lines []string
	for l := hl + 1; l < out.lines(); l++ {
		c := out.content(l)
		if l == out.lines()-1 && len(c) == 0 {
			break // the empty remainder after a final line break
		}
		if len(bytes.Trim(c, " ")) == 0 {
			if len(c) > indent {
				lines = append(lines, string(c[indent:]))
			} else {
				lines = append(lines, "")
			}
			continue
		}
		if len(c)-len(bytes.TrimLeft(c, " ")) < indent {
			break
		}
		lines = append(lines, string(c[indent:]))
	}
	last := len(lines) - 1
	for last >= 0 && lines[last] == "" {
		last--
	}
	var want string
	switch body := strings.Join(lines[:last+1], "\n"); chomp {
	case '-':
		want = body
	case '+':
		if len(lines) > 0 {
			want = strings.Join(lines, "\n") + "\n"
		}
	default:
		if last >= 0 {
			want = body + "\n"
		}
	}
	if want != v.Value {
		return unsupported("does not map line for line onto the file")
	}
	return &textMap{in: newLineTable([]byte(v.Value)), out: out, first: hl + 1, indent: indent, block: true}, nil
}

// docRoot returns a document's content node.
func docRoot(doc *yaml.Node) *yaml.Node {
	if doc == nil || doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil
	}
	return resolve(doc.Content[0])
}

// resolve follows aliases (bounded, as anchors cannot form long chains of aliases).
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 16; i++ {
		n = n.Alias
	}
	return n
}

// mapPair returns the key and value nodes for an exact key of a mapping.
func mapPair(m *yaml.Node, key string) (*yaml.Node, *yaml.Node) {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := m.Content[i]; k.Kind == yaml.ScalarNode && k.Value == key {
			return k, m.Content[i+1]
		}
	}
	return nil, nil
}

func mapValue(m *yaml.Node, key string) *yaml.Node {
	_, v := mapPair(m, key)
	return v
}

func scalarValue(m *yaml.Node, key string) string {
	if v := resolve(mapValue(m, key)); v != nil && v.Kind == yaml.ScalarNode {
		return v.Value
	}
	return ""
}

func keyLine(m *yaml.Node, key string, def int) int {
	if k, _ := mapPair(m, key); k != nil {
		return k.Line
	}
	return def
}

// foldConflict finds two keys of a mapping that differ only in case.
func foldConflict(m *yaml.Node) (*yaml.Node, *yaml.Node, bool) {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil, nil, false
	}
	seen := make(map[string]*yaml.Node, len(m.Content)/2)
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := m.Content[i]
		if k.Kind != yaml.ScalarNode {
			continue
		}
		fk := foldKey(k.Value)
		if prev, ok := seen[fk]; ok && prev.Value != k.Value {
			return prev, k, true
		}
		seen[fk] = k
	}
	return nil, nil, false
}

// foldKey maps a string to a key shared by exactly the strings it matches
// under simple Unicode case folding (strings.EqualFold, as encoding/json uses).
func foldKey(s string) string {
	var b strings.Builder
	for _, r := range s {
		m := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if f < m {
				m = f
			}
		}
		b.WriteRune(m)
	}
	return b.String()
}
