package eppconfig

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/gatetuner/gatetuner/gate"
)

// yamlValue decodes `v: <scalar>` with yaml.v3 and returns the scalar node.
func yamlValue(t *testing.T, doc string) *yaml.Node {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(doc), &n); err != nil {
		t.Fatalf("yaml.v3 rejects %q: %v", doc, err)
	}
	return n.Content[0].Content[1]
}

// TestDecodeDoubleQuotedMatchesYAML: the piecewise decoder reads every
// double-quoted form as yaml.v3 does, and its pieces cover the source.
func TestDecodeDoubleQuotedMatchesYAML(t *testing.T) {
	docs := []string{
		`v: "plain"`,
		`v: "a\nb\tc\\d\"e\x41\u00e9\U0001F600\N\_\L\P\0\a\b\v\f\r\e\ "`,
		"v: \"folded\n  line\"",
		"v: \"trailing   \n   leading\"",
		"v: \"blank\n\n  lines\n\n\n  three\"",
		"v: \"escaped\\\n   break\"",
		"v: \"escaped\\\n\n   break then blank\"",
		"v: \"crlf\r\n  fold\r\n\r\n  blank\"",
		"v: \"tab\t\tinside\"",
		"v: \"esc tab \\\tx\"",
		"v: \"ends with escaped break\\\n  \"",
		"v: \"\n  leading fold\"",
		"v: \"ls\u2028fold\"",
		"v: \"\"",
		"v: \"é ü \u00a0 ok\"",
	}
	// What Helm's toYaml and kubectl write (sigs.k8s.io/yaml), for awkward texts.
	for _, s := range []string{
		"apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer \n",
		strings.Repeat("word ", 40) + "\n  indented  \n\n\ttab",
		"  leading spaces\nand \"quotes\" and \\backslashes\\ " + strings.Repeat("x", 100) + " end ",
	} {
		out, err := sigsyaml.Marshal(map[string]string{"v": s})
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(out))
	}
	r := rand.New(rand.NewPCG(3, 4))
	alphabet := []string{"a", "b", " ", "  ", "\n", "\t", "\\", "\"", ":", "#", "é", "\u2028", "x y", "- ", "\r\n"}
	for n := 0; n < 300; n++ {
		var b strings.Builder
		for k := r.IntN(60); k > 0; k-- {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		out, err := sigsyaml.Marshal(map[string]string{"v": b.String()})
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(out))
	}
	for _, doc := range docs {
		v := yamlValue(t, doc)
		if v.Style&yaml.DoubleQuotedStyle == 0 {
			continue
		}
		lt := newLineTable([]byte(doc))
		open, ok := lt.offset(v.Line, v.Column)
		if !ok {
			t.Fatalf("%q: cannot locate the value", doc)
		}
		got, qm, err := decodeDoubleQuoted(lt.text, open)
		if err != nil || got != v.Value {
			t.Fatalf("%q: decoded %q, %v; yaml.v3 %q", doc, got, err, v.Value)
		}
		next := open + 1
		for _, p := range qm.pieces {
			if p.s0 < next || p.s1 < p.s0 || p.d1 < p.d0 || (p.literal && p.s1-p.s0 != p.d1-p.d0) {
				t.Fatalf("%q: bad piece %+v after source offset %d", doc, p, next)
			}
			next = p.s1
		}
		if qm.close < next || doc[qm.close] != '"' || qm.size != len(got) {
			t.Fatalf("%q: close %d size %d", doc, qm.close, qm.size)
		}
	}
}

// TestEncodeDoubleQuotedReadsBack: text written by encodeDoubleQuoted reads
// back exactly, also next to a folded line break on either side.
func TestEncodeDoubleQuotedReadsBack(t *testing.T) {
	texts := []string{"", " ", "  lead", "trail  ", "\t", "a\"b\\c", "\n    key: 5", "é\u2028\u0085\ufeff\x00\x7f", "x\r\ny", " - ", "#c: d"}
	for _, s := range texts {
		docs := []string{`v: "` + encodeDoubleQuoted(s) + `"`}
		if s != "" { // an empty text between two folds makes a blank line; checkQuoted refuses such an edit
			docs = append(docs, "v: \"before\n  "+encodeDoubleQuoted(s)+"\n  after\"", "v: \"before\\\n  "+encodeDoubleQuoted(s)+"\\\n  after\"")
		}
		for _, doc := range docs {
			want := s
			switch {
			case strings.HasPrefix(doc, "v: \"before\n"):
				want = "before " + s + " after"
			case strings.HasPrefix(doc, "v: \"before\\"):
				want = "before" + s + "after"
			}
			if got := yamlValue(t, doc).Value; got != want {
				t.Errorf("%q: reads %q, want %q", doc, got, want)
			}
		}
	}
}

