package gate

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// randomEndpoints draws an endpoint set with a mix of missing attributes.
func randomEndpoints(r *rand.Rand) []Endpoint {
	n := r.IntN(9)
	eps := make([]Endpoint, n)
	for i := range eps {
		total := r.IntN(200)
		eps[i] = Endpoint{
			HasMatch:        r.IntN(10) != 0,
			MatchBlocks:     r.IntN(total + 20),
			TotalBlocks:     total,
			BlockSizeTokens: []int{0, 16, 64, 256}[r.IntN(4)],
			HasLoad:         r.IntN(8) != 0,
			InFlightTokens:  r.Int64N(600000),
			HasPrediction:   r.IntN(4) != 0,
			PredictedTTFTMs: r.Float64() * 20000,
		}
	}
	return eps
}

func randomSettings(r *rand.Rand) Settings {
	return Settings{
		AffinityThreshold:     []float64{0.5, 0.8, 0.99, 0}[r.IntN(4)],
		MaxTTFTPenaltyMs:      r.Float64() * 30000,
		PeakPrefillThroughput: 500 + r.Float64()*40000,
		Mode:                  PenaltyMode(r.IntN(2)),
		Semantics:             Semantics(1 + r.IntN(2)),
	}
}

func released(o Outcome) bool { return o == OutcomeLoadOverride }

// TestRaisingTheCeilingNeverReleasesMore: for any endpoint set, a decision
// that holds at a positive maxTTFTPenaltyMs still holds at any larger one.
func TestRaisingTheCeilingNeverReleasesMore(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		eps := randomEndpoints(r)
		lo := randomSettings(r)
		if lo.MaxTTFTPenaltyMs == 0 {
			continue
		}
		hi := lo
		hi.MaxTTFTPenaltyMs = lo.MaxTTFTPenaltyMs * (1 + r.Float64()*10)
		dl, dh := Decide(&lo, eps), Decide(&hi, eps)
		if dl.Outcome == OutcomeSticky && released(dh.Outcome) {
			t.Fatalf("raising max %v→%v released a hold: %+v → %+v on %+v", lo.MaxTTFTPenaltyMs, hi.MaxTTFTPenaltyMs, dl, dh, eps)
		}
	}
}

// TestMatchedTokensWithoutCeilingNeverHoldsWrongly: break-even alone releases
// every pin whose gap exceeds the cached prefix.
func TestMatchedTokensWithoutCeilingNeverHoldsWrongly(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 200000; i++ {
		eps := randomEndpoints(r)
		s := randomSettings(r)
		s.Mode, s.MaxTTFTPenaltyMs = ModeMatchedTokens, 0
		d := Decide(&s, eps)
		if v, _ := Judge(&d); v == HeldWrong {
			t.Fatalf("held_wrong under matchedTokens without a ceiling: %+v on %+v", d, eps)
		}
	}
}

// TestVerdictInvariants: excess cost is positive exactly for the costly
// verdicts, and kept endpoints are consistent with the outcome.
func TestVerdictInvariants(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var kept []int
	for i := 0; i < 100000; i++ {
		eps := randomEndpoints(r)
		s := randomSettings(r)
		d := Decide(&s, eps)
		checkInvariants(t, &s, eps, &d, kept[:0])
	}
}

func checkInvariants(t *testing.T, s *Settings, eps []Endpoint, d *Decision, kept []int) {
	t.Helper()
	v, excess := Judge(d)
	switch v {
	case HeldWrong, ReleasedWrong, ReleasedCeiling:
		if excess <= 0 {
			t.Fatalf("%s with excess %d: %+v", v, excess, d)
		}
	default:
		if excess != 0 {
			t.Fatalf("%s with excess %d: %+v", v, excess, d)
		}
	}
	kept = AppendKept(kept, s, eps, d)
	if d.Outcome == OutcomeSticky {
		if len(kept) == 0 || len(kept) > len(eps) {
			t.Fatalf("sticky decision keeps %v of %d", kept, len(eps))
		}
		for _, i := range kept {
			if !IsSticky(&eps[i], s.AffinityThreshold) {
				t.Fatalf("kept non-sticky endpoint %d", i)
			}
		}
	} else if len(kept) != len(eps) {
		t.Fatalf("%s keeps %d of %d", d.Outcome, len(kept), len(eps))
	}
	if d.Reason != ReasonNone && d.Outcome != OutcomeLoadOverride {
		t.Fatalf("reason %s on outcome %s", d.Reason, d.Outcome)
	}
	if s.Mode == ModeStatic && d.Reason != ReasonNone && d.Reason != ReasonTTFT {
		t.Fatalf("static decision with reason %s", d.Reason)
	}
	if d.TTFTCompared && d.Outcome == OutcomeLoadOverride && d.Reason != ReasonBreakEven && !(d.PenaltyMs > s.MaxTTFTPenaltyMs) {
		t.Fatalf("released with penalty %v ≤ max %v", d.PenaltyMs, s.MaxTTFTPenaltyMs)
	}
}

