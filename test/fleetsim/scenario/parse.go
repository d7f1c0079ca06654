package scenario

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gatetuner/gatetuner/gate"
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

type parser struct{ file string }

func (p *parser) errf(n *yaml.Node, field, format string, a ...any) error {
	e := &ParseError{File: p.file, Field: field, Msg: fmt.Sprintf(format, a...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	return e
}

// fields walks a mapping node, calling the handler of each key; unknown and
// duplicate keys are errors, and required keys must be present.
func (p *parser) fields(n *yaml.Node, field string, handlers map[string]func(v *yaml.Node, field string) error, required ...string) error {
	if n.Kind != yaml.MappingNode {
		return p.errf(n, field, "must be a mapping, got %s", kindName(n))
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name := k.Value
		sub := join(field, name)
		if seen[name] {
			return p.errf(k, sub, "duplicate key")
		}
		seen[name] = true
		h, ok := handlers[name]
		if !ok {
			known := make([]string, 0, len(handlers))
			for k := range handlers {
				known = append(known, k)
			}
			sort.Strings(known)
			return p.errf(k, sub, "unknown field (known: %s)", strings.Join(known, ", "))
		}
		if err := h(v, sub); err != nil {
			return err
		}
	}
	for _, r := range required {
		if !seen[r] {
			return p.errf(n, join(field, r), "is required")
		}
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

func (p *parser) scalar(n *yaml.Node, field string) error {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return p.errf(n, field, "must be a scalar, got %s", kindName(n))
	}
	return nil
}

func (p *parser) str(dst *string) func(*yaml.Node, string) error {
	return func(n *yaml.Node, field string) error {
		if err := p.scalar(n, field); err != nil {
			return err
		}
		*dst = n.Value
		return nil
	}
}

func (p *parser) float(dst *float64) func(*yaml.Node, string) error {
	return func(n *yaml.Node, field string) error {
		if err := p.scalar(n, field); err != nil {
			return err
		}
		f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return p.errf(n, field, "must be a finite number, got %q", n.Value)
		}
		*dst = f
		return nil
	}
}

func (p *parser) int(dst *int) func(*yaml.Node, string) error {
	return func(n *yaml.Node, field string) error {
		if err := p.scalar(n, field); err != nil {
			return err
		}
		v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 10, 64)
		if err != nil || v > math.MaxInt32 || v < math.MinInt32 {
			return p.errf(n, field, "must be an integer (32-bit), got %q", n.Value)
		}
		*dst = int(v)
		return nil
	}
}

func (p *parser) duration(dst *time.Duration) func(*yaml.Node, string) error {
	return func(n *yaml.Node, field string) error {
		if err := p.scalar(n, field); err != nil {
			return err
		}
		d, err := time.ParseDuration(n.Value)
		if err != nil {
			return p.errf(n, field, "must be a duration such as 90s, 15m or 2h, got %q", n.Value)
		}
		*dst = d
		return nil
	}
}

func (p *parser) dist(dst *Dist) func(*yaml.Node, string) error {
	return func(n *yaml.Node, field string) error {
		d := Dist{}
		if n.Kind == yaml.ScalarNode {
			d.Kind = DistConst
			if err := p.float(&d.Value)(n, field); err != nil {
				return err
			}
		} else {
			var kind string
			err := p.fields(n, field, map[string]func(*yaml.Node, string) error{
				"dist":  p.str(&kind),
				"value": p.float(&d.Value),
				"mean":  p.float(&d.Mean),
				"cv":    p.float(&d.CV),
				"min":   p.float(&d.Min),
				"max":   p.float(&d.Max),
			}, "dist")
			if err != nil {
				return err
			}
			d.Kind = DistKind(kind)
		}
		if err := d.validate(); err != nil {
			return p.errf(n, field, "%v", err)
		}
		*dst = d
		return nil
	}
}

func (p *parser) pool(dst **PoolSpec) func(*yaml.Node, string) error {
	return func(n *yaml.Node, field string) error {
		ps := &PoolSpec{}
		err := p.fields(n, field, map[string]func(*yaml.Node, string) error{
			"count":  p.int(&ps.Count),
			"tokens": p.dist(&ps.Tokens),
			"zipf":   p.float(&ps.Zipf),
			"churn":  p.duration(&ps.Churn),
		}, "tokens")
		if err != nil {
			return err
		}
		if ps.Count < 0 || ps.Count > 1_000_000 {
			return p.errf(n, join(field, "count"), "must be in [0, 1000000], got %d", ps.Count)
		}
		if ps.Zipf < 0 {
			return p.errf(n, join(field, "zipf"), "must be >= 0, got %v", ps.Zipf)
		}
		*dst = ps
		return nil
	}
}

// paramsJSON renders a parameters mapping as the JSON object the EPP would
// decode, keeping key order; it returns the keys' nodes for error locations.
func (p *parser) paramsJSON(n *yaml.Node, field string) ([]paramKV, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, p.errf(n, field, "must be a mapping, got %s", kindName(n))
	}
	var out []paramKV
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if v.Kind != yaml.ScalarNode {
			return nil, p.errf(v, join(field, k.Value), "must be a scalar, got %s", kindName(v))
		}
		var raw []byte
		switch v.Tag {
		case "!!int", "!!float":
			f, err := strconv.ParseFloat(strings.ReplaceAll(v.Value, "_", ""), 64)
			if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				return nil, p.errf(v, join(field, k.Value), "must be a finite number, got %q", v.Value)
			}
			raw = []byte(strings.ReplaceAll(v.Value, "_", ""))
			if !json.Valid(raw) {
				raw = strconv.AppendFloat(nil, f, 'g', -1, 64)
			}
		case "!!bool":
			raw = []byte(strings.ToLower(v.Value))
		case "!!null":
			raw = []byte("null")
		default:
			raw, _ = json.Marshal(v.Value)
		}
		out = append(out, paramKV{key: k.Value, raw: raw, node: k})
	}
	return out, nil
}

