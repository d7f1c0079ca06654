package deploy

import (
	"path/filepath"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	lint4 "helm.sh/helm/v4/pkg/chart/v2/lint"
	support4 "helm.sh/helm/v4/pkg/chart/v2/lint/support"
)

// TestChartCIValuesPassHelm4LintStrict runs Helm 4's chart linter (what
// `helm lint --strict` of helm v4 runs: pkg/chart/v2/lint, the linter of
// apiVersion v2 charts) on every ci/*-values.yaml, failing on its warnings
// and errors, as TestChartCIValuesPassHelmLintStrict does with Helm 3's.
func TestChartCIValuesPassHelm4LintStrict(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(chartCIDir, "*-values.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no %s/*-values.yaml: %v", chartCIDir, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			vals, err := chartutil.ReadValuesFile(f)
			if err != nil {
				t.Fatal(err)
			}
			l := lint4.RunAll(chartDir, vals.AsMap(), "gatetuner")
			for _, m := range l.Messages {
				t.Logf("helm v4 lint: %s", m)
				if m.Severity >= support4.WarningSev {
					t.Errorf("helm v4 lint --strict -f %s: %s", f, m)
				}
			}
		})
	}
}

// TestHelm4LintCatchesMistakes: Helm 4's linter is live here — a misspelt
// key (refused by values.schema.json) fails it.
func TestHelm4LintCatchesMistakes(t *testing.T) {
	vals := minimalValues()
	vals["servicemonitor"] = map[string]any{"enabled": false}
	l := lint4.RunAll(chartDir, vals, "gatetuner")
	failed := 0
	for _, m := range l.Messages {
		if m.Severity >= support4.WarningSev {
			failed++
		}
	}
	if failed == 0 {
		t.Errorf("helm v4 lint passed values with the misspelt key servicemonitor: %v", l.Messages)
	}
}
