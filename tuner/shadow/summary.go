package shadow

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/jsonenc"
)

// Summary is the shadow's stable JSON report (docs/shadow.md).
type Summary struct {
	Records             RecordStats    `json:"records"`
	BadLines            []BadLine      `json:"badLines,omitempty"`
	Settings            SettingsReport `json:"settings"`
	Outcomes            OutcomeCounts  `json:"outcomes"`
	ReleaseReasons      ReasonCounts   `json:"releaseReasons"`
	Verdicts            VerdictCounts  `json:"verdicts"`
	Rates               Rates          `json:"rates"`
	ExcessCost          ExcessCost     `json:"excessCost"`
	GateInput           GateInput      `json:"gateInput"`
	ObservedAgreement   Agreement      `json:"observedAgreement"`
	ExplorationPossible int64          `json:"explorationPossible"`
	Caveats             []string       `json:"caveats,omitempty"`
	Sweep               []SweepRow     `json:"sweep,omitempty"`
}

// RecordStats counts the input.
type RecordStats struct {
	Read    int64 `json:"read"`
	Bad     int64 `json:"bad"`
	Skipped int64 `json:"skipped"`
}

// BadLine is one rejected input line.
type BadLine struct {
	Line   int    `json:"line"`
	Reason string `json:"reason"`
}

// SettingsReport describes the replayed settings and where they came from.
type SettingsReport struct {
	Source    string `json:"source,omitempty"`
	Plugin    string `json:"plugin,omitempty"`
	Target    string `json:"target,omitempty"`
	Profile   string `json:"profile"`
	Semantics string `json:"semantics"`
	SettingsBrief
	// PPTSource is where the throughput used for seconds comes from: "flag",
	// "config" (explicit), "default" (EPP default), "calibrated+flag"; ""
	// when unknown (seconds are then null).
	PPTSource string   `json:"pptSource"`
	SecondsAt *float64 `json:"secondsAtPPT"`
}

// SettingsBrief are the values that decide.
type SettingsBrief struct {
	Mode                   string  `json:"mode"`
	TTFTSource             string  `json:"ttftSource"`
	AffinityThreshold      float64 `json:"affinityThreshold"`
	ExplorationProbability float64 `json:"explorationProbability"`
	MaxTTFTPenaltyMs       float64 `json:"maxTTFTPenaltyMs"`
	PeakPrefillThroughput  float64 `json:"peakPrefillThroughput"`
	// BarTokens is maxTTFTPenaltyMs × peakPrefillThroughput / 1000: the static
	// bar, or the matchedTokens ceiling's bar (0 = none); with a token bar
	// (maxTokensInFlightPenalty, the token-bar generation) that bar.
	BarTokens float64 `json:"barTokens"`
	// MaxTokensInFlightPenalty is the token-bar generation's bar (omitted when 0).
	MaxTokensInFlightPenalty int64 `json:"maxTokensInFlightPenalty,omitempty"`
}

// Brief summarises settings.
func Brief(s gate.Settings) SettingsBrief {
	return SettingsBrief{
		Mode: s.Mode.String(), TTFTSource: s.Source.String(), AffinityThreshold: s.AffinityThreshold,
		ExplorationProbability: s.ExplorationProbability, MaxTTFTPenaltyMs: s.MaxTTFTPenaltyMs,
		PeakPrefillThroughput: s.PeakPrefillThroughput, BarTokens: s.BarTokens(), MaxTokensInFlightPenalty: s.MaxTokensInFlightPenalty,
	}
}

// OutcomeCounts are counts per gate outcome, encoded as an object in outcome order.
type OutcomeCounts [gate.NumOutcomes]int64

// MarshalJSON encodes {"not_applicable":n,…}.
func (c OutcomeCounts) MarshalJSON() ([]byte, error) {
	return orderedCounts(c[:], func(i int) string { return gate.Outcome(i).String() }), nil
}

// ReasonCounts are load_override counts per reason.
type ReasonCounts [gate.NumReasons]int64

// MarshalJSON encodes {"ttft":n,"break_even":n,"ceiling":n}.
func (c ReasonCounts) MarshalJSON() ([]byte, error) {
	return orderedCounts(c[1:], func(i int) string { return gate.Reason(i + 1).String() }), nil
}

// VerdictCounts are counts per verdict.
type VerdictCounts [gate.NumVerdicts]int64

// MarshalJSON encodes {"not_gated":n,…}.
func (c VerdictCounts) MarshalJSON() ([]byte, error) {
	return orderedCounts(c[:], func(i int) string { return gate.Verdict(i).String() }), nil
}

func orderedCounts(c []int64, name func(int) string) []byte {
	b := []byte{'{'}
	for i, n := range c {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, name(i))
		b = append(b, ':')
		b = strconv.AppendInt(b, n, 10)
	}
	return append(b, '}')
}

