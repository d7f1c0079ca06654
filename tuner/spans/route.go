package spans

import (
	"errors"
	"fmt"
	"regexp"
)

// Target says which senders' spans belong to one tuning target: every field
// set must match the span's resource (Namespace and ServiceName exactly,
// PodPattern as a regular expression anchored at both ends).
type Target struct {
	Name        string
	Namespace   string
	PodPattern  string
	ServiceName string
}

// Route is where a span's resource goes.
type Route int

// Routes other than a target index.
const (
	// Unrouted: no target matches.
	Unrouted Route = -1
	// Ambiguous: two or more targets match; the span is not stored.
	Ambiguous Route = -2
)

// Router routes resources to targets.
type Router struct {
	targets []Target
	pods    []*regexp.Regexp
}

// NewRouter compiles the targets. Names must be unique and non-empty, and a
// target must set at least one matcher (one matching every sender would take
// every pool's spans).
func NewRouter(targets []Target) (*Router, error) {
	r := &Router{targets: append([]Target(nil), targets...), pods: make([]*regexp.Regexp, len(targets))}
	seen := map[string]bool{}
	for i, t := range targets {
		if t.Name == "" {
			return nil, fmt.Errorf("span target %d: no name", i)
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("span target %q: named twice", t.Name)
		}
		seen[t.Name] = true
		if t.Namespace == "" && t.PodPattern == "" && t.ServiceName == "" {
			return nil, fmt.Errorf("span target %q: %w", t.Name, errNoMatcher)
		}
		if t.PodPattern != "" {
			re, err := regexp.Compile(`^(?:` + t.PodPattern + `)$`)
			if err != nil {
				return nil, fmt.Errorf("span target %q: pod pattern: %w", t.Name, err)
			}
			r.pods[i] = re
		}
	}
	return r, nil
}

var errNoMatcher = errors.New("sets no namespace, pod pattern or service name")

// Targets returns the targets in configuration order.
func (r *Router) Targets() []Target { return r.targets }

// Route returns the index of the one target res matches, Unrouted or
// Ambiguous.
func (r *Router) Route(res *Resource) Route {
	found := Unrouted
	for i := range r.targets {
		t := &r.targets[i]
		if t.Namespace != "" && t.Namespace != res.Namespace {
			continue
		}
		if t.ServiceName != "" && t.ServiceName != res.ServiceName {
			continue
		}
		if r.pods[i] != nil && !r.pods[i].MatchString(res.Pod) {
			continue
		}
		if found != Unrouted {
			return Ambiguous
		}
		found = Route(i)
	}
	return found
}
