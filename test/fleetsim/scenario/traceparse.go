package scenario

import (
	"path/filepath"
	"strconv"

	"gopkg.in/yaml.v3"
)

// trace parses a scenario's trace section.
func (p *parser) trace(dst **TraceSpec) func(*yaml.Node, string) error {
	return func(n *yaml.Node, field string) error {
		t := &TraceSpec{Loop: true, Seed: 1}
		err := p.fields(n, field, map[string]func(*yaml.Node, string) error{
			"file":              p.str(&t.File),
			"class":             p.str(&t.Class),
			"scale":             p.float(&t.Scale),
			"targetUtilization": p.float(&t.TargetUtilization),
			"start":             p.duration(&t.Start),
			"window":            p.duration(&t.Window),
			"loop":              p.bool(&t.Loop),
			"strict":            p.bool(&t.Strict),
			"envelope": func(n *yaml.Node, f string) error {
				return p.fields(n, f, map[string]func(*yaml.Node, string) error{
					"hours":    p.floats(&t.Envelope),
					"dayToDay": p.float(&t.DayToDay),
					"seed": func(n *yaml.Node, f string) error {
						var v int
						if err := p.int(&v)(n, f); err != nil {
							return err
						}
						if v < 0 {
							return p.errf(n, f, "must be >= 0, got %d", v)
						}
						t.Seed = uint64(v)
						return nil
					},
				}, "hours")
			},
		}, "file")
		if err != nil {
			return err
		}
		if err := t.validate(&Scenario{}); err != nil {
			return p.errf(n, field, "%v", err)
		}
		// A file scenario's trace is relative to the scenario's directory.
		written, file := t.File, t.File
		if !filepath.IsAbs(file) {
			file = filepath.Join(filepath.Dir(p.file), file)
		}
		t.UseFile(file)
		t.written = written
		*dst = t
		return nil
	}
}

func (p *parser) bool(dst *bool) func(*yaml.Node, string) error {
	return func(n *yaml.Node, field string) error {
		if err := p.scalar(n, field); err != nil {
			return err
		}
		var b bool
		if n.Tag != "!!bool" || n.Decode(&b) != nil {
			return p.errf(n, field, "must be true or false, got %q", n.Value)
		}
		*dst = b
		return nil
	}
}

func (p *parser) floats(dst *[]float64) func(*yaml.Node, string) error {
	return func(n *yaml.Node, field string) error {
		if n.Kind != yaml.SequenceNode {
			return p.errf(n, field, "must be a list of numbers, got %s", kindName(n))
		}
		out := make([]float64, len(n.Content))
		for i, c := range n.Content {
			if err := p.float(&out[i])(c, field+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
		*dst = out
		return nil
	}
}
