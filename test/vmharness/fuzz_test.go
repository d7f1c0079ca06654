package vmharness_test

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/gatetuner/gatetuner/test/vmharness"
)

// FuzzConvertOpenMetrics checks the converter never panics and that whatever it accepts comes
// out as one `series value milliseconds` line per sample line.
func FuzzConvertOpenMetrics(f *testing.F) {
	f.Add("# TYPE c counter\nc_total{a=\"x y\"} 3 1700000000.123\n# EOF\n")
	f.Add("h_bucket{le=\"+Inf\"} 2 1700000000.5 # {trace_id=\"a\"} 1 1700000000.4\n")
	f.Fuzz(func(t *testing.T, in string) {
		var out bytes.Buffer
		if err := vmharness.ConvertOpenMetrics(&out, strings.NewReader(in)); err != nil {
			return
		}
		samples := 0
		for _, l := range strings.Split(in, "\n") {
			// bufio.ScanLines drops one trailing \r, as the converter reads lines.
			if l = strings.TrimSuffix(l, "\r"); l != "" && l[0] != '#' {
				samples++
			}
		}
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		if out.Len() == 0 {
			lines = nil
		}
		if len(lines) != samples {
			t.Fatalf("%d sample lines became %d lines: %q", samples, len(lines), out.String())
		}
		for _, l := range lines {
			i := strings.LastIndexByte(l, ' ')
			if _, err := strconv.ParseInt(l[i+1:], 10, 64); i < 0 || err != nil {
				t.Fatalf("line %q does not end in integer milliseconds", l)
			}
		}
	})
}
