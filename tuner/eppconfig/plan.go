package eppconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"sort"
	"strings"

	"github.com/gatetuner/gatetuner/gate"
	"gopkg.in/yaml.v3"
)

// instanceEdit is the planning of one filter instance's edit on its config
// text: the nodes it edits, the keys to insert and what the parameters must
// read afterwards.
type instanceEdit struct {
	p      *plan
	in     Instance
	m      *textMap
	set    map[gate.Key]Value
	remove map[gate.Key]bool
	// obj is the parameters as the EPP receives them.
	obj map[string]json.RawMessage
	// entry is the plugin entry; pk and pv its parameters key and value
	// (nil when absent).
	entry, pk, pv *yaml.Node
	entryFlow     bool
	// inserts are the set keys no existing key matched, in key order.
	inserts []newPair
	matched map[gate.Key]bool
	exp     *expectation
}

// planInstance plans the splices for one filter instance, on the config text.
func (p *plan) planInstance(in Instance, set map[gate.Key]Value, remove map[gate.Key]bool) error {
	c := in.Config
	if c.readOnly != nil {
		return in.fail(c.dataKeyLn, c.readOnly)
	}
	obj, err := in.paramObject()
	if err != nil {
		return err
	}
	e := &instanceEdit{p: p, in: in, m: c.tm, set: set, remove: remove, obj: obj, matched: map[gate.Key]bool{}}
	e.entry, e.pk, e.pv = in.nodes()
	if err := e.checkEntry(); err != nil {
		return err
	}
	e.entryFlow = e.entry.Style&yaml.FlowStyle != 0
	e.exp = &expectation{cfg: c, index: in.index, original: e.pv}
	planned, err := e.plan()
	if err != nil || !planned {
		return err
	}
	p.expects = append(p.expects, e.exp)
	return nil
}

// unsupported is an ErrUnsupported failure at a line of the config text.
func (e *instanceEdit) unsupported(line int, format string, a ...any) error {
	return e.in.fail(e.m.fileLine(line), errorf(ErrUnsupported, format, a...))
}

// checkEntry refuses a plugins list or plugin entry that may be reused
// elsewhere (anchors, aliases, merge keys) or carries a tag.
func (e *instanceEdit) checkEntry() error {
	c, entry := e.in.Config, e.entry
	if c.root.Anchor != "" || c.pluginsSeq.Anchor != "" {
		return e.unsupported(c.pluginsSeq.Line, "the plugins list carries an anchor and may be reused elsewhere; edit it by hand")
	}
	switch {
	case entry.Kind == yaml.AliasNode:
		return e.unsupported(entry.Line, "the plugin entry is an alias (*%s); edit the anchored entry by hand", entry.Value)
	case entry.Anchor != "":
		return e.unsupported(entry.Line, "the plugin entry carries anchor &%s and may be reused elsewhere; edit it by hand", entry.Anchor)
	case entry.Style&yaml.TaggedStyle != 0:
		return e.unsupported(entry.Line, "the plugin entry carries a tag; edit it by hand")
	case hasMerge(entry):
		return e.unsupported(entry.Line, "the plugin entry uses a merge key (<<); edit it by hand")
	}
	return nil
}

// plan plans the edit by the form of the parameters value; false when there
// is nothing to change.
func (e *instanceEdit) plan() (bool, error) {
	pv := e.pv
	switch {
	case pv == nil:
		return e.createParams()
	case pv.Kind == yaml.AliasNode:
		return false, e.unsupported(pv.Line, "parameters is an alias (*%s) of parameters used elsewhere; edit them by hand", pv.Value)
	case pv.Anchor != "":
		return false, e.unsupported(pv.Line, "parameters carry anchor &%s and may be reused elsewhere; edit them by hand", pv.Anchor)
	case pv.Style&yaml.TaggedStyle != 0:
		return false, e.unsupported(pv.Line, "parameters carry a tag; edit them by hand")
	case pv.Kind == yaml.ScalarNode && pv.ShortTag() == "!!null":
		return e.fillNull()
	case pv.Kind == yaml.MappingNode:
		return e.editMapping()
	}
	return false, e.in.fail(e.m.fileLine(pv.Line), &gate.ParamError{Err: errors.New("must be a mapping")})
}

