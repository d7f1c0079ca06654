package sink

import (
	"context"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/eppconfig"
)

// BenchmarkFileApply measures one guarded file write (re-read, re-check,
// splice, sidecar and config written atomically with fsync) and the restart
// record that lets the next one through.
func BenchmarkFileApply(b *testing.B) {
	dir := b.TempDir()
	path := dir + "/config.yaml"
	if err := writeFileBytes(path, readTestdata(b, "epp-config-production-commented.yaml")); err != nil {
		b.Fatal(err)
	}
	s, err := New(Target{File: path, Profile: mustProfile(b, gate.ProfileRouter202608)}, Options{Logger: testLogger(b), HistoryLimit: 20})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		snap, err := s.Read(ctx)
		if err != nil {
			b.Fatal(err)
		}
		res, err := s.Apply(ctx, snap, []eppconfig.Change{set("", gate.KeyMaxTTFTPenaltyMs, 1000+i%2)}, Meta{Reason: "bench"})
		if err != nil || res.Outcome != OutcomeApplied {
			b.Fatalf("%+v %v", res, err)
		}
		if err := s.MarkRestarted(ctx, time.Now()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAnnotationsRoundTrip measures encoding and decoding a full history.
func BenchmarkAnnotationsRoundTrip(b *testing.B) {
	st := sampleState()
	for len(st.History) < DefaultHistoryLimit {
		e := st.History[0]
		e.Seq = st.History[len(st.History)-1].Seq + 1
		st.History = append(st.History, e)
	}
	b.ReportAllocs()
	for b.Loop() {
		ann, err := encodeAnnotations(nil, st, 0)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := decodeAnnotations(ann); err != nil {
			b.Fatal(err)
		}
	}
}
