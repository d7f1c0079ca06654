package eppconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// cnode is the decoded content of a YAML node: kind, resolved tag, value,
// anchor and children, in order. Styles, comments and positions are not part
// of it. Aliases are kept as references; edits never touch anchored or
// aliased nodes, so comparing unexpanded trees is exact.
type cnode struct {
	kind   yaml.Kind
	tag    string
	value  string
	anchor string
	kids   []*cnode
}

func canon(n *yaml.Node) *cnode {
	c := &cnode{kind: n.Kind, anchor: n.Anchor}
	switch n.Kind {
	case yaml.AliasNode:
		c.value = n.Value
	case yaml.ScalarNode:
		c.tag, c.value = n.ShortTag(), n.Value
	case yaml.MappingNode, yaml.SequenceNode:
		c.tag = n.ShortTag()
	}
	if len(n.Content) > 0 {
		c.kids = make([]*cnode, len(n.Content))
		for i, k := range n.Content {
			c.kids[i] = canon(k)
		}
	}
	return c
}

// pairValue returns the value of an exact scalar key of a mapping cnode.
func (c *cnode) pairValue(key string) (int, *cnode) {
	if c == nil || c.kind != yaml.MappingNode {
		return -1, nil
	}
	for i := 0; i+1 < len(c.kids); i += 2 {
		if k := c.kids[i]; k.kind == yaml.ScalarNode && k.value == key {
			return i + 1, c.kids[i+1]
		}
	}
	return -1, nil
}

func (c *cnode) describe() string {
	switch c.kind {
	case yaml.ScalarNode:
		v := c.value
		if len(v) > 40 {
			v = v[:40] + "…"
		}
		return strconv.Quote(v)
	case yaml.MappingNode:
		return fmt.Sprintf("a mapping of %d keys", len(c.kids)/2)
	case yaml.SequenceNode:
		return fmt.Sprintf("a list of %d items", len(c.kids))
	case yaml.AliasNode:
		return "*" + c.value
	}
	return "a document"
}

// diffCanon returns where two trees first differ ("" when equal).
func diffCanon(a, b *cnode, path string) string {
	at := path
	if at == "" {
		at = "the document root"
	}
	if a.kind == yaml.ScalarNode && b.kind == yaml.ScalarNode && a.tag == b.tag && a.anchor == b.anchor &&
		a.value != b.value && (strings.Contains(a.value, "\n") || strings.Contains(b.value, "\n")) {
		return diffValueLines(a.value, b.value, at)
	}
	if a.kind != b.kind || a.tag != b.tag || a.value != b.value || a.anchor != b.anchor {
		return fmt.Sprintf("%s: %s became %s", at, a.describe(), b.describe())
	}
	if d := diffKids(a, b, path); d != "" {
		return d
	}
	if len(a.kids) != len(b.kids) {
		return fmt.Sprintf("%s: %s became %s", at, a.describe(), b.describe())
	}
	return ""
}

// diffValueLines says where two multi-line scalar values at path first differ.
func diffValueLines(a, b, at string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	i := 0
	for i < len(la) && i < len(lb) && la[i] == lb[i] {
		i++
	}
	line := func(ls []string) string {
		if i < len(ls) {
			return strconv.Quote(ls[i])
		}
		return "nothing"
	}
	return fmt.Sprintf("%s (line %d of the value): %s became %s", at, i+1, line(la), line(lb))
}

// diffKids returns where the children two nodes of one kind have in common
// first differ ("" when they do not).
func diffKids(a, b *cnode, path string) string {
	switch a.kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(a.kids) && i+1 < len(b.kids); i += 2 {
			p := path + "." + a.kids[i].value
			if path == "" {
				p = a.kids[i].value
			}
			if d := diffCanon(a.kids[i], b.kids[i], p+" (key)"); d != "" {
				return d
			}
			if d := diffCanon(a.kids[i+1], b.kids[i+1], p); d != "" {
				return d
			}
		}
	case yaml.SequenceNode:
		for i := 0; i < len(a.kids) && i < len(b.kids); i++ {
			if d := diffCanon(a.kids[i], b.kids[i], fmt.Sprintf("%s[%d]", path, i)); d != "" {
				return d
			}
		}
	default:
		for i := 0; i < len(a.kids) && i < len(b.kids); i++ {
			if d := diffCanon(a.kids[i], b.kids[i], path); d != "" {
				return d
			}
		}
	}
	return ""
}

// scalarCanon returns the decoded content of a scalar written as text.
func scalarCanon(text string) (*cnode, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte("v: "+text+"\n"), &doc); err != nil {
		return nil, err
	}
	root := docRoot(&doc)
	if root == nil || root.Kind != yaml.MappingNode || len(root.Content) != 2 {
		return nil, fmt.Errorf("scalar %q does not read back as one value", text)
	}
	return canon(root.Content[1]), nil
}

