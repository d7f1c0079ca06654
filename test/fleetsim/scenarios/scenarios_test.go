package scenarios

import (
	"strings"
	"testing"
)

func TestBuiltinScenariosParseAndValidate(t *testing.T) {
	want := []string{"calibration-15928", "calibration-1970", "calibration-39065", "glm-5-2", "glm-5-2-trace", "hotspot", "prompt-shift", "quiet", "steady", "trace-drift", "trace-saturation"}
	got := Names()
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	for _, name := range got {
		sc, err := Load(name)
		if err != nil {
			t.Fatalf("Load(%s): %v", name, err)
		}
		if sc.Name != name {
			t.Errorf("scenario file %s.yaml declares name %q", name, sc.Name)
		}
		if sc.Description == "" {
			t.Errorf("scenario %s has no description", name)
		}
		if err := sc.Clone().Validate(); err != nil {
			t.Errorf("clone of %s does not validate: %v", name, err)
		}
	}
	if _, err := Load("nope"); err == nil || !strings.Contains(err.Error(), "steady") {
		t.Errorf("Load(nope) = %v, want an error listing the built-ins", err)
	}
}

func TestCalibrationScenariosDeclareTheirNominalRate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		nominal float64
	}{{"calibration-1970", 1970}, {"calibration-15928", 15928}, {"calibration-39065", 39065}} {
		sc, err := Load(tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if sc.Pods.Engine.NominalRate != tc.nominal {
			t.Errorf("%s: nominal rate %v, want %v", tc.name, sc.Pods.Engine.NominalRate, tc.nominal)
		}
	}
}
