package jsonenc

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

type inner struct {
	A float64 `json:"a"`
	B *int    `json:"b,omitempty"`
}

type Embedded struct {
	E string `json:"e"`
}

type textKey int

func (k textKey) MarshalText() ([]byte, error) { return []byte("k" + strings.Repeat("!", int(k))), nil }

type sample struct {
	Embedded
	Name     string             `json:"name"`
	Skip     int                `json:"-"`
	Omit     []int              `json:"omit,omitempty"`
	Ptr      *inner             `json:"ptr"`
	Map      map[string]float64 `json:"map"`
	Keys     map[textKey]int    `json:"keys"`
	When     time.Time          `json:"when"`
	Raw      json.RawMessage    `json:"raw"`
	Bytes    []byte             `json:"bytes"`
	Any      any                `json:"any"`
	Quoted   int64              `json:"quoted,string"`
	Arr      [2]uint8           `json:"arr"`
	NoTag    bool
	HTML     string `json:"html"`
	private  int
	Duration time.Duration `json:"duration"`
}

// TestSameAsEncodingJSON: on values encoding/json can encode, the output is
// byte for byte the same.
func TestSameAsEncodingJSON(t *testing.T) {
	two := 2
	cases := []any{
		nil, 1, -3.5, 1e21, 1e-7, "x<&>", []int(nil), []string{"a"}, map[string]any{"z": 1, "a": []any{true, nil}},
		sample{Embedded: Embedded{E: "e"}, Name: "n", Ptr: &inner{A: 0.1, B: &two}, Map: map[string]float64{"b": 2, "a": 1},
			Keys: map[textKey]int{1: 1, 2: 2}, When: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Raw: json.RawMessage(`{"x": 1}`),
			Bytes: []byte("hi"), Any: map[string]int{"q": 1}, Quoted: 42, HTML: "<b>", private: 3, Duration: time.Second},
		&sample{},
		struct{ F float32 }{F: 0.1},
	}
	for _, c := range cases {
		want, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Marshal(c)
		if err != nil {
			t.Fatalf("%#v: %v", c, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("Marshal(%#v)\n got %s\nwant %s", c, got, want)
		}
	}
}

// TestNonFiniteAsStrings: NaN and ±Inf become strings wherever they are.
func TestNonFiniteAsStrings(t *testing.T) {
	v := struct {
		A float64            `json:"a"`
		B []float64          `json:"b"`
		C map[string]float64 `json:"c"`
		D *float64           `json:"d"`
	}{A: math.NaN(), B: []float64{1, math.Inf(1)}, C: map[string]float64{"x": math.Inf(-1)}}
	ninf := math.Inf(-1)
	v.D = &ninf
	if _, err := json.Marshal(v); err == nil {
		t.Fatal("encoding/json accepted a non-finite number; the test has no point")
	}
	got, err := Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"a":"NaN","b":[1,"+Inf"],"c":{"x":"-Inf"},"d":"-Inf"}`
	if string(got) != want {
		t.Errorf("got %s, want %s", got, want)
	}
	var buf bytes.Buffer
	if err := Encode(&buf, v, "  "); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "\n  \"a\": \"NaN\",\n") || !strings.HasSuffix(buf.String(), "}\n") {
		t.Errorf("indented output:\n%s", buf.String())
	}
}
