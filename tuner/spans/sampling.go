package spans

import (
	"fmt"
	"math"
)

// SamplingVerdict says what the ratio of spans to counted decisions shows.
type SamplingVerdict uint8

// Sampling verdicts. None of them is "thin pool": how many decisions a pool
// makes is the counter's to say, never the spans'.
const (
	// NoDecisions: the counter shows no decisions and no span came either.
	NoDecisions SamplingVerdict = iota
	// SpansWithoutDecisions: spans came, the counter counted nothing — a
	// stream that is not this target's.
	SpansWithoutDecisions
	// Excess: more spans than decisions, beyond the tolerance — forged,
	// duplicated or another pool's spans.
	Excess
	// Complete: one span per decision within the tolerance (unsampled).
	Complete
	// Sampled: fewer spans than decisions — head-sampled traces; Rate is
	// the inferred sampling rate.
	Sampled
)

var samplingNames = [...]string{"no-decisions", "spans-without-decisions", "excess", "complete", "sampled"}

// String names the verdict.
func (v SamplingVerdict) String() string {
	if int(v) < len(samplingNames) {
		return samplingNames[v]
	}
	return fmt.Sprintf("SamplingVerdict(%d)", uint8(v))
}

// Disagrees reports whether the verdict says the stream is not this
// target's decisions: it must not steer a write.
func (v SamplingVerdict) Disagrees() bool { return v == SpansWithoutDecisions || v == Excess }

// SamplingOptions set the tolerance of InferSampling.
type SamplingOptions struct {
	// Z is the number of standard errors tolerated (default 4).
	Z float64
	// Slack is the relative misalignment of the span and counter windows
	// tolerated (default 0.02): spans arrive in batches seconds late, the
	// counter is scraped every interval.
	Slack float64
	// SpansPerTrace is the design effect of trace-level sampling (≥ 1,
	// View.SpansPerTrace; default 1).
	SpansPerTrace float64
}

func (o *SamplingOptions) defaults() {
	if o.Z <= 0 {
		o.Z = 4
	}
	if o.Slack <= 0 {
		o.Slack = 0.02
	}
	if o.SpansPerTrace < 1 {
		o.SpansPerTrace = 1
	}
}

// Sampling is the sampling rate inferred from spans against the counter.
type Sampling struct {
	Spans     uint64
	Decisions float64
	// Rate = Spans / Decisions and its binomial standard error
	// sqrt(Rate(1−Rate)/Decisions), scaled by sqrt(SpansPerTrace).
	Rate, StdErr float64
	// ShareError is the worst-case standard error of an outcome share
	// measured on the spans, 0.5·sqrt(SpansPerTrace/Spans): what sampling
	// costs every share the spans measure.
	ShareError float64
	Verdict    SamplingVerdict
}

// InferSampling compares the gate spans of a window with the counter's
// decisions over the same window (the increase of
// llm_d_epp_prefix_cache_affinity_filter_decisions_total summed over
// outcomes and the target's pods). Every decision is in the sample
// independently with the sampler's probability (head sampling by trace id),
// so Spans is binomial(Decisions, rate).
func InferSampling(spans uint64, decisions float64, o SamplingOptions) Sampling {
	o.defaults()
	s := Sampling{Spans: spans, Decisions: decisions}
	if decisions < 0.5 { // counters count whole decisions
		s.Verdict = NoDecisions
		if spans > 0 {
			s.Verdict = SpansWithoutDecisions
		}
		return s
	}
	s.Rate = float64(spans) / decisions
	p := math.Min(s.Rate, 1)
	s.StdErr = math.Sqrt(p*(1-p)/decisions) * math.Sqrt(o.SpansPerTrace)
	if spans > 0 {
		s.ShareError = 0.5 * math.Sqrt(o.SpansPerTrace/float64(spans))
	}
	tol := o.Z*s.StdErr + o.Slack
	switch {
	case s.Rate > 1+tol:
		s.Verdict = Excess
	case s.Rate >= 1-tol:
		s.Verdict = Complete
	default:
		s.Verdict = Sampled
	}
	return s
}

// MatchesRate reports whether the inferred rate agrees with a configured
// sampler argument (e.g. the chart's 0.1) within the tolerance. A parent-
// based sampler follows an upstream decision, so a mismatch alone is no
// fault; it is reported.
func (s *Sampling) MatchesRate(rate float64, o SamplingOptions) bool {
	o.defaults()
	if s.Decisions < 0.5 {
		return false
	}
	se := math.Sqrt(rate*(1-rate)/s.Decisions) * math.Sqrt(o.SpansPerTrace)
	return math.Abs(s.Rate-rate) <= o.Z*se+o.Slack*rate
}
