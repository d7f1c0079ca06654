package prom_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/estimator/prom"
)

// FuzzIngestText feeds arbitrary bytes to IngestText in every format: it
// must not panic, and every error must be a *LineError naming a line of
// the input (or the one just past its end).
func FuzzIngestText(f *testing.F) {
	seeds := []string{
		"# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens_total{namespace=\"llm\",pod=\"a\"} 150 1700000000\n# EOF\n",
		"# HELP vllm:num_requests_waiting x\n# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{pod=\"a\"} 3 1700000000000\nvllm:num_requests_waiting{pod=\"b\"} 4\n",
		"# TYPE h histogram\nh_bucket{le=\"1\"} 1 1000\nh_bucket{le=\"+Inf\"} 2 1000\nh_sum 3 1000\nh_count 2 1000\n",
		"a 1 1000\na 2 1000\n",
		"a{x=\"\"} NaN 1000\nb +Inf\nc -Inf 5\n",
		"{\"utf8.name\",x=\"y\"} 1 1\n",
		"# EOF\nmore\n",
		"\n\n\n}{\n",
		"a 1 1e400\n",
		"# TYPE a summary\na{quantile=\"0.5\"} 1 1\na_sum 1 1\na_count 1 1\n# EOF",
	}
	for _, s := range seeds {
		f.Add([]byte(s), uint8(0))
		f.Add([]byte(s), uint8(1))
		f.Add([]byte(s), uint8(2))
	}
	e, err := prom.NewEmbedded(prom.EmbeddedConfig{Logger: quietLogger()})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = e.Close() })
	defaultTime := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	formats := []prom.Format{prom.FormatAuto, prom.FormatOpenMetrics, prom.FormatPrometheusText}

	f.Fuzz(func(t *testing.T, text []byte, format uint8) {
		opts := prom.IngestOptions{Format: formats[int(format)%len(formats)], Labels: map[string]string{"job": "fuzz"}}
		if format&4 != 0 {
			opts.DefaultTime = defaultTime
		}
		_, err := e.IngestText(context.Background(), bytes.NewReader(text), opts)
		if err == nil {
			return
		}
		var le *prom.LineError
		if !errors.As(err, &le) {
			t.Fatalf("error is not a *LineError: %v", err)
		}
		lines := bytes.Count(text, []byte{'\n'}) + 1
		if le.Line < 1 || le.Line > lines+1 {
			t.Fatalf("error names line %d of a %d-line input: %v", le.Line, lines, err)
		}
		if !strings.HasPrefix(err.Error(), "line ") {
			t.Fatalf("error does not lead with its line: %v", err)
		}
	})
}
