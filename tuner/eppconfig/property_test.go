package eppconfig

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/gatetuner/gatetuner/gate"
)

// randomNumber returns integers, halves, thousandths and small fractions.
func randomNumber(r *rand.Rand) float64 {
	switch r.IntN(4) {
	case 0:
		return float64(r.IntN(200000))
	case 1:
		return float64(r.IntN(100000)) + 0.5
	case 2:
		return float64(r.IntN(1000000)) / 1000
	}
	return float64(r.IntN(1000)) / 1e5
}

// TestRandomEditsChangeOnlyWhatTheyTarget edits random subsets of owned keys
// of random instances of the samples and checks, independently of the
// package's verifier, that only those keys differ; reversing the edit restores
// the original bytes.
func TestRandomEditsChangeOnlyWhatTheyTarget(t *testing.T) {
	prof := mustProfile(t, gate.ProfilePenaltyMode)
	r := rand.New(rand.NewPCG(1, 2))
	for _, sample := range []string{sampleChart, sampleTwoGates, sampleProduction} {
		orig := readSample(t, sample)
		f, err := Parse(orig, sample)
		if err != nil {
			t.Fatal(err)
		}
		filters := f.Filters()
		for iter := 0; iter < 300; iter++ {
			var changes, reverse []Change
			var updates []intended
			for _, in := range filters {
				if r.IntN(3) == 0 {
					continue
				}
				owned, err := in.Owned()
				if err != nil {
					t.Fatal(err)
				}
				ch := Change{Target: in.Target(), Set: map[gate.Key]Value{}}
				back := Change{Target: in.Target(), Set: map[gate.Key]Value{}}
				u := intended{doc: in.Config.Document, dataKey: in.Config.DataKey, plugin: in.index, set: map[string]any{}}
				for _, o := range owned {
					if !prof.Accepts(o.Key) { // maxTokensInFlightPenalty: the token-bar build only
						continue
					}
					if r.IntN(2) == 0 {
						continue
					}
					switch {
					case o.Key == gate.KeyPenaltyMode:
						mode := []string{"static", "matchedTokens"}[r.IntN(2)]
						p, err := in.Params(prof)
						if err != nil {
							t.Fatal(err)
						}
						if p.TTFTSource == gate.SourceLatencyPredictor {
							mode = "static"
						}
						ch.Set[o.Key] = String(mode)
						u.set[o.Key.String()] = mode
					default:
						v := randomNumber(r)
						if o.Key == gate.KeyPeakPrefillThroughput && v == 0 {
							v = 1
						}
						ch.Set[o.Key] = Number(v)
						u.set[o.Key.String()] = v
					}
					if o.Present {
						var x float64
						if err := json.Unmarshal([]byte(o.Value), &x); err != nil {
							t.Fatalf("owned %s = %s is not a number", o.Key, o.Value)
						}
						back.Set[o.Key] = Number(x)
					} else {
						back.Remove = append(back.Remove, o.Key)
					}
				}
				if len(ch.Set) > 0 {
					changes = append(changes, ch)
					reverse = append(reverse, back)
					updates = append(updates, u)
				}
			}
			if len(changes) == 0 {
				continue
			}
			out, err := f.Edit(changes, prof)
			if err != nil {
				t.Fatalf("%s: Edit(%v): %v", sample, changes, err)
			}
			if d := semanticDelta(orig, out, updates); d != "" {
				t.Fatalf("%s: %v: %s", sample, changes, d)
			}
			g, err := Parse(out, sample)
			if err != nil {
				t.Fatalf("%s: edited output does not parse: %v", sample, err)
			}
			for _, u := range updates {
				in, err := g.Select(Target{Plugin: g.configAt(u.doc, u.dataKey).Plugins[u.plugin].Name, DataKey: u.dataKey})
				if err != nil {
					t.Fatal(err)
				}
				owned, _ := in.Owned()
				for _, o := range owned {
					want, ok := u.set[o.Key.String()]
					if !ok {
						continue
					}
					switch w := want.(type) {
					case float64:
						if got, _ := strconv.ParseFloat(o.Value, 64); got != w {
							t.Errorf("%s: %s reads %s, want %v", sample, o.Key, o.Value, w)
						}
					case string:
						if o.Value != strconv.Quote(w) {
							t.Errorf("%s: %s reads %s, want %q", sample, o.Key, o.Value, w)
						}
					}
				}
			}
			restored, err := g.Edit(reverse, prof)
			if err != nil {
				t.Fatalf("%s: reverse edit: %v", sample, err)
			}
			// Keys that were only changed come back byte for byte; keys that
			// were inserted into an existing block go away with their line.
			if !bytes.Equal(restored, orig) {
				t.Fatalf("%s: reverse edit does not restore the original:\n%s", sample, Diff("original", "restored", orig, restored))
			}
		}
	}
}

// configAt returns the config at a document and data key.
func (f *File) configAt(doc int, dataKey string) *Config {
	for _, c := range f.configs {
		if c.Document == doc && c.DataKey == dataKey {
			return c
		}
	}
	return nil
}