// scalarJSON returns a scalar written as text the way the EPP decodes it.
func scalarJSON(text string) (any, error) {
	j, err := eppJSON([]byte("v: " + text + "\n"))
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := decodeJSON(j, &m); err != nil {
		return nil, err
	}
	return m["v"], nil
}

func decodeJSON(j []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	return dec.Decode(v)
}

// applyCanon rewrites a config root the way the expectation says it changes.
func (e *expectation) applyCanon(root *cnode) error {
	_, seq := root.pairValue("plugins")
	if seq == nil || seq.kind != yaml.SequenceNode || e.index >= len(seq.kids) {
		return fmt.Errorf("plugins[%d] not found", e.index)
	}
	entry := seq.kids[e.index]
	var params *cnode
	if e.emptied {
		params = &cnode{kind: yaml.ScalarNode, tag: "!!null"}
	} else {
		params = &cnode{kind: yaml.MappingNode, tag: "!!map"}
		for _, p := range e.pairs {
			k := &cnode{kind: yaml.ScalarNode, tag: "!!str", value: p.name}
			if p.key != nil {
				k = canon(p.key)
			}
			var v *cnode
			if p.val != nil {
				v = canon(p.val)
			} else {
				var err error
				if v, err = scalarCanon(p.text); err != nil {
					return err
				}
			}
			params.kids = append(params.kids, k, v)
		}
	}
	if e.created {
		entry.kids = append(entry.kids, &cnode{kind: yaml.ScalarNode, tag: "!!str", value: "parameters"}, params)
		return nil
	}
	i, _ := entry.pairValue("parameters")
	if i < 0 {
		return fmt.Errorf("plugins[%d].parameters not found", e.index)
	}
	entry.kids[i] = params
	return nil
}

// applyJSON rewrites a config's EPP view the way the expectation says it changes.
func (e *expectation) applyJSON(root any) error {
	top, _ := root.(map[string]any)
	plugins, _ := top["plugins"].([]any)
	if e.index >= len(plugins) {
		return fmt.Errorf("plugins[%d] not found", e.index)
	}
	entry, _ := plugins[e.index].(map[string]any)
	if entry == nil {
		return fmt.Errorf("plugins[%d] is not a mapping", e.index)
	}
	orig, _ := entry["parameters"].(map[string]any)
	if e.emptied {
		entry["parameters"] = nil
		return nil
	}
	params := make(map[string]any, len(e.pairs))
	for _, p := range e.pairs {
		if p.val != nil {
			params[p.name] = orig[p.name]
			continue
		}
		v, err := scalarJSON(p.text)
		if err != nil {
			return err
		}
		params[p.name] = v
	}
	entry["parameters"] = params
	return nil
}

// verify checks that g (the edited file) differs from f only as the
// expectations say, both in the YAML content of every document and in the
// EPP's view of every edited config.
func (f *File) verify(g *File, exps []*expectation) error {
	v := &verification{f: f, g: g, byCfg: map[*Config][]*expectation{}}
	if len(f.docs) != len(g.docs) {
		return v.refuse("the stream has %d YAML documents instead of %d", len(g.docs), len(f.docs))
	}
	for _, e := range exps {
		if v.byCfg[e.cfg] == nil {
			v.cfgs = append(v.cfgs, e.cfg)
		}
		v.byCfg[e.cfg] = append(v.byCfg[e.cfg], e)
	}
	sort.SliceStable(v.cfgs, func(i, j int) bool { return v.cfgs[i].Document < v.cfgs[j].Document })
	for i := range f.docs {
		if err := v.document(i); err != nil {
			return err
		}
	}
	for _, c := range v.cfgs {
		if err := v.config(c); err != nil {
			return err
		}
	}
	return nil
}

// verification is one run of verify: the original and edited files and the
// expectations by edited config (cfgs in document order).
type verification struct {
	f, g  *File
	byCfg map[*Config][]*expectation
	cfgs  []*Config
}

// refuse is verify's refusal: the edit changed more than it intended.
func (v *verification) refuse(format string, a ...any) error {
	return &Error{Source: v.f.source, Err: errorf(ErrUnintended, "edit refused: the result differs beyond the intended change: "+format, a...)}
}

// masks returns, for an enclosing text, the paths of the edited configs' scalars in it.
func (v *verification) masks(id string, depth int) [][]any {
	var out [][]any
	for _, c := range v.cfgs {
		if len(c.levels) > depth && c.levels[depth].id == id {
			out = append(out, c.levels[depth].path)
		}
	}
	return out
}

// document checks that document i differs only by the expected changes of
// the configs it holds directly, and the scalars that hold edited configs.
func (v *verification) document(i int) error {
	a, b := canon(v.f.docs[i]), canon(v.g.docs[i])
	for _, c := range v.cfgs {
		if c.Document != i || len(c.levels) > 0 {
			continue
		}
		for _, e := range v.byCfg[c] {
			if err := e.applyCanon(a.kids[0]); err != nil {
				return v.refuse("document %d: %v", i+1, err)
			}
		}
	}
	for _, p := range v.masks(strconv.Itoa(i), 0) {
		maskPath(a, p)
		maskPath(b, p)
	}
	if d := diffCanon(a, b, ""); d != "" {
		return v.refuse("document %d: %s", i+1, d)
	}
	return nil
}

