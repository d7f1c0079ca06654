package epp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/tuner/eppconfig"
)

// AffinityFilterType is the plugin type of the prefix-cache-affinity filter.
const AffinityFilterType = "prefix-cache-affinity-filter"

// DefaultSettings are the EPP's defaults (router main, Aug 2026): static,
// 18000 ms, 15928 tok/s, threshold 0.8, v1 missing-signal semantics.
func DefaultSettings() gate.Settings {
	p := gate.DefaultParams()
	return p.Settings(gate.SemanticsV1)
}

// SettingsSource gives the gate settings an EPP pod starts with.
type SettingsSource interface {
	// LoadSettings returns the settings, or an error when an EPP started
	// with this configuration would fail (e.g. a key its build rejects).
	LoadSettings() (gate.Settings, error)
}

// SettingsFunc adapts a loader function to SettingsSource.
type SettingsFunc func() (gate.Settings, error)

// LoadSettings calls f.
func (f SettingsFunc) LoadSettings() (gate.Settings, error) { return f() }

// StaticSettings is a SettingsSource that always returns s.
func StaticSettings(s gate.Settings) SettingsSource {
	return SettingsFunc(func() (gate.Settings, error) { return s, nil })
}

// ConfigFile reads the gate's settings from an EPP config file (an
// EndpointPickerConfig, possibly several YAML documents) each time it is
// loaded, as an EPP pod does when it starts.
type ConfigFile struct {
	Path string
	// Plugin names the filter instance; "" means the only plugin of type
	// prefix-cache-affinity-filter.
	Plugin string
	// Profile is the EPP build the parameters are decoded with.
	Profile gate.Profile
}

// LoadSettings reads and decodes the file.
func (f ConfigFile) LoadSettings() (gate.Settings, error) {
	data, err := os.ReadFile(f.Path)
	if err != nil {
		return gate.Settings{}, fmt.Errorf("read EPP config: %w", err)
	}
	s, err := ParseConfig(data, f.Plugin, f.Profile)
	if err != nil {
		return gate.Settings{}, fmt.Errorf("EPP config %s: %w", f.Path, err)
	}
	return s, nil
}

// ParseConfig finds the affinity filter's parameters in an EPP config
// (EndpointPickerConfig YAML, one or more documents) and decodes them as an
// EPP of the given build would. This is a minimal reader for the simulator:
// it looks only at plugins[].{name,type,parameters}.
func ParseConfig(data []byte, plugin string, prof gate.Profile) (gate.Settings, error) {
	// A config embedded in a ConfigMap, Helm values, a HelmRelease, an
	// Application or a List is read as gatetuner reads it.
	if f, err := eppconfig.Parse(data, "EPP config"); err == nil {
		if in, err := f.Select(eppconfig.Target{Plugin: plugin}); err == nil && in.Config.Path != "" {
			params, err := in.Params(prof)
			if err != nil {
				return gate.Settings{}, err
			}
			return params.Settings(prof.MissingSignal), nil
		}
	}
	var ps configPlugins
	if err := ps.read(data, plugin); err != nil {
		return gate.Settings{}, err
	}
	switch {
	case len(ps.matches) == 0 && plugin != "":
		return gate.Settings{}, fmt.Errorf("no plugin named %q (affinity filters: %s)", plugin, strings.Join(ps.names, ", "))
	case len(ps.matches) == 0:
		return gate.Settings{}, fmt.Errorf("no plugin of type %s", AffinityFilterType)
	case len(ps.matches) > 1:
		return gate.Settings{}, fmt.Errorf("%d plugins match (%s); name the one to use", len(ps.matches), strings.Join(ps.names, ", "))
	}
	m := ps.matches[0]
	var raw []byte
	if m.params != nil {
		var err error
		if raw, err = scenario.EncodeParameters("EPP config", m.params, "plugins["+m.name+"].parameters"); err != nil {
			return gate.Settings{}, err
		}
	}
	params, err := gate.ParseParams(raw, prof)
	if err != nil {
		return gate.Settings{}, fmt.Errorf("plugin %q (line %d): %w", m.name, m.line, err)
	}
	return params.Settings(prof.MissingSignal), nil
}

// configPlugins are the plugins of an EPP config that match the one asked
// for, and the names of its affinity filters.
type configPlugins struct {
	matches []configPlugin
	names   []string
}

// configPlugin is one plugin: its name, its parameters' node, its line.
type configPlugin struct {
	name   string
	params *yaml.Node
	line   int
}

// read collects, from every document's plugins list, the plugins matching
// plugin (by name; "" means by the affinity filter's type).
func (ps *configPlugins) read(data []byte, plugin string) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var root yaml.Node
		err := dec.Decode(&root)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("invalid YAML: %w", err)
		}
		if len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
			continue
		}
		m := root.Content[0]
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value != "plugins" {
				continue
			}
			if err := ps.readList(m.Content[i+1], plugin); err != nil {
				return err
			}
		}
	}
}

// readList collects the matching plugins of one plugins list.
func (ps *configPlugins) readList(list *yaml.Node, plugin string) error {
	if list.Kind != yaml.SequenceNode {
		return fmt.Errorf("line %d: plugins must be a list", list.Line)
	}
	for _, pn := range list.Content {
		if pn.Kind != yaml.MappingNode {
			return fmt.Errorf("line %d: a plugin must be a mapping", pn.Line)
		}
		var name, typ string
		var params *yaml.Node
		for j := 0; j+1 < len(pn.Content); j += 2 {
			k, v := pn.Content[j].Value, pn.Content[j+1]
			switch k {
			case "name":
				name = v.Value
			case "type":
				typ = v.Value
			case "parameters":
				params = v
			}
		}
		if name == "" {
			name = typ
		}
		if typ == AffinityFilterType {
			ps.names = append(ps.names, name)
		}
		if (plugin != "" && name == plugin) || (plugin == "" && typ == AffinityFilterType) {
			ps.matches = append(ps.matches, configPlugin{name: name, params: params, line: pn.Line})
		}
	}
	return nil
}
