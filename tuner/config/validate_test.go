package config

import (
	"strings"
	"testing"
	"time"
)

// TestOnePassReportsEveryProblem: a target's problems come in one error,
// not one per round of fixing.
func TestOnePassReportsEveryProblem(t *testing.T) {
	_, err := load(t, "targets:\n- name: a\n  file: /tmp/epp.yaml\n  mode: rollout\n  minConfidence: 2\n  deadband: 1\n", nil)
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"a file target supports off and configmap", "selector.vllm is required", "minConfidence", "deadband"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "needs deployment") {
		t.Errorf("a file target is told to add a deployment it cannot use: %q", err)
	}
}

// TestUnknownKeyAsWritten: an unknown key is reported as the user wrote it,
// with its file and line and the key it was likely meant to be.
func TestUnknownKeyAsWritten(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"in a target", "targets:\n- name: a\n  namespace: llm-d\n  configMap: epp\n  minConfidance: 0.5\n",
			`gatetuner.yaml:5: targets[0]: unknown key "minConfidance" (did you mean "minConfidence"?)`},
		{"nested", "prometheus:\n  url: http://p:9090\ntargets:\n- name: a\n  namespace: llm-d\n  configMap: epp\n  selector:\n    vLLM: x\n    ePPP: y\n",
			`gatetuner.yaml:9: targets[0].selector: unknown key "ePPP" (did you mean "epp"?)`},
		{"at the top", "Prometheus:\n  url: http://p:9090\npromethus:\n  url: x\ntargets:\n- name: a\n  namespace: llm-d\n  configMap: epp\n",
			`gatetuner.yaml:3: unknown key "promethus" (did you mean "prometheus"?)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, tc.yaml, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "decoding failed") || strings.Contains(err.Error(), "; ;") {
				t.Fatalf("raw decoder text in %q", err)
			}
		})
	}
}

// TestTheDailyCycleKeys: history, dayLength and windowWidth default to a
// day of hours, errors name the key, and applyWindow takes the words auto
// and always.
func TestTheDailyCycleKeys(t *testing.T) {
	const target = "targets:\n- name: a\n  namespace: llm-d\n  configMap: epp\n"
	c, err := load(t, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := c.Targets[0].Policy
	if p.History != 24*time.Hour || p.DayLength != 24*time.Hour || p.WindowWidth != time.Hour || p.ApplyWindow == nil || !p.ApplyWindow.Auto || *p.DailyBudget != 1 {
		t.Fatalf("defaults: history %v dayLength %v windowWidth %v applyWindow %v dailyBudget %d", p.History, p.DayLength, p.WindowWidth, p.ApplyWindow, *p.DailyBudget)
	}
	for _, tc := range []struct{ name, extra, want string }{
		{"a simulated day", "  dayLength: 2h\n  windowWidth: 20m\n  history: 4h\n", ""},
		{"always", "  applyWindow: always\n", ""},
		{"a width that does not divide the day", "  dayLength: 2h\n  windowWidth: 25m\n", "windowWidth: 25m0s does not divide dayLength 2h0m0s"},
		{"a history shorter than a window", "  history: 30m\n", "history: 30m0s is shorter than one window (windowWidth 1h0m0s)"},
		{"an unknown window word", "  applyWindow: sometimes\n", `applyWindow: want auto, always or {schedule, duration}, got "sometimes"`},
		{"a cron window without a duration", "  applyWindow:\n    schedule: \"0 2 * * *\"\n", "applyWindow.duration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := load(t, target+tc.extra, nil)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if strings.Contains(tc.extra, "always") && !c.Targets[0].ApplyWindow.Always {
					t.Errorf("applyWindow %+v", c.Targets[0].ApplyWindow)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
