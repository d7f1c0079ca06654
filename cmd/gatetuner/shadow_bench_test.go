package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkShadowCommand runs `gatetuner shadow` end to end — flags, the EPP
// config, the records file read from disk, replay, summary — over 100,000
// eight-endpoint records (BenchmarkReplay8's file, 25 times), to set the
// command's cost per record beside BenchmarkReplay8's (docs/benchmarks.md).
func BenchmarkShadowCommand(b *testing.B) {
	one, err := os.ReadFile("../../tuner/shadow/testdata/bench/records-8ep.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	recs := filepath.Join(dir, "records.jsonl")
	data := bytes.Repeat(one, 25)
	if err := os.WriteFile(recs, data, 0o644); err != nil {
		b.Fatal(err)
	}
	cfg := filepath.Join(dir, "epp.yaml")
	if err := os.WriteFile(cfg, []byte(eppConfig), 0o644); err != nil {
		b.Fatal(err)
	}
	n := bytes.Count(data, []byte{'\n'})
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		var stderr bytes.Buffer
		if code := run(context.Background(), []string{"shadow", "--records", recs, "--epp-config", cfg}, nil, io.Discard, &stderr); code != 0 {
			b.Fatalf("exit %d: %s", code, stderr.String())
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}
