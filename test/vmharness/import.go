package vmharness

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// importTimeout bounds one backfill (the POST, the flush and the cache reset).
const importTimeout = 10 * time.Minute

// Import backfills openMetrics (OpenMetrics text with explicit timestamps in seconds, as
// promharness.Backfill takes it) into the running server: it rewrites it to the Prometheus
// text format with millisecond timestamps, POSTs it to /api/v1/import/prometheus, flushes the
// in-memory buffers to searchable parts (/internal/force_flush) and drops the rollup result
// cache (/internal/resetRollupResultCache), so every sample is visible to the next query.
func (s *Server) Import(ctx context.Context, openMetrics io.Reader) error {
	ctx, cancel := context.WithTimeout(ctx, importTimeout)
	defer cancel()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(ConvertOpenMetrics(pw, openMetrics)) }()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/api/v1/import/prometheus", pr)
	if err != nil {
		_ = pr.Close()
		return fmt.Errorf("build import request: %w", err)
	}
	req.Header.Set("Content-Type", "text/plain; version=0.0.4")
	if err := do(req); err != nil {
		_ = pr.CloseWithError(err)
		return fmt.Errorf("import into victoria-metrics: %w", err)
	}
	for _, path := range []string{"/internal/force_flush", "/internal/resetRollupResultCache"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+path, nil)
		if err != nil {
			return fmt.Errorf("build %s request: %w", path, err)
		}
		if err := do(req); err != nil {
			return fmt.Errorf("victoria-metrics %s: %w", path, err)
		}
	}
	return nil
}

// ImportFile is Import for an OpenMetrics file on disk.
func (s *Server) ImportFile(ctx context.Context, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	if err := s.Import(ctx, bufio.NewReaderSize(f, 1<<20)); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func do(req *http.Request) error {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", req.Method, req.URL.Path, resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

// ConvertOpenMetrics rewrites OpenMetrics text (timestamps in seconds) to the Prometheus text
// format with integer millisecond timestamps, which /api/v1/import/prometheus reads without
// guessing the unit: VictoriaMetrics takes a timestamp below 2^31 for seconds and truncates
// seconds×1000, so 1700000000.123 s could land on …122 ms. Comment lines (# TYPE, # HELP,
// # UNIT, # EOF) and exemplars are dropped; a sample without a timestamp is an error, since
// a backfill without one would be stamped with the import time. Errors name the line.
func ConvertOpenMetrics(w io.Writer, r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	bw := bufio.NewWriterSize(w, 1<<20)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if text == "" || text[0] == '#' {
			continue
		}
		series, value, ts, err := splitSample(text)
		if err != nil {
			return fmt.Errorf("line %d: %w", line, err)
		}
		ms, err := secondsToMillis(ts)
		if err != nil {
			return fmt.Errorf("line %d: %w", line, err)
		}
		bw.WriteString(series)
		bw.WriteByte(' ')
		bw.WriteString(value)
		bw.WriteByte(' ')
		bw.WriteString(strconv.FormatInt(ms, 10))
		bw.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("line %d: %w", line+1, err)
	}
	return bw.Flush()
}

// splitSample splits `name{labels} value timestamp [# exemplar]` into its series, value and
// timestamp, honouring quoted label values (which may hold spaces, braces and '#').
func splitSample(line string) (series, value, ts string, err error) {
	end := strings.IndexAny(line, " {")
	if end <= 0 {
		return "", "", "", fmt.Errorf("no metric name in %q", line)
	}
	if line[end] == '{' {
		closing, err := labelsEnd(line, end)
		if err != nil {
			return "", "", "", err
		}
		end = closing + 1
	}
	series = line[:end]
	rest := strings.Fields(line[end:])
	if len(rest) < 2 || strings.HasPrefix(rest[1], "#") {
		return "", "", "", fmt.Errorf("sample without a timestamp: %q", line)
	}
	if len(rest) > 2 && rest[2] != "#" {
		return "", "", "", fmt.Errorf("trailing text after the timestamp: %q", line)
	}
	if _, err := strconv.ParseFloat(rest[0], 64); err != nil {
		return "", "", "", fmt.Errorf("value %q: %w", rest[0], err)
	}
	return series, rest[0], rest[1], nil
}

// labelsEnd returns the index of the '}' closing the label set opened at line[open].
func labelsEnd(line string, open int) (int, error) {
	inQuote, escaped := false, false
	for i := open + 1; i < len(line); i++ {
		c := line[i]
		switch {
		case escaped:
			escaped = false
		case inQuote && c == '\\':
			escaped = true
		case c == '"':
			inQuote = !inQuote
		case !inQuote && c == '}':
			return i, nil
		}
	}
	return 0, errors.New("unterminated label set")
}

// secondsToMillis parses an OpenMetrics timestamp (decimal seconds) into milliseconds,
// rounding to the nearest millisecond.
func secondsToMillis(s string) (int64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("timestamp %q: %w", s, err)
	}
	ms := math.Round(f * 1000)
	if math.IsNaN(ms) || math.IsInf(ms, 0) || ms > math.MaxInt64/2 || ms < math.MinInt64/2 {
		return 0, fmt.Errorf("timestamp %q out of range", s)
	}
	return int64(ms), nil
}
