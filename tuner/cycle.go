package tuner

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/gatetuner/gatetuner/tuner/decide"
	"github.com/gatetuner/gatetuner/tuner/sink"
)

// Cycle runs one tuning cycle for a target with the Tuner's own memory:
// read, estimate, shadow, recommend, guard and — in configmap or rollout
// mode — write.
func (t *Tuner) Cycle(ctx context.Context, tg *Target) *Report {
	return t.CycleGroup(ctx, []*Target{tg}, nil)[0]
}

// CycleGroup runs one cycle for targets that share one EPP config with the
// Tuner's own memory (CycleGroupWith).
func (t *Tuner) CycleGroup(ctx context.Context, tgs []*Target, joint sink.Sink) []*Report {
	return t.CycleGroupWith(ctx, &t.memory, tgs, joint)
}

// CycleGroupWith runs one cycle for targets that share one EPP config
// (filter instances of one ConfigMap or file), each with its memory in mem:
// each target is planned on its own — gather, decide, assemble — and the
// edits of every target that passes all guards are written together
// through joint, in one write and, in rollout mode, one EPP restart. joint
// must manage all the targets' plugins (sink.Merge); it is used only when
// two or more targets write.
func (t *Tuner) CycleGroupWith(ctx context.Context, mem *Memories, tgs []*Target, joint sink.Sink) []*Report {
	reps := make([]*Report, len(tgs))
	plans := make([]*writePlan, len(tgs))
	mems := make([]*Memory, len(tgs))
	starts := make([]time.Time, len(tgs))
	spans := make([]trace.Span, len(tgs))
	ctxs := make([]context.Context, len(tgs))
	finished := false
	defer func() {
		if !finished { // a panic: end the spans before it propagates
			for _, sp := range spans {
				if sp != nil {
					sp.End()
				}
			}
		}
	}()
	var ready []int
	for i, tg := range tgs {
		starts[i] = t.now()
		mems[i] = mem.take(tg.Config.Name)
		ctxs[i], spans[i] = t.tracer().Start(ctx, "gatetuner.cycle", trace.WithAttributes(attribute.String("gatetuner.target", tg.Config.Name)))
		reps[i], plans[i] = t.plan(ctxs[i], tg, mems[i]) //nolint:contextcheck // ctxs[i] is ctx with the target's span
		if plans[i] != nil {
			ready = append(ready, i)
		}
		t.announceApproval(ctxs[i], tg, mems[i], reps[i])     //nolint:contextcheck // ctxs[i] is ctx with the target's span
		t.announceJoinProblems(ctxs[i], tg, mems[i], reps[i]) //nolint:contextcheck // ctxs[i] is ctx with the target's span
	}
	switch {
	case len(ready) == 1 || len(ready) > 1 && joint == nil:
		for _, i := range ready {
			t.apply(ctxs[i], tgs[i].Sink, reps[i], plans[i]) //nolint:contextcheck // ctxs[i] is ctx with the target's span
		}
	case len(ready) > 1:
		t.applyJoint(ctx, joint, reps, plans, ready)
	}
	for i, rep := range reps {
		span := spans[i]
		span.SetAttributes(attribute.String("gatetuner.result", string(rep.Result)))
		if rep.Hold != nil {
			span.SetAttributes(attribute.String("gatetuner.hold", string(rep.Hold.Reason)))
		}
		if rep.Result == ResultError {
			span.SetStatus(codes.Error, rep.Error)
		}
		span.End()
		t.record(rep, t.now().Sub(starts[i])) //nolint:contextcheck // metrics and the cycle log line take no context
		mem.put(tgs[i].Config.Name, mems[i])
	}
	finished = true
	return reps
}

// plan runs one target's cycle up to the write, stage after stage — each
// gather stage reads through a port, each decide stage is package decide's
// pure code over what was gathered — and assembles the report; it returns
// what to write when the cycle should write.
func (t *Tuner) plan(ctx context.Context, tg *Target, mem *Memory) (*Report, *writePlan) {
	c := &cycle{now: t.now()}
	c.read, c.halt = t.readTarget(ctx, tg) // gather: the EPP config and the target's state (sink)
	if c.halt == nil {
		c.halt = decide.Admit(tg.Profile, c.read.cur) // decide: a gate the tuner tunes
	}
	if c.halt == nil {
		c.evidence, c.halt = t.gatherEvidence(ctx, tg, mem, c.read, c.now) // gather: estimates, the history's spans, the decision stream
	}
	if c.halt == nil {
		w := t.weigh(ctx, c.evidence, mem)            // decide: candidates, shadow replay, choice, evidence, apply window
		c.recent = t.gatherRecent(ctx, tg, c.read, w) // gather: the last minutes' estimate, when a restart now is priced
		c.outcome = t.settle(ctx, w, c.recent)        // decide: restart price, confidence, edit, guards, the write or the hold
	}
	rep := c.assemble(tg) // assemble: the report
	return rep, c.writePlan()
}

// weigh runs decide.Weigh in the shadow stage's span.
func (t *Tuner) weigh(ctx context.Context, ev *gathered, mem *Memory) *decide.Weighed {
	_, span := t.stage(ctx, "shadow")
	defer span.End()
	w := decide.Weigh(&ev.input, &mem.carry)
	if s := w.Tally(); s != nil {
		span.SetAttributes(attribute.Int("gatetuner.candidates", s.Candidates), attribute.Int64("gatetuner.replayed_decisions", s.Replayed))
	}
	return w
}

// settle runs decide.Settle in the guards stage's span.
func (t *Tuner) settle(ctx context.Context, w *decide.Weighed, recent *recentEstimate) *decide.Outcome {
	_, span := t.stage(ctx, "guards")
	defer span.End()
	return decide.Settle(w, recent.decided())
}
