package config

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// policyKeys are Policy's configuration keys, nested structs dotted.
func policyKeys(t reflect.Type, prefix string) []string {
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("mapstructure")
		if tag == "" || tag == "-" {
			continue
		}
		if f.Type.Kind() == reflect.Struct && f.Type.Name() != "Duration" {
			keys = append(keys, policyKeys(f.Type, prefix+tag+".")...)
			continue
		}
		keys = append(keys, prefix+tag)
	}
	return keys
}

// TestDocsListEveryPolicyKey pins docs/config.md's policy-key table to
// Policy's keys, both ways.
func TestDocsListEveryPolicyKey(t *testing.T) {
	b, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "| key | default | meaning |")
	if !ok {
		t.Fatal("docs/config.md: no policy-key table")
	}
	row := regexp.MustCompile("^\\| `([A-Za-z.]+)` \\|")
	var documented []string
	for _, line := range strings.Split(table, "\n")[2:] {
		m := row.FindStringSubmatch(line)
		if m == nil {
			break
		}
		documented = append(documented, m[1])
	}
	keys := policyKeys(reflect.TypeOf(Policy{}), "")
	for _, k := range keys {
		if !slices.Contains(documented, k) {
			t.Errorf("policy key %s is not in docs/config.md", k)
		}
	}
	for _, k := range documented {
		if !slices.Contains(keys, k) {
			t.Errorf("docs/config.md documents %s, which is no policy key", k)
		}
	}
}
