package daemon

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gatetuner/gatetuner/tuner"
)

// Problem is why a target cannot work, found by the startup check.
type Problem struct {
	Target string `json:"target"`
	// Check is "prometheus" or "epp-config".
	Check  string `json:"check"`
	Detail string `json:"detail"`
}

func (p Problem) String() string { return fmt.Sprintf("%s: %s: %s", p.Target, p.Check, p.Detail) }

// StartupCheck asks Prometheus once and reads every target's EPP config.
// For each target that cannot work it logs a warning, sets
// gatetuner_target_up to 0 and puts an error report in /reports, each
// until the target's first cycle replaces it; it returns the problems. It
// neither stops the daemon (an outage may heal, and cycles hold and say
// why) nor changes /readyz.
func (d *Daemon) StartupCheck(ctx context.Context) []Problem {
	var promErr error
	if d.q != nil {
		timeout := d.cfg.Prometheus.Timeout
		if timeout <= 0 {
			timeout = 30 * time.Second
		}
		qctx, cancel := context.WithTimeout(ctx, timeout)
		_, _, promErr = d.q.Query(qctx, "vector(1)", d.deps.Clock())
		cancel()
	}
	var out []Problem
	for _, tg := range d.targets {
		name := tg.Config.Name
		var ps []Problem
		if promErr != nil {
			ps = append(ps, Problem{Target: name, Check: "prometheus", Detail: fmt.Sprintf("%s cannot be queried: %v", d.cfg.Prometheus.URL, promErr)})
		}
		if _, err := tg.Sink.Read(ctx); err != nil {
			ps = append(ps, Problem{Target: name, Check: "epp-config", Detail: err.Error()})
		}
		if len(ps) == 0 {
			continue
		}
		var why []string
		for _, p := range ps {
			d.log.Warn("target cannot work: its cycles will error or hold until this is fixed", "target", name, "check", p.Check, "detail", p.Detail)
			why = append(why, p.Check+": "+p.Detail)
		}
		d.deps.Metrics.TargetUp.WithLabelValues(name).Set(0)
		d.mu.Lock()
		if _, ok := d.reports[name]; !ok {
			d.reports[name] = &tuner.Report{Target: name, At: d.deps.Clock(), Result: tuner.ResultError,
				Error: "startup check: " + strings.Join(why, "; ")}
		}
		d.mu.Unlock()
		out = append(out, ps...)
	}
	return out
}
