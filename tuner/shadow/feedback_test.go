package shadow

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"testing"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/records"
)

// fbEndpoint is an endpoint with a prefix match of m of total blocks (16
// tokens each) and tok in-flight tokens.
func fbEndpoint(m, total int, tok int64) gate.Endpoint {
	return gate.Endpoint{HasMatch: true, MatchBlocks: m, TotalBlocks: total, BlockSizeTokens: 16, HasLoad: true, InFlightTokens: tok}
}

// staticBar is the default settings with a static token bar.
func staticBar(bar float64) gate.Settings {
	s := defaultSettings()
	s.MaxTTFTPenaltyMs = bar / s.PeakPrefillThroughput * 1000
	return s
}

var fbNames = [][]byte{[]byte("a"), []byte("b"), []byte("c")}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestFeedbackCurrentSettingsFollowTheRecordedTrajectory(t *testing.T) {
	// a holds 90 of 100 blocks and is 10000 tokens behind b: the default bar
	// holds, so the request stays on a (160 uncached tokens).
	eps := []gate.Endpoint{fbEndpoint(90, 100, 10000), fbEndpoint(0, 100, 0)}
	fb := NewFeedback([]gate.Settings{defaultSettings()}, FeedbackOptions{Rate: 1000})
	fb.Add(&FeedbackDecision{At: 0, Endpoints: eps, Names: fbNames[:2], PromptTokens: 1600})
	fb.Add(&FeedbackDecision{At: 1, Endpoints: eps, Names: fbNames[:2], PromptTokens: 1600, Chosen: []byte("a")})
	o := fb.Outcome(0)
	if o.Diverged != 0 || o.Decisions != 2 {
		t.Fatalf("current settings diverged: %+v", o)
	}
	if want := (10000.0 + 160) / 1000; !near(o.MeanTTFTSeconds, want) {
		t.Fatalf("mean TTFT %v, want %v", o.MeanTTFTSeconds, want)
	}
	if want := 2 * (10000.0 + 160); !near(o.QueueTokens, want) {
		t.Fatalf("queue tokens %v, want %v", o.QueueTokens, want)
	}
}

func TestFeedbackReleaseChains(t *testing.T) {
	// Request 1 is pinned to a (6000 tokens behind); a bar of 2000 releases
	// it to b, the least loaded, where its whole prompt (1600) lands.
	// Request 2 is pinned to b, which the recorded run shows idle: under the
	// low bar b now looks 1600 behind c — released too, a chain.
	r1 := []gate.Endpoint{fbEndpoint(95, 100, 6000), fbEndpoint(0, 100, 0), fbEndpoint(0, 100, 500)}
	r2 := []gate.Endpoint{fbEndpoint(0, 100, 6000), fbEndpoint(95, 100, 0), fbEndpoint(0, 100, 100)}
	settings := []gate.Settings{defaultSettings(), staticBar(2000), staticBar(1000)}
	fb := NewFeedback(settings, FeedbackOptions{Rate: 1000})
	fb.Add(&FeedbackDecision{At: 0, Endpoints: r1, Names: fbNames, PromptTokens: 1600})
	fb.Add(&FeedbackDecision{At: 0, Endpoints: r2, Names: fbNames, PromptTokens: 1600})
	tests := []struct {
		name     string
		k        int
		diverged float64
		meanTTFT float64
	}{
		// current: a (6000 + 80), then b (0 + 80)
		{"current holds both", 0, 0, ((6000 + 80) + (0 + 80)) / 2 / 1000.0},
		// bar 2000: released to b (0 + 1600); b is 1600 behind c (100):
		// held (gap 1500 < 2000) at b: 1600 + 80 ahead of nothing else
		{"bar 2000 releases one", 1, 0.5, ((0 + 1600) + (1600 + 80)) / 2 / 1000.0},
		// bar 1000: released to b; then b (1600) vs c (100): gap 1500 >
		// 1000, released again to c with its whole prompt: 100 + 1600
		{"bar 1000 chains", 2, 1, ((0 + 1600) + (100 + 1600)) / 2 / 1000.0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := fb.Outcome(tc.k)
			if !near(o.Diverged, tc.diverged) || !near(o.MeanTTFTSeconds, tc.meanTTFT) {
				t.Fatalf("outcome %+v, want diverged %v mean %v", o, tc.diverged, tc.meanTTFT)
			}
		})
	}
}