// EncodeParameters renders a YAML parameters mapping as the JSON object the
// EPP would decode (key order kept); an error is a *ParseError naming file,
// line and field.
func EncodeParameters(file string, n *yaml.Node, field string) ([]byte, error) {
	p := &parser{file: file}
	kvs, err := p.paramsJSON(n, field)
	if err != nil {
		return nil, err
	}
	return encodeParams(kvs), nil
}

type paramKV struct {
	key  string
	raw  []byte
	node *yaml.Node
}

// mergeParams overlays over on base: a key present in both (same spelling)
// takes over's value in base's position; new keys are appended.
func mergeParams(base, over []paramKV) []paramKV {
	out := append([]paramKV(nil), base...)
	for _, o := range over {
		replaced := false
		for i := range out {
			if out[i].key == o.key {
				out[i] = o
				replaced = true
				break
			}
		}
		if !replaced {
			out = append(out, o)
		}
	}
	return out
}

func encodeParams(kvs []paramKV) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, kv := range kvs {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(kv.key)
		b.Write(k)
		b.WriteByte(':')
		b.Write(kv.raw)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// decodeParams decodes parameters with the profile; an error points at the
// offending key's line when it can.
func (p *parser) decodeParams(kvs []paramKV, at *yaml.Node, field string, prof gate.Profile) ([]byte, gate.Settings, error) {
	raw := encodeParams(kvs)
	params, err := gate.ParseParams(raw, prof)
	if err != nil {
		node, f := at, field
		var pe *gate.ParamError
		if errors.As(err, &pe) && pe.Key != "" {
			for _, kv := range kvs {
				if kv.key == pe.Key {
					node, f = kv.node, join(field, kv.key)
				}
			}
		}
		return nil, gate.Settings{}, p.errf(node, f, "the EPP (profile %s) would reject it: %v", prof.Name, err)
	}
	return raw, params.Settings(prof.MissingSignal), nil
}

// Parse parses a scenario from YAML. file names the source in
// errors, which carry the line, column and field path (*ParseError).
func Parse(file string, data []byte) (*Scenario, error) {
	p := &parser{file: file}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &ParseError{File: file, Msg: "invalid YAML: " + err.Error()}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, &ParseError{File: file, Msg: "empty document"}
	}
	root := doc.Content[0]
	sc := &Scenario{Source: file, ScrapeInterval: 15 * time.Second, Namespace: "default"}
	sc.Pods.Engine = EngineSpec{MaxNumSeqs: 256, DecodeCost: 1, BlockSize: 16, StepOverhead: 10 * time.Millisecond}
	sc.EPP.PrefixIndex = PrefixIndexSpec{BlockSizeTokens: 64, LRUCapacityPerServer: 31250}
	sc.EPP.Plugin = "prefix-cache-affinity-filter"
	sc.EPP.Picker = PickerLeastTokensThenRequests
	var picker string
	var (
		profileName string
		baseParams  []paramKV
		baseNode    *yaml.Node
		classesNode *yaml.Node
		phasesNode  *yaml.Node
	)
	err := p.fields(root, "", map[string]func(*yaml.Node, string) error{
		"name":           p.str(&sc.Name),
		"description":    p.str(&sc.Description),
		"namespace":      p.str(&sc.Namespace),
		"target":         p.str(&sc.Target),
		"model":          p.str(&sc.Model),
		"scrapeInterval": p.duration(&sc.ScrapeInterval),
		"pods": func(n *yaml.Node, f string) error {
			return p.fields(n, f, map[string]func(*yaml.Node, string) error{
				"count":      p.int(&sc.Pods.Count),
				"namePrefix": p.str(&sc.Pods.NamePrefix),
				"engine": func(n *yaml.Node, f string) error {
					e := &sc.Pods.Engine
					err := p.fields(n, f, map[string]func(*yaml.Node, string) error{
						"nominalRate":         p.float(&e.NominalRate),
						"maxNumBatchedTokens": p.int(&e.MaxNumBatchedTokens),
						"maxNumSeqs":          p.int(&e.MaxNumSeqs),
						"stepOverhead":        p.duration(&e.StepOverhead),
						"decodeCost":          p.float(&e.DecodeCost),
						"blockSize":           p.int(&e.BlockSize),
						"numGPUBlocks":        p.int(&e.NumGPUBlocks),
						"maxModelLen":         p.int(&e.MaxModelLen),
					}, "nominalRate", "maxNumBatchedTokens", "numGPUBlocks", "maxModelLen")
					if err != nil {
						return err
					}
					if err := e.validate(); err != nil {
						return p.errf(n, f, "%v", err)
					}
					return nil
				},
			}, "count", "engine")
		},
		"epp": func(n *yaml.Node, f string) error {
			return p.fields(n, f, map[string]func(*yaml.Node, string) error{
				"pod":     p.str(&sc.EPP.Pod),
				"profile": p.str(&profileName),
				"plugin":  p.str(&sc.EPP.Plugin),
				"picker":  p.str(&picker),
				"parameters": func(n *yaml.Node, f string) error {
					kvs, err := p.paramsJSON(n, f)
					baseParams, baseNode = kvs, n
					return err
				},
				"prefixIndex": func(n *yaml.Node, f string) error {
					pi := &sc.EPP.PrefixIndex
					return p.fields(n, f, map[string]func(*yaml.Node, string) error{
						"blockSizeTokens":        p.int(&pi.BlockSizeTokens),
						"lruCapacityPerServer":   p.int(&pi.LRUCapacityPerServer),
						"maxPrefixBlocksToMatch": p.int(&pi.MaxPrefixBlocksToMatch),
					})
				},
			})
		},
		"exporters": func(n *yaml.Node, f string) (err error) {
			sc.Exporters, err = p.exporters(n, f)
			return err
		},
		"classes": func(n *yaml.Node, _ string) error { classesNode = n; return nil },
		"trace":   p.trace(&sc.Trace),
		"phases":  func(n *yaml.Node, _ string) error { phasesNode = n; return nil },
	}, "name", "pods", "phases")
	if err != nil {
		return nil, err
	}
	if picker != "" {
		sc.EPP.Picker = Picker(picker)
	}
	if sc.Target == "" {
		sc.Target = sc.Name
	}
	if sc.Model == "" {
		sc.Model = sc.Target
	}
	if sc.Pods.NamePrefix == "" {
		sc.Pods.NamePrefix = sc.Target + "-decode"
	}
	if sc.EPP.Pod == "" {
		sc.EPP.Pod = sc.Target + "-epp-0"
	}
	prof, err := gate.LookupProfile(profileName)
	if err != nil {
		return nil, p.errf(root, "epp.profile", "%v", err)
	}
	sc.EPP.Profile = prof
	if baseNode == nil {
		baseNode = root
	}
	if sc.EPP.Parameters, sc.EPP.Settings, err = p.decodeParams(baseParams, baseNode, "epp.parameters", prof); err != nil {
		return nil, err
	}

	classIdx, err := p.classes(sc, root, classesNode)
	if err != nil {
		return nil, err
	}

	// Phases.
	if phasesNode.Kind != yaml.SequenceNode || len(phasesNode.Content) == 0 {
		return nil, p.errf(phasesNode, "phases", "must be a non-empty list, got %s", kindName(phasesNode))
	}
	for i, pn := range phasesNode.Content {
		f := fmt.Sprintf("phases[%d]", i)
		ph := Phase{Arrivals: ArrivalSpec{Process: ArrivalPoisson}, Mix: make([]float64, len(sc.Classes))}
		var over []paramKV
		var overNode *yaml.Node
		mixSet := false
		err := p.fields(pn, f, map[string]func(*yaml.Node, string) error{
			"name": p.str(&ph.Name),
			"duration": func(n *yaml.Node, f string) error {
				if err := p.duration(&ph.Duration)(n, f); err != nil {
					return err
				}
				if ph.Duration <= 0 {
					return p.errf(n, f, "must be > 0, got %v", ph.Duration)
				}
				return nil
			},
			"requestRate": func(n *yaml.Node, f string) error {
				if err := p.float(&ph.RequestRate)(n, f); err != nil {
					return err
				}
				if ph.RequestRate < 0 {
					return p.errf(n, f, "must be >= 0, got %v", ph.RequestRate)
				}
				return nil
			},
			"arrivals": func(n *yaml.Node, f string) error {
				a := &ph.Arrivals
				var proc string
				err := p.fields(n, f, map[string]func(*yaml.Node, string) error{
					"process":       p.str(&proc),
					"burstFactor":   p.float(&a.BurstFactor),
					"burstDuration": p.duration(&a.BurstDuration),
					"burstEvery":    p.duration(&a.BurstEvery),
					"peakToTrough":  p.float(&a.PeakToTrough),
					"period":        p.duration(&a.Period),
				}, "process")
				if err != nil {
					return err
				}
				a.Process = ArrivalProcess(proc)
				if err := a.validate(); err != nil {
					return p.errf(n, f, "%v", err)
				}
				return nil
			},
			"mix": func(n *yaml.Node, f string) error {
				mixSet = true
				if n.Kind != yaml.MappingNode {
					return p.errf(n, f, "must be a mapping of class name to weight, got %s", kindName(n))
				}
				seen := map[string]bool{}
				for j := 0; j+1 < len(n.Content); j += 2 {
					k, v := n.Content[j], n.Content[j+1]
					ci, ok := classIdx[k.Value]
					if !ok {
						names := make([]string, 0, len(sc.Classes))
						for _, c := range sc.Classes {
							names = append(names, c.Name)
						}
						return p.errf(k, join(f, k.Value), "no such class (classes: %s)", strings.Join(names, ", "))
					}
					if seen[k.Value] {
						return p.errf(k, join(f, k.Value), "duplicate key")
					}
					seen[k.Value] = true
					if err := p.float(&ph.Mix[ci])(v, join(f, k.Value)); err != nil {
						return err
					}
					if ph.Mix[ci] < 0 {
						return p.errf(v, join(f, k.Value), "weight must be >= 0, got %v", ph.Mix[ci])
					}
				}
				return nil
			},
			"parameters": func(n *yaml.Node, f string) error {
				kvs, err := p.paramsJSON(n, f)
				over, overNode = kvs, n
				return err
			},
		}, "name", "duration")
		if err != nil {
			return nil, err
		}
		if !mixSet {
			for j := range ph.Mix {
				ph.Mix[j] = 1
			}
		}
		ph.Parameters, ph.Settings = sc.EPP.Parameters, sc.EPP.Settings
		if over != nil {
			if ph.Parameters, ph.Settings, err = p.decodeParams(mergeParams(baseParams, over), overNode, f+".parameters", prof); err != nil {
				return nil, err
			}
		}
		sc.Phases = append(sc.Phases, ph)
	}
	if err := sc.Validate(); err != nil {
		return nil, &ParseError{File: file, Msg: err.Error()}
	}
	return sc, nil
}

