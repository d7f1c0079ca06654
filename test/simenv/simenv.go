// Package simenv runs the fleet simulator into an embedded Prometheus and
// builds tuner targets over it, for tests, benchmarks and the demo.
package simenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/estimator/prom"
	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/truth"
)

// EstimatorTarget returns the estimator's selection of a scenario's series:
// its vLLM pods (VLLMPods), its EPP pod, its engines' limits, and a P/D
// pool's gate profile (the export shape's pdGateProfile).
func EstimatorTarget(sc *scenario.Scenario) estimator.Target {
	t := estimator.Target{
		Name:                sc.Target,
		VLLMSelector:        fmt.Sprintf(`namespace=%q,pod=~%q`, sc.Namespace, VLLMPods(sc)),
		EPPSelector:         fmt.Sprintf(`namespace=%q,pod=%q`, sc.Namespace, sc.EPP.Pod),
		MaxNumBatchedTokens: sc.Pods.Engine.MaxNumBatchedTokens,
		MaxNumSeqs:          sc.Pods.Engine.MaxNumSeqs,
	}
	if x := sc.Exporters; x != nil && x.PrefillPods > 0 {
		t.PDGateProfile = x.PDGateProfile
	}
	return t
}

// VLLMPods is the regular expression of a scenario's vLLM pod names: its
// pods, and in a P/D pool (the export shape's prefillPods) its decode and
// prefill pods.
func VLLMPods(sc *scenario.Scenario) string {
	if x := sc.Exporters; x != nil && x.PrefillPods > 0 {
		return "(" + regexp.QuoteMeta(sc.Pods.NamePrefix) + "|" + regexp.QuoteMeta(sc.PrefillNamePrefix()) + ")-[0-9]+"
	}
	return sc.Pods.NamePrefix + "-[0-9]+"
}

// Fill runs the simulator with opt (its Metrics output replaced) and ingests
// the metrics into emb; it returns the truth and the wall time the measured
// phases end at.
func Fill(ctx context.Context, emb *prom.Embedded, sc *scenario.Scenario, opt fleetsim.Options) (*truth.Truth, time.Time, error) {
	pr, pw := io.Pipe()
	opt.Metrics = pw
	type result struct {
		tr  *truth.Truth
		err error
	}
	done := make(chan result, 1)
	go func() {
		tr, err := fleetsim.Run(ctx, sc, opt)
		pw.CloseWithError(err)
		done <- result{tr, err}
	}()
	_, ierr := emb.IngestText(ctx, pr, prom.IngestOptions{Format: prom.FormatOpenMetrics})
	_ = pr.CloseWithError(errors.New("ingestion ended"))
	res := <-done
	if res.err != nil {
		return nil, time.Time{}, fmt.Errorf("simulate %s: %w", sc.Name, res.err)
	}
	if ierr != nil {
		return nil, time.Time{}, fmt.Errorf("ingest %s metrics: %w", sc.Name, ierr)
	}
	base := opt.BaseTime
	if base.IsZero() {
		base = fleetsim.DefaultBaseTime()
	}
	return res.tr, base.Add(time.Duration(res.tr.End * float64(time.Second))), nil
}

// EPPConfig renders an EndpointPickerConfig holding the scenario's gate
// plugin with the given settings (penaltyMode written when not static or
// when the profile accepts it and writeMode is set).
func EPPConfig(sc *scenario.Scenario, s gate.Settings, writeMode bool) []byte {
	var b strings.Builder
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	fmt.Fprintf(&b, `apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: approx-prefix-cache-producer
  parameters:
    blockSizeTokens: %d
- type: inflight-load-producer
# Keep requests on the pod that holds their prompt unless it is far behind.
- name: %s
  type: prefix-cache-affinity-filter
  parameters:
    affinityThreshold: %s
    maxTTFTPenaltyMs: %s        # hand-picked at deploy time
    peakPrefillThroughput: %s   # tok/s
`, sc.EPP.PrefixIndex.BlockSizeTokens, sc.EPP.Plugin, f(s.AffinityThreshold), f(s.MaxTTFTPenaltyMs), f(s.PeakPrefillThroughput))
	if s.Mode != gate.ModeStatic || writeMode {
		fmt.Fprintf(&b, "    penaltyMode: %s\n", s.Mode)
	}
	if s.Source != gate.SourcePrefillThroughput {
		fmt.Fprintf(&b, "    ttftSource: %s\n", s.Source)
	}
	fmt.Fprintf(&b, `- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: %s
  - pluginRef: max-score-picker
`, sc.EPP.Plugin)
	return []byte(b.String())
}

// WriteEPPConfig writes EPPConfig to dir/epp-config.yaml and returns the path.
func WriteEPPConfig(dir string, sc *scenario.Scenario, s gate.Settings, writeMode bool) (string, error) {
	p := filepath.Join(dir, "epp-config.yaml")
	return p, os.WriteFile(p, EPPConfig(sc, s, writeMode), 0o644)
}

// ScalePods resizes sc's pool to pods at the same per-pod load: every
// phase's request rate scales with the pod count.
func ScalePods(sc *scenario.Scenario, pods int) {
	scale := float64(pods) / float64(sc.Pods.Count)
	sc.Pods.Count = pods
	for i := range sc.Phases {
		sc.Phases[i].RequestRate *= scale
	}
}
