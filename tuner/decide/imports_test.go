package decide

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestTheDecisionImportsNoIO pins that package decide is pure: nothing it
// pulls in reaches the network, Kubernetes, Prometheus or the estimator's
// queries, and it opens no file and takes no context itself. (fmt pulls in
// os, so os is checked among its own imports, not its dependencies.)
func TestTheDecisionImportsNoIO(t *testing.T) {
	list := func(format string) []string {
		t.Helper()
		out, err := exec.Command("go", "list", "-f", format, ".").Output()
		if err != nil {
			t.Fatalf("go list: %v", err)
		}
		return strings.Fields(string(out))
	}
	deps := list(`{{join .Deps " "}}`)
	for _, bad := range []string{
		"net", "net/http", "crypto/tls", "os/exec",
		"k8s.io/client-go/kubernetes", "k8s.io/api/core/v1", "k8s.io/apimachinery/pkg/apis/meta/v1",
		"github.com/prometheus/client_golang/api", "github.com/prometheus/client_golang/api/prometheus/v1",
		"github.com/gatetuner/gatetuner/estimator", "github.com/gatetuner/gatetuner/estimator/prom",
		"github.com/gatetuner/gatetuner/tuner/sink", "github.com/gatetuner/gatetuner/tuner/source",
		"github.com/gatetuner/gatetuner/tuner/config",
	} {
		if slices.Contains(deps, bad) {
			t.Errorf("package decide depends on %s", bad)
		}
	}
	for _, p := range deps {
		if strings.HasPrefix(p, "k8s.io/") {
			t.Errorf("package decide depends on %s", p)
		}
	}
	imports := list(`{{join .Imports " "}}`)
	for _, bad := range []string{"os", "io/fs", "io/ioutil", "path/filepath", "context", "syscall", "net/url", "log", "log/slog"} {
		if slices.Contains(imports, bad) {
			t.Errorf("package decide imports %s", bad)
		}
	}
}
