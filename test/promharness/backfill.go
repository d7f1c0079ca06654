package promharness

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// DefaultMaxBlockDuration is the block span Backfill asks promtool for: the
// TSDB's own head block range, so every block lines up with the ranges the
// server compacts and loads, however many hours the input spans.
const DefaultMaxBlockDuration = 2 * time.Hour

// CreateBlocks runs `promtool tsdb create-blocks-from openmetrics` on the
// OpenMetrics file input, writing blocks into outDir. maxBlockDuration <= 0
// means DefaultMaxBlockDuration. A failure carries promtool's output.
func CreateBlocks(ctx context.Context, promtool, input, outDir string, maxBlockDuration time.Duration) error {
	if maxBlockDuration <= 0 {
		maxBlockDuration = DefaultMaxBlockDuration
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return fmt.Errorf("create backfill dir %s: %w", outDir, err)
	}
	cmd := exec.CommandContext(ctx, promtool, "tsdb", "create-blocks-from", "openmetrics",
		"--max-block-duration="+maxBlockDuration.String(), input, outDir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("promtool tsdb create-blocks-from openmetrics %s: %w\nstderr:\n%s\nstdout:\n%s",
			input, err, tail(stderr.String(), 30), tail(stdout.String(), 10))
	}
	return nil
}

// Backfill writes openMetrics (OpenMetrics text with explicit timestamps in
// seconds, ending in "# EOF") to a temporary file, turns it into TSDB blocks
// with promtool and returns the new data dir, ready for Options.DataDir.
func Backfill(t testing.TB, openMetrics io.Reader) string {
	t.Helper()
	b := Require(t)
	dir := t.TempDir()
	input := filepath.Join(dir, "backfill.om")
	f, err := os.Create(input)
	if err != nil {
		t.Fatalf("create %s: %v", input, err)
	}
	if _, err := io.Copy(f, openMetrics); err != nil {
		_ = f.Close()
		t.Fatalf("write %s: %v", input, err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close %s: %v", input, err)
	}
	return backfill(t, b, input, filepath.Join(dir, "data"))
}

// BackfillFile is Backfill for an OpenMetrics file already on disk.
func BackfillFile(t testing.TB, path string) string {
	t.Helper()
	b := Require(t)
	return backfill(t, b, path, filepath.Join(t.TempDir(), "data"))
}

// BackfillString is Backfill for OpenMetrics text held in a string.
func BackfillString(t testing.TB, openMetrics string) string {
	t.Helper()
	return Backfill(t, strings.NewReader(openMetrics))
}

func backfill(t testing.TB, b Binaries, input, dataDir string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := CreateBlocks(ctx, b.Promtool, input, dataDir, 0); err != nil {
		t.Fatalf("backfill: %v", err)
	}
	return dataDir
}
