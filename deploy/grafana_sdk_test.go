package deploy

import (
	"errors"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	grafana "github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

var registerGrafanaPlugins sync.Once

// checkGrafanaDashboard decodes b with the Grafana Foundation SDK's strict
// unmarshal (unknown fields and missing required ones are errors; panel
// options and Prometheus queries decoded by their plugin types) and runs its
// validation.
func checkGrafanaDashboard(b []byte) error {
	registerGrafanaPlugins.Do(plugins.RegisterDefaultPlugins)
	var d grafana.Dashboard
	if err := sdkErr(d.UnmarshalJSONStrict(b)); err != nil {
		return err
	}
	return sdkErr(d.Validate())
}

// sdkErr turns the SDK's empty cog.BuildErrors (a non-nil error holding no
// errors) into nil.
func sdkErr(err error) error {
	var be cog.BuildErrors
	if errors.As(err, &be) && len(be) == 0 {
		return nil
	}
	return err
}

// TestDashboardPassesGrafanaFoundationSDK checks the shipped dashboard with
// the Grafana Foundation SDK, and that the check refuses a misspelt field and
// a missing required one.
func TestDashboardPassesGrafanaFoundationSDK(t *testing.T) {
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkGrafanaDashboard(b); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	for _, tc := range []struct{ name, from, to, want string }{
		{"misspelt panel field", `"gridPos": {`, `"gridpos": {`, "gridpos"},
		{"missing required option", `"showHeader": true`, `"showHeaderX": true`, "showHeader"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := strings.Replace(string(b), tc.from, tc.to, 1)
			if bad == string(b) {
				t.Fatalf("%q not in the dashboard", tc.from)
			}
			if err := checkGrafanaDashboard([]byte(bad)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %s", err, tc.want)
			}
		})
	}
}