func TestFeedbackDifferenceDrainsOnlyWhileAnEndpointIsIdle(t *testing.T) {
	// A low bar releases a request from a to b (1600 tokens land on b, whose
	// recorded load is bTok before and after). A probe pinned to b then
	// reads b's tokens in each trajectory through its estimated TTFT.
	tests := []struct {
		name  string
		bTok  int64   // b's recorded in-flight tokens
		dt    float64 // seconds until the probe
		w     float64 // weight of the probe
		wantB float64 // b's tokens in the low bar's trajectory at the probe
	}{
		{"busy endpoint keeps the difference", 5000, 1, 1, 5000 + 1600},
		{"idle endpoint drains it at the rate", 0, 1, 1, 1600 - 1000},
		{"drained difference is gone", 0, 3, 1, 0},
		{"a weighted draw stands for a stretch of requests", 0, 1, 4, 1600 - 250},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			settings := []gate.Settings{defaultSettings(), staticBar(2000)}
			fb := NewFeedback(settings, FeedbackOptions{Rate: 1000, Parts: 2})
			release := []gate.Endpoint{fbEndpoint(95, 100, 50000), fbEndpoint(0, 100, tc.bTok), fbEndpoint(0, 100, 40000)}
			fb.Add(&FeedbackDecision{At: 0, Endpoints: release, Names: fbNames, PromptTokens: 1600})
			probe := []gate.Endpoint{fbEndpoint(0, 100, 90000), fbEndpoint(95, 100, tc.bTok), fbEndpoint(0, 100, 90000)}
			fb.Add(&FeedbackDecision{At: tc.dt, Weight: tc.w, Endpoints: probe, Names: fbNames, PromptTokens: 1600, Part: 1})
			if o := fb.PartOutcome(1, 1); !near(o.MeanTTFTSeconds, (tc.wantB+80)/1000) {
				t.Fatalf("probe TTFT %v s, want %v s (b at %v tokens)", o.MeanTTFTSeconds, (tc.wantB+80)/1000, tc.wantB)
			}
			if cur := fb.PartOutcome(1, 0); !near(cur.MeanTTFTSeconds, (float64(tc.bTok)+80)/1000) {
				t.Fatalf("current settings' probe TTFT %v s", cur.MeanTTFTSeconds)
			}
		})
	}
}

func TestFeedbackPrefixReplicas(t *testing.T) {
	// Request 1 (95 of 100 blocks on a, 6000 behind) is released to b by the
	// low bar. Request 2 shares the prefix (95 blocks on a), a still far
	// behind: with replicas the low bar finds the prefix on b too and goes
	// there cached; without, b holds nothing and the gate releases again.
	r1 := []gate.Endpoint{fbEndpoint(95, 100, 6000), fbEndpoint(0, 100, 0), fbEndpoint(0, 100, 3000)}
	r2 := []gate.Endpoint{fbEndpoint(95, 100, 6000), fbEndpoint(0, 100, 0), fbEndpoint(0, 100, 1000)}
	for _, tc := range []struct {
		name     string
		replicas bool
		want     float64 // the second request's estimated TTFT (s)
	}{
		{"with replicas the released prefix is found again", true, (1600 + 80) / 1000.0},
		{"without replicas it is forfeited again", false, (1000 + 1600) / 1000.0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fb := NewFeedback([]gate.Settings{defaultSettings(), staticBar(2000)}, FeedbackOptions{Rate: 1000, Parts: 2, PrefixReplicas: tc.replicas})
			fb.Add(&FeedbackDecision{At: 0, Endpoints: r1, Names: fbNames, PromptTokens: 1600})
			fb.Add(&FeedbackDecision{At: 0, Endpoints: r2, Names: fbNames, PromptTokens: 1600, Part: 1})
			if o := fb.PartOutcome(1, 1); !near(o.MeanTTFTSeconds, tc.want) {
				t.Fatalf("second request TTFT %v s, want %v s", o.MeanTTFTSeconds, tc.want)
			}
		})
	}
}

