package tuner

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/gatetuner/gatetuner/exporter"
	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/kubeharness"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/sink"
)

// kubeEnv is the package's API server (kubeharness.Shared), stopped by TestMain.
var kubeEnv kubeharness.Shared

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	kubeEnv.Stop()
	os.Exit(code)
}

// needKube returns the shared real API server's client and a fresh
// namespace; it skips under -short and fails loudly when the server cannot start.
func needKube(t *testing.T) (kubernetes.Interface, string) {
	t.Helper()
	env, ns := kubeEnv.Need(t)
	return env.Client, ns
}

const (
	approveCM  = "qwen3-32b-epp"
	approveKey = "epp.yaml"
)

// relativeDecisions replays the same decisions in every window: those of
// TestCycleStagesEndToEnd's full replay (2400, from 10 minutes into the
// window), so that cycles an hour apart see the same evidence.
type relativeDecisions struct{}

func (relativeDecisions) Kind() string { return SourceKindRecords }

func (relativeDecisions) Replay(ctx context.Context, from, to time.Time, fn func(*Decision) error) error {
	d := decisions{from: from.Add(10 * time.Minute), n: 2400}
	return d.Replay(ctx, from, to, fn)
}

// approveTarget is a ConfigMap target in mode approve on the
// production-style config, with decisions that make the tuner recommend a
// change.
func approveTarget(t *testing.T, c kubernetes.Interface, ns string, now time.Time, clk clock.Clock) *Target {
	t.Helper()
	text, err := os.ReadFile("eppconfig/testdata/epp-config-production-commented.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: approveCM}, Data: map[string]string{approveKey: string(text)}}
	if _, err := c.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	prof, err := gate.LookupProfile(gate.ProfileRouter202608)
	if err != nil {
		t.Fatal(err)
	}
	sk, err := sink.New(sink.Target{Name: "t", Namespace: ns, ConfigMap: approveCM, Key: approveKey, Mode: sink.ModeConfigMap, Profile: prof,
		Plugins: []string{"prefill-affinity"}}, sink.Options{Client: c, Identity: "gatetuner-0", Clock: clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	pol := config.DefaultPolicy()
	pol.Mode, pol.MinDecisions, pol.Lookback = config.ModeApprove, new(int), time.Hour
	*pol.MinDecisions = 100
	// The test is about the approval, not the apply window: auto (the
	// default) needs per-window estimates this fixed estimator has not.
	pol.ApplyWindow = &config.ApplyWindow{Always: true}
	// Step 6 writes a second time in the budget window: the old budget of 2,
	// so that the once-check, not the budget, is what holds it.
	budget := 2
	pol.DailyBudget = &budget
	src := relativeDecisions{}
	return &Target{Config: config.Target{Name: "t", Namespace: ns, ConfigMap: approveCM, Key: approveKey, Plugin: "prefill-affinity", Policy: pol},
		Profile: prof, Sink: sk, Estimator: fixedEstimator{est: cycleEstimates(now)}, Records: src}
}

func annotateApprove(t *testing.T, c kubernetes.Interface, ns, value string) {
	t.Helper()
	cm, err := c.CoreV1().ConfigMaps(ns).Get(context.Background(), approveCM, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[sink.AnnotationApprove] = value
	if _, err := c.CoreV1().ConfigMaps(ns).Update(context.Background(), cm, metav1.UpdateOptions{FieldManager: "kubectl-annotate"}); err != nil {
		t.Fatal(err)
	}
}

func configMapText(t *testing.T, c kubernetes.Interface, ns string) (string, *corev1.ConfigMap) {
	t.Helper()
	cm, err := c.CoreV1().ConfigMaps(ns).Get(context.Background(), approveCM, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm.Data[approveKey], cm
}

func approvalEvents(t *testing.T, c kubernetes.Interface, ns string) []string {
	t.Helper()
	list, err := c.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Reason == eventApprovalPending && e.Regarding.Kind == "ConfigMap" && e.Regarding.Name == approveCM && e.ReportingController == sink.FieldManager {
			out = append(out, e.Note)
		}
	}
	return out
}

// TestApproveModeAgainstTheAPIServer runs mode approve's cycles against a
// real API server: no annotation → pending with the hash and the exact
// kubectl command (an Event, the pending metric); a stale hash → held naming
// both; the right hash → written once, recorded in the history; the same
// annotation again → never written a second time.
func TestApproveModeAgainstTheAPIServer(t *testing.T) {
	c, ns := needKube(t)
	ctx := context.Background()
	// One clock for the tuner and the sink, five minutes past an hour: the
	// decisions (10–50 minutes after the history's start) then stay inside
	// one window of the day through every cycle below, so the recommendation
	// — and its hash — cannot move with the time of day the test runs at.
	now := time.Now().UTC().Truncate(time.Hour).Add(5 * time.Minute)
	clk := testingclock.NewFakeClock(now)
	tg := approveTarget(t, c, ns, now, clk)
	m := exporter.New("test", "test")
	tu := &Tuner{Clock: clk.Now, Metrics: m, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	orig, _ := configMapText(t, c, ns)

	// No annotation: pending, the detail names the hash and the command.
	rep := tu.Cycle(ctx, tg)
	if rep.Result != ResultPending || rep.Hold == nil || rep.Hold.Reason != HoldAwaitingApproval {
		t.Fatalf("no annotation: result %s hold %+v, want pending %s", rep.Result, rep.Hold, HoldAwaitingApproval)
	}
	hash := rep.Recommendation.Hash
	if len(hash) != 16 {
		t.Fatalf("hash %q, want 16 hex digits", hash)
	}
	cmd := "kubectl annotate configmap " + approveCM + " -n " + ns + " gatetuner.dev/approve=" + hash + " --overwrite"
	if !strings.Contains(rep.Hold.Detail, cmd) || rep.Approval == nil || rep.Approval.Command != cmd || rep.Approval.Status != ApprovalAwaiting {
		t.Errorf("detail %q / approval %+v, want the command %q", rep.Hold.Detail, rep.Approval, cmd)
	}
	if got, _ := configMapText(t, c, ns); got != orig {
		t.Fatalf("an unapproved recommendation was written")
	}
	if ev := approvalEvents(t, c, ns); len(ev) != 1 || ev[0] != "recommendation "+hash+" awaits approval: "+cmd {
		t.Errorf("events %q, want one announcing %s with the command", ev, hash)
	}
	if v := testutil.ToFloat64(m.RecommendationPending.WithLabelValues("t", hash)); v != 1 {
		t.Errorf("gatetuner_recommendation_pending{hash=%s} = %v, want 1", hash, v)
	}

	// The next cycle, same data: the same hash, no second Event.
	clk.Step(time.Minute)
	if rep := tu.Cycle(ctx, tg); rep.Recommendation == nil || rep.Recommendation.Hash != hash {
		t.Fatalf("the hash changed between cycles over the same change: %+v", rep.Recommendation)
	}
	if ev := approvalEvents(t, c, ns); len(ev) != 1 {
		t.Errorf("events %q, want still one (one per hash)", ev)
	}

	// A stale hash: held, naming both.
	const stale = "0123456789abcdef"
	annotateApprove(t, c, ns, stale)
	rep = tu.Cycle(ctx, tg)
	if rep.Result != ResultHeld || rep.Hold == nil || rep.Hold.Reason != HoldApprovalMismatch ||
		!strings.Contains(rep.Hold.Detail, stale) || !strings.Contains(rep.Hold.Detail, hash) {
		t.Fatalf("stale approval: result %s hold %+v, want %s naming %s and %s", rep.Result, rep.Hold, HoldApprovalMismatch, stale, hash)
	}
	if got, _ := configMapText(t, c, ns); got != orig {
		t.Fatalf("a recommendation with a stale approval was written")
	}

	// The right hash: written once, the hash in the history.
	annotateApprove(t, c, ns, hash)
	clk.Step(time.Minute)
	rep = tu.Cycle(ctx, tg)
	if rep.Result != ResultApplied {
		t.Fatalf("approved: result %s hold %+v error %q, want applied", rep.Result, rep.Hold, rep.Error)
	}
	written, cm := configMapText(t, c, ns)
	if written == orig {
		t.Fatalf("approved, but the ConfigMap is unchanged")
	}
	st := historyOf(t, cm)
	if len(st) != 1 || st[0].RecommendationHash != hash {
		t.Fatalf("history %+v, want one entry with hash %s", st, hash)
	}
	if v := testutil.ToFloat64(m.RecommendationPending.WithLabelValues("t", hash)); v != 0 {
		t.Errorf("pending metric still 1 after the write")
	}
	m.RecommendationPending.Reset()

	// The same annotation, next cycle: not written again (pending restart).
	clk.Step(time.Minute)
	if rep := tu.Cycle(ctx, tg); rep.Result == ResultApplied {
		t.Fatalf("written a second time: %+v", rep.Hold)
	}
	// The EPP restarts and a person puts the old values back: the tuner
	// recommends the same change again, and the used approval does not write it.
	if err := tg.Sink.MarkRestarted(ctx, clk.Now()); err != nil {
		t.Fatal(err)
	}
	_, cm = configMapText(t, c, ns)
	cm.Data[approveKey] = orig
	if _, err := c.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{FieldManager: "someone-else"}); err != nil {
		t.Fatal(err)
	}
	clk.Step(tg.Config.Policy.Cooldown + time.Minute) // past the cooldown, a whole lookback after the restart: the same window
	rep = tu.Cycle(ctx, tg)
	if rep.Recommendation == nil || rep.Recommendation.Hash != hash {
		t.Fatalf("after the revert: recommendation %+v hold %+v, want hash %s again", rep.Recommendation, rep.Hold, hash)
	}
	if rep.Result != ResultPending || rep.Hold == nil || rep.Hold.Reason != HoldAwaitingApproval || !strings.Contains(rep.Hold.Detail, "written already") {
		t.Fatalf("the used approval: result %s hold %+v, want pending %s \"written already\"", rep.Result, rep.Hold, HoldAwaitingApproval)
	}
	if got, cm := configMapText(t, c, ns); got != orig || len(historyOf(t, cm)) != 1 {
		t.Fatalf("the same hash was written twice")
	}
}

// historyOf decodes the ConfigMap's gatetuner.dev/history annotation.
func historyOf(t *testing.T, cm *corev1.ConfigMap) []sink.Entry {
	t.Helper()
	var h []sink.Entry
	if v := cm.Annotations[sink.AnnotationHistory]; v != "" {
		if err := json.Unmarshal([]byte(v), &h); err != nil {
			t.Fatalf("%s: %v", sink.AnnotationHistory, err)
		}
	}
	return h
}