// configWhere names where a config sits in the file.
func configWhere(c *Config) string {
	switch {
	case c.Path == "":
		return fmt.Sprintf("document %d", c.Document+1)
	case c.Form == "ConfigMap":
		return fmt.Sprintf("document %d, data key %q", c.Document+1, c.DataKey)
	}
	return fmt.Sprintf("document %d, %s", c.Document+1, c.Path)
}

// config checks one edited config: the texts enclosing it, its own
// documents and its EPP view differ only by the expected changes.
func (v *verification) config(c *Config) error {
	gc := v.g.config(c.id)
	where := configWhere(c)
	if gc == nil || len(gc.levels) != len(c.levels) {
		return v.refuse("%s no longer holds a %s", where, Kind)
	}
	if err := v.enclosing(c, gc, where); err != nil {
		return err
	}
	if err := v.embedded(c, gc, where); err != nil {
		return err
	}
	return v.eppView(c, gc, where)
}

// enclosing checks that the texts enclosing an embedded config (an
// Application's helm.values) differ only in the edited configs.
func (v *verification) enclosing(c, gc *Config, where string) error {
	for d := 1; d < len(c.levels); d++ {
		ad, bd := c.levels[d].docs, gc.levels[d].docs
		if len(ad) != len(bd) {
			return v.refuse("%s: %d YAML documents instead of %d in %s", where, len(bd), len(ad), pathString(c.levels[d-1].path))
		}
		for j := range ad {
			a, b := canon(ad[j]), canon(bd[j])
			if j == 0 {
				for _, p := range v.masks(c.levels[d].id, d) {
					maskPath(a, p)
					maskPath(b, p)
				}
			}
			if diff := diffCanon(a, b, ""); diff != "" {
				return v.refuse("%s: in %s: %s", where, pathString(c.levels[d-1].path), diff)
			}
		}
	}
	return nil
}

// embedded checks the documents of a config embedded in a scalar: they
// differ only by the expected changes.
func (v *verification) embedded(c, gc *Config, where string) error {
	if len(c.levels) == 0 {
		return nil
	}
	if len(c.docs) != len(gc.docs) {
		return v.refuse("%s: %d YAML documents instead of %d", where, len(gc.docs), len(c.docs))
	}
	for i := range c.docs {
		a, b := canon(c.docs[i]), canon(gc.docs[i])
		if i == 0 {
			for _, e := range v.byCfg[c] {
				if err := e.applyCanon(a.kids[0]); err != nil {
					return v.refuse("%s: %v", where, err)
				}
			}
		}
		if d := diffCanon(a, b, ""); d != "" {
			return v.refuse("%s: %s", where, d)
		}
	}
	return nil
}

// eppView checks that the EPP reads the edited config as the original with
// the expected changes.
func (v *verification) eppView(c, gc *Config, where string) error {
	var a, b any
	if err := decodeJSON(c.eppJSON, &a); err != nil {
		return v.refuse("%s: %v", where, err)
	}
	if err := decodeJSON(gc.eppJSON, &b); err != nil {
		return v.refuse("%s: %v", where, err)
	}
	for _, e := range v.byCfg[c] {
		if err := e.applyJSON(a); err != nil {
			return v.refuse("%s: %v", where, err)
		}
	}
	if d := diffJSON(a, b, ""); d != "" {
		return v.refuse("%s, as the EPP reads it: %s", where, d)
	}
	return nil
}

// diffJSON returns where two decoded JSON values first differ ("" when equal).
func diffJSON(a, b any, path string) string {
	if reflect.DeepEqual(a, b) {
		return ""
	}
	if path == "" {
		path = "the config"
	}
	switch at := a.(type) {
	case map[string]any:
		bt, ok := b.(map[string]any)
		if !ok {
			break
		}
		keys := make([]string, 0, len(at)+len(bt))
		for k := range at {
			keys = append(keys, k)
		}
		for k := range bt {
			if _, ok := at[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			if d := diffJSON(at[k], bt[k], path+"."+k); d != "" {
				return d
			}
		}
	case []any:
		bt, ok := b.([]any)
		if !ok || len(at) != len(bt) {
			break
		}
		for i := range at {
			if d := diffJSON(at[i], bt[i], fmt.Sprintf("%s[%d]", path, i)); d != "" {
				return d
			}
		}
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return fmt.Sprintf("%s: %s became %s", path, truncate(string(ja)), truncate(string(jb)))
}

func truncate(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

// JSON returns the config as the EPP decodes it (YAML converted to JSON).
func (c *Config) JSON() []byte { return append([]byte(nil), c.eppJSON...) }
