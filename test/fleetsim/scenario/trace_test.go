package scenario_test

import (
	"strings"
	"testing"

	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
)

func TestTraceScenarioErrorsNameTheField(t *testing.T) {
	base := `name: t
pods: {count: 2, engine: {nominalRate: 1000, maxNumBatchedTokens: 512, numGPUBlocks: 10000, maxModelLen: 4096}}
phases: [{name: a, duration: 1m}]
`
	for _, tc := range []struct{ name, trace, want string }{
		{"scale and target", "trace: {file: x, scale: 1, targetUtilization: 0.5}", "t.yaml:4:8: trace: exactly one of scale and targetUtilization"},
		{"no file", "trace: {scale: 1}", "t.yaml:4:8: trace.file: is required"},
		{"short envelope", "trace: {file: x, scale: 1, envelope: {hours: [1, 2]}}", "envelope.hours needs 24 multipliers"},
		{"loop not a bool", "trace: {file: x, scale: 1, loop: yes-please}", "trace.loop: must be true or false"},
		{"no classes, no trace", "", "classes: is required (or a trace)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := scenario.Parse("t.yaml", []byte(base+tc.trace+"\n"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want %q", err, tc.want)
			}
		})
	}
}
