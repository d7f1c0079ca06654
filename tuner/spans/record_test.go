package spans_test

import (
	"math"
	"testing"
	"unsafe"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/spans"
)

func TestRecordIsFortyEightBytesInMemoryAndOnDisk(t *testing.T) {
	if s := unsafe.Sizeof(spans.Record{}); s != spans.RecordSize {
		t.Fatalf("Record is %d bytes in memory, want %d", s, spans.RecordSize)
	}
	r := spans.Record{}
	if n := len(r.AppendBinary(nil)); n != spans.RecordSize {
		t.Fatalf("encoding is %d bytes", n)
	}
}

func TestRecordRoundTripsEveryOutcome(t *testing.T) {
	outs := []gate.Outcome{gate.OutcomeNotApplicable, gate.OutcomeExploration, gate.OutcomeNoMatch, gate.OutcomeSticky,
		gate.OutcomeLoadOverride, gate.OutcomeMissingSignal, spans.OutcomeRequestLoadOverride, spans.OutcomeOther}
	for i, o := range outs {
		r := spans.Record{EndNano: -int64(i) - 5, TraceLo: math.MaxUint64 - uint64(i), RequestHash: 77, PenaltyMs: -0.25 * float64(i),
			DurationNano: 123456, Candidates: 65535, Sticky: uint16(i), Threshold: 2, Model: 3, Pod: spans.NoIndex,
			Outcome: o, Flags: spans.FlagPenalty | spans.FlagSticky}
		if got := spans.DecodeRecord(r.AppendBinary(nil)); got != r {
			t.Fatalf("%s: got %+v want %+v", spans.OutcomeName(o), got, r)
		}
	}
}

func TestInternerKeepsIndexesAndRedefinesThemInOrder(t *testing.T) {
	in := spans.NewInterner()
	gs := spans.GateSpan{Threshold: 0.8, Model: "m1", Resource: spans.Resource{Pod: "p1"}, RequestID: "r", EndNano: 10, StartNano: 4}
	r1, added := in.Record(&gs)
	if added != 1<<spans.TableThreshold|1<<spans.TableModel|1<<spans.TablePod {
		t.Fatalf("added %b", added)
	}
	gs.Model = "m2"
	r2, added := in.Record(&gs)
	if added != 1<<spans.TableModel || r2.Model != 1 || r2.Threshold != r1.Threshold || r2.Pod != r1.Pod {
		t.Fatalf("second record %+v added %b", r2, added)
	}
	if in.Model(&r1) != "m1" || in.Model(&r2) != "m2" || in.Threshold(&r1) != 0.8 || in.Pod(&r1) != "p1" ||
		r1.DurationNano != 6 || r1.RequestHash != spans.HashRequestID("r") || !r1.Flags.Has(spans.FlagRequestID) {
		t.Fatalf("lookups of %+v", r1)
	}
	back := spans.NewInterner()
	if !back.Define(spans.TableModel, 0, "m1", 0) || back.Define(spans.TableModel, 2, "m3", 0) ||
		back.Define(spans.TableModel, 0, "other", 0) || !back.Define(spans.TableModel, 0, "m1", 0) {
		t.Fatal("Define must take entries in order and refuse a clash")
	}
}
