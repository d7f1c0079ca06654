package eppconfig

import (
	"bytes"
	"fmt"
	"strings"
)

const (
	diffContext = 3
	// maxDiffEdits bounds the Myers search (memory grows with its square);
	// beyond it the differing middle is shown as one replacement, which is
	// still a correct diff, only not a minimal one.
	maxDiffEdits = 1500
)

// Diff returns a unified diff (---/+++/@@, 3 lines of context) turning a into
// b, or "" when they are equal. Lines keep their own endings; a last line
// without one is marked "\ No newline at end of file".
func Diff(oldName, newName string, a, b []byte) string {
	if bytes.Equal(a, b) {
		return ""
	}
	ops := diffLines(splitLines(a), splitLines(b))
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", oldName, newName)
	// oldBefore[i], newBefore[i]: lines of a and b before ops[i].
	oldBefore := make([]int, len(ops)+1)
	newBefore := make([]int, len(ops)+1)
	for i, o := range ops {
		oldBefore[i+1], newBefore[i+1] = oldBefore[i], newBefore[i]
		if o.kind != '+' {
			oldBefore[i+1]++
		}
		if o.kind != '-' {
			newBefore[i+1]++
		}
	}
	for i := 0; i < len(ops); {
		c := i
		for c < len(ops) && ops[c].kind == ' ' {
			c++
		}
		if c == len(ops) {
			break
		}
		start := max(c-diffContext, i)
		j := c
		var end int
		for {
			for j < len(ops) && ops[j].kind != ' ' {
				j++
			}
			e := j
			for e < len(ops) && ops[e].kind == ' ' {
				e++
			}
			if e < len(ops) && e-j <= 2*diffContext {
				j = e
				continue
			}
			end = min(j+diffContext, len(ops))
			break
		}
		oldN, newN := oldBefore[end]-oldBefore[start], newBefore[end]-newBefore[start]
		fmt.Fprintf(&out, "@@ -%s +%s @@\n", hunkRange(oldBefore[start], oldN), hunkRange(newBefore[start], newN))
		for _, o := range ops[start:end] {
			out.WriteByte(o.kind)
			out.WriteString(o.text)
			if !strings.HasSuffix(o.text, "\n") {
				out.WriteString("\n\\ No newline at end of file\n")
			}
		}
		i = end
	}
	return out.String()
}

// hunkRange renders a hunk side as GNU diff does: "l" for one line, "l,n"
// otherwise, with l the line before the hunk when n is 0.
func hunkRange(before, n int) string {
	switch n {
	case 0:
		return fmt.Sprintf("%d,0", before)
	case 1:
		return fmt.Sprintf("%d", before+1)
	}
	return fmt.Sprintf("%d,%d", before+1, n)
}

type diffOp struct {
	kind byte // ' ', '-' or '+'
	text string
}

// splitLines splits after each '\n', keeping the terminators.
func splitLines(b []byte) []string {
	var out []string
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			out = append(out, string(b))
			break
		}
		out = append(out, string(b[:i+1]))
		b = b[i+1:]
	}
	return out
}

// diffLines returns an edit script from a to b: common prefix and suffix,
// and a Myers shortest edit script for the middle.
func diffLines(a, b []string) []diffOp {
	p := 0
	for p < len(a) && p < len(b) && a[p] == b[p] {
		p++
	}
	s := 0
	for s < len(a)-p && s < len(b)-p && a[len(a)-1-s] == b[len(b)-1-s] {
		s++
	}
	ops := make([]diffOp, 0, len(a)+len(b)-p-s)
	for _, l := range a[:p] {
		ops = append(ops, diffOp{' ', l})
	}
	ops = append(ops, myers(a[p:len(a)-s], b[p:len(b)-s])...)
	for _, l := range a[len(a)-s:] {
		ops = append(ops, diffOp{' ', l})
	}
	return ops
}

// myers computes a shortest edit script (Myers 1986), keeping each round's
// frontier for the backtrack.
func myers(a, b []string) []diffOp {
	n, m := len(a), len(b)
	replaceAll := func() []diffOp {
		ops := make([]diffOp, 0, n+m)
		for _, l := range a {
			ops = append(ops, diffOp{'-', l})
		}
		for _, l := range b {
			ops = append(ops, diffOp{'+', l})
		}
		return ops
	}
	if n == 0 || m == 0 {
		return replaceAll()
	}
	maxD := n + m
	off := maxD + 1
	v := make([]int, 2*maxD+3)
	var trace [][]int // trace[d] holds v[-d-1 .. d+1] before round d
	found := false
	for d := 0; d <= maxD && !found; d++ {
		if d > maxDiffEdits {
			return replaceAll()
		}
		snap := make([]int, 2*d+3)
		copy(snap, v[off-d-1:off+d+2])
		trace = append(trace, snap)
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				x = v[off+k+1]
			} else {
				x = v[off+k-1] + 1
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x++
				y++
			}
			v[off+k] = x
			if x >= n && y >= m {
				found = true
				break
			}
		}
	}
	// Backtrack from (n, m) to (0, 0), collecting the script in reverse.
	var rev []diffOp
	x, y := n, m
	for d := len(trace) - 1; d >= 0; d-- {
		snap := trace[d]
		at := func(k int) int { return snap[k+d+1] }
		k := x - y
		var prevK int
		if k == -d || (k != d && at(k-1) < at(k+1)) {
			prevK = k + 1
		} else {
			prevK = k - 1
		}
		prevX := at(prevK)
		prevY := prevX - prevK
		for x > prevX && y > prevY {
			rev = append(rev, diffOp{' ', a[x-1]})
			x--
			y--
		}
		if d > 0 {
			if x == prevX {
				rev = append(rev, diffOp{'+', b[y-1]})
			} else {
				rev = append(rev, diffOp{'-', a[x-1]})
			}
		}
		x, y = prevX, prevY
	}
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return rev
}