// Rates are over decisions with a known verdict; null when none is known.
type Rates struct {
	Known       int64    `json:"known"`
	WronglyHeld *float64 `json:"wronglyHeld"`
	Forfeited   *float64 `json:"forfeited"`
}

// ExcessCost is the summed excess of costly verdicts.
type ExcessCost struct {
	Tokens  float64  `json:"tokens"`
	Seconds *float64 `json:"seconds"`
}

// GateInput is where the decisions fall relative to the bar.
type GateInput struct {
	PenaltyMs             Quantiles `json:"penaltyMs"`
	GapMinusMatchedTokens Quantiles `json:"gapMinusMatchedTokens"`
}

// SweepRow is one candidate's result.
type SweepRow struct {
	Label      string        `json:"label"`
	Settings   SettingsBrief `json:"settings"`
	Invalid    string        `json:"invalid,omitempty"`
	Outcomes   OutcomeCounts `json:"outcomes"`
	Verdicts   VerdictCounts `json:"verdicts"`
	Rates      Rates         `json:"rates"`
	ExcessCost ExcessCost    `json:"excessCost"`
}

// RatesOf computes rates from counts.
func RatesOf(c *Counts) Rates {
	r := Rates{Known: c.Known()}
	if v, ok := c.WronglyHeldRate(); ok {
		r.WronglyHeld = &v
	}
	if v, ok := c.ForfeitedRate(); ok {
		r.Forfeited = &v
	}
	return r
}

// ExcessOf converts excess tokens to seconds at ppt (tok/s; ≤ 0 = unknown).
func ExcessOf(c *Counts, ppt float64) ExcessCost {
	e := ExcessCost{Tokens: c.ExcessTokens}
	if ppt > 0 {
		s := c.ExcessTokens / ppt
		e.Seconds = &s
	}
	return e
}

// Fill sets the summary's counts and distributions from an accumulator whose
// settings entry 0 is the current settings and entries 1… the candidates.
func (s *Summary) Fill(a *Accumulator, candidates []Candidate, ppt float64) {
	cur := a.Counts(0)
	s.Outcomes, s.ReleaseReasons, s.Verdicts = cur.Outcomes, cur.Reasons, cur.Verdicts
	s.Rates = RatesOf(cur)
	s.ExcessCost = ExcessOf(cur, ppt)
	s.ExplorationPossible = cur.ExplorationPossible
	s.GateInput = GateInput{PenaltyMs: QuantilesOf(a.PenaltyMs()), GapMinusMatchedTokens: QuantilesOf(a.GapMinusMatched())}
	s.ObservedAgreement = a.Agreement()
	s.Sweep = s.Sweep[:0]
	for i, c := range candidates {
		cc := a.Counts(i + 1)
		s.Sweep = append(s.Sweep, SweepRow{
			Label: c.Label, Settings: Brief(c.Settings), Invalid: c.Invalid,
			Outcomes: cc.Outcomes, Verdicts: cc.Verdicts, Rates: RatesOf(cc), ExcessCost: ExcessOf(cc, ppt),
		})
	}
	if s.ExplorationPossible > 0 {
		s.Caveats = append(s.Caveats, fmt.Sprintf("explorationProbability is between 0 and 1: %d decisions were evaluated as if no exploration draw happened", s.ExplorationPossible))
	}
}

