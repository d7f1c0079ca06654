package doctor

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gatetuner/gatetuner/estimator/prom"
	"github.com/gatetuner/gatetuner/exporter"
)

// promChecks: Prometheus answers a query, and which backend serves it.
func promChecks(ctx context.Context, e *env) []Result {
	url := e.cfg.Prometheus.URL
	if err := e.promErr; err != nil {
		return []Result{
			{Name: checkPrometheus, Status: StatusFail, Reason: "prometheus-" + exporter.QueryErrorKind(prom.KindOf(err).String()),
				Detail: fmt.Sprintf("%s cannot be queried: %v", url, err),
				Fix:    "check prometheus.url (or --prometheus), that this host can reach it, and its credentials (bearerTokenFile, caFile, headers)"},
			{Name: checkBackend, Status: StatusSkip, Detail: "Prometheus cannot be queried"},
		}
	}
	out := []Result{{Name: checkPrometheus, Status: StatusPass,
		Detail: fmt.Sprintf("%s answered vector(1) in %s", url, e.promLatency.Round(time.Millisecond))}}
	bi, err := e.q.DetectBackend(ctx)
	switch {
	case err != nil:
		out = append(out, Result{Name: checkBackend, Status: StatusWarn, Detail: "the backend could not be detected: " + err.Error(),
			Fix: "the estimator is tested on Prometheus, VictoriaMetrics and Thanos (docs/estimator.md, Backends); results elsewhere are unverified"})
	case bi.Backend == prom.BackendUnknown:
		out = append(out, Result{Name: checkBackend, Status: StatusWarn, Reason: string(bi.Backend), Detail: bi.Caveat() + " (" + bi.Evidence + ")",
			Fix: "query a Prometheus, VictoriaMetrics or Thanos Querier endpoint (docs/estimator.md, Backends)"})
	default:
		detail := strings.TrimSpace(string(bi.Backend) + " " + bi.Version + " (" + bi.Evidence + ")")
		if c := bi.Caveat(); c != "" {
			detail += "; caveat: " + c
		}
		out = append(out, Result{Name: checkBackend, Status: StatusPass, Detail: detail})
	}
	return out
}