// TestDoubleQuotedEditsWriteEscapedStrings: a string value inside a
// double-quoted config is written with escaped quotes, and the file reads
// back with exactly the new value; line numbers in errors point into the
// folded string.
func TestDoubleQuotedEditsWriteEscapedStrings(t *testing.T) {
	in := readSample(t, "forms/configmap-kubectl-folded.yaml")
	f, err := Parse(in, "cm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sel, err := f.Select(Target{})
	if err != nil {
		t.Fatal(err)
	}
	if got := sel.keyLine("maxTTFTPenaltyMs"); got != 10 {
		t.Errorf("maxTTFTPenaltyMs reported on line %d, want 10 (the file line holding it)", got)
	}
	out, err := f.Edit([]Change{{Set: map[gate.Key]Value{
		gate.KeyInFlightLoadProducerName: String(`my "ifl"`),
		gate.KeyTTFTSource:               String("latencyPredictor"),
	}}}, mustProfile(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	removed, added := changedLines(Diff("a", "b", in, out))
	wantRemoved := []string{`    15928\n    inFlightLoadProducerName: \"inflight-load-producer\"\n- type: token-load-scorer\nschedulingProfiles:\n-`}
	wantAdded := []string{`    15928\n    inFlightLoadProducerName: \"my \\\"ifl\\\"\"\n    ttftSource: latencyPredictor\n- type: token-load-scorer\nschedulingProfiles:\n-`}
	if strings.Join(removed, "|") != strings.Join(wantRemoved, "|") || strings.Join(added, "|") != strings.Join(wantAdded, "|") {
		t.Errorf("diff:\n removed %q\n   added %q\nwant %q\n     %q", removed, added, wantRemoved, wantAdded)
	}
	g, err := Parse(out, "cm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	gin, err := g.Select(Target{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := gin.Params(mustProfile(t, ""))
	if err != nil || p.InFlightLoadProducerName != `my "ifl"` || p.TTFTSource != gate.SourceLatencyPredictor {
		t.Errorf("read back %q %v, %v", p.InFlightLoadProducerName, p.TTFTSource, err)
	}
}

// TestCheckQuotedRefusesTextThatReadsBackDifferently: the read-back check
// compares the decoded text, comments and spacing included, with the
// original text and the planned changes. Here the file bytes lost "X"
// between two line folds, which joins them into a blank line: the config
// still parses, but its text is not the intended one.
func TestCheckQuotedRefusesTextThatReadsBackDifferently(t *testing.T) {
	const cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: epp\ndata:\n"
	body := `apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: prefix-cache-affinity-filter # a`
	in := cm + "  epp.yaml: \"" + body + "\n    X\n    #b\\n\"\n"
	f, err := Parse([]byte(in), "cm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c := f.Configs()[0]
	text := string(c.tm.in.text)
	x := strings.Index(text, "X")
	if c.quoted == nil || x < 0 {
		t.Fatalf("config not quoted-editable: %q", text)
	}
	p := plan{decoded: map[*Config][]splice{c: {{start: x, end: x + 1}}}}
	g, err := Parse([]byte(strings.Replace(in, "    X\n", "", 1)), "cm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.checkQuoted(f, g); !errors.Is(err, ErrUnintended) || !strings.Contains(err.Error(), `key "epp.yaml"`) {
		t.Fatalf("checkQuoted = %v, want ErrUnintended naming the key", err)
	}
	ok, err := Parse([]byte(strings.Replace(in, "    X\n", "    \n", 1)), "cm.yaml") // "# a\n#b": not "# a  #b"
	if err != nil {
		t.Fatal(err)
	}
	if err := p.checkQuoted(f, ok); err == nil {
		t.Fatal("checkQuoted accepted a blank line for two spaces")
	}
}
