package eppconfig

import (
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// valuesRoots are the Helm values paths under which the llm-d router charts
// take extra EPP config files (pluginsCustomConfig: file name -> config text)
// and the name of the one the EPP runs (pluginsConfigFile); see docs/push.md.
var valuesRoots = [][]string{
	{"router", "epp"},      // llm-d-router charts (routerlib)
	{"inferenceExtension"}, // older charts (epplib)
}

// scope is a text being searched for embedded configs: the file itself, or
// the content of a block scalar (an Argo CD Application's helm.values).
type scope struct {
	doc      int          // the file's YAML document
	id       string       // identifies the text across a re-parse
	text     *lineTable   // the text node positions refer to
	tm       *textMap     // maps the text to the file
	docs     []*yaml.Node // the text's YAML documents (nil for the file: f.docs[doc])
	levels   []level      // enclosing texts, outermost first
	readOnly error        // why configs in this scope cannot be spliced
	form     string
	quoted   *quotedEmbed // the text is a double-quoted string edited in place
}

// level is one enclosing text of an embedded config and where, in its first
// document, the scalar holding the next text sits.
type level struct {
	id   string       // the enclosing text's scope id
	docs []*yaml.Node // nil for the file's own document
	path []any        // map keys (string) and sequence indices (int)
}

// pathString renders a path like `spec.values.router["x.yaml"]`.
func pathString(path []any) string {
	var b strings.Builder
	for _, e := range path {
		switch v := e.(type) {
		case int:
			fmt.Fprintf(&b, "[%d]", v)
		case string:
			if plainSafe.MatchString(v) && !strings.Contains(v, ".") {
				if b.Len() > 0 {
					b.WriteByte('.')
				}
				b.WriteString(v)
			} else {
				b.WriteString("[" + strconv.Quote(v) + "]")
			}
		}
	}
	return b.String()
}

func extend(path []any, elems ...any) []any {
	out := make([]any, 0, len(path)+len(elems))
	return append(append(out, path...), elems...)
}

// scanObject finds configs embedded in a Kubernetes object (or a Helm values
// document, at the top of a document) at path.
func (f *File) scanObject(s *scope, node *yaml.Node, path []any) error {
	node = resolve(node)
	if node == nil || node.Kind != yaml.MappingNode {
		return nil
	}
	kind, api := scalarValue(node, "kind"), scalarValue(node, "apiVersion")
	switch {
	case kind == "ConfigMap" && api == "v1":
		return f.scanConfigMap(s.within("ConfigMap"), node, path)
	case kind == "List" && api == "v1":
		items := resolve(mapValue(node, "items"))
		if items == nil || items.Kind != yaml.SequenceNode {
			return nil
		}
		ls := s.within("List")
		ls.form = "List"
		for i, it := range items.Content {
			if err := f.scanObject(ls, it, extend(path, "items", i)); err != nil {
				return err
			}
		}
	case kind == "HelmRelease" && strings.HasPrefix(api, "helm.toolkit.fluxcd.io/"):
		spec := resolve(mapValue(node, "spec"))
		return f.scanValues(s.within("HelmRelease"), resolve(mapValue(spec, "values")), extend(path, "spec", "values"))
	case kind == "Application" && strings.HasPrefix(api, "argoproj.io/"):
		return f.scanApplication(s.within("Application"), node, path)
	case kind == "" && len(path) == 0 && s.docs == nil:
		return f.scanValues(s.within("Helm values"), node, nil)
	}
	return nil
}

// within is a copy of s for an object of form name inside s's form.
func (s *scope) within(name string) *scope {
	c := *s
	if c.form != "" {
		c.form = name + " in a " + c.form
	} else {
		c.form = name
	}
	return &c
}

// scanConfigMap finds configs in a ConfigMap's data keys.
func (f *File) scanConfigMap(cs *scope, node *yaml.Node, path []any) error {
	var name, ns string
	if md := resolve(mapValue(node, "metadata")); md != nil && md.Kind == yaml.MappingNode {
		name, ns = scalarValue(md, "name"), scalarValue(md, "namespace")
	}
	data := resolve(mapValue(node, "data"))
	if data == nil || data.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(data.Content); i += 2 {
		k, v := data.Content[i], data.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			continue
		}
		c, err := f.embedded(cs, k, v, extend(path, "data", k.Value))
		if err != nil {
			return err
		}
		if c != nil {
			c.ConfigMapName, c.ConfigMapNamespace = name, ns
		}
	}
	return nil
}

