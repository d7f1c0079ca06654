// Package shadow replays gate decisions through the gate core for the current
// settings and for candidate settings, and accounts what each would have
// done: outcomes, verdicts against the per-decision break-even, excess cost,
// the distribution of the gate's input, and agreement with the live EPP.
package shadow

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/gatetuner/gatetuner/gate"
)

// Candidate is one settings variant to evaluate.
type Candidate struct {
	// Label names the variant, e.g. "maxTTFTPenaltyMs=5000,penaltyMode=matchedTokens".
	Label string
	// Params are the variant's parameters, Settings what decides.
	Params   gate.Params
	Settings gate.Settings
	// Invalid says why the target's build profile would reject the variant
	// ("" when valid). Invalid variants are evaluated but flagged.
	Invalid string
}

// Override sets one parameter to one value, as in `--sweep key=value`.
type Override struct {
	Key   gate.Key
	Value string
}

// Sweep is a list of keys, each with values; its product is the candidates.
type Sweep []struct {
	Key    gate.Key
	Values []string
}

// SweepKeys are the parameters a sweep may vary.
var sweepKeys = []gate.Key{gate.KeyMaxTTFTPenaltyMs, gate.KeyPeakPrefillThroughput, gate.KeyPenaltyMode,
	gate.KeyAffinityThreshold, gate.KeyExplorationProbability, gate.KeyTTFTSource, gate.KeyMaxTokensInFlightPenalty}

// ParseSweep parses `key=v1,v2` specs (keys case-insensitive; a key may
// repeat, adding values).
func ParseSweep(specs []string) (Sweep, error) {
	var sw Sweep
	for _, spec := range specs {
		k, vals, ok := strings.Cut(spec, "=")
		if !ok || strings.TrimSpace(vals) == "" {
			return nil, fmt.Errorf("--sweep %q: want key=v1,v2,…", spec)
		}
		key, ok := gate.LookupKey(strings.TrimSpace(k))
		if !ok || !isSweepKey(key) {
			names := make([]string, len(sweepKeys))
			for i, k := range sweepKeys {
				names[i] = k.String()
			}
			return nil, fmt.Errorf("--sweep %q: cannot sweep %q (sweepable: %s)", spec, k, strings.Join(names, ", "))
		}
		var values []string
		for _, v := range strings.Split(vals, ",") {
			v = strings.TrimSpace(v)
			if v == "" {
				return nil, fmt.Errorf("--sweep %q: empty value", spec)
			}
			if _, err := applyOverride(gate.DefaultParams(), Override{key, v}); err != nil {
				return nil, fmt.Errorf("--sweep %q: %w", spec, err)
			}
			values = append(values, v)
		}
		merged := false
		for i := range sw {
			if sw[i].Key == key {
				sw[i].Values = append(sw[i].Values, values...)
				merged = true
			}
		}
		if !merged {
			sw = append(sw, struct {
				Key    gate.Key
				Values []string
			}{key, values})
		}
	}
	return sw, nil
}

func isSweepKey(k gate.Key) bool {
	for _, s := range sweepKeys {
		if s == k {
			return true
		}
	}
	return false
}

// applyOverride sets one key on a copy of p, as an explicit parameter.
func applyOverride(p gate.Params, o Override) (gate.Params, error) {
	spelling := make(map[gate.Key]string, len(p.Spelling)+1)
	for k, v := range p.Spelling {
		spelling[k] = v
	}
	p.Spelling = spelling
	if _, ok := p.Spelling[o.Key]; !ok {
		p.Spelling[o.Key] = o.Key.String()
	}
	p.Present = p.Present.With(o.Key)
	switch o.Key {
	case gate.KeyPenaltyMode:
		m, err := gate.ParsePenaltyMode(o.Value)
		if err != nil {
			return p, err
		}
		p.PenaltyMode = m
		return p, nil
	case gate.KeyTTFTSource:
		src, err := gate.ParseTTFTSource(o.Value)
		if err != nil {
			return p, err
		}
		p.TTFTSource = src
		return p, nil
	case gate.KeyMaxTokensInFlightPenalty:
		// An int64 in the EPP's Config (plugin.go@a42e39d3d): a token count.
		n, err := strconv.ParseInt(o.Value, 10, 64)
		if err != nil {
			return p, fmt.Errorf("%s: %q is not an integer", o.Key, o.Value)
		}
		p.MaxTokensInFlightPenalty = n
		return p, nil
	}
	f, err := strconv.ParseFloat(o.Value, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return p, fmt.Errorf("%s: %q is not a finite number", o.Key, o.Value)
	}
	switch o.Key {
	case gate.KeyMaxTTFTPenaltyMs:
		p.MaxTTFTPenaltyMs = f
	case gate.KeyPeakPrefillThroughput:
		p.PeakPrefillThroughput = f
	case gate.KeyAffinityThreshold:
		p.AffinityThreshold = f
	case gate.KeyExplorationProbability:
		p.ExplorationProbability = f
	default:
		return p, fmt.Errorf("cannot override %s", o.Key)
	}
	return p, nil
}

// NewCandidate applies overrides to the current parameters and checks the
// result against the build profile.
func NewCandidate(current gate.Params, prof gate.Profile, overrides ...Override) (Candidate, error) {
	p := current
	var label []string
	for _, o := range overrides {
		var err error
		if p, err = applyOverride(p, o); err != nil {
			return Candidate{}, err
		}
		label = append(label, o.Key.String()+"="+o.Value)
	}
	c := Candidate{Label: strings.Join(label, ","), Params: p, Settings: p.Settings(prof.MissingSignal)}
	if c.Label == "" {
		c.Label = "current"
	}
	for _, o := range overrides {
		if !prof.Accepts(o.Key) {
			c.Invalid = fmt.Sprintf("build profile %s does not accept %s", prof.Name, o.Key)
			return c, nil
		}
	}
	if err := p.Validate(prof); err != nil {
		c.Invalid = err.Error()
	}
	return c, nil
}

// Expand returns the sweep's product of candidates, in the order the keys
// and values were given (the last key varies fastest).
func (sw Sweep) Expand(current gate.Params, prof gate.Profile) ([]Candidate, error) {
	if len(sw) == 0 {
		return nil, nil
	}
	var out []Candidate
	idx := make([]int, len(sw))
	for {
		ovs := make([]Override, len(sw))
		for i, k := range sw {
			ovs[i] = Override{k.Key, k.Values[idx[i]]}
		}
		c, err := NewCandidate(current, prof, ovs...)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
		i := len(sw) - 1
		for ; i >= 0; i-- {
			idx[i]++
			if idx[i] < len(sw[i].Values) {
				break
			}
			idx[i] = 0
		}
		if i < 0 {
			return out, nil
		}
	}
}
