package sink

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

func sampleState() State {
	at := t0.Add(time.Hour)
	return State{
		Pending:     &Pending{Since: t0, ConfigHash: "abc", Seq: 2, Generation: 7, TemplateHash: "deadbeef"},
		Hold:        &Hold{Reason: HoldRolloutFailed, Since: t0, Message: "crash-loop", Seq: 1},
		EffectiveAt: at,
		History: []Entry{
			{Seq: 1, Kind: KindApply, At: t0, By: "a", Mode: "rollout", ConfigHash: "h1", Status: StatusRolledBack, EffectiveAt: &at,
				Instances: []InstanceChange{{Plugin: "p", Old: map[string]string{"maxTTFTPenaltyMs": "18000"}, New: map[string]string{"maxTTFTPenaltyMs": "5000"}, OldBarTokens: 286704, NewBarTokens: 79640}},
				Failure:   &Failure{Reason: HoldRolloutFailed, Message: "x"}, Verification: &Verification{Metric: MetricEPPTTFT, Quantile: 0.9, Before: 0.2, After: 2, Margin: 0.2, Result: "failed"}},
			{Seq: 2, Kind: KindAutoRollback, At: t0, Undoes: 1, ConfigHash: "h0", Status: StatusPendingRestart,
				Instances: []InstanceChange{{Plugin: "p", Old: map[string]string{"maxTTFTPenaltyMs": "5000"}, New: map[string]string{"maxTTFTPenaltyMs": "18000"}}}},
		},
	}
}

