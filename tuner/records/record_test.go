package records

import (
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/gatetuner/gatetuner/gate"
)

func readAll(t *testing.T, in string, opts Options) ([]Record, *Reader, error) {
	t.Helper()
	r := NewReader(strings.NewReader(in), opts)
	var out []Record
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return out, r, nil
		}
		if err != nil {
			return out, r, err
		}
		c := *rec
		c.Endpoints = append([]gate.Endpoint(nil), rec.Endpoints...)
		c.RequestID = append([]byte(nil), rec.RequestID...)
		out = append(out, c)
	}
}

func TestReadsTheDesignExample(t *testing.T) {
	data, err := os.ReadFile("testdata/design-example.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	recs, r, err := readAll(t, string(data), Options{})
	if err != nil || len(recs) != 1 {
		t.Fatalf("records = %d, err %v, bad %v", len(recs), err, r.BadLines())
	}
	rec := recs[0]
	if string(rec.RequestID) != "r-1" || rec.PromptTokens != 5000 || rec.TS.UnixMilli()%1000 != 123 {
		t.Fatalf("record = %+v", rec)
	}
	a, b, c := rec.Endpoints[0], rec.Endpoints[1], rec.Endpoints[2]
	if !a.HasMatch || a.MatchBlocks != 90 || a.TotalBlocks != 100 || a.BlockSizeTokens != 16 || !a.HasLoad || a.InFlightTokens != 1000 || a.InFlightRequests != 3 || a.HasPrediction {
		t.Errorf("pod-a = %+v", a)
	}
	if !b.HasPrediction || !math.IsNaN(b.PredictedTTFTMs) || !b.HasLoad || b.InFlightTokens != 0 {
		t.Errorf("pod-b = %+v", b)
	}
	if c.HasMatch || !c.HasLoad || c.InFlightTokens != 500 || c.PredictedTTFTMs != 812.5 {
		t.Errorf("pod-c = %+v", c)
	}
	if !rec.Observed.Present || !rec.Observed.KnownOutcome || rec.Observed.Parsed != gate.OutcomeSticky || string(rec.Observed.Chosen) != "pod-a" {
		t.Errorf("observed = %+v", rec.Observed)
	}
}

func TestAttributePresence(t *testing.T) {
	tests := []struct {
		name string
		ep   string
		want gate.Endpoint
	}{
		{"absent keys are absent", `{}`, gate.Endpoint{}},
		{"null is absent", `{"matchBlocks":null,"totalBlocks":null,"inFlightTokens":null,"predictedTTFTMs":null}`, gate.Endpoint{}},
		{"match info without block size has block size 0", `{"matchBlocks":9,"totalBlocks":10}`, gate.Endpoint{HasMatch: true, MatchBlocks: 9, TotalBlocks: 10}},
		{"total blocks alone is match info", `{"totalBlocks":10}`, gate.Endpoint{HasMatch: true, TotalBlocks: 10}},
		{"block size alone is not match info", `{"blockSizeTokens":16}`, gate.Endpoint{BlockSizeTokens: 16}},
		{"in-flight tokens make the load present", `{"inFlightTokens":0}`, gate.Endpoint{HasLoad: true}},
		{"requests alone do not make the load present", `{"inFlightRequests":4}`, gate.Endpoint{InFlightRequests: 4}},
		{"infinities as strings", `{"predictedTTFTMs":"-Inf"}`, gate.Endpoint{HasPrediction: true, PredictedTTFTMs: math.Inf(-1)}},
		{"unknown keys are ignored", `{"zone":"a","extra":{"x":[1,{"y":null}]},"inFlightTokens":7}`, gate.Endpoint{HasLoad: true, InFlightTokens: 7}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			recs, r, err := readAll(t, `{"endpoints":[`+tc.ep+`]}`, Options{Strict: true})
			if err != nil {
				t.Fatalf("err %v (%v)", err, r.BadLines())
			}
			if got := recs[0].Endpoints[0]; got != tc.want {
				t.Fatalf("endpoint = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestBadLines(t *testing.T) {
	tests := []struct {
		name, line, reason string
	}{
		{"not JSON", `{"endpoints":[`, "not valid JSON"},
		{"plain text", `hello`, "not valid JSON"},
		{"trailing garbage", `{"endpoints":[]} x`, "trailing data"},
		{"no endpoints array", `{"requestId":"r"}`, "no endpoints array"},
		{"endpoints null", `{"endpoints":null}`, "no endpoints array"},
		{"endpoints not an array", `{"endpoints":{}}`, "endpoints: not an array"},
		{"endpoint not an object", `{"endpoints":[1]}`, "endpoints[0]: not an object"},
		{"negative count", `{"endpoints":[{"inFlightTokens":-1}]}`, "endpoints[0].inFlightTokens: negative count"},
		{"fractional count", `{"endpoints":[{},{"matchBlocks":1.5}]}`, "endpoints[1].matchBlocks: not a non-negative integer"},
		{"string count", `{"endpoints":[{"totalBlocks":"10"}]}`, "endpoints[0].totalBlocks: not a non-negative integer"},
		{"huge block count", `{"endpoints":[{"totalBlocks":99999999999}]}`, "out of range"},
		{"bad prediction string", `{"endpoints":[{"predictedTTFTMs":"slow"}]}`, "predictedTTFTMs"},
		{"name not a string", `{"endpoints":[{"name":7}]}`, "endpoints[0].name: not a string"},
		{"bad time", `{"ts":"yesterday","endpoints":[]}`, "ts: not an RFC 3339 time"},
		{"negative prompt", `{"promptTokens":-5,"endpoints":[]}`, "promptTokens: negative count"},
		{"observed not an object", `{"endpoints":[],"observed":"sticky"}`, "observed: not an object"},
		{"target not a string", `{"endpoints":[],"target":1}`, "target: not a string"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := `{"endpoints":[]}` + "\n" + tc.line + "\n" + `{"endpoints":[]}` + "\n"
			recs, r, err := readAll(t, in, Options{})
			if err != nil || len(recs) != 2 {
				t.Fatalf("tolerant read: %d records, err %v", len(recs), err)
			}
			bad := r.BadLines()
			if r.Stats().Bad != 1 || len(bad) != 1 || bad[0].Line != 2 || !strings.Contains(bad[0].Reason, tc.reason) {
				t.Fatalf("bad lines = %+v, want line 2 with %q", bad, tc.reason)
			}
			if recs[0].Line != 1 || recs[1].Line != 3 {
				t.Fatalf("line numbers %d %d", recs[0].Line, recs[1].Line)
			}
			_, _, err = readAll(t, in, Options{Strict: true})
			var le *LineError
			if !errors.As(err, &le) || le.Line != 2 {
				t.Fatalf("strict read err = %v, want a LineError on line 2", err)
			}
		})
	}
}

func TestFiltersTargetAndPlugin(t *testing.T) {
	in := strings.Join([]string{
		`{"target":"a","plugin":"p","endpoints":[]}`,
		`{"target":"b","plugin":"p","endpoints":[]}`,
		`{"target":"a","plugin":"q","endpoints":[]}`,
		`{"endpoints":[]}`,
		``,
		`{"target":"a","plugin":"p","endpoints":[]}`,
	}, "\r\n")
	recs, r, err := readAll(t, in, Options{Target: "a", Plugin: "p"})
	if err != nil || len(recs) != 3 {
		t.Fatalf("records = %d, err %v", len(recs), err)
	}
	if s := r.Stats(); s != (Stats{Read: 3, Skipped: 2}) {
		t.Fatalf("stats = %+v", s)
	}
}

func TestEscapesAndLongLines(t *testing.T) {
	long := strings.Repeat(`{"name":"p","inFlightTokens":1},`, 100000)
	in := `{"requestId":"a\"b\\c\u00e9\ud83d\ude00","endpoints":[` + long + `{}]}` + "\n"
	r := NewReader(strings.NewReader(in), Options{Strict: true})
	rec, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	if string(rec.RequestID) != "a\"b\\cé😀" || len(rec.Endpoints) != 100001 {
		t.Fatalf("requestId %q, %d endpoints", rec.RequestID, len(rec.Endpoints))
	}
	r = NewReader(strings.NewReader(in+`{"endpoints":[]}`), Options{MaxLineBytes: 1000})
	rec, err = r.Next()
	if err != nil || rec.Line != 2 || r.Stats().Bad != 1 {
		t.Fatalf("over-long line: rec %+v err %v stats %+v", rec, err, r.Stats())
	}
}

// FuzzReader: no panic; a line the reader accepts is valid JSON, and its
// counts agree with encoding/json's reading.
func FuzzReader(f *testing.F) {
	data, _ := os.ReadFile("testdata/design-example.jsonl")
	f.Add(data)
	for _, s := range []string{`{"endpoints":[]}`, `{"endpoints":[{"inFlightTokens":1e3}]}`, `{"endpoints":[{"name":"\u0041"}]}`,
		`{"endpoints":[{"predictedTTFTMs":-0.5e-3}],"x":[true,false,null]}`, `[]`, `{"endpoints":[{}]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(strings.NewReader(string(data)), Options{})
		for {
			rec, err := r.Next()
			if err == io.EOF {
				return
			}
			if err != nil {
				t.Fatalf("tolerant reader returned %v", err)
			}
			lines := strings.Split(string(data), "\n")
			line := lines[rec.Line-1]
			var v struct {
				Endpoints []struct {
					InFlightTokens *int64 `json:"inFlightTokens"`
				} `json:"endpoints"`
			}
			if err := json.Unmarshal([]byte(line), &v); err != nil {
				var syn *json.SyntaxError
				if errors.As(err, &syn) {
					t.Fatalf("accepted invalid JSON %q: %v", line, err)
				}
				continue // a type mismatch on a key encoding/json reads differently (e.g. duplicate keys)
			}
			if len(v.Endpoints) != len(rec.Endpoints) {
				t.Fatalf("endpoints %d vs encoding/json %d on %q", len(rec.Endpoints), len(v.Endpoints), line)
			}
		}
	})
}

// TestLineBoundCountsTheContent: the MaxLineBytes bound counts a line's
// content (not its "\n" or "\r\n"), holds for lines shorter than the read
// buffer too, and an over-long line is one bad line — no part of it is read
// as a line of its own.
func TestLineBoundCountsTheContent(t *testing.T) {
	line := func(n int) string { // a valid record of exactly n bytes
		const head, tail = `{"endpoints":[],"x":"`, `"}`
		return head + strings.Repeat("a", n-len(head)-len(tail)) + tail
	}
	for _, tc := range []struct {
		name      string
		max, size int
		term      string
		bad       int
	}{
		{"at the bound with \\n", 100, 100, "\n", 0},
		{"at the bound with \\r\\n", 100, 100, "\r\n", 0},
		{"at the bound at the end of input", 100, 100, "", 0},
		{"one over the bound (shorter than the buffer)", 100, 101, "\n", 1},
		{"longer than the buffer, at the bound", 3 << 20, 3 << 20, "\n", 0},
		{"longer than the buffer, one over", 3 << 20, 3<<20 + 1, "\n", 1},
		{"over the bound by more than a buffer", 1<<20 + 10, 3 << 20, "\n", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := `{"endpoints":[{"name":"first"}]}` + "\n" + line(tc.size) + tc.term + `{"endpoints":[{"name":"next"}]}` + "\n"
			if tc.term == "" {
				in = `{"endpoints":[{"name":"first"}]}` + "\n" + line(tc.size)
			}
			r := NewReader(strings.NewReader(in), Options{MaxLineBytes: tc.max})
			var got []Record
			for {
				rec, err := r.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, *rec)
			}
			want := 3 - tc.bad
			if tc.term == "" {
				want--
			}
			if len(got) != want || r.Stats().Bad != int64(tc.bad) {
				t.Fatalf("%d records, %d bad; want %d and %d", len(got), r.Stats().Bad, want, tc.bad)
			}
			if first := got[0]; first.Line != 1 || len(first.Endpoints) != 1 {
				t.Fatalf("the line before: %+v", first)
			}
			if last := got[len(got)-1]; tc.term != "" && (len(last.Endpoints) != 1 || last.Line != 3) {
				t.Fatalf("the line after: %+v", last)
			}
		})
	}
}

// TestOverLongLineIsNamed: an over-long line is one bad line whose reason
// says so, with its line number, and strict mode stops there.
func TestOverLongLineIsNamed(t *testing.T) {
	in := `{"endpoints":[]}` + "\n" + strings.Repeat(" ", 150) + `{"endpoints":[]}` + "\n" + `{"endpoints":[]}` + "\n"
	r := NewReader(strings.NewReader(in), Options{MaxLineBytes: 100})
	n := 0
	for {
		_, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	want := []LineError{{Line: 2, Reason: "line longer than 100 bytes"}}
	if n != 2 || !reflect.DeepEqual(r.BadLines(), want) {
		t.Fatalf("%d records, bad lines %v; want 2 and %v", n, r.BadLines(), want)
	}
	r = NewReader(strings.NewReader(in), Options{MaxLineBytes: 100, Strict: true})
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	var le *LineError
	if _, err := r.Next(); !errors.As(err, &le) || *le != want[0] {
		t.Fatalf("strict: %v, want %v", err, want[0])
	}
}
