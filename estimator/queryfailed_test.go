package estimator

import (
	"testing"

	"github.com/gatetuner/gatetuner/estimator/prom"
)

// TestQueryFailedIsEveryQueryFailureButCanceled: a query failure of any
// kind but the caller's cancellation maps to a reason QueryFailed names;
// no reason a query that answered can carry is one.
func TestQueryFailedIsEveryQueryFailureButCanceled(t *testing.T) {
	failures := map[ReasonCode]bool{}
	for _, k := range []prom.Kind{prom.KindUnavailable, prom.KindTimeout, prom.KindCanceled, prom.KindBadQuery, prom.KindRejected, prom.KindBadResponse} {
		code := reasonFor(&prom.Error{Kind: k, Query: "up"})
		if got, want := code.QueryFailed(), k != prom.KindCanceled; got != want {
			t.Errorf("kind %s: reason %s QueryFailed() = %v, want %v", k, code, got, want)
		}
		failures[code] = k != prom.KindCanceled
	}
	for _, code := range AllReasonCodes() {
		if code.QueryFailed() && !failures[code] {
			t.Errorf("%s: QueryFailed() but no query failure maps to it", code)
		}
	}
	e := &Estimates{Reasons: []Reason{{Code: ReasonNoSeries, Part: "drainRate"}, {Code: ReasonPrometheusTimeout, Part: "prompt"}}}
	if r := e.QueryFailure(); r == nil || r.Code != ReasonPrometheusTimeout || r.Part != "prompt" {
		t.Errorf("QueryFailure() = %+v, want the prompt's timeout", r)
	}
	if r := (&Estimates{Reasons: []Reason{{Code: ReasonNoSeries}}}).QueryFailure(); r != nil {
		t.Errorf("QueryFailure() = %+v without a query failure", r)
	}
	if r := (*Estimates)(nil).QueryFailure(); r != nil {
		t.Errorf("nil estimates: QueryFailure() = %+v", r)
	}
}
