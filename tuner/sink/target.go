package sink

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/eppconfig"
)

// Mode is how a new config reaches a Kubernetes target's EPP.
type Mode string

const (
	// ModeConfigMap writes the ConfigMap only; the target is pending-restart
	// until the EPP runs the new config (someone restarts it).
	ModeConfigMap Mode = "configmap"
	// ModeRollout writes the ConfigMap, restarts the EPP Deployment through a
	// pod-template annotation, waits for it, verifies and rolls back on failure.
	ModeRollout Mode = "rollout"
)

// ParseMode parses "configmap" or "rollout"; "" is ModeConfigMap.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "", ModeConfigMap:
		return ModeConfigMap, nil
	case ModeRollout:
		return ModeRollout, nil
	}
	return "", fmt.Errorf("mode must be %q or %q, got %q", ModeConfigMap, ModeRollout, s)
}

// Target names one EPP config location and the filter instances gatetuner
// manages in it. Build it from command-line flags or from the daemon config.
type Target struct {
	// Name labels the target in messages, Events and history (e.g. "qwen3-32b").
	Name string

	// Namespace, ConfigMap and Key locate a Kubernetes target: the EPP config
	// text is ConfigMap.data[Key]; an empty Key means the one data key whose
	// EPP config holds the (first) managed plugin, found at every read.
	Namespace string
	ConfigMap string
	Key       string
	// Deployment is the EPP Deployment in Namespace: required in rollout mode;
	// in configmap mode it is watched to detect that the EPP restarted.
	Deployment string
	// Mode is how a Kubernetes target's new config reaches the EPP.
	Mode Mode

	// File locates a file target instead: an EPP config file as a mounted
	// ConfigMap would show it (or a ConfigMap manifest, with Key naming the
	// data key). A file target has no Deployment; see FileOptions.
	File string
	// StateFile is where a file target keeps its state (history, holds,
	// pending restart); "" means SidecarPath(File).
	StateFile string

	// Plugins names the prefix-cache-affinity-filter instances gatetuner
	// manages; empty means the only instance.
	Plugins []string
	// Profile is the EPP build's profile; the zero value means the default
	// built-in profile.
	Profile gate.Profile
}

// IsFile reports whether the target is a file.
func (t Target) IsFile() bool { return t.File != "" }

// Location identifies where the target's config lives; targets with the same
// Location are written together (see Merge).
func (t Target) Location() string {
	if t.IsFile() {
		return "file:" + t.File + "#" + t.Key
	}
	return "configmap:" + t.Namespace + "/" + t.ConfigMap + "#" + t.Key
}

// String names the target for messages.
func (t Target) String() string {
	var loc string
	if t.IsFile() {
		loc = "file " + t.File
		if t.Key != "" {
			loc += " key " + t.Key
		}
	} else {
		loc = fmt.Sprintf("configmap %s/%s", t.Namespace, t.ConfigMap)
		if t.Key != "" {
			loc += " key " + t.Key
		}
	}
	if t.Name != "" {
		return fmt.Sprintf("target %q (%s)", t.Name, loc)
	}
	return loc
}

// withDefaults fills the profile and mode.
func (t Target) withDefaults() (Target, error) {
	if t.Profile.Name == "" {
		p, err := gate.LookupProfile("")
		if err != nil {
			return t, err
		}
		t.Profile = p
	}
	if !t.IsFile() {
		m, err := ParseMode(string(t.Mode))
		if err != nil {
			return t, err
		}
		t.Mode = m
	}
	if t.Name == "" {
		if t.IsFile() {
			t.Name = t.File
		} else {
			t.Name = t.Namespace + "/" + t.ConfigMap
		}
	}
	return t, nil
}

// Validate reports what is missing or inconsistent in the target.
func (t Target) Validate() error {
	var errs []string
	add := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	if t.IsFile() {
		if t.Namespace != "" || t.ConfigMap != "" || t.Deployment != "" {
			add("a file target takes no namespace, configmap or deployment")
		}
		if t.Mode != "" {
			add("a file target takes no mode (its restart is a hook or MarkRestarted)")
		}
	} else {
		if t.StateFile != "" {
			add("a ConfigMap target takes no state file (its state is in annotations)")
		}
		for _, f := range []struct{ name, v string }{{"namespace", t.Namespace}, {"configmap", t.ConfigMap}} {
			if f.v == "" {
				add("%s is required", f.name)
			} else if msgs := validation.IsDNS1123Subdomain(f.v); len(msgs) > 0 {
				add("%s %q: %s", f.name, f.v, strings.Join(msgs, "; "))
			}
		}
		if t.Key != "" {
			if msgs := validation.IsConfigMapKey(t.Key); len(msgs) > 0 {
				add("key %q: %s", t.Key, strings.Join(msgs, "; "))
			}
		}
		mode, err := ParseMode(string(t.Mode))
		if err != nil {
			add("%v", err)
		}
		if t.Deployment != "" {
			if msgs := validation.IsDNS1123Subdomain(t.Deployment); len(msgs) > 0 {
				add("deployment %q: %s", t.Deployment, strings.Join(msgs, "; "))
			}
		} else if mode == ModeRollout {
			add("rollout mode needs the EPP deployment")
		}
	}
	seen := map[string]bool{}
	for _, p := range t.Plugins {
		if p == "" && len(t.Plugins) > 1 {
			add("an empty plugin name selects the only instance; it cannot be combined with others")
		}
		if seen[p] {
			add("plugin %q listed twice", p)
		}
		seen[p] = true
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s: %s", t, strings.Join(errs, "; "))
	}
	return nil
}

// selectors returns the eppconfig selections of the managed instances.
func (t Target) selectors() []eppconfig.Target {
	plugins := t.Plugins
	if len(plugins) == 0 {
		plugins = []string{""}
	}
	dataKey := ""
	if t.IsFile() {
		dataKey = t.Key
	}
	out := make([]eppconfig.Target, len(plugins))
	for i, p := range plugins {
		out[i] = eppconfig.Target{Plugin: p, DataKey: dataKey}
	}
	return out
}

// Merge combines targets that share one config location (same Location,
// Deployment, Mode and Profile) into one target managing all their filter
// instances, so that the tuner's changes to them make one write and one
// rollout. Names are joined with "+".
func Merge(targets ...Target) (Target, error) {
	if len(targets) == 0 {
		return Target{}, errors.New("merge: no targets")
	}
	out := targets[0]
	out.Plugins = slices.Clone(out.Plugins)
	names := []string{out.Name}
	for _, t := range targets[1:] {
		if t.Location() != out.Location() || t.Deployment != out.Deployment || t.Mode != out.Mode || t.Profile.Name != out.Profile.Name {
			return Target{}, fmt.Errorf("merge: %s and %s do not share one config location, deployment, mode and profile", out, t)
		}
		if len(t.Plugins) == 0 || len(out.Plugins) == 0 {
			return Target{}, fmt.Errorf("merge: %s and %s: name the plugin of every target sharing a config", out, t)
		}
		for _, p := range t.Plugins {
			if !slices.Contains(out.Plugins, p) {
				out.Plugins = append(out.Plugins, p)
			}
		}
		if t.Name != "" && !slices.Contains(names, t.Name) {
			names = append(names, t.Name)
		}
	}
	out.Name = strings.Join(names, "+")
	return out, nil
}
