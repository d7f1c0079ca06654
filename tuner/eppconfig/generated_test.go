package eppconfig

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gatetuner/gatetuner/gate"
)

// genConfig is a random but valid config in one of many styles, with how the
// filter's parameters are written.
type genConfig struct {
	text       string
	paramsKind string   // "absent", "empty", "null", "block", "flow"
	present    []string // canonical names of the keys written
}

// generateConfig writes a config: block or flow or null or missing
// parameters, indentation steps of 2 to 4, comments, key spellings, quoting,
// CRLF, no final newline, or wrapped in a ConfigMap literal block (|, |-, |+).
func generateConfig(r *rand.Rand) genConfig {
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	step := strings.Repeat(" ", 2+r.IntN(3))
	item := pick("", "  ", step)
	entry := item + "  "
	var b strings.Builder
	g := genConfig{}
	b.WriteString(pick("", "# EPP config\n") + "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n")
	other := func(name string) {
		fmt.Fprintf(&b, "%s- type: %s\n", item, name)
		switch r.IntN(3) {
		case 1:
			fmt.Fprintf(&b, "%sparameters: {threshold: %d}%s\n", entry, r.IntN(100), pick("", "  # other"))
		case 2:
			fmt.Fprintf(&b, "%sparameters:\n%s%sthreshold: %d\n", entry, entry, step, r.IntN(100))
		}
	}
	for i := r.IntN(3); i > 0; i-- {
		other(fmt.Sprintf("scorer-%d", i))
	}
	if r.IntN(4) == 0 {
		fmt.Fprintf(&b, "%s# the gate\n", item)
	}
	fmt.Fprintf(&b, "%s- type: prefix-cache-affinity-filter%s\n", item, pick("", "   # gate"))
	if r.IntN(2) == 0 {
		fmt.Fprintf(&b, "%sname: gate\n", entry)
	}
	spell := func(k string) string {
		if r.IntN(4) == 0 {
			return strings.ToUpper(k[:1]) + k[1:]
		}
		return k
	}
	type kv struct{ k, v string }
	var pairs []kv
	for _, c := range []kv{{"affinityThreshold", pick("0.8", "0.80", "0.95")}, {"maxTTFTPenaltyMs", pick("18000", "5000", "30000")},
		{"peakPrefillThroughput", pick("15928", "4783")}, {"penaltyMode", pick("static", "\"static\"", "'static'")},
		{"ttftSource", "prefillThroughput"}} {
		if r.IntN(2) == 0 {
			pairs = append(pairs, kv{spell(c.k), c.v})
			g.present = append(g.present, c.k)
		}
	}
	r.Shuffle(len(pairs), func(i, j int) { pairs[i], pairs[j] = pairs[j], pairs[i] })
	switch r.IntN(6) {
	case 0:
		g.paramsKind, g.present = "absent", nil
	case 1:
		g.paramsKind, g.present = "empty", nil
		fmt.Fprintf(&b, "%sparameters:%s\n", entry, pick("", "  # defaults"))
	case 2:
		g.paramsKind, g.present = "null", nil
		fmt.Fprintf(&b, "%sparameters: %s\n", entry, pick("null", "~", "null # none"))
	case 3, 4:
		g.paramsKind = "block"
		if len(pairs) == 0 {
			g.paramsKind = "empty"
		}
		fmt.Fprintf(&b, "%sparameters:\n", entry)
		for _, p := range pairs {
			if r.IntN(4) == 0 {
				fmt.Fprintf(&b, "%s%s# about %s\n", entry, step, p.k)
			}
			fmt.Fprintf(&b, "%s%s%s:%s%s%s\n", entry, step, p.k, pick(" ", "  ", "\t"), p.v, pick("", " # c", "\t# tab"))
		}
	case 5:
		g.paramsKind = "flow"
		var parts []string
		for _, p := range pairs {
			parts = append(parts, p.k+": "+p.v)
		}
		fmt.Fprintf(&b, "%sparameters: {%s}%s\n", entry, strings.Join(parts, ", "), pick("", " # flow"))
	}
	if r.IntN(3) == 0 {
		fmt.Fprintf(&b, "%s%s# trailing comment\n", entry, step)
	}
	for i := r.IntN(3); i > 0; i-- {
		other(fmt.Sprintf("picker-%d", i))
	}
	b.WriteString("schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: " + pick("gate", "prefix-cache-affinity-filter") + "\n")
	text := b.String()
	if !strings.Contains(text, "name: gate") {
		text = strings.ReplaceAll(text, "pluginRef: gate", "pluginRef: prefix-cache-affinity-filter")
	} else { // the EPP refuses a reference to an undeclared plugin
		text = strings.ReplaceAll(text, "pluginRef: prefix-cache-affinity-filter", "pluginRef: gate")
	}
	switch r.IntN(4) {
	case 0: // ConfigMap, literal block
		ind := pick("    ", "   ", "      ")
		chomp := pick("", "-", "+")
		lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
		for i, l := range lines {
			if l != "" {
				lines[i] = ind + l
			}
		}
		text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: epp # comment\ndata:\n  a.txt: hello\n  epp.yaml: |" + chomp + "\n" +
			strings.Join(lines, "\n") + "\n" + pick("", "\n") + "  z.txt: bye\n"
	case 1:
		text = strings.TrimSuffix(text, "\n")
	}
	if r.IntN(3) == 0 {
		text = strings.ReplaceAll(text, "\n", "\r\n")
	}
	g.text = text
	return g
}

