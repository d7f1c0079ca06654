package sink

import (
	"bytes"
	"fmt"
	"slices"
	"time"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/eppconfig"
)

// Snapshot is a target as Read found it.
type Snapshot struct {
	// Target is the target read (defaults filled in).
	Target Target
	// Source names the config in messages ("configmap ns/name key k" or the path).
	Source string
	// Text is the EPP config text (the ConfigMap data value or the file bytes).
	Text []byte
	// File is Text parsed.
	File *eppconfig.File
	// Instances are the managed filter instances, in the order of Target.Plugins.
	Instances []InstanceState
	// Version is the resourceVersion (ConfigMap) or a content hash (file);
	// Apply writes only over this version or a fresher one whose owned values
	// are unchanged.
	Version string
	// ConfigHash is the sha256 (hex) of Text.
	ConfigHash string
	// State is what gatetuner keeps on the target.
	State State
	// ReadAt is when the snapshot was taken (the sink's clock).
	ReadAt time.Time
}

// InstanceState is one managed filter instance as read.
type InstanceState struct {
	Instance eppconfig.Instance
	// Params are the parameters as the target's EPP build decodes them.
	Params gate.Params
	// Owned are the current values of the keys gatetuner owns that the
	// profile accepts (maxTTFTPenaltyMs, peakPrefillThroughput and, when
	// accepted, penaltyMode).
	Owned []eppconfig.OwnedValue
}

// Target returns the selection that addresses this instance in a Change.
func (s InstanceState) Target() eppconfig.Target { return s.Instance.Target() }

// Name returns the instance's plugin name.
func (s InstanceState) Name() string { return s.Instance.Plugin.Name }

// Instance returns the managed instance named plugin ("" for the only one).
func (s *Snapshot) Instance(plugin string) (InstanceState, bool) {
	for _, in := range s.Instances {
		if plugin == "" && len(s.Instances) == 1 || in.Name() == plugin {
			return in, true
		}
	}
	return InstanceState{}, false
}

// Preview returns the config text the changes would produce and its unified
// diff against the snapshot, without writing.
func (s *Snapshot) Preview(changes []eppconfig.Change) ([]byte, string, error) {
	if err := s.checkChanges(changes); err != nil {
		return nil, "", err
	}
	out, err := s.File.Edit(changes, s.Target.Profile)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", s.Source, err)
	}
	return out, eppconfig.Diff(s.Source, s.Source+" (new)", s.Text, out), nil
}

// ownedKeys returns the keys gatetuner owns that the profile accepts.
func ownedKeys(p gate.Profile) []gate.Key {
	var keys []gate.Key
	for _, k := range eppconfig.OwnedKeys() {
		if p.Accepts(k) {
			keys = append(keys, k)
		}
	}
	return keys
}

// parseTarget parses config text and selects the target's managed instances.
// Any failure wraps ErrMalformed.
func parseTarget(t Target, text []byte, source string) (*eppconfig.File, []InstanceState, error) {
	f, err := eppconfig.Parse(text, source)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	var out []InstanceState
	keys := ownedKeys(t.Profile)
	for _, sel := range t.selectors() {
		in, err := f.Select(sel)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		if err := in.Config.Editable(); err != nil {
			return nil, nil, fmt.Errorf("%w: %s: %w", ErrMalformed, in, err)
		}
		p, err := in.Params(t.Profile)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		owned, err := in.Owned(keys...)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		for _, prev := range out {
			if prev.Instance == in {
				return nil, nil, fmt.Errorf("%w: %s selects %s twice", ErrMalformed, t, in)
			}
		}
		out = append(out, InstanceState{Instance: in, Params: p, Owned: owned})
	}
	return f, out, nil
}

// checkChanges refuses changes to keys gatetuner does not own and to
// instances the target does not manage.
func (s *Snapshot) checkChanges(changes []eppconfig.Change) error {
	owned := eppconfig.OwnedKeys()
	for _, ch := range changes {
		if _, ok := s.instanceFor(ch.Target); !ok {
			return fmt.Errorf("%w: %s is not a filter instance %s manages", ErrInvalidChange, ch.Target, s.Target)
		}
		for k := range ch.Set {
			if !slices.Contains(owned, k) {
				return fmt.Errorf("%w: %s is not a key gatetuner owns", ErrInvalidChange, k)
			}
		}
		for _, k := range ch.Remove {
			if !slices.Contains(owned, k) {
				return fmt.Errorf("%w: %s is not a key gatetuner owns", ErrInvalidChange, k)
			}
		}
	}
	return nil
}

// instanceFor finds the managed instance a change selection addresses.
func (s *Snapshot) instanceFor(sel eppconfig.Target) (int, bool) {
	in, err := s.File.Select(sel)
	if err != nil {
		return 0, false
	}
	for i, m := range s.Instances {
		if m.Instance == in {
			return i, true
		}
	}
	return 0, false
}

// sameOwned reports which managed instances' owned values differ between two
// parses of the target ("" when none).
func sameOwned(a, b []InstanceState) string {
	for i := range a {
		if i >= len(b) || !slices.Equal(a[i].Owned, b[i].Owned) {
			return a[i].Instance.String()
		}
	}
	return ""
}

// describeOwned renders owned values as "key=value, …" for messages.
func describeOwned(vs []eppconfig.OwnedValue) string {
	var b bytes.Buffer
	for i, v := range vs {
		if i > 0 {
			b.WriteString(", ")
		}
		if v.Present {
			fmt.Fprintf(&b, "%s=%s", v.Key, v.Value)
		} else {
			fmt.Fprintf(&b, "%s absent", v.Key)
		}
	}
	return b.String()
}

// AsRead returns a copy of s whose instances' owned values are as the
// earlier reads saw them (matched by plugin name). A joint write planned on
// several reads — one per filter instance — is applied over it, so the
// write's one changed-externally check holds when any instance's owned keys
// changed since its own read.
func (s *Snapshot) AsRead(reads ...*Snapshot) *Snapshot {
	c := *s
	c.Instances = slices.Clone(s.Instances)
	for i := range c.Instances {
		for _, r := range reads {
			for _, was := range r.Instances {
				if was.Name() == c.Instances[i].Name() {
					c.Instances[i].Owned = was.Owned
				}
			}
		}
	}
	return &c
}