// classes parses the scenario's session classes (optional with a trace) into
// sc and returns their indexes by name.
func (p *parser) classes(sc *Scenario, root, classesNode *yaml.Node) (map[string]int, error) {
	if classesNode == nil && sc.Trace == nil {
		return nil, p.errf(root, "classes", "is required (or a trace)")
	}
	if classesNode == nil {
		classesNode = &yaml.Node{Kind: yaml.SequenceNode}
	} else if classesNode.Kind != yaml.SequenceNode || len(classesNode.Content) == 0 {
		return nil, p.errf(classesNode, "classes", "must be a non-empty list, got %s", kindName(classesNode))
	}
	classIdx := map[string]int{}
	for i, cn := range classesNode.Content {
		f := fmt.Sprintf("classes[%d]", i)
		c := SessionClass{Turns: ConstDist(1), ThinkSeconds: ConstDist(0), Pace: ConstDist(1)}
		var first Dist
		hasFirst := false
		err := p.fields(cn, f, map[string]func(*yaml.Node, string) error{
			"name":         p.str(&c.Name),
			"systemPrompt": p.pool(&c.SystemPrompt),
			"document":     p.pool(&c.Document),
			"turns":        p.dist(&c.Turns),
			"firstUserTokens": func(n *yaml.Node, f string) error {
				hasFirst = true
				return p.dist(&first)(n, f)
			},
			"userTokens":   p.dist(&c.UserTokens),
			"outputTokens": p.dist(&c.OutputTokens),
			"thinkSeconds": p.dist(&c.ThinkSeconds),
			"pace":         p.dist(&c.Pace),
		}, "name", "userTokens", "outputTokens")
		if err != nil {
			return nil, err
		}
		if hasFirst {
			c.FirstUserTokens = &first
		}
		if _, dup := classIdx[c.Name]; dup || c.Name == "" {
			return nil, p.errf(cn, f+".name", "must be non-empty and unique, got %q", c.Name)
		}
		classIdx[c.Name] = i
		sc.Classes = append(sc.Classes, c)
	}
	return classIdx, nil
}
