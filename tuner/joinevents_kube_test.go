package tuner

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gatetuner/gatetuner/estimator"
	"github.com/gatetuner/gatetuner/exporter"
	"github.com/gatetuner/gatetuner/tuner/sink"
)

// joinEvents lists the gatetuner Events on the target's ConfigMap other than
// the approval ones, as "Type Reason: Note", oldest first.
func joinEvents(t *testing.T, c kubernetes.Interface, ns string) []string {
	t.Helper()
	list, err := c.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(list.Items, func(a, b eventsv1.Event) int { return a.EventTime.Compare(b.EventTime.Time) })
	var out []string
	for _, e := range list.Items {
		if e.ReportingController == sink.FieldManager && e.Regarding.Kind == "ConfigMap" && e.Regarding.Name == approveCM &&
			e.Reason != eventApprovalPending && e.Action == eventActionJoin {
			out = append(out, e.Type+" "+e.Reason+": "+e.Note)
		}
	}
	return out
}

// TestJoinProblemsBecomeEventsOncePerChange runs cycles against a real API
// server whose estimates carry join reasons: each new reason is one Warning
// Event on the ConfigMap named after the reason with its detail; the same
// reasons on the next cycle add nothing; a clean estimate adds one Normal
// JoinProblemsResolved.
func TestJoinProblemsBecomeEventsOncePerChange(t *testing.T) {
	c, ns := needKube(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	tg := approveTarget(t, c, ns, now, nil)
	tu := &Tuner{Clock: func() time.Time { return now }, Metrics: exporter.New("test", "test"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	unmatched := estimator.Reason{Code: estimator.ReasonEndpointNamesUnmatched, Part: "inFlight",
		Detail: `in-flight "qwen-0-rank-0" vs routing "qwen-0"`}
	unjoined := estimator.Reason{Code: estimator.ReasonEndpointsUnjoined, Part: "inFlight", Detail: `in-flight endpoint "old-0-rank-0" has no pod`}
	with := func(reasons, warnings []estimator.Reason) *estimator.Estimates {
		e := *cycleEstimates(now)
		e.Reasons, e.Warnings = reasons, warnings
		return &e
	}
	steps := []struct {
		name string
		est  *estimator.Estimates
		want []string // every join Event so far
	}{
		{"clean: nothing to say", with(nil, nil), nil},
		{"a join reason: one Warning", with([]estimator.Reason{unmatched}, nil), []string{
			`Warning EndpointNamesUnmatched: target "t": endpoint-names-unmatched (inFlight): in-flight "qwen-0-rank-0" vs routing "qwen-0"`}},
		{"the same reason again: nothing", with([]estimator.Reason{unmatched}, nil), nil},
		{"a second reason (a warning): one more", with([]estimator.Reason{unmatched}, []estimator.Reason{unjoined}), []string{
			`Warning EndpointsUnjoined: target "t": endpoints-unjoined (inFlight): in-flight endpoint "old-0-rank-0" has no pod`}},
		{"clean again: one Normal", with(nil, nil), []string{
			`Normal JoinProblemsResolved: target "t": the estimate joins again (was: endpoint-names-unmatched, endpoints-unjoined)`}},
		{"still clean: nothing", with(nil, nil), nil},
	}
	var want []string
	for i, s := range steps {
		now = now.Add(time.Minute)
		tg.Estimator = fixedEstimator{est: s.est}
		rep := tu.Cycle(ctx, tg)
		if rep.Estimates == nil {
			t.Fatalf("step %d (%s): no estimate in the report: %+v", i, s.name, rep)
		}
		want = append(want, s.want...)
		if got := joinEvents(t, c, ns); !slices.Equal(got, want) {
			t.Fatalf("step %d (%s): events\n%q\nwant\n%q", i, s.name, got, want)
		}
	}
}
