package scenario

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/gatetuner/gatetuner/gate"
)

// paramsJSON renders a parameters mapping as the JSON object the EPP would
// decode, keeping key order; it returns the keys' nodes for error locations.
func (d *decoder) paramsJSON(n *yaml.Node, field string) ([]paramKV, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, d.errf(n, field, "must be a mapping, got %s", kindName(n))
	}
	var out []paramKV
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if v.Kind != yaml.ScalarNode {
			return nil, d.errf(v, join(field, k.Value), "must be a scalar, got %s", kindName(v))
		}
		var raw []byte
		switch v.Tag {
		case "!!int", "!!float":
			f, err := strconv.ParseFloat(strings.ReplaceAll(v.Value, "_", ""), 64)
			if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				return nil, d.errf(v, join(field, k.Value), "must be a finite number, got %q", v.Value)
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
	d := &decoder{file: file}
	kvs, err := d.paramsJSON(n, field)
	if err != nil {
		return nil, err
	}
	return encodeParams(kvs), nil
}

// params are a parameters mapping as written (nil: absent, null or empty)
// and its node.
type params struct {
	kvs  []paramKV
	node *yaml.Node
}

func (p *params) decodeNode(d *decoder, n *yaml.Node, field string) error {
	kvs, err := d.paramsJSON(n, field)
	p.kvs, p.node = kvs, n
	return err
}

// paramKV is one parameter: its key, its JSON value and the key's node.
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
func (d *decoder) decodeParams(kvs []paramKV, at *yaml.Node, field string, prof gate.Profile) ([]byte, gate.Settings, error) {
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
		return nil, gate.Settings{}, d.errf(node, f, "the EPP (profile %s) would reject it: %v", prof.Name, err)
	}
	return raw, params.Settings(prof.MissingSignal), nil
}
