package tuner

import (
	"context"
	"log/slog"
	"time"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/exporter"
	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/decide"
	"github.com/gatetuner/gatetuner/tuner/shadow"
)

// record logs the cycle's decision record and reports it in the metrics.
func (t *Tuner) record(rep *Report, took time.Duration) {
	attrs := []any{"target", rep.Target, "result", rep.Result, "took", took.Round(time.Millisecond)}
	if rep.Hold != nil {
		attrs = append(attrs, "hold", rep.Hold.Reason, "why", rep.Hold.Detail)
	}
	if r := rep.Recommendation; r != nil {
		attrs = append(attrs, "mode", r.Mode, "barTokens", decide.BarText(r.EffectiveBarTokens), "currentBarTokens", decide.BarText(rep.Current.BarTokens),
			"confidence", r.Confidence, "wronglyHeldNow", decide.PctText(r.Evidence.Shadow.Current.Rates.WronglyHeld),
			"wronglyHeldRecommended", decide.PctText(r.Evidence.Shadow.Recommended.Rates.WronglyHeld), "source", r.Evidence.Source)
	}
	if rep.Error != "" {
		attrs = append(attrs, "error", rep.Error)
	}
	level := slog.LevelInfo
	if rep.Result == ResultError || rep.Result == ResultRolledBack {
		level = slog.LevelWarn
	}
	t.log().Log(context.Background(), level, "cycle", attrs...)

	m := t.Metrics
	if m == nil {
		return
	}
	tg := rep.Target
	m.Cycles.WithLabelValues(tg, string(rep.Result)).Inc()
	m.CycleDuration.WithLabelValues(tg).Observe(took.Seconds())
	m.LastCycle.WithLabelValues(tg).Set(float64(rep.At.Unix()))
	m.TargetUp.WithLabelValues(tg).Set(boolf(rep.Result != ResultError))
	m.HoldActive.DeletePartialMatch(map[string]string{"target": tg})
	m.RecommendationPending.DeletePartialMatch(map[string]string{"target": tg})
	if a := rep.Approval; a != nil && a.Pending() {
		m.RecommendationPending.WithLabelValues(tg, a.Hash).Set(1)
	}
	if rep.Hold != nil {
		m.Holds.WithLabelValues(tg, string(rep.Hold.Reason)).Inc()
		m.HoldActive.WithLabelValues(tg, string(rep.Hold.Reason)).Set(1)
	}
	switch rep.Result {
	case ResultApplied:
		m.Applies.WithLabelValues(tg, "ok").Inc()
		m.LastApply.WithLabelValues(tg).Set(float64(rep.At.Unix()))
	case ResultRolledBack:
		m.Applies.WithLabelValues(tg, "rolled_back").Inc()
		reason := "rollout"
		if rep.Hold != nil {
			reason = string(rep.Hold.Reason)
		}
		m.Rollbacks.WithLabelValues(tg, reason).Inc()
	case ResultError:
		if rep.Apply == nil && rep.Recommendation != nil && rep.Mode != "off" && rep.Error != "" {
			m.Applies.WithLabelValues(tg, "failed").Inc()
		}
	}
	if c := rep.cost; c != nil {
		m.CycleQueries.WithLabelValues(tg).Set(float64(c.queries))
		m.CycleReplayed.WithLabelValues(tg).Set(float64(c.replayed))
	}
	t.recordParameters(rep)
	if e := rep.Estimates; e != nil {
		t.recordEstimates(tg, e)
	}
	if rep.shadowCur != nil {
		t.recordShadow(tg, exporter.SettingsCurrent, rep.shadowCur, rep.shadowScale, rep.Recommendation, true)
		t.recordShadow(tg, exporter.SettingsRecommended, rep.shadowRec, rep.shadowScale, rep.Recommendation, false)
		for q, v := range map[string]*float64{"p50": msToSeconds(rep.gateInput.PenaltyMs.P50), "p90": msToSeconds(rep.gateInput.PenaltyMs.P90), "p99": msToSeconds(rep.gateInput.PenaltyMs.P99)} {
			setOrDelete(m.GateInputPenalty.WithLabelValues(tg, q), v, func() { m.GateInputPenalty.DeleteLabelValues(tg, q) })
		}
		for q, v := range map[string]*float64{"p50": rep.gateInput.GapMinusMatchedTokens.P50, "p90": rep.gateInput.GapMinusMatchedTokens.P90, "p99": rep.gateInput.GapMinusMatchedTokens.P99} {
			setOrDelete(m.GateInputGap.WithLabelValues(tg, q), v, func() { m.GateInputGap.DeleteLabelValues(tg, q) })
		}
		ev := rep.Recommendation.Evidence
		m.DecisionSource.DeletePartialMatch(map[string]string{"target": tg})
		m.DecisionSource.WithLabelValues(tg, ev.Source).Set(1)
		m.ShadowWindowStart.WithLabelValues(tg).Set(float64(ev.Window.From.Unix()))
		setOrDelete(m.RestartCost.WithLabelValues(tg), ev.RestartCost.DelaySeconds, func() { m.RestartCost.DeleteLabelValues(tg) })
		m.RestartSaving.WithLabelValues(tg).Set(ev.Objective.SavingOverCooldownSeconds)
	}
}