func TestFeedbackFollowsALiveChoiceThePickerDoesNotExplain(t *testing.T) {
	// Both endpoints are sticky; the picker would take b (fewer tokens) but
	// the live EPP took a (another scorer): every settings that keeps a
	// follows it, so the current settings do not diverge.
	eps := []gate.Endpoint{fbEndpoint(95, 100, 3000), fbEndpoint(95, 100, 1000)}
	fb := NewFeedback([]gate.Settings{defaultSettings(), staticBar(1500)}, FeedbackOptions{Rate: 1000})
	fb.Add(&FeedbackDecision{At: 0, Endpoints: eps, Names: fbNames[:2], PromptTokens: 1600, Chosen: []byte("a")})
	for k := range 2 {
		if o := fb.Outcome(k); o.Diverged != 0 || !near(o.MeanTTFTSeconds, (3000+80)/1000.0) {
			t.Fatalf("settings %d: %+v", k, o)
		}
	}
}

func TestFeedbackUnnamedEndpointsAndMissingPrompt(t *testing.T) {
	// Without names endpoints are identified by position; without a prompt
	// length, TotalBlocks × BlockSizeTokens stands in.
	eps := []gate.Endpoint{fbEndpoint(95, 100, 6000), fbEndpoint(0, 100, 0)}
	fb := NewFeedback([]gate.Settings{defaultSettings(), staticBar(2000)}, FeedbackOptions{Rate: 1000})
	fb.Add(&FeedbackDecision{At: 0, Endpoints: eps, PromptTokens: -1})
	fb.Add(&FeedbackDecision{At: 0, Endpoints: eps, PromptTokens: -1})
	// Released to b (0 + 1600); then a (6000 − 80) is still 4320 ahead of
	// b (1600): released again to b (1600 + 1600).
	if o := fb.Outcome(1); !near(o.MeanTTFTSeconds, (1600+3200)/2/1000.0) || o.Diverged != 1 {
		t.Fatalf("outcome %+v", o)
	}
}

// loadFeedbackBench reads the reference input: 3000 gate records of 16
// endpoints (a minute of the simulator's prompt-shift evening, default
// settings), with timestamps, prompt lengths and the live choice.
func loadFeedbackBench(tb testing.TB) []FeedbackDecision {
	f, err := os.Open("testdata/bench/records-16ep.jsonl.gz")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		tb.Fatal(err)
	}
	rd := records.NewReader(bytes.NewReader(data), records.Options{})
	var out []FeedbackDecision
	var t0 float64
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			tb.Fatal(err)
		}
		at := float64(rec.TS.UnixNano()) / 1e9
		if len(out) == 0 {
			t0 = at
		}
		d := FeedbackDecision{At: at - t0, Endpoints: append([]gate.Endpoint(nil), rec.Endpoints...), PromptTokens: rec.PromptTokens,
			Chosen: append([]byte(nil), rec.Observed.Chosen...)}
		for _, n := range rec.Names {
			d.Names = append(d.Names, append([]byte(nil), n...))
		}
		out = append(out, d)
	}
	return out
}

