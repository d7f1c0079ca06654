package spans_test

import (
	"testing"

	"github.com/gatetuner/gatetuner/tuner/spans"
)

func TestRouterSendsEachResourceToTheOneTargetItMatches(t *testing.T) {
	r, err := spans.NewRouter([]spans.Target{
		{Name: "glm", Namespace: "llm", PodPattern: "glm-epp-.*"},
		{Name: "qwen", Namespace: "llm", PodPattern: "qwen-epp-.*", ServiceName: "llm-d-router/epp"},
		{Name: "all-of-other", Namespace: "other"},
		{Name: "overlap", PodPattern: "glm-epp-x.*"},
	})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		res  spans.Resource
		want spans.Route
	}{
		{spans.Resource{Namespace: "llm", Pod: "glm-epp-1"}, 0},
		{spans.Resource{Namespace: "llm", Pod: "xglm-epp-1"}, spans.Unrouted}, // anchored
		{spans.Resource{Namespace: "llm", Pod: "qwen-epp-1", ServiceName: "llm-d-router/epp"}, 1},
		{spans.Resource{Namespace: "llm", Pod: "qwen-epp-1", ServiceName: "llm-d-epp"}, spans.Unrouted},
		{spans.Resource{Namespace: "other", Pod: "anything"}, 2},
		{spans.Resource{Namespace: "llm", Pod: "glm-epp-x1"}, spans.Ambiguous},
		{spans.Resource{}, spans.Unrouted},
	}
	for _, c := range cases {
		if got := r.Route(&c.res); got != c.want {
			t.Errorf("%+v: got %d want %d", c.res, got, c.want)
		}
	}
}

func TestRouterRefusesTargetsThatCannotBeTold(t *testing.T) {
	for name, ts := range map[string][]spans.Target{
		"no name":       {{Namespace: "a"}},
		"twice":         {{Name: "a", Namespace: "a"}, {Name: "a", Namespace: "b"}},
		"no matcher":    {{Name: "a"}},
		"bad pod regex": {{Name: "a", PodPattern: "("}},
	} {
		if _, err := spans.NewRouter(ts); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
