package eppconfig

import (
	"errors"
	"strings"
	"testing"

	"github.com/gatetuner/gatetuner/gate"
)

// allKeysProfile accepts every key, so fuzzed edits reach the splicer.
func allKeysProfile(t testing.TB) gate.Profile {
	var names []string
	for _, k := range gate.AllKeys() {
		names = append(names, k.String())
	}
	p, err := gate.NewProfile("all", names, "v1", "le1")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func checkOneLine(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("%s: error %q is not an *Error", what, err)
	}
	if strings.ContainsAny(err.Error(), "\n\r") {
		t.Fatalf("%s: error is not one line: %q", what, err)
	}
}

// FuzzParse: any input parses or fails with a one-line error, never panics;
// reading a parsed file's instances never panics either. Under a profile
// whose loader registers llm-d.ai/v1 the input parses the same, unless an
// apiVersion one loader registers and the other not decides it.
func FuzzParse(f *testing.F) {
	prof := allKeysProfile(f)
	v1, err := gate.NewCustomProfile(gate.ProfileSpec{Name: "v1", Keys: []string{"base"}, ConfigAPIVersions: []string{APIVersionV1, APIVersion}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data, "fuzz.yaml")
		checkOneLine(t, "Parse", err)
		fileV1, errV1 := ParseFor(data, "fuzz.yaml", v1)
		checkOneLine(t, "ParseFor", errV1)
		if (err == nil) != (errV1 == nil) && !strings.Contains(errorText(err)+errorText(errV1), "apiVersion") {
			t.Fatalf("the loaders disagree beyond apiVersion: %v / %v", err, errV1)
		}
		if errV1 == nil && err == nil && len(fileV1.Configs()) != len(file.Configs()) {
			t.Fatalf("%d configs under the v1 loader, %d under the built-in one", len(fileV1.Configs()), len(file.Configs()))
		}
		if err != nil {
			return
		}
		for _, in := range file.Filters() {
			_, err := in.Params(prof)
			checkOneLine(t, "Params", err)
			_, err = in.Owned()
			checkOneLine(t, "Owned", err)
			_, err = file.Select(in.Target())
			checkOneLine(t, "Select", err)
			_ = in.Profiles()
		}
		_, err = file.Select(Target{})
		checkOneLine(t, "Select", err)
	})
}

var fuzzStrings = []string{"static", "matchedTokens", "latencyPredictor", "a b: c", "yes", "it's", "\"q\"", "", "é\u2028x"}

// FuzzEdit: any edit of any parsed input either fails with a one-line error
// and no bytes, or yields output that parses and, decoded independently of
// the package's verifier, differs from the input only by the edit.
func FuzzEdit(f *testing.F) {
	prof := allKeysProfile(f)
	keys := gate.AllKeys()
	f.Fuzz(func(t *testing.T, data []byte, plugin, key, op uint8, num float64) {
		file, err := Parse(data, "fuzz.yaml")
		if err != nil {
			return
		}
		filters := file.Filters()
		if len(filters) == 0 {
			return
		}
		in := filters[int(plugin)%len(filters)]
		k := keys[int(key)%len(keys)]
		ch := Change{Target: in.Target()}
		u := intended{doc: in.Config.Document, dataKey: in.Config.DataKey, path: in.Config.fullPath(), plugin: in.index, set: map[string]any{}}
		var want Value
		switch op % 4 {
		case 0:
			want = Number(num)
			u.set[k.String()] = num
		case 1:
			s := fuzzStrings[int(op/4)%len(fuzzStrings)]
			want = String(s)
			u.set[k.String()] = s
		case 2:
			ch.Remove = []gate.Key{k}
			u.remove = []string{k.String()}
		case 3:
			want = Bool(num > 0)
			u.set[k.String()] = num > 0
		}
		if ch.Remove == nil {
			ch.Set = map[gate.Key]Value{k: want}
		}
		out, err := file.Edit([]Change{ch}, prof)
		checkOneLine(t, "Edit", err)
		if err != nil {
			if out != nil {
				t.Fatal("Edit returned bytes with an error")
			}
			return
		}
		g, err := Parse(out, "fuzz.yaml")
		if err != nil {
			t.Fatalf("edited output does not parse: %v\ninput:\n%q\noutput:\n%q", err, data, out)
		}
		if _, err := decodeAll(data); err == nil {
			if d := semanticDelta(data, out, []intended{u}); d != "" {
				t.Fatalf("edit %+v: %s\ninput:\n%q\noutput:\n%q", ch, d, data, out)
			}
		}
		gin, err := g.Select(in.Target())
		if err != nil {
			t.Fatalf("edited instance not found: %v", err)
		}
		owned, err := gin.Owned(k)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case ch.Remove != nil && owned[0].Present && owned[0].Value != "null":
			t.Fatalf("%s still set after removal: %+v", k, owned[0])
		case ch.Remove == nil && !want.matches([]byte(owned[0].Value)):
			t.Fatalf("%s reads %s after setting %s", k, owned[0].Value, want)
		}
	})
}

// fullPath returns the path of an embedded config's text through every
// enclosing text (nil for a bare config).
func (c *Config) fullPath() []any {
	var out []any
	for _, l := range c.levels {
		out = append(out, l.path...)
	}
	return out
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
