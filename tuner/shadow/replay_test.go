package shadow

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/records"
)

func defaultSettings() gate.Settings {
	p := gate.DefaultParams()
	return p.Settings(gate.SemanticsV1)
}

func TestReplayCountsAndDecisionLines(t *testing.T) {
	in := strings.Join([]string{
		// held wrongly by the default bar: gap 200000 > matched 1440
		`{"requestId":"a","endpoints":[{"name":"x","matchBlocks":90,"totalBlocks":100,"blockSizeTokens":16,"inFlightTokens":200000},{"name":"y","matchBlocks":0,"totalBlocks":100,"blockSizeTokens":16,"inFlightTokens":0}],"observed":{"outcome":"sticky"}}`,
		// released by the default bar: gap 286705
		`{"requestId":"b","endpoints":[{"name":"x","matchBlocks":90,"totalBlocks":100,"blockSizeTokens":16,"inFlightTokens":286705},{"name":"y","totalBlocks":100,"inFlightTokens":0}],"observed":{"outcome":"sticky"}}`,
		`not json`,
		// no sticky endpoint
		`{"requestId":"c","endpoints":[{"name":"x","totalBlocks":10},{"name":"y","totalBlocks":10}]}`,
	}, "\n")
	cur := defaultSettings()
	pm := gate.DefaultParams()
	prof, _ := gate.LookupProfile(gate.ProfilePenaltyMode)
	cand, err := NewCandidate(pm, prof, Override{gate.KeyPenaltyMode, "matchedTokens"}, Override{gate.KeyMaxTTFTPenaltyMs, "0"})
	if err != nil || cand.Invalid != "" {
		t.Fatalf("candidate %+v %v", cand, err)
	}
	acc := NewAccumulator([]gate.Settings{cur, cand.Settings}, 15928)
	r := records.NewReader(strings.NewReader(in), records.Options{})
	var out bytes.Buffer
	if err := Replay(r, acc, &out); err != nil {
		t.Fatal(err)
	}
	c := acc.Counts(0)
	if c.Verdicts[gate.HeldWrong] != 1 || c.Verdicts[gate.ReleasedOK] != 1 || c.Verdicts[gate.NotGated] != 1 || c.ExcessTokens != 200000-1440 {
		t.Fatalf("current counts = %+v", c)
	}
	if c2 := acc.Counts(1); c2.Verdicts[gate.ReleasedOK] != 2 || c2.ExcessTokens != 0 {
		t.Fatalf("matchedTokens counts = %+v", c2)
	}
	if ag := acc.Agreement(); ag.Agree != 1 || ag.Disagree != 1 || ag.Unobserved != 1 {
		t.Fatalf("agreement = %+v", ag)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("decision lines = %d", len(lines))
	}
	var d struct {
		Line          int      `json:"line"`
		RequestID     string   `json:"requestId"`
		Outcome       string   `json:"outcome"`
		Kept          []string `json:"kept"`
		GapTokens     *int64   `json:"gapTokens"`
		MatchedTokens *int64   `json:"matchedTokens"`
		PenaltyMs     *float64 `json:"penaltyMs"`
		Verdict       string   `json:"verdict"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &d); err != nil {
		t.Fatal(err)
	}
	if d.RequestID != "a" || d.Outcome != "sticky" || len(d.Kept) != 1 || d.Kept[0] != "x" || *d.GapTokens != 200000 || *d.MatchedTokens != 1440 || d.Verdict != "held_wrong" || d.PenaltyMs == nil {
		t.Fatalf("decision line = %s", lines[0])
	}
	if err := json.Unmarshal([]byte(lines[2]), &d); err != nil || d.Line != 4 || d.Outcome != "no_match" || len(d.Kept) != 2 {
		t.Fatalf("decision line = %s (%v)", lines[2], err)
	}
}

func TestSweepExpandsAProductAndFlagsRejectedSettings(t *testing.T) {
	sw, err := ParseSweep([]string{"maxTTFTPenaltyMs=1000,5000", "PenaltyMode=static,matchedTokens", "maxTTFTPenaltyMs=9000"})
	if err != nil {
		t.Fatal(err)
	}
	prof, _ := gate.LookupProfile(gate.ProfileRouter202608)
	cands, err := sw.Expand(gate.DefaultParams(), prof)
	if err != nil {
		t.Fatal(err)
	}
	if len(cands) != 6 {
		t.Fatalf("%d candidates", len(cands))
	}
	if cands[0].Label != "maxTTFTPenaltyMs=1000,penaltyMode=static" || cands[5].Label != "maxTTFTPenaltyMs=9000,penaltyMode=matchedTokens" {
		t.Fatalf("labels %q … %q", cands[0].Label, cands[5].Label)
	}
	for _, c := range cands {
		if c.Invalid == "" {
			t.Fatalf("%s: router-2026-08 does not accept penaltyMode, so every candidate must be flagged", c.Label)
		}
	}
	for _, bad := range []string{"maxTTFTPenaltyMs", "noSuchKey=1", "maxTTFTPenaltyMs=abc", "penaltyMode=fast", "inFlightLoadProducerName=x"} {
		if _, err := ParseSweep([]string{bad}); err == nil {
			t.Errorf("ParseSweep(%q) accepted", bad)
		}
	}
}

func loadBenchRecords(b *testing.B) []byte {
	data, err := os.ReadFile("testdata/bench/records-8ep.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	return data
}

// BenchmarkReplay8: parse plus evaluation of 8-endpoint records (goal ≥ 300k
// records/s per core, memory flat).
func BenchmarkReplay8(b *testing.B) {
	data := loadBenchRecords(b)
	n := bytes.Count(data, []byte{'\n'})
	for _, bc := range []struct {
		name     string
		settings int
		out      bool
	}{{"current", 1, false}, {"current+decisions", 1, true}, {"16-candidates", 16, false}} {
		b.Run(bc.name, func(b *testing.B) {
			settings := make([]gate.Settings, bc.settings)
			for i := range settings {
				settings[i] = defaultSettings()
				settings[i].MaxTTFTPenaltyMs = float64(250 * (i + 1))
			}
			acc := NewAccumulator(settings, 15928)
			var w io.Writer
			if bc.out {
				w = io.Discard
			}
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				r := records.NewReader(bytes.NewReader(data), records.Options{})
				if err := Replay(r, acc, w); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// TestTokenBarOverride: a candidate can set the token-bar build's
// maxTokensInFlightPenalty (an integer, as the EPP's int64 reads it), and
// builds without the key flag it.
func TestTokenBarOverride(t *testing.T) {
	prof, err := gate.LookupProfile(gate.ProfileRouterTokenBar)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := gate.ParseParams([]byte(`{"maxTTFTPenaltyMs":0,"maxTokensInFlightPenalty":200000}`), prof)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCandidate(cur, prof, Override{gate.KeyMaxTokensInFlightPenalty, "84090"})
	if err != nil || c.Invalid != "" || c.Settings.MaxTokensInFlightPenalty != 84090 || c.Settings.BarTokens() != 84090 || c.Label != "maxTokensInFlightPenalty=84090" {
		t.Fatalf("candidate %+v, %v", c, err)
	}
	if _, err := NewCandidate(cur, prof, Override{gate.KeyMaxTokensInFlightPenalty, "1.5"}); err == nil || !strings.Contains(err.Error(), "not an integer") {
		t.Errorf("1.5 tokens: err = %v", err)
	}
	if c, err := NewCandidate(cur, prof, Override{gate.KeyMaxTokensInFlightPenalty, "-1"}); err != nil || !strings.Contains(c.Invalid, "maxTokensInFlightPenalty") {
		t.Errorf("-1 tokens: %+v %v, want rejected by the build's validation", c, err)
	}
	other, _ := gate.LookupProfile(gate.ProfileRouter202608)
	if c, err := NewCandidate(gate.DefaultParams(), other, Override{gate.KeyMaxTokensInFlightPenalty, "1000"}); err != nil || !strings.Contains(c.Invalid, "does not accept") {
		t.Errorf("router-2026-08: %+v %v, want flagged", c, err)
	}
	if _, err := ParseSweep([]string{"maxTokensInFlightPenalty=50000,100000"}); err != nil {
		t.Errorf("sweep over the token bar: %v", err)
	}
}
