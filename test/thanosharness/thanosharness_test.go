//go:build thanos

package thanosharness_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/gatetuner/gatetuner/test/promharness"
	"github.com/gatetuner/gatetuner/test/thanosharness"
)

// TestQuerierReadsBackfilledBlocks backfills an hour-old counter into a real Prometheus and
// reads it back through the sidecar and the querier, with the replica label dropped.
func TestQuerierReadsBackfilledBlocks(t *testing.T) {
	base := time.Now().Add(-3 * time.Hour).Truncate(time.Hour)
	var om strings.Builder
	om.WriteString("# TYPE vllm:prompt_tokens counter\n")
	for i := 0; i <= 40; i++ {
		fmt.Fprintf(&om, "vllm:prompt_tokens_total{pod=\"p-0\"} %d %d\n", 100*i, base.Add(time.Duration(i)*15*time.Second).Unix())
	}
	om.WriteString("# EOF\n")
	data := promharness.BackfillString(t, om.String())
	srv := promharness.Start(t, promharness.Options{DataDir: data,
		ExternalLabels: map[string]string{thanosharness.ReplicaLabel: "0"}})
	q := thanosharness.Start(t, thanosharness.Options{PrometheusURL: srv.URL(), TSDBPath: srv.DataDir()})

	ctx := context.Background()
	direct, _, err := srv.Query(ctx, `increase(vllm:prompt_tokens_total[2m])`, base.Add(10*time.Minute+7*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	client, err := api.NewClient(api.Config{Address: q.URL()})
	if err != nil {
		t.Fatal(err)
	}
	viaThanos, _, _, err := v1.NewAPI(client).Query(ctx, `increase(vllm:prompt_tokens_total[2m])`, base.Add(10*time.Minute+7*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	dv, tv := direct.(model.Vector), viaThanos.(model.Vector)
	if len(dv) != 1 || len(tv) != 1 {
		t.Fatalf("direct %v, via thanos %v: want one sample each", dv, tv)
	}
	if tv[0].Value != dv[0].Value {
		t.Errorf("via thanos %v, direct %v: the querier's PromQL differs from Prometheus'", tv[0].Value, dv[0].Value)
	}
	if _, ok := tv[0].Metric[thanosharness.ReplicaLabel]; ok {
		t.Errorf("result %v still carries the replica label", tv[0].Metric)
	}
}
