package scenario

import (
	"strings"

	"gopkg.in/yaml.v3"
)

// exporters parses a scenario's `exporters:` mapping: `shape` (a named
// shape, default DefaultExportShape) and any ExportShape field by its YAML
// name, e.g. {shape: llm-d-2026, dpRanks: 2, producers: [a, b]}.
func (p *parser) exporters(n *yaml.Node, field string) (*ExportShape, error) {
	if n.Kind != yaml.MappingNode {
		return nil, p.errf(n, field, "must be a mapping, got %s", kindName(n))
	}
	name := ""
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "shape" {
			v := n.Content[i+1]
			if err := p.scalar(v, join(field, "shape")); err != nil {
				return nil, err
			}
			name = v.Value
		}
	}
	x, err := ExportShapeNamed(name)
	if err != nil {
		return nil, p.errf(n, join(field, "shape"), "%v", err)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		sub := join(field, k.Value)
		if seen[k.Value] {
			return nil, p.errf(k, sub, "duplicate key")
		}
		seen[k.Value] = true
		if k.Value == "shape" {
			continue
		}
		val := v.Value
		if k.Value == "producers" && v.Kind == yaml.SequenceNode {
			var names []string
			for _, e := range v.Content {
				if err := p.scalar(e, sub); err != nil {
					return nil, err
				}
				names = append(names, e.Value)
			}
			val = strings.Join(names, ",")
		} else if err := p.scalar(v, sub); err != nil {
			return nil, err
		}
		if err := x.SetExportField(k.Value, val); err != nil {
			return nil, p.errf(v, sub, "%v", err)
		}
	}
	if err := x.Validate(); err != nil {
		return nil, p.errf(n, field, "%v", err)
	}
	return &x, nil
}
