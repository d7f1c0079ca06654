package scenario_test

import (
	"testing"

	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenarios"
)

func TestDaysRepeatThePhasesUnderDayNames(t *testing.T) {
	one, err := scenarios.Load("steady")
	if err != nil {
		t.Fatal(err)
	}
	sc, err := scenario.Days(one, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"d1-morning", "d1-afternoon", "d2-morning", "d2-afternoon", "d3-morning", "d3-afternoon"}
	if len(sc.Phases) != len(want) {
		t.Fatalf("%d phases, want %d", len(sc.Phases), len(want))
	}
	for i, w := range want {
		if sc.Phases[i].Name != w {
			t.Errorf("phase %d: %q, want %q", i, sc.Phases[i].Name, w)
		}
	}
	if sc.DayCount() != 3 || sc.DayDuration() != one.Duration() || sc.Duration() != 3*one.Duration() {
		t.Errorf("days %d of %s (%s in all), want 3 of %s", sc.DayCount(), sc.DayDuration(), sc.Duration(), one.Duration())
	}
	if len(one.Phases) != 2 || one.DayCount() != 1 {
		t.Errorf("Days changed its input: %d phases, %d days", len(one.Phases), one.DayCount())
	}
	if _, err := scenario.Days(sc, 2); err == nil {
		t.Error("Days of a multi-day scenario: no error")
	}
	if _, err := scenario.Days(one, 0); err == nil {
		t.Error("zero days: no error")
	}
}

func TestSplitDayPhase(t *testing.T) {
	for _, tc := range []struct {
		in   string
		day  int
		name string
		ok   bool
	}{
		{"d1-night", 1, "night", true},
		{"d12-late-evening", 12, "late-evening", true},
		{"night", 0, "", false},
		{"d0-night", 0, "", false},
		{"dx-night", 0, "", false},
		{"d-night", 0, "", false},
	} {
		day, name, ok := scenario.SplitDayPhase(tc.in)
		if day != tc.day || name != tc.name || ok != tc.ok {
			t.Errorf("SplitDayPhase(%q) = %d, %q, %v; want %d, %q, %v", tc.in, day, name, ok, tc.day, tc.name, tc.ok)
		}
	}
}