// TestGeneratedConfigsRandomEdits edits generated configs at random and
// checks, independently of the package's verifier, that only the edited keys
// differ, that CRLF files stay CRLF, and that the reverse edit restores the
// original bytes whenever no key was removed.
func TestGeneratedConfigsRandomEdits(t *testing.T) {
	prof := mustProfile(t, gate.ProfilePenaltyMode)
	r := rand.New(rand.NewPCG(3, 5))
	var owned []gate.Key // the owned keys this profile accepts
	for _, k := range OwnedKeys() {
		if prof.Accepts(k) {
			owned = append(owned, k)
		}
	}
	for iter := 0; iter < 3000; iter++ {
		g := generateConfig(r)
		f, err := Parse([]byte(g.text), "gen.yaml")
		if err != nil {
			t.Fatalf("generated config does not parse: %v\n%s", err, g.text)
		}
		in, err := f.Select(Target{})
		if err != nil {
			t.Fatal(err)
		}
		ch := Change{Set: map[gate.Key]Value{}}
		back := Change{Set: map[gate.Key]Value{}}
		u := intended{doc: in.Config.Document, dataKey: in.Config.DataKey, plugin: in.index, set: map[string]any{}}
		current, err := in.Owned(owned...)
		if err != nil {
			t.Fatal(err)
		}
		reversible := true
		for i, k := range owned {
			switch r.IntN(3) {
			case 0:
				continue
			case 1:
				if k == gate.KeyPenaltyMode {
					ch.Set[k] = String("matchedTokens")
					u.set[k.String()] = "matchedTokens"
				} else {
					v := float64(1 + r.IntN(50000))
					ch.Set[k] = Number(v)
					u.set[k.String()] = v
				}
				switch {
				case current[i].Present && k == gate.KeyPenaltyMode:
					back.Set[k] = String("static")
				case current[i].Present:
					var x float64
					fmt.Sscan(current[i].Value, &x)
					back.Set[k] = Number(x)
				default:
					back.Remove = append(back.Remove, k)
					if g.paramsKind != "block" && g.paramsKind != "flow" {
						reversible = false
					}
				}
			case 2:
				ch.Remove = append(ch.Remove, k)
				u.remove = append(u.remove, k.String())
				if current[i].Present {
					reversible = false
				}
			}
		}
		out, err := f.Edit([]Change{ch}, prof)
		if err != nil {
			t.Fatalf("Edit(%v): %v\n%s", ch, err, g.text)
		}
		if d := semanticDelta([]byte(g.text), out, []intended{u}); d != "" {
			t.Fatalf("Edit(%v): %s\ninput:\n%s\noutput:\n%s", ch, d, g.text, out)
		}
		if strings.Contains(g.text, "\r\n") && bytes.Count(out, []byte("\n")) != bytes.Count(out, []byte("\r\n")) {
			t.Fatalf("line endings mixed after the edit:\n%q", out)
		}
		if !reversible {
			continue
		}
		g2, err := Parse(out, "gen.yaml")
		if err != nil {
			t.Fatal(err)
		}
		restored, err := g2.Edit([]Change{back}, prof)
		if err != nil {
			t.Fatalf("reverse Edit(%v): %v\n%s", back, err, out)
		}
		if !bytes.Equal(restored, []byte(g.text)) {
			t.Fatalf("reverse edit does not restore the original:\n%s", Diff("original", "restored", []byte(g.text), restored))
		}
	}
}
