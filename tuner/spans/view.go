package spans

import (
	"iter"

	"github.com/gatetuner/gatetuner/gate"
)

// View is a read of one target's window: the records whose end time is in
// [FromNano, ToNano), in arrival order, with the tables they index. It is a
// copy: the window goes on receiving while a View is read.
type View struct {
	FromNano, ToNano int64
	Records          []Record
	Tables           Tables
}

// All yields the view's records in arrival order.
func (v *View) All() iter.Seq[*Record] {
	return func(yield func(*Record) bool) {
		for i := range v.Records {
			if !yield(&v.Records[i]) {
				return
			}
		}
	}
}

// Labels of a Tally: gate's outcomes, then the two gate does not model.
const (
	LabelRequestLoadOverride = int(gate.NumOutcomes)
	LabelOther               = int(gate.NumOutcomes) + 1
	NumLabels                = int(gate.NumOutcomes) + 2
)

// LabelName returns the decision value of label i.
func LabelName(i int) string {
	switch i {
	case LabelRequestLoadOverride:
		return "request_load_override"
	case LabelOther:
		return "other"
	}
	return gate.Outcome(i).String()
}

// LabelOf returns the Tally label of an outcome.
func LabelOf(o gate.Outcome) int {
	switch {
	case o < gate.NumOutcomes:
		return int(o)
	case o == OutcomeRequestLoadOverride:
		return LabelRequestLoadOverride
	}
	return LabelOther
}

// LabelOfName returns the Tally label of a counter's outcome label value.
func LabelOfName(s string) int { return LabelOf(parseDecision(s)) }

// Tally counts spans by decision.
type Tally struct {
	N [NumLabels]uint64
	// Total is the sum of N.
	Total uint64
}

// Add counts one record.
func (t *Tally) Add(r *Record) {
	t.N[LabelOf(r.Outcome)]++
	t.Total++
}

// TallyOf counts records by decision.
func TallyOf(recs iter.Seq[*Record]) Tally {
	var t Tally
	for r := range recs {
		t.Add(r)
	}
	return t
}

// ThresholdCount is one distinct affinity_threshold and its span count.
type ThresholdCount struct {
	Threshold float64
	Spans     uint64
}

// Thresholds counts the distinct thresholds of a view's records, in table
// order. Two counts mean two filter instances (or a config change within
// the window): their spans cannot be told apart otherwise (docs/spans.md).
func (v *View) Thresholds() []ThresholdCount {
	n := make([]uint64, len(v.Tables.Thresholds))
	for i := range v.Records {
		if j := int(v.Records[i].Threshold); j < len(n) {
			n[j]++
		}
	}
	var out []ThresholdCount
	for i, c := range n {
		if c > 0 {
			out = append(out, ThresholdCount{Threshold: v.Tables.Thresholds[i], Spans: c})
		}
	}
	return out
}

// SpansPerTrace is the mean number of gate spans per trace in the view
// (1 when empty): above 1 when a request runs the filter more than once —
// two filter instances, or one instance in several scheduling profiles.
// Spans of one trace are sampled together, so sampling errors scale by its
// square root (the design effect).
func (v *View) SpansPerTrace() float64 {
	if len(v.Records) == 0 {
		return 1
	}
	traces := make(map[uint64]struct{}, len(v.Records))
	for i := range v.Records {
		traces[v.Records[i].TraceLo] = struct{}{}
	}
	return float64(len(v.Records)) / float64(len(traces))
}
