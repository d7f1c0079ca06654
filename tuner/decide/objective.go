package decide

import (
	"math"
	"strings"
	"time"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/shadow"
)

// computedTokenRate is the pool's computed (uncached) prefill tokens per
// second: request rate × (mean prompt − mean cached); 0 when unknown.
func computedTokenRate(e *Traffic) float64 {
	if e == nil || e.RequestRate == nil || e.PromptMean == nil || e.CachedMean == nil {
		return 0
	}
	return *e.RequestRate * math.Max(0, *e.PromptMean-*e.CachedMean)
}

// clampStep moves the recommendation at most ×/÷ maxStep from the current
// bar (clamped, not held): the candidate of the same mode nearest to the
// clamped bar.
func clampStep(cands []Candidate, best int, maxStep, floor float64) (int, *StepNote) {
	cur := cands[0].Bar
	want := cands[best].Bar
	if best == 0 || gate.IsNoBar(cur) || maxStep <= 1 {
		return best, nil
	}
	lo, hi := cur/maxStep, cur*maxStep
	target := want
	switch {
	case gate.IsNoBar(want) || want > hi*(1+1e-9):
		target = hi
	case want < lo*(1-1e-9):
		target = lo
	default:
		return best, nil
	}
	idx, bestD := best, math.Inf(1)
	for i, c := range cands[1:] {
		if c.Settings.Mode != cands[best].Settings.Mode || gate.IsNoBar(c.Bar) || (c.Bar < floor && c.Bar < lo) {
			continue
		}
		if d := barDistance(c.Bar, target); d < bestD {
			idx, bestD = i+1, d
		}
	}
	return idx, &StepNote{WantedBarTokens: barPtr(want), ClampedBarTokens: barPtr(cands[idx].Bar), MaxStep: maxStep}
}

func costPair(cur, rec float64, width, cooldown time.Duration, rate float64) CostPair {
	c := CostPair{Current: cur, Recommended: rec}
	if cur > 0 {
		r := rec / cur
		c.Ratio = &r
	}
	if width > 0 {
		c.SavingPerSecond = (cur - rec) / width.Seconds()
		c.SavingOverCooldown = c.SavingPerSecond * cooldown.Seconds()
	}
	if rate > 0 {
		a, b := cur/rate, rec/rate
		c.CurrentSeconds, c.RecommendedSeconds = &a, &b
	}
	return c
}

// maxRestartUtilization caps ρ in the restart cost: at or past saturation
// the backlog would never drain and the cost would be infinite.
const maxRestartUtilization = 0.95

// restartCost estimates what an EPP restart costs. For the warm-up,
// requests land without affinity, and on N endpoints a request finds its
// prefix on the endpoint it lands on with probability 1/N: B = requestRate ×
// mean cached × warm-up × (N−1)/N tokens are prefilled again. That backlog
// drains only on the pool's spare capacity C·(1−ρ), and every request that
// arrives meanwhile queues behind what is left of it (spread over the
// endpoints, B(t)/C seconds), so the delay summed over requests is
// ∫λ·B(t)/C dt = λ·B² / (2·C²·(1−ρ)) request-seconds — quadratic in the
// backlog and steep near saturation, which is what the closed loop measured
// (docs/tuner.md). rate and rates are the per-endpoint prefill rates the
// objective uses.
func restartCost(e *Traffic, warmup time.Duration, rate float64, rates map[string]float64) RestartCost {
	return PriceRestart(e, e, warmup, rate, rates)
}

// PriceRestart prices a restart whose backlog comes from the traffic of
// backlog (the sessions that come back right after it: requestRate and mean
// cached tokens there) and whose queueing is felt by the traffic of arrivals
// (its request rate λ and utilization ρ). restartCost prices both from one
// window; a restart now takes its backlog from the last minutes' traffic.
func PriceRestart(backlog, arrivals *Traffic, warmup time.Duration, rate float64, rates map[string]float64) RestartCost {
	rc := RestartCost{WarmupSeconds: warmup.Seconds(),
		Formula: "backlog B = requestRate × mean cached × warm-up × (N−1)/N; delay = λ·B² / (2·C²·(1−ρ))"}
	eps := arrivals.Endpoints
	if len(eps) == 0 {
		eps = backlog.Endpoints
	}
	n := float64(len(eps))
	var missing []string
	if backlog.RequestRate == nil || arrivals.RequestRate == nil {
		missing = append(missing, "request rate")
	}
	if backlog.CachedMean == nil {
		missing = append(missing, "mean cached tokens")
	}
	if n < 1 {
		missing = append(missing, "routed endpoints")
	}
	if len(missing) > 0 {
		rc.Unknown = strings.Join(missing, ", ") + " unknown"
		return rc
	}
	lambda := *arrivals.RequestRate
	rc.Tokens = *backlog.RequestRate * *backlog.CachedMean * warmup.Seconds() * (n - 1) / n
	for _, ep := range eps {
		r, ok := rates[ep]
		if !ok {
			r = rate
		}
		rc.CapacityTokensPerSecond += r
	}
	work := computedTokenRate(arrivals)
	if rc.CapacityTokensPerSecond <= 0 || work <= 0 {
		rc.Formula += " (capacity or computed prefill unknown: delay not priced)"
		return rc
	}
	rho := work / rc.CapacityTokensPerSecond
	rc.Utilization = &rho
	spare := rc.CapacityTokensPerSecond * (1 - math.Min(rho, maxRestartUtilization))
	drain := rc.Tokens / spare
	delay := lambda * rc.Tokens * rc.Tokens / (2 * rc.CapacityTokensPerSecond * spare)
	rc.DrainSeconds, rc.DelaySeconds = &drain, &delay
	return rc
}

