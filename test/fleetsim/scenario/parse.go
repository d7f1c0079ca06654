package scenario

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gatetuner/gatetuner/gate"
)

// scenarioFile is a scenario file's top level. Its classes and phases are
// decoded once the EPP's profile and parameters are known (phases override
// the parameters and name the classes in their mix).
type scenarioFile struct {
	Name           string        `yaml:"name" required:"true"`
	Description    string        `yaml:"description"`
	Namespace      string        `yaml:"namespace"`
	Target         string        `yaml:"target"`
	Model          string        `yaml:"model"`
	ScrapeInterval time.Duration `yaml:"scrapeInterval"`
	Pods           PodsSpec      `yaml:"pods" required:"true"`
	EPP            eppFile       `yaml:"epp"`
	Exporters      *ExportShape  `yaml:"exporters"`
	Classes        *yaml.Node    `yaml:"classes"`
	Trace          *TraceSpec    `yaml:"trace"`
	Phases         *yaml.Node    `yaml:"phases" required:"true"`
}

// eppFile is the epp section: the profile by name, the plugin's parameters
// as written.
type eppFile struct {
	Pod         string          `yaml:"pod"`
	Profile     string          `yaml:"profile"`
	Plugin      string          `yaml:"plugin"`
	Picker      string          `yaml:"picker"`
	Parameters  params          `yaml:"parameters"`
	PrefixIndex PrefixIndexSpec `yaml:"prefixIndex"`
}

// phaseFile is a phase as written: its mix by class name, its parameters
// overriding the EPP's.
type phaseFile struct {
	Name        string        `yaml:"name" required:"true"`
	Duration    time.Duration `yaml:"duration" required:"true" check:">0"`
	RequestRate float64       `yaml:"requestRate" check:">=0"`
	Arrivals    ArrivalSpec   `yaml:"arrivals"`
	Mix         mix           `yaml:"mix"`
	Parameters  params        `yaml:"parameters"`
}

// mix is a phase's class weights, in class order (set: the phase has a mix).
type mix struct {
	weights []float64
	set     bool
}

// Parse parses a scenario from YAML. file names the source in errors,
// which carry the line, column and field path (*ParseError).
func Parse(file string, data []byte) (*Scenario, error) {
	d := &decoder{file: file}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &ParseError{File: file, Msg: "invalid YAML: " + err.Error()}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, &ParseError{File: file, Msg: "empty document"}
	}
	root := doc.Content[0]
	f := scenarioFile{ScrapeInterval: 15 * time.Second, Namespace: "default"}
	f.Pods.Engine = EngineSpec{MaxNumSeqs: 256, DecodeCost: 1, BlockSize: 16, StepOverhead: 10 * time.Millisecond}
	f.EPP.PrefixIndex = PrefixIndexSpec{BlockSizeTokens: 64, LRUCapacityPerServer: 31250}
	f.EPP.Plugin = "prefix-cache-affinity-filter"
	if err := d.decode(root, "", reflect.ValueOf(&f).Elem()); err != nil {
		return nil, err
	}
	sc := f.scenario(file)
	prof, err := gate.LookupProfile(f.EPP.Profile)
	if err != nil {
		return nil, d.errf(root, "epp.profile", "%v", err)
	}
	sc.EPP.Profile = prof
	base := f.EPP.Parameters
	if base.node == nil {
		base.node = root
	}
	if sc.EPP.Parameters, sc.EPP.Settings, err = d.decodeParams(base.kvs, base.node, "epp.parameters", prof); err != nil {
		return nil, err
	}
	if err := d.decodeClasses(sc, root, f.Classes); err != nil {
		return nil, err
	}
	if err := d.decodePhases(sc, f.Phases, base.kvs); err != nil {
		return nil, err
	}
	if err := sc.Validate(); err != nil {
		return nil, &ParseError{File: file, Msg: err.Error()}
	}
	return sc, nil
}

