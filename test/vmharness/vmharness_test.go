package vmharness_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/gatetuner/gatetuner/test/vmharness"
)

func TestConvertOpenMetricsRewritesTimestampsToMilliseconds(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"counter with labels", "# TYPE c counter\nc_total{a=\"x y\",b=\"}#\"} 3 1700000000.123\n# EOF\n", "c_total{a=\"x y\",b=\"}#\"} 3 1700000000123\n"},
		{"no labels, integer seconds", "g 1.5 1700000000\n", "g 1.5 1700000000000\n"},
		{"exemplar dropped", "h_bucket{le=\"1\"} 2 1700000000.5 # {trace_id=\"a\"} 1 1700000000.4\n", "h_bucket{le=\"1\"} 2 1700000000500\n"},
		{"escaped quote", "m{a=\"q\\\"}\"} 1 10\n", "m{a=\"q\\\"}\"} 1 10000\n"},
		{"colon names", "vllm:num_requests_waiting{pod=\"p\"} 0 1700000015\n", "vllm:num_requests_waiting{pod=\"p\"} 0 1700000015000\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := vmharness.ConvertOpenMetrics(&b, strings.NewReader(tc.in)); err != nil {
				t.Fatal(err)
			}
			if b.String() != tc.want {
				t.Errorf("got %q, want %q", b.String(), tc.want)
			}
		})
	}
}

func TestConvertOpenMetricsNamesTheBadLine(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"no timestamp", "a 1 10\nb 2\n", "line 2"},
		{"bad value", "a x 10\n", "line 1"},
		{"unterminated labels", "# HELP a\na{x=\"1 2 3\n", "line 2"},
		{"trailing text", "a 1 10 junk\n", "line 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := vmharness.ConvertOpenMetrics(&bytes.Buffer{}, strings.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
}

// TestImportIsQueryableInThePast backfills an hour-old counter and reads it back through the
// Prometheus query API, as the estimator does.
func TestImportIsQueryableInThePast(t *testing.T) {
	s := vmharness.Start(t, vmharness.Options{})
	base := time.Now().Add(-2 * time.Hour).Truncate(time.Minute)
	var om strings.Builder
	om.WriteString("# TYPE vllm:prompt_tokens counter\n")
	for i := 0; i <= 40; i++ {
		fmt.Fprintf(&om, "vllm:prompt_tokens_total{pod=\"p-0\"} %d %d\n", 100*i, base.Add(time.Duration(i)*15*time.Second).Unix())
	}
	om.WriteString("# EOF\n")
	ctx := context.Background()
	if err := s.Import(ctx, strings.NewReader(om.String())); err != nil {
		t.Fatal(err)
	}
	at := base.Add(10*time.Minute + 7*time.Second)
	v, _, err := s.Query(ctx, `sum(increase(vllm:prompt_tokens_total{pod="p-0"}[2m]))`, at)
	if err != nil {
		t.Fatal(err)
	}
	vec, ok := v.(model.Vector)
	if !ok || len(vec) != 1 {
		t.Fatalf("got %v, want one sample", v)
	}
	// Eight 15 s steps of 100 tokens end inside (at-2m, at]; VictoriaMetrics counts from the
	// last sample before the window and does not extrapolate, so the increase is exact.
	if got := float64(vec[0].Value); got != 800 {
		t.Errorf("increase %v, want exactly 800", got)
	}
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _, err := s.Query(ctx, `count(vllm:prompt_tokens_total)`, base.Add(5*time.Minute)); err != nil || len(v.(model.Vector)) != 1 {
		t.Fatalf("after a restart: %v, %v", v, err)
	}
}