// consistencyExcess is the fraction of sub-windows (with known verdicts) in
// which the recommendation costs no more than the current settings.
func consistencyExcess(parts []*shadow.Accumulator, rec int) float64 {
	n, ok := 0, 0
	for _, p := range parts {
		if p.Counts(0).Known() == 0 {
			continue
		}
		n++
		if p.Counts(rec).ExcessTokens <= p.Counts(0).ExcessTokens {
			ok++
		}
	}
	if n == 0 {
		return 0
	}
	return float64(ok) / float64(n)
}

// consistency is the fraction of sub-windows (with decisions) in which the
// recommendation's objective is no worse than the current settings'.
func consistency(fb *shadow.Feedback, rec int) float64 {
	n, ok := 0, 0
	for p := 0; p < fb.Parts(); p++ {
		cur := fb.PartOutcome(p, 0)
		if cur.Decisions == 0 {
			continue
		}
		n++
		if fb.PartOutcome(p, rec).P90TTFTSeconds <= cur.P90TTFTSeconds {
			ok++
		}
	}
	if n == 0 {
		return 0
	}
	return float64(ok) / float64(n)
}

// feedbackRates returns the drain rates the feedback replay turns tokens
// into seconds with: the drain-rate estimate (per endpoint where measured),
// else the nominal estimate, else the configured peakPrefillThroughput; and
// which one it used.
func feedbackRates(est *Estimate, params gate.Params) (float64, map[string]float64, string) {
	for _, c := range []struct {
		r    *Rate
		name string
	}{{&est.Drain, "drain-rate estimate"}, {&est.Nominal, "nominal estimate"}} {
		if c.r.Value != nil && *c.r.Value > 0 && !math.IsInf(*c.r.Value, 0) && !c.r.Inconclusive {
			return *c.r.Value, c.r.PerEndpoint, c.name // keyed by pod and by in-flight endpoint name
		}
	}
	return params.PeakPrefillThroughput, nil, "configured peakPrefillThroughput"
}

// objectiveView is the evidence of the objective for current and recommended.
func objectiveView(cands []Candidate, outcomes []shadow.FeedbackOutcome, rec int, width, cooldown time.Duration, rateSource string) ObjectiveView {
	v := ObjectiveView{Name: ObjectiveFeedbackTTFTP90, RateSource: rateSource,
		Current:     FeedbackRow{Settings: cands[0].Settings.String(), FeedbackOutcome: outcomes[0]},
		Recommended: FeedbackRow{Settings: cands[rec].Settings.String(), FeedbackOutcome: outcomes[rec]}}
	if c := outcomes[0].P90TTFTSeconds; c > 0 {
		r := outcomes[rec].P90TTFTSeconds / c
		v.Ratio = &r
	}
	if width > 0 {
		v.SavingOverCooldownTokens = (outcomes[0].QueueTokens - outcomes[rec].QueueTokens) / width.Seconds() * cooldown.Seconds()
	}
	return v
}

// objective scores the candidates in every window of the day — lower is
// better, +Inf excludes — combines a candidate's windows into its day
// score, states the 10 % rule's absolute tolerance per window, and judges
// the recommendation's consistency over the windows. The choose stage
// depends only on this (choice.go, choose).
type objective interface {
	// name is what the recommendation is chosen by (ObjectiveView.Name).
	name() string
	// windowScores are the candidates' scores per window ([window][candidate]).
	windowScores(cands []Candidate, r *replayed) [][]float64
	// dayScore combines one candidate's window scores, request-weighted.
	dayScore(perWindow []float64, r *replayed) float64
	// slack is the 10 % rule's absolute tolerance in window k: where the
	// current score is about 0, 10 % of it allows nothing.
	slack(r *replayed, k int) float64
	// floor is the lowest bar considered (0: none).
	floor() float64
	// consistency is the fraction of windows in which candidate rec is
	// no worse than the current settings.
	consistency(r *replayed, rec int) float64
	// amend fills the objective's own numbers into the evidence's view.
	amend(v *ObjectiveView, r *replayed, ch choice, cooldown time.Duration)
}

