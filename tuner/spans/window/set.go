package window

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"sync"
	"sync/atomic"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"

	"github.com/gatetuner/gatetuner/tuner/spans"
)

// Set is the windows of every target, with the router that sends each
// span to its target's window. It is safe for concurrent use.
type Set struct {
	router  *spans.Router
	windows []*Window
	pool    sync.Pool // *[][]spans.GateSpan, one batch per target

	mu     sync.Mutex
	counts spans.Counts
	routed struct{ unrouted, ambiguous atomic.Uint64 }
}

// OpenSet opens one window per target of router, each in its own
// subdirectory of dir (named after the target, path-escaped); dir "" keeps
// every window in memory only.
func OpenSet(dir string, router *spans.Router, o Options) (*Set, error) {
	s := &Set{router: router}
	for _, t := range router.Targets() {
		sub := ""
		if dir != "" {
			esc := url.PathEscape(t.Name)
			if esc == "." || esc == ".." {
				return nil, fmt.Errorf("span target %q: not a usable directory name", t.Name)
			}
			sub = filepath.Join(dir, esc)
		}
		w, err := Open(sub, t.Name, o)
		if err != nil {
			_ = s.Close()
			return nil, err
		}
		s.windows = append(s.windows, w)
	}
	s.pool.New = func() any {
		b := make([][]spans.GateSpan, len(s.windows))
		return &b
	}
	return s, nil
}

// Windows returns the windows in the router's target order.
func (s *Set) Windows() []*Window { return s.windows }

// Window returns the named target's window, nil when there is none.
func (s *Set) Window(name string) *Window {
	for _, w := range s.windows {
		if w.name == name {
			return w
		}
	}
	return nil
}

// Ingested is what one Ingest did with a request's spans.
type Ingested struct {
	spans.Counts
	// Unrouted and Ambiguous gate spans matched no target or several.
	Unrouted, Ambiguous uint64
	// Stored gate spans; Old and Future refused by a window's bounds.
	Stored, Old, Future uint64
}

// Rejected counts the gate spans not stored.
func (i *Ingested) Rejected() uint64 {
	return i.MalformedTotal() + i.Unrouted + i.Ambiguous + i.Old + i.Future
}

// Ingest extracts the gate spans of req and appends them to their targets'
// windows. A window's write error is returned; its spans are still in
// memory and counted as stored.
func (s *Set) Ingest(req *coltracepb.ExportTraceServiceRequest) (Ingested, error) {
	var in Ingested
	bp := s.pool.Get().(*[][]spans.GateSpan)
	batches := *bp
	lastRes, lastRoute := spans.Resource{}, spans.Unrouted
	first := true
	spans.Extract(req, &in.Counts, func(gs *spans.GateSpan) {
		if first || gs.Resource != lastRes {
			lastRes, lastRoute, first = gs.Resource, s.router.Route(&gs.Resource), false
		}
		switch lastRoute {
		case spans.Unrouted:
			in.Unrouted++
		case spans.Ambiguous:
			in.Ambiguous++
		default:
			batches[lastRoute] = append(batches[lastRoute], *gs)
		}
	})
	var errs []error
	for i, b := range batches {
		if len(b) == 0 {
			continue
		}
		a, err := s.windows[i].Append(b)
		in.Stored += uint64(a.Stored)
		in.Old += uint64(a.Old)
		in.Future += uint64(a.Future)
		if err != nil {
			errs = append(errs, err)
		}
		clear(b)
		batches[i] = b[:0]
	}
	s.pool.Put(bp)
	s.routed.unrouted.Add(in.Unrouted)
	s.routed.ambiguous.Add(in.Ambiguous)
	s.mu.Lock()
	s.counts.Add(&in.Counts)
	s.mu.Unlock()
	return in, errors.Join(errs...)
}

// SetStats are a Set's counts since it was opened.
type SetStats struct {
	spans.Counts
	Unrouted, Ambiguous uint64
	// Targets holds each window's stats, in target order.
	Targets []Stats
}

// Stats returns the set's counts.
func (s *Set) Stats() SetStats {
	var st SetStats
	s.mu.Lock()
	st.Counts = s.counts
	s.mu.Unlock()
	st.Unrouted, st.Ambiguous = s.routed.unrouted.Load(), s.routed.ambiguous.Load()
	for _, w := range s.windows {
		st.Targets = append(st.Targets, w.Stats())
	}
	return st
}

// Sync makes every window's appended records durable.
func (s *Set) Sync() error {
	var errs []error
	for _, w := range s.windows {
		errs = append(errs, w.Sync())
	}
	return errors.Join(errs...)
}

// Close closes every window's files.
func (s *Set) Close() error {
	var errs []error
	for _, w := range s.windows {
		errs = append(errs, w.Close())
	}
	return errors.Join(errs...)
}