// WriteJSON writes the summary as indented JSON.
func (s *Summary) WriteJSON(w io.Writer) error {
	var buf bytes.Buffer
	if err := jsonenc.Encode(&buf, s, "  "); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// WriteText writes the summary for a terminal.
func (s *Summary) WriteText(w io.Writer) error {
	var b strings.Builder
	st := s.Settings
	fmt.Fprintf(&b, "records    read %d, bad %d, skipped %d\n", s.Records.Read, s.Records.Bad, s.Records.Skipped)
	where := st.Source
	if st.Plugin != "" {
		where += " plugin " + st.Plugin
	}
	fmt.Fprintf(&b, "settings   %s (profile %s, %s semantics)\n", where, st.Profile, st.Semantics)
	fmt.Fprintf(&b, "           %s\n", briefText(st.SettingsBrief))
	switch {
	case st.SecondsAt != nil:
		fmt.Fprintf(&b, "           seconds at %s tok/s (%s)\n", num(*st.SecondsAt), st.PPTSource)
	default:
		b.WriteString("           seconds unknown: peakPrefillThroughput is calibrated, 0, or not a key of this build, and --ppt was not given\n")
	}
	b.WriteString("outcomes  ")
	for i, n := range s.Outcomes {
		fmt.Fprintf(&b, " %s %d", gate.Outcome(i), n)
	}
	if s.Outcomes[gate.OutcomeLoadOverride] > 0 {
		fmt.Fprintf(&b, " (ttft %d, break_even %d, ceiling %d", s.ReleaseReasons[gate.ReasonTTFT], s.ReleaseReasons[gate.ReasonBreakEven], s.ReleaseReasons[gate.ReasonCeiling])
		if n := s.ReleaseReasons[gate.ReasonTokens]; n > 0 || st.MaxTokensInFlightPenalty > 0 {
			fmt.Fprintf(&b, ", tokens %d", n)
		}
		b.WriteString(")")
	}
	b.WriteString("\nverdicts  ")
	for i, n := range s.Verdicts {
		fmt.Fprintf(&b, " %s %d", gate.Verdict(i), n)
	}
	fmt.Fprintf(&b, "\nrates      wrongly held %s, forfeited %s (of %d decisions with a known verdict)\n",
		pct(s.Rates.WronglyHeld), pct(s.Rates.Forfeited), s.Rates.Known)
	fmt.Fprintf(&b, "excess     %s tokens", num(s.ExcessCost.Tokens))
	if s.ExcessCost.Seconds != nil {
		fmt.Fprintf(&b, " = %s s of prefill", num(*s.ExcessCost.Seconds))
	}
	b.WriteString("\n")
	gi := s.GateInput
	fmt.Fprintf(&b, "gate input penalty ms     p50 %s  p90 %s  p99 %s  (n=%d; bar %s ms)\n",
		qnum(gi.PenaltyMs.P50), qnum(gi.PenaltyMs.P90), qnum(gi.PenaltyMs.P99), gi.PenaltyMs.Count, num(st.MaxTTFTPenaltyMs))
	fmt.Fprintf(&b, "           gap−matched tok p50 %s  p90 %s  p99 %s  (n=%d; > 0 means releasing pays)\n",
		qnum(gi.GapMinusMatchedTokens.P50), qnum(gi.GapMinusMatchedTokens.P90), qnum(gi.GapMinusMatchedTokens.P99), gi.GapMinusMatchedTokens.Count)
	oa := s.ObservedAgreement
	fmt.Fprintf(&b, "observed   agree %d, disagree %d, explained by exploration %d, unmodelled %d, unobserved %d\n",
		oa.Agree, oa.Disagree, oa.Explained, oa.Unmodelled, oa.Unobserved)
	for _, c := range s.Caveats {
		fmt.Fprintf(&b, "caveat     %s\n", c)
	}
	if len(s.Sweep) > 0 {
		b.WriteString("\nsweep\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  candidate\tbar tokens\theld_wrong\treleased_wrong\twrongly held\tforfeited\texcess tokens\texcess s\tnote")
		for _, r := range s.Sweep {
			secs := "-"
			if r.ExcessCost.Seconds != nil {
				secs = num(*r.ExcessCost.Seconds)
			}
			if r.Invalid != "" {
				// Not a setting the EPP would run: no numbers that read like a result.
				fmt.Fprintf(tw, "  %s\trejected\t-\t-\t-\t-\t-\t-\tthe EPP would refuse it: %s\n", r.Label, r.Invalid)
				continue
			}
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", r.Label, num(r.Settings.BarTokens),
				r.Verdicts[gate.HeldWrong], r.Verdicts[gate.ReleasedWrong], pct(r.Rates.WronglyHeld), pct(r.Rates.Forfeited),
				num(r.ExcessCost.Tokens), secs, "")
		}
		tw.Flush()
	}
	if len(s.BadLines) > 0 {
		fmt.Fprintf(&b, "\nbad lines (%d; first %d shown)\n", s.Records.Bad, len(s.BadLines))
		for _, l := range s.BadLines {
			fmt.Fprintf(&b, "  line %d: %s\n", l.Line, l.Reason)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func briefText(s SettingsBrief) string {
	t := fmt.Sprintf("%s, maxTTFTPenaltyMs %s", s.Mode, num(s.MaxTTFTPenaltyMs))
	if s.TTFTSource == gate.SourceLatencyPredictor.String() {
		t += ", ttftSource latencyPredictor"
		if s.MaxTokensInFlightPenalty > 0 {
			t += fmt.Sprintf(", maxTokensInFlightPenalty %d tokens", s.MaxTokensInFlightPenalty)
		}
	} else {
		t += fmt.Sprintf(", peakPrefillThroughput %s tok/s, bar %s tokens", num(s.PeakPrefillThroughput), num(s.BarTokens))
	}
	t += fmt.Sprintf(", affinityThreshold %s", num(s.AffinityThreshold))
	if s.ExplorationProbability != 0 {
		t += fmt.Sprintf(", explorationProbability %s", num(s.ExplorationProbability))
	}
	return t
}

func pct(v *float64) string {
	if v == nil {
		return "n/a"
	}
	return strconv.FormatFloat(*v*100, 'f', 1, 64) + "%"
}

func qnum(v *float64) string {
	if v == nil {
		return "n/a"
	}
	return num(*v)
}

// num formats a number compactly: integers without decimals, others with 3
// significant digits after the point when small.
func num(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return strconv.FormatFloat(v, 'g', -1, 64)
	case math.Abs(v) >= 1e15:
		return strconv.FormatFloat(v, 'g', 4, 64)
	case v == math.Trunc(v) || math.Abs(v) >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}