// Day-rule constants: no window may be estimated worse than the current
// settings by more than windowTolerance (relative) plus the objective's
// absolute slack.
const (
	windowTolerance = 0.10
	// ttftSlackSeconds is the feedback objective's absolute slack: TTFT p90
	// differences below 5 ms are below what the replay resolves.
	ttftSlackSeconds = 0.005
	// excessSlackBlocks is the excess-tokens objective's absolute slack per
	// request, in KV blocks (a release forfeits whole blocks).
	excessSlackBlocks = 0.1
)

// objectiveFor is the objective of a decision source. With gate records:
// the feedback replay's estimated TTFT p90, which sees the load each
// candidate's own releases cause (release chains and their queueing) where
// the per-decision excess cost cannot. With the Prometheus model, which
// knows where a request's prefix is cached only on its home endpoint, the
// feedback replay sees every release forfeit the whole prefix and is too
// pessimistic to act (docs/tuner.md): there the objective is the
// per-decision excess cost, with the release-chain floor — bars below the
// p99 prompt length are not recommended, because a released request lands
// its whole prompt on another endpoint and makes it look over such a bar
// to the next request.
func objectiveFor(kind string, est *Estimate, blockSize int) objective {
	if kind != SourceKindModel {
		return feedbackTTFT{}
	}
	var floor float64
	switch {
	case est.PromptP99 != nil:
		floor = *est.PromptP99
	case est.PromptP90 != nil:
		floor = *est.PromptP90
	}
	return excessTokens{releaseChainFloor: floor, blockSize: float64(max(blockSize, 1))}
}

// feedbackTTFT is the feedback replay's estimated TTFT p90 per window; the
// day's is the request-weighted mean of the windows'.
type feedbackTTFT struct{}

func (feedbackTTFT) name() string   { return ObjectiveFeedbackTTFTP90 }
func (feedbackTTFT) floor() float64 { return 0 }

func (feedbackTTFT) windowScores(cands []Candidate, r *replayed) [][]float64 {
	ws := make([][]float64, r.fb.Parts())
	for k := range ws {
		ws[k] = make([]float64, len(cands))
		for i := range cands {
			ws[k][i] = r.fb.PartOutcome(k, i).P90TTFTSeconds
		}
	}
	return ws
}

func (feedbackTTFT) dayScore(perWindow []float64, r *replayed) float64 {
	var sum, w float64
	for k, s := range perWindow {
		if r.reqs[k] <= 0 {
			continue
		}
		sum += r.reqs[k] * s
		w += r.reqs[k]
	}
	if w == 0 {
		return 0
	}
	return sum / w
}

func (feedbackTTFT) slack(*replayed, int) float64 { return ttftSlackSeconds }

func (feedbackTTFT) consistency(r *replayed, rec int) float64 { return consistency(r.fb, rec) }

// amend states the gain as the day scores' ratio (what the gain guard judges).
func (feedbackTTFT) amend(v *ObjectiveView, _ *replayed, ch choice, _ time.Duration) {
	v.Ratio = nil
	if c := ch.scores[0]; c > 0 && !math.IsInf(c, 0) {
		x := ch.scores[ch.rec] / c
		v.Ratio = &x
	}
}

// excessTokens is the per-decision excess cost in tokens per window (the
// model's draws scaled to the window's requests), with bars below the
// release-chain floor excluded; the day's is the sum over the windows.
type excessTokens struct {
	releaseChainFloor float64
	blockSize         float64
}

func (excessTokens) name() string     { return ObjectiveExcessTokens }
func (o excessTokens) floor() float64 { return o.releaseChainFloor }

func (o excessTokens) windowScores(cands []Candidate, r *replayed) [][]float64 {
	ws := make([][]float64, len(r.windowCosts))
	for k, row := range r.windowCosts {
		ws[k] = make([]float64, len(cands))
		for i := range cands {
			ws[k][i] = row[i]
			if cands[i].Bar < o.releaseChainFloor {
				ws[k][i] = math.Inf(1)
			}
		}
	}
	return ws
}

func (excessTokens) dayScore(perWindow []float64, _ *replayed) float64 {
	var sum float64
	for _, s := range perWindow {
		sum += s
	}
	return sum
}

func (o excessTokens) slack(r *replayed, k int) float64 {
	return excessSlackBlocks * o.blockSize * r.reqs[k]
}

func (excessTokens) consistency(r *replayed, rec int) float64 { return consistencyExcess(r.parts, rec) }

func (o excessTokens) amend(v *ObjectiveView, r *replayed, ch choice, cooldown time.Duration) {
	v.Name = o.name()
	v.Ratio = nil
	if r.costs[0] > 0 {
		x := r.costs[ch.rec] / r.costs[0]
		v.Ratio = &x
	}
	v.SavingOverCooldownTokens = costPair(r.costs[0], r.costs[ch.rec], r.width, cooldown, 0).SavingOverCooldown
}