func TestFeedbackOnTheReferenceRecords(t *testing.T) {
	// On real records the current settings replay the live trajectory
	// exactly, and lower bars diverge more.
	ds := loadFeedbackBench(t)
	settings := []gate.Settings{defaultSettings(), staticBar(50000), staticBar(10000)}
	fb := NewFeedback(settings, FeedbackOptions{Rate: 13000, PrefixReplicas: true})
	for i := range ds {
		fb.Add(&ds[i])
	}
	cur, mid, low := fb.Outcome(0), fb.Outcome(1), fb.Outcome(2)
	if cur.Diverged != 0 || cur.Decisions != float64(len(ds)) {
		t.Fatalf("current: %+v", cur)
	}
	if !(mid.Diverged > 0 && low.Diverged > mid.Diverged) {
		t.Fatalf("divergence: 50k %v, 10k %v", mid.Diverged, low.Diverged)
	}
}

// BenchmarkFeedback: one decision of 16 endpoints replayed for 100
// settings (static bars 2k–2M and matchedTokens); reports ns per decision
// per settings (goal: a few hundred).
func BenchmarkFeedback(b *testing.B) {
	ds := loadFeedbackBench(b)
	span := ds[len(ds)-1].At + 0.01
	settings := []gate.Settings{defaultSettings()}
	for k := 0; len(settings) < 99; k++ {
		settings = append(settings, staticBar(2000*math.Pow(2, float64(k)/10)))
	}
	mt := defaultSettings()
	mt.Mode = gate.ModeMatchedTokens
	settings = append(settings, mt)
	for _, replicas := range []bool{false, true} {
		name := "replicas=off"
		if replicas {
			name = "replicas=on"
		}
		b.Run(name, func(b *testing.B) {
			fb := NewFeedback(settings, FeedbackOptions{Rate: 13000, Parts: 4, PrefixReplicas: replicas})
			loopFeedback(b, ds, span, len(settings), fb.Add, nil)
		})
	}
	// The same on a Sharded replay with one shard per core (the tuner's).
	b.Run("replicas=on/sharded", func(b *testing.B) {
		fb := NewSharded(settings, FeedbackOptions{Rate: 13000, Parts: 4, PrefixReplicas: true}, runtime.GOMAXPROCS(0))
		loopFeedback(b, ds, span, len(settings), fb.Add, fb.Flush)
		b.ReportMetric(float64(fb.Shards()), "shards")
	})
}

// modelDraws draws n decisions shaped as the Prometheus model's (the
// tuner's source without records): eps endpoints named, a snapshot of
// their in-flight tokens every per draws, each draw's home endpoint alone
// holding its cached prefix, one request a draw (weight 1), and the
// Accumulator's decisions attached as the tuner attaches them.
func modelDraws(settings []gate.Settings, eps, per, n int) []FeedbackDecision {
	r := rand.New(rand.NewPCG(7, 8))
	names := make([][]byte, eps)
	for i := range names {
		names[i] = []byte(fmt.Sprintf("pod-%02d", i))
	}
	acc := NewAccumulator(settings, 15000)
	tokens := make([]int64, eps)
	out := make([]FeedbackDecision, 0, n)
	for i := 0; i < n; i++ {
		if i%per == 0 {
			for j := range tokens {
				tokens[j] = r.Int64N(400000)
			}
		}
		prompt := 500 + r.IntN(20000)
		total := (prompt + 63) / 64
		home := r.IntN(eps)
		d := FeedbackDecision{At: float64(i) * 15 / float64(per), Weight: 1, Names: names, PromptTokens: int64(prompt),
			Endpoints: make([]gate.Endpoint, eps)}
		for j := range d.Endpoints {
			d.Endpoints[j] = gate.Endpoint{HasMatch: true, TotalBlocks: total, BlockSizeTokens: 64, HasLoad: true, InFlightTokens: tokens[j], InFlightRequests: tokens[j] / 2000}
		}
		d.Endpoints[home].MatchBlocks = int(float64(total) * r.Float64() * 1.1)
		d.Decided = append([]gate.Decision(nil), acc.Add(d.Endpoints)...)
		out = append(out, d)
	}
	return out
}