func TestStateRoundTrips(t *testing.T) {
	st := sampleState()
	ann, err := encodeAnnotations(map[string]string{"other": "kept", AnnotationPaused: "false"}, st, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ann["other"] != "kept" || ann[AnnotationPaused] != "false" {
		t.Fatalf("foreign annotations not kept: %v", ann)
	}
	got, err := decodeAnnotations(ann)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, st) {
		t.Fatalf("annotations round trip:\n got %+v\nwant %+v", got, st)
	}
	b, err := encodeSidecar(st, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, err = decodeSidecar(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, st) {
		t.Fatalf("sidecar round trip:\n got %+v\nwant %+v", got, st)
	}
	if c := clone(st); !reflect.DeepEqual(c, st) {
		t.Fatal("clone differs")
	}
	// Cleared state removes gatetuner's annotations, not people's.
	ann, err = encodeAnnotations(ann, State{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ann) != 2 {
		t.Fatalf("after clearing: %v", ann)
	}
}

func TestPauseAnnotation(t *testing.T) {
	for v, want := range map[string]bool{"true": true, "True": true, "1": true, "false": false, " false ": false, "yes please": true, "": true} {
		st, err := decodeAnnotations(map[string]string{AnnotationPaused: v})
		if err != nil || st.Paused != want {
			t.Errorf("%q: paused %v (%v), want %v", v, st.Paused, err, want)
		}
	}
	if st, _ := decodeAnnotations(map[string]string{}); st.Paused {
		t.Error("paused without the annotation")
	}
}

func TestHistoryIsBounded(t *testing.T) {
	var h []Entry
	for i := 1; i <= 50; i++ {
		h = append(h, Entry{Seq: i, Kind: KindApply, At: t0, ConfigHash: strings.Repeat("f", 64), Evidence: clip(strings.Repeat("é", 400)),
			Instances: []InstanceChange{{Plugin: "p", Old: map[string]string{"maxTTFTPenaltyMs": "1"}, New: map[string]string{"maxTTFTPenaltyMs": "2"}}}})
	}
	if len(h[0].Evidence) > MaxTextBytes || !strings.HasSuffix(h[0].Evidence, "…") {
		t.Fatalf("evidence not clipped: %d bytes", len(h[0].Evidence))
	}
	got, err := boundHistory(h, 20)
	if err != nil || len(got) != 20 || got[0].Seq != 31 {
		t.Fatalf("count bound: %d entries from %d (%v)", len(got), got[0].Seq, err)
	}
	got, err = boundHistory(h, 1000)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(got)
	if len(b) > MaxHistoryBytes || got[len(got)-1].Seq != 50 || len(got) == 50 {
		t.Fatalf("byte bound: %d bytes, %d entries", len(b), len(got))
	}
	st := State{History: got}
	if nextSeq(&st) != 51 {
		t.Fatalf("next seq %d", nextSeq(&st))
	}
}

func TestDecodeRejectsMangledState(t *testing.T) {
	for name, ann := range map[string]map[string]string{
		"history not JSON":  {AnnotationHistory: "[{"},
		"history trailing":  {AnnotationHistory: "[] []"},
		"seq out of order":  {AnnotationHistory: `[{"seq":2,"kind":"apply"},{"seq":1,"kind":"apply"}]`},
		"unknown kind":      {AnnotationHistory: `[{"seq":1,"kind":"yolo"}]`},
		"value not JSON":    {AnnotationHistory: `[{"seq":1,"kind":"apply","instances":[{"plugin":"p","old":{"maxTTFTPenaltyMs":"1x"},"new":{}}]}]`},
		"hold not JSON":     {AnnotationHold: "rollout-failed"},
		"pending not JSON":  {AnnotationPendingRestart: "yes"},
		"effective not RFC": {AnnotationEffectiveAt: "yesterday"},
	} {
		if _, err := decodeAnnotations(ann); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := decodeSidecar([]byte(`{"version":2,"history":[]}`)); err == nil {
		t.Error("sidecar of another version accepted")
	}
	if _, err := decodeSidecar([]byte(`{"version":1,"history":[],"extra":1}`)); err == nil {
		t.Error("sidecar with an unknown field accepted")
	}
}

// FuzzDecodeAnnotations: whatever a person writes into the annotations, the
// decoder does not panic, and what it accepts re-encodes to the same state.
func FuzzDecodeAnnotations(f *testing.F) {
	ann, _ := encodeAnnotations(nil, sampleState(), 0)
	f.Add(ann[AnnotationHistory], ann[AnnotationHold], ann[AnnotationPendingRestart], ann[AnnotationEffectiveAt], "true")
	f.Add("[]", "", "", "", "false")
	f.Add(`[{"seq":1,"kind":"apply","instances":[{"plugin":"p","old":{"k":"null"},"new":{}}]}]`, `{}`, `{"since":"2026-01-01T00:00:00Z"}`, "2026-01-01T00:00:00Z", "")
	f.Add(`[{"seq":-1}]`, "null", "null", "x", "maybe")
	f.Fuzz(func(t *testing.T, hist, hold, pending, eff, paused string) {
		in := map[string]string{AnnotationHistory: hist, AnnotationHold: hold, AnnotationPendingRestart: pending, AnnotationEffectiveAt: eff, AnnotationPaused: paused}
		st, err := decodeAnnotations(in)
		if err != nil {
			return
		}
		out, err := encodeAnnotations(nil, st, 1<<20)
		if err != nil {
			return // e.g. one entry over the byte bound
		}
		st2, err := decodeAnnotations(out)
		if err != nil {
			t.Fatalf("re-encoded state does not decode: %v\n%v", err, out)
		}
		st.Paused, st.PausedValue = false, ""
		a, _ := json.Marshal(toSidecar(st))
		b, _ := json.Marshal(toSidecar(st2))
		if string(a) != string(b) {
			t.Fatalf("round trip changed the state:\n%s\n%s", a, b)
		}
	})
}

// FuzzDecodeSidecar: the file sink's state file never panics the decoder and
// what it accepts round-trips.
func FuzzDecodeSidecar(f *testing.F) {
	b, _ := encodeSidecar(sampleState(), 0)
	f.Add(b)
	f.Add([]byte(`{"version":1,"paused":true,"history":[]}`))
	f.Add([]byte(`{"version":1,"history":[{"seq":1,"kind":"rollback","undoes":3}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := decodeSidecar(data)
		if err != nil {
			return
		}
		out, err := encodeSidecar(st, 1<<20)
		if err != nil {
			return
		}
		st2, err := decodeSidecar(out)
		if err != nil {
			t.Fatalf("re-encoded sidecar does not decode: %v\n%s", err, out)
		}
		a, _ := json.Marshal(toSidecar(st))
		c, _ := json.Marshal(toSidecar(st2))
		if string(a) != string(c) {
			t.Fatalf("round trip changed the state:\n%s\n%s", a, c)
		}
	})
}

// TestApprovalIsReadAndNeverWritten: gatetuner.dev/approve is read into
// State.Approve (a list of hashes), kept as a person wrote it on every
// write, carried by a file target's state file, and a joint entry's hashes
// count as written.
func TestApprovalIsReadAndNeverWritten(t *testing.T) {
	ann := map[string]string{AnnotationApprove: " 3f2a9c0d1e4b5a67, 0123456789abcdef ", "other": "x"}
	st, err := decodeAnnotations(ann)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Approvals(); len(got) != 2 || got[0] != "3f2a9c0d1e4b5a67" || got[1] != "0123456789abcdef" {
		t.Errorf("approvals %q", got)
	}
	st.History = []Entry{{Seq: 1, Kind: KindApply, RecommendationHash: "aaaa+3f2a9c0d1e4b5a67", Status: StatusEffective}}
	out, err := encodeAnnotations(ann, st, 0)
	if err != nil {
		t.Fatal(err)
	}
	if out[AnnotationApprove] != ann[AnnotationApprove] {
		t.Errorf("the write changed the approval: %q", out[AnnotationApprove])
	}
	if _, ok := st.WrittenHash("3f2a9c0d1e4b5a67"); !ok {
		t.Errorf("a joint entry's hash does not count as written")
	}
	if _, ok := st.WrittenHash("3f2a"); ok {
		t.Errorf("a prefix counts as written")
	}
	b, err := json.Marshal(toSidecar(st))
	if err != nil {
		t.Fatal(err)
	}
	back, err := decodeSidecar(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.Approve != st.Approve {
		t.Errorf("state file round trip: approve %q, want %q", back.Approve, st.Approve)
	}
}