// scanApplication finds configs in an Argo CD Application's source and
// sources.
func (f *File) scanApplication(as *scope, node *yaml.Node, path []any) error {
	spec := resolve(mapValue(node, "spec"))
	if err := f.scanArgoSource(as, resolve(mapValue(spec, "source")), extend(path, "spec", "source")); err != nil {
		return err
	}
	if srcs := resolve(mapValue(spec, "sources")); srcs != nil && srcs.Kind == yaml.SequenceNode {
		for i, src := range srcs.Content {
			if err := f.scanArgoSource(as, resolve(src), extend(path, "spec", "sources", i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// scanArgoSource finds configs in an Argo CD Application source's helm
// values: the values string (helm.values: |) and valuesObject.
func (f *File) scanArgoSource(s *scope, src *yaml.Node, path []any) error {
	helm := resolve(mapValue(src, "helm"))
	if helm == nil || helm.Kind != yaml.MappingNode {
		return nil
	}
	if err := f.scanValues(s, resolve(mapValue(helm, "valuesObject")), extend(path, "helm", "valuesObject")); err != nil {
		return err
	}
	k, v := mapPair(helm, "values")
	if k == nil || v == nil || v.Kind != yaml.ScalarNode || !strings.Contains(v.Value, Kind) {
		return nil
	}
	inner, err := f.enter(s, k, v, extend(path, "helm", "values"), false)
	if err != nil {
		return err
	}
	for _, d := range inner.docs {
		if err := f.scanValues(inner, docRoot(d), nil); err != nil {
			return err
		}
	}
	return nil
}

// scanValues finds the configs of a Helm values tree: the
// pluginsCustomConfig entries of the chart roots.
func (f *File) scanValues(s *scope, values *yaml.Node, path []any) error {
	if values == nil || values.Kind != yaml.MappingNode {
		return nil
	}
	for _, root := range valuesRoots {
		m, p := values, path
		for _, k := range root {
			m, p = resolve(mapValue(m, k)), extend(p, k)
		}
		pcc := resolve(mapValue(m, "pluginsCustomConfig"))
		if pcc == nil || pcc.Kind != yaml.MappingNode {
			continue
		}
		inUse := scalarValue(m, "pluginsConfigFile")
		for i := 0; i+1 < len(pcc.Content); i += 2 {
			k, v := pcc.Content[i], pcc.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				continue
			}
			c, err := f.embedded(s, k, v, extend(p, "pluginsCustomConfig", k.Value))
			if err != nil {
				return err
			}
			if c != nil {
				c.InUse = inUse == k.Value
			}
		}
	}
	return nil
}

// enter returns the scope of the text held by scalar v (key k) at path. A
// config (quotedOK) may sit in a double-quoted string, edited in place; an
// enclosing text (an Application's values string) only in a literal block.
func (f *File) enter(s *scope, k, v *yaml.Node, path []any, quotedOK bool) (*scope, error) {
	text := []byte(v.Value)
	tm, roErr := blockMap(s.text, k, v)
	var quoted *quotedEmbed
	switch {
	case tm != nil:
		tm = tm.compose(s.tm)
	case quotedOK && s.readOnly == nil && v.Style&yaml.DoubleQuotedStyle != 0:
		var qErr error
		if tm, quoted, qErr = quotedTextMap(s.text, s.tm, k, v); qErr != nil {
			roErr = errorf(ErrUnsupported, "the value of data key %q is a double-quoted string gatetuner cannot map back to its bytes (%v); "+
				"rewrite it as a literal block scalar (%s: |, the config lines indented below it, trailing spaces removed) or edit it by hand",
				k.Value, qErr, k.Value)
		} else {
			roErr = nil
		}
	default:
		roErr = refuseStyle(k, v, roErr)
	}
	if tm == nil {
		// Lines inside the value cannot be mapped; errors point at the key.
		tm = (&textMap{in: newLineTable(text), out: s.text, first: k.Line - 1, fixed: k.Line}).compose(s.tm)
	}
	if s.readOnly != nil {
		roErr = s.readOnly
	}
	docs, err := parseStream(text)
	if err != nil {
		msg, line := yamlFailure(text, err)
		return nil, &Error{Source: f.source, Line: tm.fileLine(line), DataKey: k.Value, Err: errorf(ErrMalformed, "malformed YAML: %s", msg)}
	}
	lv := level{id: s.id, docs: s.docs, path: path}
	return &scope{doc: s.doc, id: s.id + "/" + pathString(path), text: tm.in, tm: tm, docs: docs, levels: extend2(s.levels, lv),
		readOnly: roErr, form: s.form, quoted: quoted}, nil
}

func extend2(ls []level, l level) []level {
	out := make([]level, 0, len(ls)+1)
	return append(append(out, ls...), l)
}

// embedded loads the config held by scalar v (key k) at path, if it holds one.
func (f *File) embedded(s *scope, k, v *yaml.Node, path []any) (*Config, error) {
	if v = resolve(v); v == nil || v.Kind != yaml.ScalarNode || !strings.Contains(v.Value, Kind) {
		return nil, nil
	}
	inner, err := f.enter(s, k, v, path, true)
	if err != nil {
		return nil, err
	}
	if len(inner.docs) == 0 {
		return nil, nil
	}
	r := docRoot(inner.docs[0])
	if r == nil || r.Kind != yaml.MappingNode || scalarValue(r, "kind") != Kind {
		return nil, nil
	}
	var where []string
	for _, l := range inner.levels {
		where = append(where, pathString(l.path))
	}
	c := &Config{Document: s.doc, DataKey: k.Value, Path: strings.Join(where, " / "), Form: s.form,
		file: f, tm: inner.tm, readOnly: inner.readOnly, docs: inner.docs, root: r,
		dataKeyLn: s.tm.fileLine(k.Line), id: inner.id, levels: inner.levels, quoted: inner.quoted}
	if err := c.load([]byte(v.Value), 0); err != nil {
		return nil, err
	}
	for _, other := range f.configs {
		if other.id == c.id {
			return nil, &Error{Source: f.source, Line: c.dataKeyLn, DataKey: k.Value, Err: errorf(ErrMalformed, "key %q appears twice", k.Value)}
		}
	}
	f.configs = append(f.configs, c)
	return c, nil
}

// refuseStyle says what to do with a value that is not a literal block scalar.
func refuseStyle(k, v *yaml.Node, err error) error {
	var style string
	switch {
	case v.Style&yaml.DoubleQuotedStyle != 0:
		style = "a double-quoted string"
	case v.Style&yaml.SingleQuotedStyle != 0:
		style = "a single-quoted string"
	case v.Style&yaml.FoldedStyle != 0:
		style = "a folded block scalar (>)"
	case v.Style&(yaml.LiteralStyle) == 0:
		style = "a plain multi-line string"
	default:
		return err
	}
	return errorf(ErrUnsupported, "%v: it is %s (as Helm's toYaml or kubectl -o yaml write one when a line has trailing whitespace), "+
		"and gatetuner does not re-encode it: rewrite it as a literal block scalar (%s: |, the config lines indented below it, trailing spaces removed) "+
		"or edit it by hand", err, style, k.Value)
}

// compose maps a text embedded in m's outer text through outer to the file.
func (m *textMap) compose(outer *textMap) *textMap {
	switch {
	case outer.fixed > 0:
		return &textMap{in: m.in, out: outer.out, fixed: outer.fixed}
	case m.fixed > 0:
		return &textMap{in: m.in, out: outer.out, fixed: outer.fileLine(m.fixed)}
	case !outer.block:
		return m
	}
	return &textMap{in: m.in, out: outer.out, first: outer.first + m.first, indent: outer.indent + m.indent, block: true}
}

// at returns the node at path below a document's root (nil if absent).
func at(doc *cnode, path []any) (parent *cnode, idx int) {
	if doc == nil || len(doc.kids) == 0 {
		return nil, -1
	}
	n := doc.kids[0]
	for i, e := range path {
		var next *cnode
		j := -1
		switch v := e.(type) {
		case string:
			j, next = n.pairValue(v)
		case int:
			if n.kind == yaml.SequenceNode && v < len(n.kids) {
				j, next = v, n.kids[v]
			}
		}
		if next == nil {
			return nil, -1
		}
		if i == len(path)-1 {
			return n, j
		}
		n = next
	}
	return nil, -1
}

// maskPath replaces the node at path with a placeholder.
func maskPath(doc *cnode, path []any) {
	if p, i := at(doc, path); p != nil && i >= 0 {
		p.kids[i] = &cnode{kind: yaml.ScalarNode, tag: "masked"}
	}
}
