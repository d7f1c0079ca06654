package eppconfig

import (
	"bytes"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gatetuner/gatetuner/gate"
)

// requireTool returns the path of a real tool the test compares against; it
// fails loudly when the tool is missing (skips only under -short).
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if testing.Short() {
			t.Skipf("%s not installed (-short)", name)
		}
		t.Fatalf("%s is required to check Diff against the real tool: install it (apt-get install -y diffutils patch)", name)
	}
	return p
}

// gnuDiff runs diff -u with labels, so the headers match Diff's.
func gnuDiff(t *testing.T, a, b []byte) string {
	t.Helper()
	bin := requireTool(t, "diff")
	dir := t.TempDir()
	pa, pb := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if err := os.WriteFile(pa, a, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pb, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "-u", "--label", "a/epp.yaml", "--label", "b/epp.yaml", pa, pb).Output()
	if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() != 1) {
		t.Fatalf("diff: %v", err)
	}
	return string(out)
}

func TestDiffMatchesGNUDiffOnEdits(t *testing.T) {
	pm := mustProfile(t, gate.ProfilePenaltyMode)
	cases := []struct {
		name    string
		sample  string
		changes []Change
	}{
		{"two values in a ConfigMap", sampleChart, []Change{{Set: map[gate.Key]Value{gate.KeyMaxTTFTPenaltyMs: Number(4092), gate.KeyPeakPrefillThroughput: Number(21000.5)}}}},
		{"an inserted line", sampleChart, []Change{{Set: set(gate.KeyPenaltyMode, String("matchedTokens"))}}},
		{"two instances far apart", sampleTwoGates, []Change{
			{Target: Target{Plugin: "strict-affinity-filter"}, Set: set(gate.KeyMaxTTFTPenaltyMs, Number(1))},
			{Target: Target{Plugin: "loose-affinity-filter"}, Set: set(gate.KeyMaxTTFTPenaltyMs, Number(2))},
		}},
		{"replace and insert", sampleProduction, []Change{{Set: map[gate.Key]Value{gate.KeyPenaltyMode: String("matchedTokens"), gate.KeyMaxTTFTPenaltyMs: Number(60000)}}}},
		{"a removed line", sampleProduction, []Change{{Remove: []gate.Key{gate.KeyPeakPrefillThroughput}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := readSample(t, tc.sample)
			f, err := Parse(in, tc.sample)
			if err != nil {
				t.Fatal(err)
			}
			out, err := f.Edit(tc.changes, pm)
			if err != nil {
				t.Fatal(err)
			}
			got, want := Diff("a/epp.yaml", "b/epp.yaml", in, out), gnuDiff(t, in, out)
			if got != want {
				t.Errorf("Diff differs from diff -u:\n--- got\n%s\n--- diff -u\n%s", got, want)
			}
		})
	}
}

func TestDiffEdgeCases(t *testing.T) {
	cases := []struct {
		name string
		a, b string
		want string
	}{
		{name: "equal", a: "x\n", b: "x\n", want: ""},
		{name: "from empty", a: "", b: "x\ny\n", want: "--- a\n+++ b\n@@ -0,0 +1,2 @@\n+x\n+y\n"},
		{name: "to empty", a: "x\n", b: "", want: "--- a\n+++ b\n@@ -1 +0,0 @@\n-x\n"},
		{name: "missing final newline", a: "x\ny", b: "x\nz", want: "--- a\n+++ b\n@@ -1,2 +1,2 @@\n x\n-y\n\\ No newline at end of file\n+z\n\\ No newline at end of file\n"},
		{name: "newline added at end", a: "x", b: "x\n", want: "--- a\n+++ b\n@@ -1 +1 @@\n-x\n\\ No newline at end of file\n+x\n"},
		{name: "CRLF lines kept", a: "a\r\nb\r\n", b: "a\r\nc\r\n", want: "--- a\n+++ b\n@@ -1,2 +1,2 @@\n a\r\n-b\r\n+c\r\n"},
		{name: "distant changes make two hunks",
			a:    "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n",
			b:    "one\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\ntwelve\n",
			want: "--- a\n+++ b\n@@ -1,4 +1,4 @@\n-1\n+one\n 2\n 3\n 4\n@@ -9,4 +9,4 @@\n 9\n 10\n 11\n-12\n+twelve\n"},
		{name: "changes six lines apart share a hunk",
			a:    "1\n2\n3\n4\n5\n6\n7\n8\n",
			b:    "one\n2\n3\n4\n5\n6\n7\neight\n",
			want: "--- a\n+++ b\n@@ -1,8 +1,8 @@\n-1\n+one\n 2\n 3\n 4\n 5\n 6\n 7\n-8\n+eight\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Diff("a", "b", []byte(tc.a), []byte(tc.b)); got != tc.want {
				t.Errorf("Diff:\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

// TestDiffAppliesWithPatch generates random line edits and checks that GNU
// patch turns a into b with Diff's output.
func TestDiffAppliesWithPatch(t *testing.T) {
	bin := requireTool(t, "patch")
	r := rand.New(rand.NewPCG(7, 11))
	words := []string{"a\n", "b\n", "c\n", "plugins:\n", "- type: x\n", "  parameters:\n", "\n", "# c\n"}
	randomText := func(n int) []byte {
		var b bytes.Buffer
		for i := 0; i < n; i++ {
			b.WriteString(words[r.IntN(len(words))])
		}
		if r.IntN(4) == 0 && b.Len() > 0 {
			b.Truncate(b.Len() - 1) // no final newline
		}
		return b.Bytes()
	}
	for iter := 0; iter < 60; iter++ {
		a := randomText(r.IntN(40))
		lines := strings.SplitAfter(string(a), "\n")
		var bb strings.Builder
		for _, l := range lines {
			switch r.IntN(6) {
			case 0: // drop
			case 1:
				bb.WriteString(words[r.IntN(len(words))])
				bb.WriteString(l)
			default:
				bb.WriteString(l)
			}
		}
		b := []byte(bb.String())
		d := Diff("a/f", "b/f", a, b)
		if bytes.Equal(a, b) {
			if d != "" {
				t.Fatalf("equal inputs gave a diff")
			}
			continue
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "f"), a, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "-s", "-p1", "--no-backup-if-mismatch", "-d", dir)
		cmd.Stdin = strings.NewReader(d)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("patch failed: %v %s\n%s", err, out, d)
		}
		got, err := os.ReadFile(filepath.Join(dir, "f"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, b) {
			t.Fatalf("patched text differs:\na=%q\nb=%q\ngot=%q\ndiff:\n%s", a, b, got, d)
		}
	}
}

// TestDiffLargeRewriteStillApplies covers the bounded search: past the edit
// limit the middle is one replacement, which patch still applies.
func TestDiffLargeRewriteStillApplies(t *testing.T) {
	bin := requireTool(t, "patch")
	var a, b strings.Builder
	for i := 0; i < 2000; i++ {
		a.WriteString("old line " + string(rune('a'+i%26)) + "\n")
		b.WriteString("new line " + string(rune('a'+i%26)) + "\n")
	}
	d := Diff("a/f", "b/f", []byte(a.String()), []byte(b.String()))
	if n := strings.Count(d, "\n-"); n != 2000 {
		t.Fatalf("want 2000 removed lines, got %d", n)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte(a.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-s", "-p1", "--no-backup-if-mismatch", "-d", dir)
	cmd.Stdin = strings.NewReader(d)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("patch failed: %v %s", err, out)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "f")); string(got) != b.String() {
		t.Fatal("patched text differs")
	}
}
