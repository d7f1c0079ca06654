package hold

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDocsListEveryReasonInCheckOrder pins docs/holds.md's guard table to All.
func TestDocsListEveryReasonInCheckOrder(t *testing.T) {
	b, err := os.ReadFile("../../docs/holds.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "| reason | guard |")
	if !ok {
		t.Fatal("docs/holds.md: no \"| reason | guard |\" table")
	}
	name := regexp.MustCompile("`([a-z-]+)`")
	var got []Reason
	for _, line := range strings.Split(table, "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cell := strings.Split(line, "|")[1]
		for _, m := range name.FindAllStringSubmatch(cell, -1) {
			got = append(got, Reason(m[1]))
		}
	}
	if want := All(); !slices.Equal(got, want) {
		t.Errorf("docs/holds.md lists\n  %v\nthe code checks\n  %v", got, want)
	}
}

// TestReasonsAreUnique pins that no two guards share a reason string.
func TestReasonsAreUnique(t *testing.T) {
	seen := map[Reason]bool{}
	for _, r := range All() {
		if seen[r] {
			t.Errorf("%s listed twice", r)
		}
		seen[r] = true
	}
}