// scenario is the scenario the file's top level describes, its names
// defaulted from its target.
func (f *scenarioFile) scenario(file string) *Scenario {
	sc := &Scenario{Name: f.Name, Description: f.Description, Source: file, Namespace: f.Namespace, Target: f.Target,
		Model: f.Model, ScrapeInterval: f.ScrapeInterval, Pods: f.Pods, Exporters: f.Exporters, Trace: f.Trace}
	sc.EPP = EPPSpec{Pod: f.EPP.Pod, Plugin: f.EPP.Plugin, PrefixIndex: f.EPP.PrefixIndex, Picker: PickerLeastTokensThenRequests}
	if f.EPP.Picker != "" {
		sc.EPP.Picker = Picker(f.EPP.Picker)
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
	return sc
}

// decodeClasses decodes the scenario's session classes (optional with a
// trace) into sc and d.
func (d *decoder) decodeClasses(sc *Scenario, root, n *yaml.Node) error {
	if n == nil && sc.Trace == nil {
		return d.errf(root, "classes", "is required (or a trace)")
	}
	if n == nil {
		n = &yaml.Node{Kind: yaml.SequenceNode}
	} else if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		return d.errf(n, "classes", "must be a non-empty list, got %s", kindName(n))
	}
	d.classIx = map[string]int{}
	for i, cn := range n.Content {
		f := fmt.Sprintf("classes[%d]", i)
		c := SessionClass{Turns: ConstDist(1), ThinkSeconds: ConstDist(0), Pace: ConstDist(1)}
		if err := d.decode(cn, f, reflect.ValueOf(&c).Elem()); err != nil {
			return err
		}
		if _, dup := d.classIx[c.Name]; dup || c.Name == "" {
			return d.errf(cn, f+".name", "must be non-empty and unique, got %q", c.Name)
		}
		d.classIx[c.Name] = i
		sc.Classes = append(sc.Classes, c)
	}
	d.classes = sc.Classes
	return nil
}

// decodePhases decodes the scenario's phases into sc, each phase's
// parameters merged over the EPP's (base).
func (d *decoder) decodePhases(sc *Scenario, n *yaml.Node, base []paramKV) error {
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		return d.errf(n, "phases", "must be a non-empty list, got %s", kindName(n))
	}
	for i, pn := range n.Content {
		field := fmt.Sprintf("phases[%d]", i)
		f := phaseFile{Arrivals: ArrivalSpec{Process: ArrivalPoisson}, Mix: mix{weights: make([]float64, len(sc.Classes))}}
		if err := d.decode(pn, field, reflect.ValueOf(&f).Elem()); err != nil {
			return err
		}
		ph := Phase{Name: f.Name, Duration: f.Duration, RequestRate: f.RequestRate, Arrivals: f.Arrivals, Mix: f.Mix.weights}
		if !f.Mix.set {
			for j := range ph.Mix {
				ph.Mix[j] = 1
			}
		}
		ph.Parameters, ph.Settings = sc.EPP.Parameters, sc.EPP.Settings
		if f.Parameters.kvs != nil {
			var err error
			if ph.Parameters, ph.Settings, err = d.decodeParams(mergeParams(base, f.Parameters.kvs), f.Parameters.node, field+".parameters", sc.EPP.Profile); err != nil {
				return err
			}
		}
		sc.Phases = append(sc.Phases, ph)
	}
	return nil
}

// decodeNode decodes a mix: class names to weights.
func (m *mix) decodeNode(d *decoder, n *yaml.Node, field string) error {
	m.set = true
	if n.Kind != yaml.MappingNode {
		return d.errf(n, field, "must be a mapping of class name to weight, got %s", kindName(n))
	}
	seen := map[string]bool{}
	for j := 0; j+1 < len(n.Content); j += 2 {
		k, v := n.Content[j], n.Content[j+1]
		sub := join(field, k.Value)
		ci, ok := d.classIx[k.Value]
		if !ok {
			names := make([]string, 0, len(d.classes))
			for _, c := range d.classes {
				names = append(names, c.Name)
			}
			return d.errf(k, sub, "no such class (classes: %s)", strings.Join(names, ", "))
		}
		if seen[k.Value] {
			return d.errf(k, sub, "duplicate key")
		}
		seen[k.Value] = true
		w, err := d.float(v, sub)
		if err != nil {
			return err
		}
		m.weights[ci] = w
		if w < 0 {
			return d.errf(v, sub, "weight must be >= 0, got %v", w)
		}
	}
	return nil
}

// decodeNode decodes a distribution: a number (a constant) or a mapping
// naming its family.
func (dst *Dist) decodeNode(d *decoder, n *yaml.Node, field string) error {
	x := Dist{}
	if n.Kind == yaml.ScalarNode {
		x.Kind = DistConst
		v, err := d.float(n, field)
		if err != nil {
			return err
		}
		x.Value = v
	} else if err := d.mapping(n, field, reflect.ValueOf(&x).Elem()); err != nil {
		return err
	}
	if err := x.validate(); err != nil {
		return d.errf(n, field, "%v", err)
	}
	*dst = x
	return nil
}