// endpointsFromBytes decodes fuzz input into settings and endpoints.
func endpointsFromBytes(data []byte) (Settings, []Endpoint) {
	next := func(n int) []byte {
		if len(data) < n {
			b := make([]byte, n)
			copy(b, data)
			data = nil
			return b
		}
		b := data[:n]
		data = data[n:]
		return b
	}
	u64 := func() uint64 { return binary.LittleEndian.Uint64(next(8)) }
	f64 := func() float64 { return math.Float64frombits(u64()) }
	s := Settings{
		AffinityThreshold:      f64(),
		ExplorationProbability: f64(),
		MaxTTFTPenaltyMs:       f64(),
		PeakPrefillThroughput:  f64(),
		Mode:                   PenaltyMode(next(1)[0] % 2),
		Source:                 TTFTSource(next(1)[0] % 2),
		Semantics:              Semantics(1 + next(1)[0]%2),
	}
	var eps []Endpoint
	for len(data) > 0 && len(eps) < 64 {
		flags := next(1)[0]
		eps = append(eps, Endpoint{
			HasMatch:        flags&1 != 0,
			MatchBlocks:     int(int32(u64())),
			TotalBlocks:     int(int32(u64())),
			BlockSizeTokens: int(int16(u64())),
			HasLoad:         flags&2 != 0,
			InFlightTokens:  int64(u64()),
			HasPrediction:   flags&4 != 0,
			PredictedTTFTMs: f64(),
		})
	}
	return s, eps
}

// FuzzDecide: no panic on any input; DecideAll equals Decide; the decision's
// invariants hold.
func FuzzDecide(f *testing.F) {
	f.Add([]byte{})
	f.Add(make([]byte, 200))
	for _, tc := range conformanceCases() {
		f.Add(encodeCase(tc.settings, tc.eps))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, eps := endpointsFromBytes(data)
		d := Decide(&s, eps)
		out := make([]Decision, 2)
		s2 := s
		s2.MaxTTFTPenaltyMs = 0
		DecideAll([]Settings{s, s2}, eps, out)
		if out[0] != d && !(math.IsNaN(d.PenaltyMs) && math.IsNaN(out[0].PenaltyMs)) {
			t.Fatalf("DecideAll %+v != Decide %+v", out[0], d)
		}
		if d.Outcome >= NumOutcomes || d.Reason >= NumReasons {
			t.Fatalf("bad decision %+v", d)
		}
		v, _ := Judge(&d)
		if v >= NumVerdicts {
			t.Fatalf("bad verdict %v", v)
		}
		kept := AppendKept(nil, &s, eps, &d)
		if d.Outcome == OutcomeSticky && len(kept) == 0 {
			t.Fatalf("sticky decision keeps nothing: %+v", d)
		}
	})
}

func encodeCase(s Settings, eps []Endpoint) []byte {
	var b []byte
	put := func(u uint64) { b = binary.LittleEndian.AppendUint64(b, u) }
	putf := func(f float64) { put(math.Float64bits(f)) }
	putf(s.AffinityThreshold)
	putf(s.ExplorationProbability)
	putf(s.MaxTTFTPenaltyMs)
	putf(s.PeakPrefillThroughput)
	b = append(b, byte(s.Mode), byte(s.Source), byte(s.Semantics-1))
	for _, e := range eps {
		var flags byte
		if e.HasMatch {
			flags |= 1
		}
		if e.HasLoad {
			flags |= 2
		}
		if e.HasPrediction {
			flags |= 4
		}
		b = append(b, flags)
		put(uint64(e.MatchBlocks))
		put(uint64(e.TotalBlocks))
		put(uint64(e.BlockSizeTokens))
		put(uint64(e.InFlightTokens))
		putf(e.PredictedTTFTMs)
	}
	return b
}

// FuzzParseParams: no panic; accepted parameters are finite and re-validate;
// rejections are single-line ParamErrors.
func FuzzParseParams(f *testing.F) {
	for _, s := range []string{``, `{}`, `null`, `{"affinityThreshold":0.8}`, `{"maxTTFTPenaltyMs":5000,"peakPrefillThroughput":4783}`,
		`{"penaltyMode":"matchedTokens","maxTTFTPenaltyMs":0}`, `{"ttftSource":"latencyPredictor"}`, `{"MaxTTFTPenaltyMs":1,"maxttftpenaltyms":2}`,
		`{"prefillCalibrationFile":"x","maxInFlightRequestsDelta":3}`, `[`, `{"a":1}`, `{"explorationProbability":1e-320}`,
		`{"prefillCalibrationRequired":true}`, `{"prefillCalibrationFile":"x","PeakPrefillThroughput":null}`,
		`{"peakPrefillThroughput":null,"prefillCalibrationRequired":true}`, `{"affinityThreshold":-0.5}`} {
		f.Add([]byte(s), uint8(0))
	}
	profiles := BuiltinProfiles()
	f.Fuzz(func(t *testing.T, raw []byte, which uint8) {
		prof := profiles[int(which)%len(profiles)]
		p, err := ParseParams(raw, prof)
		if err != nil {
			if _, ok := err.(*ParamError); !ok {
				t.Fatalf("error %T is not a *ParamError: %v", err, err)
			}
			for _, c := range err.Error() {
				if c == '\n' {
					t.Fatalf("multi-line error %q", err)
				}
			}
			return
		}
		if err := p.Validate(prof); err != nil {
			t.Fatalf("accepted params fail validation: %v", err)
		}
		for _, k := range p.Present.Keys() {
			if !prof.Accepts(k) {
				t.Fatalf("accepted key %s the profile lacks", k)
			}
		}
	})
}
