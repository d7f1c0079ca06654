package eppconfig

import (
	"encoding/json"
	"fmt"

	"github.com/gatetuner/gatetuner/gate"
)

// ErrStartup marks a config the EPP would refuse at startup.
var ErrStartup = fmt.Errorf("the EPP would refuse the config at startup")

// CheckStartup returns the first reason the EPP would refuse the config at
// startup, naming its line: a scheduling profile without a name or with a
// duplicate one, a pluginRef that is empty or names no declared plugin (in a
// scheduling profile, requestHandler.parsers, the deprecated parser, or the
// saturation detector), or a prefix-cache-affinity-filter whose parameters
// the build profile rejects (an unknown key among them). Plugin names are
// unique already (Parse refuses duplicates). The rules are the EPP loader's
// (docs/gate.md).
func (c *Config) CheckStartup(prof gate.Profile) error {
	fail := func(line int, format string, a ...any) error {
		return &Error{Source: c.file.source, Line: line, DataKey: c.DataKey,
			Err: &kindError{kind: ErrStartup, msg: fmt.Sprintf(format, a...) + "; " + ErrStartup.Error()}}
	}
	declared := make(map[string]bool, len(c.Plugins))
	for _, p := range c.Plugins {
		declared[p.Name] = true
	}
	seen := map[string]bool{}
	for i, sp := range c.SchedulingProfiles {
		switch {
		case sp.Name == "":
			return fail(sp.Line, "schedulingProfiles[%d] has no name", i)
		case seen[sp.Name]:
			return fail(sp.Line, "scheduling profile name %q is used twice", sp.Name)
		}
		seen[sp.Name] = true
		for j, r := range sp.Plugins {
			switch {
			case r.PluginRef == "":
				return fail(r.Line, "schedulingProfiles[%s].plugins[%d] has no pluginRef", sp.Name, j)
			case !declared[r.PluginRef]:
				return fail(r.Line, "scheduling profile %q references plugin %q, which is not declared in plugins", sp.Name, r.PluginRef)
			}
		}
	}
	for _, ref := range c.otherRefs() {
		if !declared[ref.name] {
			return fail(ref.line, "%s references plugin %q, which is not declared in plugins", ref.where, ref.name)
		}
	}
	for _, in := range c.Filters() {
		if _, err := in.Params(prof); err != nil {
			return err
		}
	}
	return nil
}

type pluginRef struct {
	where string
	name  string
	line  int
}

// otherRefs returns the pluginRefs outside scheduling profiles: parsers and
// the saturation detector (current and deprecated places).
func (c *Config) otherRefs() []pluginRef {
	var top struct {
		RequestHandler *struct {
			Parsers []struct {
				PluginRef string `json:"pluginRef"`
			} `json:"parsers"`
		} `json:"requestHandler"`
		Parser *struct {
			PluginRef string `json:"pluginRef"`
		} `json:"parser"`
		FlowControl *struct {
			SaturationDetector *struct {
				PluginRef string `json:"pluginRef"`
			} `json:"saturationDetector"`
		} `json:"flowControl"`
		SaturationDetector *struct {
			PluginRef string `json:"pluginRef"`
		} `json:"saturationDetector"`
	}
	if json.Unmarshal(c.eppJSON, &top) != nil {
		return nil
	}
	line := func(key string) int { return c.tm.fileLine(keyLine(c.root, key, c.root.Line)) }
	var out []pluginRef
	if rh := top.RequestHandler; rh != nil {
		for i, p := range rh.Parsers {
			out = append(out, pluginRef{fmt.Sprintf("requestHandler.parsers[%d]", i), p.PluginRef, line("requestHandler")})
		}
	}
	if p := top.Parser; p != nil && p.PluginRef != "" {
		out = append(out, pluginRef{"parser", p.PluginRef, line("parser")})
	}
	if fc := top.FlowControl; fc != nil && fc.SaturationDetector != nil {
		out = append(out, pluginRef{"flowControl.saturationDetector", fc.SaturationDetector.PluginRef, line("flowControl")})
	}
	if sd := top.SaturationDetector; sd != nil && sd.PluginRef != "" {
		out = append(out, pluginRef{"saturationDetector", sd.PluginRef, line("saturationDetector")})
	}
	return out
}
