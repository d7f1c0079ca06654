package scenario_test

import (
	"strings"
	"testing"

	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenarios"
)

func TestExportersParseFromYAMLAndFlags(t *testing.T) {
	base, _, err := scenarios.Source("calibration-1970")
	if err != nil {
		t.Fatal(err)
	}
	sc, err := scenario.Parse("x.yaml", append(append([]byte(nil), base...),
		"exporters: {shape: llm-d-2026, dpRanks: 2, producers: [a, b], eppReplicas: 3, syncReplicas: false}\n"...))
	if err != nil {
		t.Fatal(err)
	}
	x := sc.Exporters
	if x.Name != scenario.ShapeLLMD2026 || x.DPRanks != 2 || strings.Join(x.Producers, ",") != "a,b" || x.EPPReplicas != 3 || x.SyncReplicas {
		t.Errorf("parsed %s", x)
	}
	for _, bad := range []struct{ yaml, want string }{
		{"exporters: {shape: nope}\n", "exporters.shape: unknown export shape"},
		{"exporters: {dpRanks: 0}\n", "dpRanks must be in [1, 64]"},
		{"exporters: {vllm: 0.7}\n", "vllm must be one of"},
		{"exporters: {colour: red}\n", "unknown exporters field"},
	} {
		_, err := scenario.Parse("x.yaml", append(append([]byte(nil), base...), bad.yaml...))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "x.yaml:") {
			t.Errorf("%q: error %v, want file position and %q", bad.yaml, err, bad.want)
		}
	}
	if f, err := scenario.ParseExportShape("llm-d-2026,producers=a,b,dpRanks=4"); err != nil || f.DPRanks != 4 || len(f.Producers) != 2 {
		t.Errorf("flag form: %v %+v", err, f)
	}
	if _, err := scenario.ParseExportShape("llm-d-2026,dpRanks"); err == nil {
		t.Error("flag form without =: no error")
	}
}
