package eppconfig

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/gatetuner/gatetuner/gate"
)

// ErrOtherBase marks a config whose values are not the ones a
// recommendation was computed from (or an instance the tuner does not
// change).
var ErrOtherBase = errors.New("not the config the recommendation was computed from")

// Base is the config a recommendation was computed from: its bytes, their
// source, and the target of each of its changes in it.
type Base struct {
	Data    []byte
	Source  string
	Targets []Target
}

// CheckBase checks that every instance changes[i] selects in f holds, as
// the EPP reads them under prof, the values the recommendation was computed
// from: those of the instance base.Targets[i] selects in base (the owned
// keys, ttftSource and peakPrefillThroughput: paramsDifference). An
// instance that takes TTFT from the latency predictor is refused unless it
// gates on the token bar alone (tokenBarOnly): the tuner does not change
// such instances. A refusal wraps ErrOtherBase.
func (f *File) CheckBase(base Base, changes []Change, prof gate.Profile, tokenBarOnly func(gate.Settings) bool) error {
	b, err := Parse(base.Data, base.Source)
	if err != nil {
		return fmt.Errorf("%w: the recommendation's own config does not parse: %w", ErrOtherBase, err)
	}
	for i, ch := range changes {
		in, err := f.Select(ch.Target)
		if err != nil {
			return err
		}
		p, err := in.Params(prof)
		if err != nil {
			return err
		}
		if p.TTFTSource == gate.SourceLatencyPredictor && !tokenBarOnly(p.Settings(prof.MissingSignal)) {
			return fmt.Errorf("%w: %s takes TTFT from the latency predictor; gatetuner does not tune such instances", ErrOtherBase, in)
		}
		bin, err := b.Select(base.Targets[i])
		if err != nil {
			return fmt.Errorf("%w: %w", ErrOtherBase, err)
		}
		bp, err := bin.Params(prof)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrOtherBase, err)
		}
		if d := paramsDifference(bp, p, prof); d != "" {
			return fmt.Errorf("%w: %s: %s; a recommendation made for one config is never spliced into another's numbers (run recommend against this file's values)", ErrOtherBase, in, d)
		}
	}
	return nil
}

// paramsDifference names the first value the tuner's decision rests on
// that differs between the recommendation's config (a) and another (b):
// ttftSource, maxTTFTPenaltyMs, peakPrefillThroughput with where it comes
// from, and penaltyMode and maxTokensInFlightPenalty when prof accepts
// them; "" when none does.
func paramsDifference(a, b gate.Params, prof gate.Profile) string {
	type field struct {
		key  gate.Key
		a, b string
	}
	num := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	fields := []field{
		{gate.KeyTTFTSource, a.TTFTSource.String(), b.TTFTSource.String()},
		{gate.KeyMaxTTFTPenaltyMs, num(a.MaxTTFTPenaltyMs), num(b.MaxTTFTPenaltyMs)},
		{gate.KeyPeakPrefillThroughput, num(a.PeakPrefillThroughput) + " (" + a.PPTSource().String() + ")", num(b.PeakPrefillThroughput) + " (" + b.PPTSource().String() + ")"},
	}
	if prof.Accepts(gate.KeyPenaltyMode) {
		fields = append(fields, field{gate.KeyPenaltyMode, a.PenaltyMode.String(), b.PenaltyMode.String()})
	}
	if prof.Accepts(gate.KeyMaxTokensInFlightPenalty) {
		fields = append(fields, field{gate.KeyMaxTokensInFlightPenalty, strconv.FormatInt(a.MaxTokensInFlightPenalty, 10), strconv.FormatInt(b.MaxTokensInFlightPenalty, 10)})
	}
	for _, f := range fields {
		if f.a != f.b {
			return fmt.Sprintf("%s is %s here but the recommendation was computed from %s", f.key, f.b, f.a)
		}
	}
	return ""
}