func (t *Tuner) recordParameters(rep *Report) {
	m, tg := t.Metrics, rep.Target
	set := func(settings string, maxMs, ppt float64, bar *float64, mode string) {
		m.Parameter.WithLabelValues(tg, settings, "maxTTFTPenaltyMs").Set(maxMs)
		m.Parameter.WithLabelValues(tg, settings, "peakPrefillThroughput").Set(ppt)
		if bar != nil {
			m.Parameter.WithLabelValues(tg, settings, "barTokens").Set(*bar)
		} else {
			m.Parameter.DeleteLabelValues(tg, settings, "barTokens")
		}
		m.PenaltyMode.DeletePartialMatch(map[string]string{"target": tg, "settings": settings})
		m.PenaltyMode.WithLabelValues(tg, settings, mode).Set(1)
	}
	c := rep.Current
	if c.Mode != "" {
		set(exporter.SettingsCurrent, c.MaxTTFTPenaltyMs, c.PeakPrefillThroughput, c.BarTokens, c.Mode)
	}
	if r := rep.Recommendation; r != nil {
		set(exporter.SettingsRecommended, r.MaxTTFTPenaltyMs, r.PeakPrefillThroughput, r.EffectiveBarTokens, r.Mode)
	}
}

func (t *Tuner) recordEstimates(tg string, e *estimator.Estimates) {
	m := t.Metrics
	d := e.DrainRate
	m.EstimateConfidence.WithLabelValues(tg).Set(d.Confidence)
	conclusive := d.Value != nil && d.Status != estimator.StatusInconclusive
	m.EstimateConclusive.WithLabelValues(tg).Set(boolf(conclusive))
	if conclusive {
		m.DrainRate.WithLabelValues(tg).Set(*d.Value)
		if d.Interval != nil {
			m.DrainRateLow.WithLabelValues(tg).Set(d.Interval.Low)
			m.DrainRateHigh.WithLabelValues(tg).Set(d.Interval.High)
		}
	} else {
		m.DrainRate.DeleteLabelValues(tg)
		m.DrainRateLow.DeleteLabelValues(tg)
		m.DrainRateHigh.DeleteLabelValues(tg)
	}
	setOrDelete(m.NominalRate.WithLabelValues(tg), e.Nominal.Value, func() { m.NominalRate.DeleteLabelValues(tg) })
	setOrDelete(m.PerRequestRate.WithLabelValues(tg), e.PerRequestRate.Value, func() { m.PerRequestRate.DeleteLabelValues(tg) })
	setOrDelete(m.RequestRate.WithLabelValues(tg), e.RequestRate.Value, func() { m.RequestRate.DeleteLabelValues(tg) })
	m.EstimateReason.DeletePartialMatch(map[string]string{"target": tg})
	for _, r := range e.Reasons {
		m.EstimateReason.WithLabelValues(tg, string(r.Code)).Set(1)
	}
	m.JoinProblems.DeletePartialMatch(map[string]string{"target": tg})
	for code, n := range e.JoinProblems() {
		m.JoinProblems.WithLabelValues(tg, string(code)).Set(n)
	}
	for q, v := range map[string]*float64{"p50": e.Prompt.P50, "p90": e.Prompt.P90, "p99": e.Prompt.P99, "mean": e.Prompt.Mean} {
		setOrDelete(m.PromptTokens.WithLabelValues(tg, q), v, func() { m.PromptTokens.DeleteLabelValues(tg, q) })
	}
	for q, v := range map[string]*float64{"p50": e.Cached.P50, "p90": e.Cached.P90, "p99": e.Cached.P99, "mean": e.Cached.Mean} {
		setOrDelete(m.CachedTokens.WithLabelValues(tg, q), v, func() { m.CachedTokens.DeleteLabelValues(tg, q) })
	}
	// Freshness: how old the newest evidence is.
	if d.NewestWindowEnd != nil {
		m.DataAge.WithLabelValues(tg, "drain-rate").Set(e.At.Sub(*d.NewestWindowEnd).Seconds())
	}
	if n := len(e.InFlight.Snapshots); n > 0 {
		m.DataAge.WithLabelValues(tg, "in-flight").Set(e.At.Sub(e.InFlight.Snapshots[n-1].Time).Seconds())
	} else {
		m.DataAge.DeleteLabelValues(tg, "in-flight")
	}
}

// recordShadow adds the decisions no earlier cycle counted to the counters
// and sets the window's rates.
func (t *Tuner) recordShadow(tg, settings string, c *shadow.Counts, scale float64, rec *Recommendation, current bool) {
	m := t.Metrics
	for v := gate.Verdict(0); v < gate.NumVerdicts; v++ {
		m.ShadowDecisions.WithLabelValues(tg, settings, v.String()).Add(float64(c.Verdicts[v]))
	}
	for o := gate.Outcome(0); o < gate.NumOutcomes; o++ {
		m.ShadowOutcomes.WithLabelValues(tg, settings, o.String()).Add(float64(c.Outcomes[o]))
	}
	row := rec.Evidence.Shadow.Recommended
	if current {
		row = rec.Evidence.Shadow.Current
	}
	excess := c.ExcessTokens * scale
	m.ShadowExcessTok.WithLabelValues(tg, settings).Add(excess)
	if rec.PeakPrefillThroughput > 0 {
		m.ShadowExcessSec.WithLabelValues(tg, settings).Add(excess / rec.PeakPrefillThroughput)
	}
	setOrDelete(m.WronglyHeldRatio.WithLabelValues(tg, settings), row.Rates.WronglyHeld, func() { m.WronglyHeldRatio.DeleteLabelValues(tg, settings) })
	setOrDelete(m.ForfeitedRatio.WithLabelValues(tg, settings), row.Rates.Forfeited, func() { m.ForfeitedRatio.DeleteLabelValues(tg, settings) })
}

func setOrDelete(g interface{ Set(float64) }, v *float64, del func()) {
	if v == nil {
		del()
		return
	}
	g.Set(*v)
}

func boolf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// msToSeconds converts a millisecond value for a _seconds gauge (nil stays nil).
func msToSeconds(ms *float64) *float64 {
	if ms == nil {
		return nil
	}
	s := *ms / 1000
	return &s
}
