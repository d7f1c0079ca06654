package e2e

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim/live"
	"github.com/gatetuner/gatetuner/test/kubeharness"
	"github.com/gatetuner/gatetuner/test/promharness"
	"github.com/gatetuner/gatetuner/tuner/eppconfig"
)

// sampler records the bar in force, TTFT p90 and the true wrongly-held rate
// over time, for the plot in docs/benchmarks.md.
type sampler struct {
	held, known int64
}

func (s *sampler) take(ctx context.Context, t *testing.T, env *kubeharness.Env, ns string, p *promharness.Server, live *live.Fleet, prof gate.Profile, start time.Time) sample {
	now := time.Now()
	out := sample{T: now.Sub(start).Seconds()}
	num := func(v float64) *float64 {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil
		}
		return &v
	}
	if cm, err := env.Client.CoreV1().ConfigMaps(ns).Get(ctx, cmName, metav1.GetOptions{}); err == nil {
		if f, err := eppconfig.Parse([]byte(cm.Data[cmKey]), "configmap"); err == nil {
			if in, err := f.Select(eppconfig.Target{}); err == nil {
				if params, err := in.Params(prof); err == nil {
					st := params.Settings(prof.MissingSignal)
					out.Bar, out.Mode = num(st.BarTokens()), st.Mode.String()
				}
			}
		}
	}
	if p.Running() {
		v, _, err := p.Query(ctx, `histogram_quantile(0.9, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[30s])))`, now)
		if vec, ok := v.(model.Vector); err == nil && ok && len(vec) == 1 {
			out.TTFTP90 = num(float64(vec[0].Value))
		}
	}
	var held, known int64
	for _, ph := range live.Truth().Phases {
		held += ph.Verdicts.HeldWrong
		known += ph.Verdicts.Known()
	}
	if dk := known - s.known; dk > 0 {
		out.Held = num(float64(held-s.held) / float64(dk))
	}
	s.held, s.known = held, known
	return out
}

// writeResult saves the run for the plot (GATETUNER_E2E_OUT=dir keeps it).
func writeResult(t *testing.T, res *loopResult) {
	dir := os.Getenv("GATETUNER_E2E_OUT")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "closed-loop-"+res.Profile+".json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	svg := plotSVG(res)
	if err := os.WriteFile(filepath.Join(dir, "closed-loop-"+res.Profile+".svg"), []byte(svg), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("results in %s", p)
}
