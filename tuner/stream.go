package tuner

import (
	"context"
	"time"

	"github.com/gatetuner/gatetuner/tuner/decide"
	"github.com/gatetuner/gatetuner/tuner/source"
)

// streamOf binds a decision source to the cycle's context: the stream the
// decision consumes (decide.Decisions), resumable for a records file or
// stream, with the model's parameters for the Prometheus model.
func streamOf(ctx context.Context, src DecisionSource) decide.Decisions {
	s := stream{ctx: ctx, src: src}
	switch src := src.(type) {
	case *source.Model:
		return modelStream{stream: s, m: src}
	case source.Resumer:
		return resumableStream{stream: s, res: src}
	}
	return s
}

// stream is a decision source bound to a context.
type stream struct {
	ctx context.Context
	src DecisionSource
}

func (s stream) Kind() string { return s.src.Kind() }

func (s stream) Replay(from, to time.Time, fn func(*decide.Decision) error) error {
	return s.src.Replay(s.ctx, from, to, fn)
}

// resumableStream is a records source a later cycle resumes.
type resumableStream struct {
	stream
	res source.Resumer
}

func (s resumableStream) ReplayAfter(mark decide.Mark, from, to time.Time, fn func(*decide.Decision) error) (decide.Mark, error) {
	at, _ := mark.Pos.(source.Mark) // the zero Mark: from the start
	next, err := s.res.ReplayAfter(s.ctx, at, from, to, fn)
	return decide.Mark{Resumable: next.Resumable, Pos: next}, err
}

func (s resumableStream) Identity() any { return s.res }

// modelStream is the Prometheus model's draws.
type modelStream struct {
	stream
	m *source.Model
}

func (s modelStream) Usable() error { return s.m.Usable() }

func (s modelStream) Draws() decide.Draws {
	return decide.Draws{BlockSize: s.m.BlockSizeTokens, Budget: s.m.EndpointBudget, Seed: s.m.Seed}
}
