package tuner

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/decide"
	"github.com/gatetuner/gatetuner/tuner/eppconfig"
	"github.com/gatetuner/gatetuner/tuner/shadow"
	"github.com/gatetuner/gatetuner/tuner/sink"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

const tokenBarSample = "eppconfig/testdata/epp-config-token-bar.yaml"

func tokenBarProfile(t testing.TB) gate.Profile {
	t.Helper()
	prof, err := gate.LookupProfile(gate.ProfileRouterTokenBar)
	if err != nil {
		t.Fatal(err)
	}
	return prof
}

// tokenBarTarget is a mode-off file target on a copy of the token-bar
// sample (maxTTFTPenaltyMs 0, maxTokensInFlightPenalty 200000).
func tokenBarTarget(t *testing.T, src DecisionSource, now time.Time) (*Target, string) {
	t.Helper()
	b, err := os.ReadFile(tokenBarSample)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "epp.yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	prof := tokenBarProfile(t)
	sk, err := sink.New(sink.Target{Name: "t", File: path, Profile: prof, Plugins: []string{"prefill-affinity"}}, sink.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	pol := config.DefaultPolicy()
	pol.MinDecisions, pol.Lookback = new(int), time.Hour
	*pol.MinDecisions = 100
	return &Target{Config: config.Target{Name: "t", Plugin: "prefill-affinity", Policy: pol}, Profile: prof, Sink: sk,
		Estimator: fixedEstimator{est: cycleEstimates(now)}, Records: src}, path
}

// TestTokenBarCandidatesVaryOnlyTheTokenBar: with maxTTFTPenaltyMs 0 the
// token-bar build's candidates set maxTokensInFlightPenalty (whole tokens,
// each once, and 0 for off) and nothing else.
func TestTokenBarCandidatesVaryOnlyTheTokenBar(t *testing.T) {
	prof := tokenBarProfile(t)
	cur, err := gate.ParseParams([]byte(`{"maxTTFTPenaltyMs":0,"maxTokensInFlightPenalty":200000}`), prof)
	if err != nil {
		t.Fatal(err)
	}
	cands := decide.BuildCandidates(decide.CandidateSpec{Current: cur, Profile: prof, DrainRate: 8000})
	if len(cands) < 40 || !cands[0].Current || cands[0].Bar != 200000 {
		t.Fatalf("%d candidates, first %+v", len(cands), cands[0])
	}
	seen := map[int64]bool{}
	off := false
	for _, c := range cands[1:] {
		s := c.Settings
		if !c.TokenBar || c.Invalid != "" || s.MaxTTFTPenaltyMs != 0 || s.Mode != cur.PenaltyMode || s.Source != gate.SourceLatencyPredictor {
			t.Fatalf("candidate %s: %+v (invalid %q)", c.Label, s, c.Invalid)
		}
		if seen[s.MaxTokensInFlightPenalty] {
			t.Errorf("bar %d twice", s.MaxTokensInFlightPenalty)
		}
		seen[s.MaxTokensInFlightPenalty] = true
		if s.MaxTokensInFlightPenalty == 0 {
			off = c.Bar > 1e300
		} else if c.Bar != float64(s.MaxTokensInFlightPenalty) {
			t.Errorf("candidate %s: bar %v", c.Label, c.Bar)
		}
	}
	if !off || !seen[200000] {
		t.Errorf("no off candidate (%v) or the current bar is not on the grid (%v)", off, seen[200000])
	}
	// With a TTFT gate the predictor decides: not tuned.
	withTTFT, err := gate.ParseParams([]byte(`{"maxTokensInFlightPenalty":200000}`), prof)
	if err != nil {
		t.Fatal(err)
	}
	if TokenBarOnly(prof, withTTFT.Settings(prof.MissingSignal)) {
		t.Errorf("maxTTFTPenaltyMs defaults to 5000 in this build: the token bar is not the only gate")
	}
}

// TestTokenBarTargetWritesMaxTokensInFlightPenalty: a router-2026-05-tokens
// target with maxTTFTPenaltyMs 0 is tuned (not held as latencyPredictor),
// its recommendation writes maxTokensInFlightPenalty alone, byte-exact
// (golden), and the shadow's candidate decides as the gate does on the
// config that would be written.
func TestTokenBarTargetWritesMaxTokensInFlightPenalty(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	src := &decisions{from: now.Add(-50 * time.Minute), n: 2400}
	tg, path := tokenBarTarget(t, src, now)
	rep, _ := (&Tuner{Clock: func() time.Time { return now }}).plan(context.Background(), tg, &Memory{})
	if rep.Hold != nil && rep.Hold.Reason == HoldUnsupportedTTFTSource {
		t.Fatalf("held as latencyPredictor: %s", rep.Hold.Detail)
	}
	if rep.Result != ResultRecommended || rep.Recommendation == nil {
		t.Fatalf("result %s hold %+v", rep.Result, rep.Hold)
	}
	rec := rep.Recommendation
	if th := rec.Evidence.Throughput; th.Write || !strings.Contains(th.Note, "no peakPrefillThroughput") {
		t.Errorf("throughput %+v: this build has no peakPrefillThroughput to write", th)
	}
	if len(rep.Changes) != 1 || len(rep.Changes[0].Set) != 1 {
		t.Fatalf("changes %+v, want maxTokensInFlightPenalty alone", rep.Changes)
	}
	v, ok := rep.Changes[0].Set[gate.KeyMaxTokensInFlightPenalty]
	if !ok || v.String() != itoa(rec.MaxTokensInFlightPenalty) || rec.MaxTokensInFlightPenalty == 200000 {
		t.Fatalf("changes %+v, recommendation bar %d", rep.Changes, rec.MaxTokensInFlightPenalty)
	}
	golden := filepath.Join("testdata", "golden", "token-bar-recommended.yaml")
	if *updateGolden {
		if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, rep.NewConfig, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -run TestTokenBarTargetWrites -update, then review it)", err)
	}
	if string(rep.NewConfig) != string(want) {
		t.Errorf("written config differs from %s:\n%s", golden, eppconfig.Diff(golden, "got", want, rep.NewConfig))
	}
	orig, err := os.ReadFile(tokenBarSample)
	if err != nil {
		t.Fatal(err)
	}
	removed, added := changedLines(string(orig), string(rep.NewConfig))
	if len(removed) != 1 || removed[0] != "    maxTokensInFlightPenalty: 200000" ||
		len(added) != 1 || added[0] != "    maxTokensInFlightPenalty: "+itoa(rec.MaxTokensInFlightPenalty) {
		t.Errorf("the edit removed %q and added %q, want the one token-bar line", removed, added)
	}

	// The sink writes exactly that, and records the bar in its history.
	w, err := sink.New(sink.Target{Name: "t", File: path, Profile: tg.Profile, Plugins: []string{"prefill-affinity"}}, sink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := w.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.Apply(context.Background(), snap, rep.Changes, sink.Meta{Kind: sink.KindApply, RecommendationHash: rec.Hash})
	if err != nil || res.Outcome != sink.OutcomeApplied {
		t.Fatalf("apply: %+v %v", res, err)
	}
	if b, _ := os.ReadFile(path); string(b) != string(want) {
		t.Errorf("the file sink wrote something else than %s:\n%s", golden, eppconfig.Diff(golden, "written", want, b))
	}
	if ic := res.Entry.Instances; len(ic) != 1 || ic[0].New["maxTokensInFlightPenalty"] != itoa(rec.MaxTokensInFlightPenalty) || ic[0].NewBarTokens != float64(rec.MaxTokensInFlightPenalty) {
		t.Errorf("history entry %+v", res.Entry.Instances)
	}

	// The shadow's candidate is the gate of the written config.
	f, err := eppconfig.Parse(rep.NewConfig, "new")
	if err != nil {
		t.Fatal(err)
	}
	in, err := f.Select(eppconfig.Target{Plugin: "prefill-affinity"})
	if err != nil {
		t.Fatal(err)
	}
	wp, err := in.Params(tg.Profile)
	if err != nil {
		t.Fatal(err)
	}
	written := wp.Settings(tg.Profile.MissingSignal)
	if rec.Candidate.Settings != written {
		t.Fatalf("shadow settings %+v, written config's %+v", rec.Candidate.Settings, written)
	}
	// Every token-bar candidate's shadow decision is the gate's and the
	// upstream filter's, on the recorded decisions and on shapes they lack
	// (a missing load, several endpoints per group).
	cands := decide.BuildCandidates(decide.CandidateSpec{Current: wp, Profile: tg.Profile, DrainRate: 8000})
	settings := make([]gate.Settings, len(cands))
	for i, c := range cands {
		settings[i] = c.Settings
	}
	var sets [][]gate.Endpoint
	err = (&decisions{from: now.Add(-50 * time.Minute), n: 2400}).Replay(context.Background(), now.Add(-time.Hour), now, func(d *Decision) error {
		sets = append(sets, append([]gate.Endpoint(nil), d.Endpoints...))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ep := func(match int, load bool, tok int64) gate.Endpoint {
		return gate.Endpoint{HasMatch: true, MatchBlocks: match, TotalBlocks: 100, BlockSizeTokens: 64, HasLoad: load, InFlightTokens: tok}
	}
	sets = append(sets,
		[]gate.Endpoint{ep(90, true, 150000), ep(0, false, 0)},
		[]gate.Endpoint{ep(95, true, 400000), ep(85, true, 90000), ep(10, true, 30000), ep(0, true, 5000)},
		[]gate.Endpoint{ep(90, false, 0), ep(0, true, 1000)},
		[]gate.Endpoint{ep(10, true, 1000), ep(0, true, 0)})
	acc := shadow.NewAccumulator(settings, 8000)
	released := 0
	for _, eps := range sets {
		got := acc.Add(eps)
		for i := range settings {
			want := gate.Decide(&settings[i], eps)
			if got[i] != want {
				t.Fatalf("%s: shadow %+v, gate %+v", cands[i].Label, got[i], want)
			}
			if keep := tokenBarFilterKeepsAll(&settings[i], eps); keep != got[i].KeepsAll() {
				t.Fatalf("%s: plugin.go@a42e39d3d keeps all=%v, gate %s", cands[i].Label, keep, got[i].Outcome)
			}
			if got[i].Reason == gate.ReasonTokens {
				released++
			}
		}
	}
	if released == 0 {
		t.Errorf("no candidate releases a decision: the agreement is only on sticky ones")
	}
}

// tokenBarFilterKeepsAll is the token-bar build's Filter as its source reads
// (llm-d-router plugin.go@a42e39d3d), without exploration: sticky are the
// endpoints whose match ratio ≥ affinityThreshold; with none, or none other,
// nothing to gate; with maxTTFTPenaltyMs 0 the TTFT gate is skipped; the
// token gate keeps all iff min(sticky tokens) − min(other tokens) >
// maxTokensInFlightPenalty, a missing load counting 0.
func tokenBarFilterKeepsAll(s *gate.Settings, eps []gate.Endpoint) bool {
	if len(eps) <= 1 || s.AffinityThreshold <= 0 {
		return true
	}
	const maxInt64 = int64(^uint64(0) >> 1)
	bestS, bestN, nS, nN := maxInt64, maxInt64, 0, 0
	for _, e := range eps {
		var score float64
		if e.HasMatch && e.TotalBlocks > 0 {
			score = float64(e.MatchBlocks) / float64(e.TotalBlocks)
		}
		var tok int64
		if e.HasLoad {
			tok = e.InFlightTokens
		}
		if score >= s.AffinityThreshold {
			nS++
			bestS = min(bestS, tok)
		} else {
			nN++
			bestN = min(bestN, tok)
		}
	}
	if nS == 0 {
		return true
	}
	return s.MaxTokensInFlightPenalty > 0 && nN > 0 && bestS-bestN > s.MaxTokensInFlightPenalty
}

func itoa(n int64) string { return eppconfig.Number(float64(n)).String() }

// changedLines returns the lines only in a and only in b (a line diff for
// edits that replace lines in place).
func changedLines(a, b string) (removed, added []string) {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	if len(al) != len(bl) {
		return al, bl
	}
	for i := range al {
		if al[i] != bl[i] {
			removed, added = append(removed, al[i]), append(added, bl[i])
		}
	}
	return removed, added
}

// TestTokenBarTargetWithoutARateHolds: the token-bar objective prices
// queued tokens with the drain-rate (else nominal) estimate; with neither
// the target holds inconclusive and says so, naming the build.
func TestTokenBarTargetWithoutARateHolds(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tg, _ := tokenBarTarget(t, &decisions{from: now.Add(-50 * time.Minute), n: 2400}, now)
	est := cycleEstimates(now)
	est.DrainRate = estimator.RateEstimate{Status: estimator.StatusInconclusive}
	est.Nominal = estimator.RateEstimate{Status: estimator.StatusInconclusive}
	tg.Estimator = fixedEstimator{est: est}
	rep, _ := (&Tuner{Clock: func() time.Time { return now }}).plan(context.Background(), tg, &Memory{})
	if rep.Hold == nil || rep.Hold.Reason != HoldInconclusive || !strings.Contains(rep.Hold.Detail, "router-2026-05-tokens has no peakPrefillThroughput") {
		t.Fatalf("hold %+v", rep.Hold)
	}
}