// checkNode checks a pool's count and Zipf exponent.
func (ps *PoolSpec) checkNode(d *decoder, n *yaml.Node, field string) error {
	if ps.Count < 0 || ps.Count > 1_000_000 {
		return d.errf(n, join(field, "count"), "must be in [0, 1000000], got %d", ps.Count)
	}
	if ps.Zipf < 0 {
		return d.errf(n, join(field, "zipf"), "must be >= 0, got %v", ps.Zipf)
	}
	return nil
}

// checkNode checks the engine's consistency.
func (e *EngineSpec) checkNode(d *decoder, n *yaml.Node, field string) error {
	if err := e.validate(); err != nil {
		return d.errf(n, field, "%v", err)
	}
	return nil
}

// checkNode checks the arrival process's parameters.
func (a *ArrivalSpec) checkNode(d *decoder, n *yaml.Node, field string) error {
	if err := a.validate(); err != nil {
		return d.errf(n, field, "%v", err)
	}
	return nil
}

// traceFile is a trace section as written.
type traceFile struct {
	File              string        `yaml:"file" required:"true"`
	Class             string        `yaml:"class"`
	Scale             float64       `yaml:"scale"`
	TargetUtilization float64       `yaml:"targetUtilization"`
	Start             time.Duration `yaml:"start"`
	Window            time.Duration `yaml:"window"`
	Loop              bool          `yaml:"loop"`
	Strict            bool          `yaml:"strict"`
	Envelope          envelopeFile  `yaml:"envelope"`
}

// envelopeFile is a trace's envelope section as written.
type envelopeFile struct {
	Hours    []float64 `yaml:"hours" required:"true"`
	DayToDay float64   `yaml:"dayToDay"`
	Seed     int       `yaml:"seed" check:">=0"`
}

// decodeNode decodes a scenario's trace section; a relative file is
// relative to the scenario file's directory.
func (t *TraceSpec) decodeNode(d *decoder, n *yaml.Node, field string) error {
	f := traceFile{Loop: true, Envelope: envelopeFile{Seed: 1}}
	if err := d.mapping(n, field, reflect.ValueOf(&f).Elem()); err != nil {
		return err
	}
	x := TraceSpec{File: f.File, Class: f.Class, Scale: f.Scale, TargetUtilization: f.TargetUtilization, Start: f.Start,
		Window: f.Window, Loop: f.Loop, Envelope: f.Envelope.Hours, DayToDay: f.Envelope.DayToDay, Seed: uint64(f.Envelope.Seed),
		Strict: f.Strict}
	if err := x.validate(&Scenario{}); err != nil {
		return d.errf(n, field, "%v", err)
	}
	written, file := x.File, x.File
	if !filepath.IsAbs(file) {
		file = filepath.Join(filepath.Dir(d.file), file)
	}
	x.UseFile(file)
	x.written = written
	*t = x
	return nil
}

// decodeNode decodes a scenario's exporters mapping: `shape` (a named
// shape, default DefaultExportShape) and any ExportShape field by its YAML
// name, e.g. {shape: llm-d-2026, dpRanks: 2, producers: [a, b]}.
func (x *ExportShape) decodeNode(d *decoder, n *yaml.Node, field string) error {
	if n.Kind != yaml.MappingNode {
		return d.errf(n, field, "must be a mapping, got %s", kindName(n))
	}
	name := ""
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "shape" {
			v := n.Content[i+1]
			if err := d.scalar(v, join(field, "shape")); err != nil {
				return err
			}
			name = v.Value
		}
	}
	shape, err := ExportShapeNamed(name)
	if err != nil {
		return d.errf(n, join(field, "shape"), "%v", err)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		sub := join(field, k.Value)
		if seen[k.Value] {
			return d.errf(k, sub, "duplicate key")
		}
		seen[k.Value] = true
		if k.Value == "shape" {
			continue
		}
		val, err := d.exportValue(k.Value, v, sub)
		if err != nil {
			return err
		}
		if err := shape.SetExportField(k.Value, val); err != nil {
			return d.errf(v, sub, "%v", err)
		}
	}
	if err := shape.Validate(); err != nil {
		return d.errf(n, field, "%v", err)
	}
	*x = shape
	return nil
}

// exportValue is an exporters field's value as SetExportField takes it: a
// scalar, or the producers list joined by commas.
func (d *decoder) exportValue(key string, v *yaml.Node, field string) (string, error) {
	if key == "producers" && v.Kind == yaml.SequenceNode {
		var names []string
		for _, e := range v.Content {
			if err := d.scalar(e, field); err != nil {
				return "", err
			}
			names = append(names, e.Value)
		}
		return strings.Join(names, ","), nil
	}
	if err := d.scalar(v, field); err != nil {
		return "", err
	}
	return v.Value, nil
}