// BenchmarkFeedbackModel64: the first cycle's replay shape — decisions of
// 64 endpoints drawn as the Prometheus model draws them, replayed for the
// tuner's 83 candidates (the current settings, 81 static bars 2^(1/4)
// apart around it and the gate off) on one core; reports ns per decision
// per settings.
func BenchmarkFeedbackModel64(b *testing.B) {
	settings := []gate.Settings{defaultSettings()}
	for k := -40; k <= 40; k++ {
		settings = append(settings, staticBar(280000*math.Pow(2, float64(k)/4)))
	}
	off := defaultSettings()
	off.MaxTTFTPenaltyMs = 0
	settings = append(settings, off)
	ds := modelDraws(settings, 64, 25, 5000)
	span := ds[len(ds)-1].At + 0.6
	fb := NewFeedback(settings, FeedbackOptions{Rate: 15000, Parts: 4})
	loopFeedback(b, ds, span, len(settings), fb.Add, nil)
}

// loopFeedback adds ds to a replay over and over, each pass span seconds
// after the last, one decision a benchmark iteration; flush (when set)
// finishes the replay before the time is read. It reports ns per decision
// per settings.
func loopFeedback(b *testing.B, ds []FeedbackDecision, span float64, settings int, add func(*FeedbackDecision), flush func()) {
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		d := ds[n%len(ds)]
		d.At += span * float64(n/len(ds))
		add(&d)
		n++
	}
	if flush != nil {
		flush()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n)/float64(settings), "ns/decision/settings")
}

// FuzzFeedback: arbitrary decisions (endpoint sets that change, duplicate
// or missing names, unknown live choices, odd weights and times) never
// panic, and every outcome stays finite and non-negative.
func FuzzFeedback(f *testing.F) {
	f.Add([]byte{3, 90, 100, 10, 0, 0, 100, 0, 1, 2, 7})
	f.Add([]byte{2, 95, 100, 60, 95, 100, 10, 0, 0, 255, 1, 0})
	f.Add([]byte{16, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20})
	f.Fuzz(func(t *testing.T, data []byte) {
		settings := []gate.Settings{defaultSettings(), staticBar(500), staticBar(50000)}
		mt := defaultSettings()
		mt.Mode = gate.ModeMatchedTokens
		settings = append(settings, mt)
		fb := NewFeedback(settings, FeedbackOptions{Rate: 1000, Rates: map[string]float64{"b": 300}, Parts: 2, PrefixReplicas: true})
		next := func() int {
			if len(data) == 0 {
				return 0
			}
			v := int(data[0])
			data = data[1:]
			return v
		}
		names := [][]byte{[]byte("a"), []byte("b"), []byte("c"), []byte("a")}
		at := 0.0
		for len(data) > 0 {
			n := next() % 6
			d := FeedbackDecision{PromptTokens: int64(next()*64) - 64, Part: next() % 3, Weight: float64(next()%4) - 1}
			at += float64(next()%5) - 1 // sometimes backwards
			d.At = at
			for i := 0; i < n; i++ {
				total := next()
				d.Endpoints = append(d.Endpoints, gate.Endpoint{HasMatch: next()%4 != 0, MatchBlocks: next(), TotalBlocks: total,
					BlockSizeTokens: next() % 3 * 16, HasLoad: true, InFlightTokens: int64(next()) * 100, InFlightRequests: int64(next() % 3)})
			}
			if next()%2 == 0 {
				d.Names = names[:min(n, len(names))]
				if len(d.Names) != n {
					d.Names = nil
				}
			}
			if c := next(); c%3 == 0 {
				d.Chosen = names[c%len(names)]
			}
			fb.Add(&d)
		}
		for k := range settings {
			o := fb.Outcome(k)
			for _, v := range []float64{o.Decisions, o.MeanTTFTSeconds, o.P90TTFTSeconds, o.QueueTokens, o.Diverged} {
				if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
					t.Fatalf("settings %d outcome %+v", k, o)
				}
			}
			if o.Diverged > 1 {
				t.Fatalf("settings %d diverged %v", k, o.Diverged)
			}
		}
	})
}