// collectInserts adds the set keys no existing key matched, in key order,
// to the inserts and the expected pairs.
func (e *instanceEdit) collectInserts() error {
	keys := make([]gate.Key, 0, len(e.set))
	for k := range e.set {
		if !e.matched[k] {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	for _, k := range keys {
		text, err := e.set[k].render(0)
		if err != nil {
			return e.in.fail(0, errorf(ErrInvalidChange, "%s: %v", k, err))
		}
		e.inserts = append(e.inserts, newPair{k, text})
		e.exp.pairs = append(e.exp.pairs, expPair{name: k.String(), text: text})
	}
	return nil
}

// pairsText joins the inserts as "key: value" with sep.
func (e *instanceEdit) pairsText(sep string) string {
	var parts []string
	for _, np := range e.inserts {
		parts = append(parts, np.key.String()+": "+np.text)
	}
	return strings.Join(parts, sep)
}

// insertLines are the inserts as block lines under indent.
func (e *instanceEdit) insertLines(indent string) []string {
	lines := make([]string, 0, len(e.inserts))
	for _, np := range e.inserts {
		lines = append(lines, indent+np.key.String()+": "+np.text)
	}
	return lines
}

// childIndent is the indentation of the keys of a block mapping under key.
func (e *instanceEdit) childIndent(key *yaml.Node) (string, string, error) {
	indent, err := linePrefix(e.m, key)
	if err != nil {
		return "", "", e.in.fail(0, err)
	}
	return indent, indent + strings.Repeat(" ", e.in.Config.indentStep()), nil
}

// createParams adds a parameters mapping to an entry that has none.
func (e *instanceEdit) createParams() (bool, error) {
	if err := e.collectInserts(); err != nil || len(e.inserts) == 0 {
		return false, err
	}
	m, entry := e.m, e.entry
	last := len(entry.Content) - 2
	if last < 0 {
		return false, e.unsupported(entry.Line, "the plugin entry is empty")
	}
	lk, lv := entry.Content[last], entry.Content[last+1]
	end, err := valueEnd(m, lk, lv, e.entryFlow)
	if err != nil {
		return false, e.in.fail(0, err)
	}
	if e.entryFlow {
		e.p.add(splice{start: m.outer(end), end: m.outer(end), text: ", parameters: {" + e.pairsText(", ") + "}"})
	} else {
		indent, child, err := e.childIndent(lk)
		if err != nil {
			return false, err
		}
		lines := append([]string{indent + "parameters:"}, e.insertLines(child)...)
		e.p.add(m.insertLines(m.in.lineOf(end), lines))
	}
	e.exp.created = true
	return true, nil
}

// fillNull writes the inserts into a null parameters value.
func (e *instanceEdit) fillNull() (bool, error) {
	if err := e.collectInserts(); err != nil || len(e.inserts) == 0 {
		return false, err
	}
	colon, err := keyColon(e.m, e.pk, e.entryFlow)
	if err != nil {
		return false, e.in.fail(0, err)
	}
	if e.entryFlow {
		return true, e.fillNullFlow(colon)
	}
	return true, e.fillNullBlock(colon)
}

// fillNullFlow replaces a null parameters value of a flow entry with a
// flow mapping of the inserts.
func (e *instanceEdit) fillNullFlow(colon int) error {
	m, pv := e.m, e.pv
	if isEmptyNull(pv) {
		e.p.add(splice{start: m.outer(colon), end: m.outer(colon), text: " {" + e.pairsText(", ") + "}"})
		return nil
	}
	s, err := m.pos(pv)
	if err != nil {
		return e.in.fail(0, err)
	}
	end, err := valueEnd(m, e.pk, pv, true)
	if err != nil {
		return e.in.fail(0, err)
	}
	e.p.add(splice{start: m.outer(s), end: m.outer(end), text: "{" + e.pairsText(", ") + "}"})
	return nil
}

// fillNullBlock replaces a null parameters value of a block entry with the
// inserts on lines under the parameters key.
func (e *instanceEdit) fillNullBlock(colon int) error {
	m, pv := e.m, e.pv
	kl := m.in.lineOf(colon)
	if !isEmptyNull(pv) {
		s, err := m.pos(pv)
		if err != nil {
			return e.in.fail(0, err)
		}
		if m.in.lineOf(s) != kl {
			return e.unsupported(pv.Line, "the null parameters value is not on the parameters line")
		}
		end, err := valueEnd(m, e.pk, pv, false)
		if err != nil {
			return e.in.fail(0, err)
		}
		e.p.add(splice{start: m.outer(colon), end: m.outer(end)})
	}
	_, child, err := e.childIndent(e.pk)
	if err != nil {
		return err
	}
	e.p.add(m.insertLines(kl, e.insertLines(child)))
	return nil
}

// editMapping replaces, removes and inserts keys of a parameters mapping.
func (e *instanceEdit) editMapping() (bool, error) {
	pv := e.pv
	if hasMerge(pv) {
		return false, e.unsupported(pv.Line, "parameters use a merge key (<<); edit them by hand")
	}
	flow := pv.Style&yaml.FlowStyle != 0
	removed, anyChange, err := e.replacePairs(flow)
	if err != nil {
		return false, err
	}
	if err := e.collectInserts(); err != nil {
		return false, err
	}
	if !anyChange && len(e.inserts) == 0 {
		return false, nil
	}
	if len(e.exp.pairs) == 0 && !flow {
		e.exp.emptied = true
	}
	return true, e.removeAndInsert(removed, flow)
}

// replacePairs plans the replacement of every existing key the change sets
// to another value, marks the keys it removes and records the pairs kept.
func (e *instanceEdit) replacePairs(flow bool) (removed []bool, anyChange bool, err error) {
	pv := e.pv
	n := len(pv.Content) / 2
	removed = make([]bool, n)
	for i := 0; i < n; i++ {
		k, v := pv.Content[2*i], pv.Content[2*i+1]
		gk, known := gate.LookupKey(k.Value)
		if known && e.remove[gk] {
			removed[i] = true
			anyChange = true
			continue
		}
		ep := expPair{key: k, val: v, name: k.Value}
		if val, ok := e.set[gk]; known && ok {
			e.matched[gk] = true
			if raw, present := e.obj[k.Value]; !present || !val.matches(raw) {
				text, err := e.p.replace(e.m, e.in, k, v, val, flow)
				if err != nil {
					return nil, false, err
				}
				ep.val, ep.text = nil, text
				anyChange = true
			}
		}
		e.exp.pairs = append(e.exp.pairs, ep)
	}
	return removed, anyChange, nil
}

// key and val are the i-th key and value of the parameters mapping.
func (e *instanceEdit) key(i int) *yaml.Node { return e.pv.Content[2*i] }
func (e *instanceEdit) val(i int) *yaml.Node { return e.pv.Content[2*i+1] }

// removeAndInsert plans removed keys and new keys of a parameters mapping.
func (e *instanceEdit) removeAndInsert(removed []bool, flow bool) error {
	lastKept := -1
	for i := len(removed) - 1; i >= 0; i-- {
		if !removed[i] {
			lastKept = i
			break
		}
	}
	if flow {
		return e.flowRemoveAndInsert(removed, lastKept)
	}
	for i := range removed {
		if !removed[i] {
			continue
		}
		if err := e.deleteBlockPair(i); err != nil {
			return err
		}
	}
	if len(e.inserts) == 0 {
		return nil
	}
	return e.insertBlockPairs(lastKept)
}

// deleteBlockPair deletes the lines of the i-th pair of a block mapping,
// which must have them to itself.
func (e *instanceEdit) deleteBlockPair(i int) error {
	m := e.m
	ko, err := m.pos(e.key(i))
	if err != nil {
		return e.in.fail(0, err)
	}
	kl := m.in.lineOf(ko)
	if len(bytes.Trim(m.in.text[m.in.start[kl]:ko], " \t")) > 0 {
		return e.unsupported(e.key(i).Line, "parameter %q does not start its line", e.key(i).Value)
	}
	ve, err := valueEnd(m, e.key(i), e.val(i), false)
	if err != nil {
		return e.in.fail(0, err)
	}
	el := m.in.lineOf(ve)
	if rest := bytes.TrimLeft(m.in.text[ve:m.in.end[el]], " \t"); len(rest) > 0 && rest[0] != '#' {
		return e.unsupported(e.key(i).Line, "parameter %q shares its line with other content", e.key(i).Value)
	}
	e.p.add(m.deleteLines(kl, el))
	return nil
}

// insertBlockPairs inserts the new keys after the last kept key, with its
// indentation; with every key removed, right after the parameters line,
// with the first key's.
func (e *instanceEdit) insertBlockPairs(lastKept int) error {
	m := e.m
	anchorKey, at := e.key(0), 0
	if lastKept >= 0 {
		ve, err := valueEnd(m, e.key(lastKept), e.val(lastKept), false)
		if err != nil {
			return e.in.fail(0, err)
		}
		anchorKey, at = e.key(lastKept), ve
	} else {
		colon, err := keyColon(m, e.pk, false)
		if err != nil {
			return e.in.fail(0, err)
		}
		at = colon
	}
	indent, err := linePrefix(m, anchorKey)
	if err != nil {
		return e.in.fail(0, err)
	}
	e.p.add(m.insertLines(m.in.lineOf(at), e.insertLines(indent)))
	return nil
}

// flowRemoveAndInsert removes runs of pairs of a flow mapping with their
// separators and inserts after the last kept value (or after the opening
// brace).
func (e *instanceEdit) flowRemoveAndInsert(removed []bool, lastKept int) error {
	keyStart, valEnd, err := e.flowBounds(len(removed))
	if err != nil {
		return err
	}
	e.removeFlowRuns(removed, keyStart, valEnd)
	if len(e.inserts) == 0 {
		return nil
	}
	m := e.m
	if lastKept >= 0 {
		at := m.outer(valEnd[lastKept])
		e.p.add(splice{start: at, end: at, text: ", " + e.pairsText(", ")})
		return nil
	}
	open, err := m.pos(e.pv)
	if err != nil {
		return e.in.fail(0, err)
	}
	if byteAt(m.in.text, open) != '{' {
		return e.unsupported(e.pv.Line, "cannot locate the parameters' opening brace")
	}
	at := m.outer(open + 1)
	e.p.add(splice{start: at, end: at, text: e.pairsText(", ")})
	return nil
}

// flowBounds are the offsets where each of the n pairs' key starts and
// value ends.
func (e *instanceEdit) flowBounds(n int) (keyStart, valEnd []int, err error) {
	keyStart, valEnd = make([]int, n), make([]int, n)
	for i := 0; i < n; i++ {
		if keyStart[i], err = e.m.pos(e.key(i)); err != nil {
			return nil, nil, e.in.fail(0, err)
		}
		if valEnd[i], err = valueEnd(e.m, e.key(i), e.val(i), true); err != nil {
			return nil, nil, e.in.fail(0, err)
		}
	}
	return keyStart, valEnd, nil
}

// removeFlowRuns removes each run of removed pairs of a flow mapping with
// one separator: up to the next kept key, else from the previous kept
// value, else (every pair removed) with a trailing comma.
func (e *instanceEdit) removeFlowRuns(removed []bool, keyStart, valEnd []int) {
	m, n := e.m, len(removed)
	for a := 0; a < n; a++ {
		if !removed[a] {
			continue
		}
		b := a
		for b+1 < n && removed[b+1] {
			b++
		}
		var s, end int
		switch {
		case b+1 < n:
			s, end = keyStart[a], keyStart[b+1]
		case a > 0:
			s, end = valEnd[a-1], valEnd[b]
		default:
			s, end = keyStart[0], valEnd[b]
			i := end
			for i < len(m.in.text) && isBlank(m.in.text[i]) {
				i++
			}
			if i < len(m.in.text) && m.in.text[i] == ',' {
				end = i + 1
			}
		}
		e.p.add(splice{start: m.outer(s), end: m.outer(end)})
		a = b
	}
}
