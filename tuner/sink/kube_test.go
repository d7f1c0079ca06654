package sink

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/deployactor"
	"github.com/gatetuner/gatetuner/tuner/eppconfig"
)

const filter = "prefix-cache-affinity-filter"

func newKubeSink(t testing.TB, c kubernetes.Interface, target Target, opts Options) Sink {
	t.Helper()
	opts.Client = c
	opts.Logger = testLogger(t)
	if opts.Identity == "" {
		opts.Identity = "gatetuner-0"
	}
	s, err := New(target, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func gatetunerEvents(t testing.TB, c kubernetes.Interface, ns, name string) []string {
	t.Helper()
	list, err := c.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.ReportingController == FieldManager && e.Regarding.Kind == "ConfigMap" && e.Regarding.Name == name {
			out = append(out, e.Type+" "+e.Reason+": "+e.Note)
		}
	}
	return out
}

func TestKubeApplyKeepsEveryOtherByte(t *testing.T) {
	env, ns := needEnv(t)
	c := env.Client
	orig := createConfigMap(t, c, sampleConfigMap(t, ns))
	target := kubeTarget(ns, ModeConfigMap, gate.ProfileRouter202608)
	target.Deployment = ""
	s := newKubeSink(t, c, target, Options{})

	snap := mustRead(t, s)
	if snap.Version != orig.ResourceVersion || string(snap.Text) != orig.Data[cmKey] {
		t.Fatalf("snapshot version %s text %q", snap.Version, snap.Text)
	}
	if got := ownedValue(t, snap, filter, gate.KeyMaxTTFTPenaltyMs); got != "18000" {
		t.Fatalf("maxTTFTPenaltyMs %s", got)
	}
	p := snap.Instances[0].Params
	if p.AffinityThreshold != 0.8 || p.PeakPrefillThroughput != 15928 {
		t.Fatalf("params %+v", p)
	}

	res := mustApply(t, s, snap, Meta{Reason: "bar 286704 -> 45000 tokens", Evidence: "wrongly held 17.2%, conf 0.81", RecommendationHash: "abc123"},
		set(filter, gate.KeyMaxTTFTPenaltyMs, 5000, gate.KeyPeakPrefillThroughput, 9000))
	if res.Outcome != OutcomeApplied || !res.Pending || res.Attempts != 1 {
		t.Fatalf("result %+v", res)
	}

	after := getConfigMap(t, c, ns, cmName)
	want := strings.Replace(orig.Data[cmKey], "maxTTFTPenaltyMs: 18000 ", "maxTTFTPenaltyMs: 5000 ", 1)
	want = strings.Replace(want, "peakPrefillThroughput: 15928 #", "peakPrefillThroughput: 9000 #", 1)
	if after.Data[cmKey] != want {
		t.Fatalf("config after apply:\n%s", eppconfig.Diff("want", "got", []byte(want), []byte(after.Data[cmKey])))
	}
	if !slices.Equal(commentLines(after.Data[cmKey]), commentLines(orig.Data[cmKey])) {
		t.Fatal("a comment changed")
	}
	if after.Data["payload-agnostic.yaml"] != orig.Data["payload-agnostic.yaml"] || len(after.Data) != 2 {
		t.Fatal("the other data key changed")
	}
	if !maps.Equal(after.Labels, orig.Labels) {
		t.Fatalf("labels %v, want %v", after.Labels, orig.Labels)
	}
	// Provenance in annotations, bounded JSON.
	st, err := decodeAnnotations(after.Annotations)
	if err != nil {
		t.Fatal(err)
	}
	en := st.History[0]
	if len(st.History) != 1 || en.RecommendationHash != "abc123" || en.By != "gatetuner-0" || en.Mode != "configmap" ||
		en.Instances[0].OldBarTokens != 286704 || en.Instances[0].NewBarTokens != 45000 ||
		st.Pending == nil || st.Pending.ConfigHash != ConfigHash([]byte(want)) {
		t.Fatalf("state %+v", st)
	}
	var managed bool
	for _, mf := range after.ManagedFields {
		managed = managed || mf.Manager == FieldManager
	}
	if !managed {
		t.Fatalf("no managed fields entry for %s: %+v", FieldManager, after.ManagedFields)
	}
	// The Event carries the numbers.
	evs := gatetunerEvents(t, c, ns, cmName)
	if len(evs) != 1 || !strings.Contains(evs[0], "maxTTFTPenaltyMs 18000 → 5000") ||
		!strings.Contains(evs[0], "peakPrefillThroughput 15928 → 9000") || !strings.Contains(evs[0], "bar 286704 → 45000 tokens") ||
		!strings.Contains(evs[0], "evidence: wrongly held 17.2%") {
		t.Fatalf("events %q", evs)
	}

	// Read back: the new values, the pending restart, nothing else.
	snap2 := mustRead(t, s)
	if ownedValue(t, snap2, filter, gate.KeyMaxTTFTPenaltyMs) != "5000" || snap2.State.Pending == nil {
		t.Fatalf("read back %+v", snap2.State)
	}
	if !strings.Contains(snap2.State.PendingNote, "MarkRestarted") {
		t.Fatalf("pending note %q", snap2.State.PendingNote)
	}
}

func TestKubeConcurrentWriterLosesNothing(t *testing.T) {
	env, ns := needEnv(t)
	c := env.Client
	t.Run("edit between re-check and write is merged", func(t *testing.T) {
		name := "merge-epp"
		cm := sampleConfigMap(t, ns)
		cm.Name = name
		createConfigMap(t, c, cm)
		target := kubeTarget(ns, ModeConfigMap, gate.ProfileRouter202608)
		target.ConfigMap, target.Deployment = name, ""
		s := newKubeSink(t, c, target, Options{})
		s.(*engine).opts.beforeWrite = func(attempt int) {
			if attempt != 1 {
				return
			}
			editConfigMap(t, c, ns, name, func(cm *corev1.ConfigMap) {
				cm.Data[cmKey] = "# reviewed by ops\n" + strings.Replace(cm.Data[cmKey], "weight: 3", "weight: 4", 1)
				cm.Data["payload-agnostic.yaml"] += "# touched\n"
				cm.Labels["team"] = "inference"
			})
		}
		res := mustApply(t, s, mustRead(t, s), Meta{}, set(filter, gate.KeyMaxTTFTPenaltyMs, 7000))
		if res.Outcome != OutcomeApplied || res.Attempts != 2 || !res.Recomputed {
			t.Fatalf("result %+v", res)
		}
		got := getConfigMap(t, c, ns, name)
		for _, want := range []string{"# reviewed by ops\n", "weight: 4", "maxTTFTPenaltyMs: 7000 "} {
			if !strings.Contains(got.Data[cmKey], want) {
				t.Fatalf("lost %q:\n%s", want, got.Data[cmKey])
			}
		}
		if !strings.HasSuffix(got.Data["payload-agnostic.yaml"], "# touched\n") || got.Labels["team"] != "inference" {
			t.Fatal("lost the other writer's change to the other key or labels")
		}
	})

	t.Run("hammered by another writer", func(t *testing.T) {
		name := "hammer-epp"
		cm := sampleConfigMap(t, ns)
		cm.Name = name
		createConfigMap(t, c, cm)
		target := kubeTarget(ns, ModeConfigMap, gate.ProfileRouter202608)
		target.ConfigMap, target.Deployment = name, ""
		s := newKubeSink(t, c, target, Options{MaxAttempts: 50})

		// The other writer rewrites a comment inside the config text and the
		// other data key, as fast as it can, and remembers its last success.
		ctx, stop := context.WithTimeout(context.Background(), 2*time.Minute)
		var wg sync.WaitGroup
		// lastOK is its last acknowledged write; unknown is a write whose
		// answer the stop cut off (it may have landed).
		var lastOK, unknown atomic.Int64
		var hammerErr atomic.Value
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int64(1); ctx.Err() == nil; i++ {
				cur, err := c.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					if ctx.Err() == nil {
						hammerErr.Store(err)
					}
					return
				}
				text := cur.Data[cmKey]
				if j := strings.Index(text, "# hammer "); j >= 0 {
					text = text[:j] + text[j+strings.Index(text[j:], "\n")+1:]
				}
				cur.Data[cmKey] = fmt.Sprintf("# hammer %d\n", i) + text
				cur.Data["payload-agnostic.yaml"] = strings.SplitN(cur.Data["payload-agnostic.yaml"], "#hammer", 2)[0] + fmt.Sprintf("#hammer %d\n", i)
				if _, err := c.CoreV1().ConfigMaps(ns).Update(ctx, cur, metav1.UpdateOptions{FieldManager: "hammer"}); err == nil {
					lastOK.Store(i)
				} else if ctx.Err() != nil {
					unknown.Store(i)
				} else if !strings.Contains(err.Error(), "the object has been modified") {
					hammerErr.Store(err)
					return
				}
				time.Sleep(5 * time.Millisecond) // ~100 writes/s: busier than any real co-writer
			}
		}()
		values := []float64{6000, 7000, 8000, 9000, 10000}
		conflicts := 0
		for _, v := range values {
			snap := mustRead(t, s)
			res := mustApply(t, s, snap, Meta{Reason: "hammer"}, set(filter, gate.KeyMaxTTFTPenaltyMs, v))
			if res.Outcome != OutcomeApplied {
				t.Fatalf("apply %v: %+v", v, res)
			}
			conflicts += res.Attempts - 1
			if err := s.MarkRestarted(context.Background(), time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		if ctx.Err() != nil {
			t.Fatal("the other writer stopped before the sink finished: no contention measured")
		}
		stop()
		wg.Wait()
		if err, _ := hammerErr.Load().(error); err != nil {
			t.Fatalf("other writer: %v", err)
		}
		got := getConfigMap(t, c, ns, name)
		n := lastOK.Load()
		if n == 0 {
			t.Fatal("the other writer never succeeded")
		}
		if u := unknown.Load(); u > n && strings.HasPrefix(got.Data[cmKey], fmt.Sprintf("# hammer %d\n", u)) {
			n = u // the write the stop cut off had landed
		}
		if !strings.HasPrefix(got.Data[cmKey], fmt.Sprintf("# hammer %d\n", n)) || !strings.HasSuffix(got.Data["payload-agnostic.yaml"], fmt.Sprintf("#hammer %d\n", n)) {
			t.Fatalf("the other writer's last write (%d) was lost:\n%s", n, got.Data[cmKey][:40])
		}
		if !strings.Contains(got.Data[cmKey], "maxTTFTPenaltyMs: 10000 ") {
			t.Fatalf("the sink's last write was lost:\n%s", got.Data[cmKey])
		}
		st, err := decodeAnnotations(got.Annotations)
		if err != nil || len(st.History) != len(values) {
			t.Fatalf("history %d entries, want %d (%v)", len(st.History), len(values), err)
		}
		for i, en := range st.History {
			if en.Instances[0].New["maxTTFTPenaltyMs"] != strconv.FormatFloat(values[i], 'f', -1, 64) {
				t.Fatalf("entry %d: %+v", i, en.Instances[0])
			}
		}
		t.Logf("other writer: %d writes; sink: %d conflicts retried over %d applies", n, conflicts, len(values))
	})
}

func TestKubeExternalOwnedEditHolds(t *testing.T) {
	env, ns := needEnv(t)
	c := env.Client
	t.Run("before the re-check", func(t *testing.T) {
		name := "before-epp"
		cm := sampleConfigMap(t, ns)
		cm.Name = name
		createConfigMap(t, c, cm)
		target := kubeTarget(ns, ModeConfigMap, gate.ProfileRouter202608)
		target.ConfigMap, target.Deployment = name, ""
		s := newKubeSink(t, c, target, Options{})
		snap := mustRead(t, s)
		edited := editConfigMap(t, c, ns, name, func(cm *corev1.ConfigMap) {
			cm.Data[cmKey] = strings.Replace(cm.Data[cmKey], "maxTTFTPenaltyMs: 18000", "MaxTTFTPenaltyMs: 12000", 1)
		})
		res := mustApply(t, s, snap, Meta{}, set(filter, gate.KeyMaxTTFTPenaltyMs, 5000))
		if res.Outcome != OutcomeHeld || res.Hold.Reason != HoldChangedExternally ||
			!strings.Contains(res.Hold.Message, `maxTTFTPenaltyMs=12000`) {
			t.Fatalf("result %+v", res)
		}
		after := getConfigMap(t, c, ns, name)
		if after.ResourceVersion != edited.ResourceVersion || after.Data[cmKey] != edited.Data[cmKey] {
			t.Fatal("the held write changed the ConfigMap")
		}
		if evs := gatetunerEvents(t, c, ns, name); len(evs) == 0 || !strings.Contains(evs[len(evs)-1], "changed-externally") {
			t.Fatalf("events %q", evs)
		}
	})
	t.Run("between re-check and write", func(t *testing.T) {
		name := "between-epp"
		cm := sampleConfigMap(t, ns)
		cm.Name = name
		createConfigMap(t, c, cm)
		target := kubeTarget(ns, ModeConfigMap, gate.ProfileRouter202608)
		target.ConfigMap, target.Deployment = name, ""
		s := newKubeSink(t, c, target, Options{})
		var edited *corev1.ConfigMap
		s.(*engine).opts.beforeWrite = func(attempt int) {
			if attempt == 1 {
				edited = editConfigMap(t, c, ns, name, func(cm *corev1.ConfigMap) {
					cm.Data[cmKey] = strings.Replace(cm.Data[cmKey], "peakPrefillThroughput: 15928", "peakPrefillThroughput: 12000", 1)
				})
			}
		}
		res := mustApply(t, s, mustRead(t, s), Meta{}, set(filter, gate.KeyMaxTTFTPenaltyMs, 5000))
		if res.Outcome != OutcomeHeld || res.Hold.Reason != HoldChangedExternally || res.Attempts != 2 {
			t.Fatalf("result %+v", res)
		}
		if after := getConfigMap(t, c, ns, name); after.ResourceVersion != edited.ResourceVersion {
			t.Fatal("the held write changed the ConfigMap")
		}
	})
}

func TestKubeMalformedLeftUntouched(t *testing.T) {
	env, ns := needEnv(t)
	c := env.Client
	cases := []struct {
		name   string
		break_ func(cm *corev1.ConfigMap)
		want   string
	}{
		{"bad YAML", func(cm *corev1.ConfigMap) { cm.Data[cmKey] += "  - : [unclosed\n" }, "malformed YAML"},
		{"missing plugin", func(cm *corev1.ConfigMap) {
			cm.Data[cmKey] = strings.Replace(cm.Data[cmKey], "- type: prefix-cache-affinity-filter", "- type: prefix-cache-affinity-filter-v2", 1)
		}, `no plugin "prefix-cache-affinity-filter"`},
		{"invalid params", func(cm *corev1.ConfigMap) {
			cm.Data[cmKey] = strings.Replace(cm.Data[cmKey], "affinityThreshold: 0.80", "affinityThreshold: 1.5", 1)
		}, "affinityThreshold"},
		{"unknown key for the profile", func(cm *corev1.ConfigMap) {
			cm.Data[cmKey] = strings.Replace(cm.Data[cmKey], "affinityThreshold: 0.80", "affinityThreshold: 0.80\n    penaltyMode: static", 1)
		}, "penaltyMode"},
		{"missing data key", func(cm *corev1.ConfigMap) { delete(cm.Data, cmKey) }, `no data key "default-plugins.yaml"`},
		{"mangled history annotation", func(cm *corev1.ConfigMap) {
			if cm.Annotations == nil {
				cm.Annotations = map[string]string{}
			}
			cm.Annotations[AnnotationHistory] = `[{"seq":1,`
		}, AnnotationHistory},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("malformed-%d", i)
			cm := sampleConfigMap(t, ns)
			cm.Name = name
			createConfigMap(t, c, cm)
			target := kubeTarget(ns, ModeConfigMap, gate.ProfileRouter202608)
			target.ConfigMap, target.Deployment = name, ""
			s := newKubeSink(t, c, target, Options{})
			snap := mustRead(t, s)
			broken := editConfigMap(t, c, ns, name, tc.break_)

			_, err := s.Read(context.Background())
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("read: %v, want ErrMalformed mentioning %q", err, tc.want)
			}
			res, err := s.Apply(context.Background(), snap, []eppconfig.Change{set(filter, gate.KeyMaxTTFTPenaltyMs, 5000)}, Meta{})
			if !errors.Is(err, ErrMalformed) || res != nil {
				t.Fatalf("apply: %+v, %v, want ErrMalformed", res, err)
			}
			t.Logf("error: %v", err)
			if after := getConfigMap(t, c, ns, name); after.ResourceVersion != broken.ResourceVersion {
				t.Fatalf("resourceVersion %s → %s: the malformed ConfigMap was written", broken.ResourceVersion, after.ResourceVersion)
			}
		})
	}
}

func TestKubePausedHolds(t *testing.T) {
	env, ns := needEnv(t)
	c := env.Client
	cm := sampleConfigMap(t, ns)
	cm.Annotations = map[string]string{AnnotationPaused: "true"}
	created := createConfigMap(t, c, cm)
	target := kubeTarget(ns, ModeConfigMap, gate.ProfileRouter202608)
	target.Deployment = ""
	s := newKubeSink(t, c, target, Options{})
	snap := mustRead(t, s)
	if !snap.State.Paused {
		t.Fatal("pause not read")
	}
	res := mustApply(t, s, snap, Meta{}, set(filter, gate.KeyMaxTTFTPenaltyMs, 5000))
	if res.Outcome != OutcomeHeld || res.Hold.Reason != HoldPaused {
		t.Fatalf("result %+v", res)
	}
	res = mustApply(t, s, snap, Meta{Kind: KindRollback}, set(filter, gate.KeyMaxTTFTPenaltyMs, 5000))
	if res.Outcome != OutcomeHeld || res.Hold.Reason != HoldPaused {
		t.Fatalf("a rollback ignored the pause: %+v", res)
	}
	if getConfigMap(t, c, ns, cmName).ResourceVersion != created.ResourceVersion {
		t.Fatal("paused target written")
	}
}

func TestKubeConfigMapModePendingRestart(t *testing.T) {
	env, ns := needEnv(t)
	c := env.Client
	createConfigMap(t, c, sampleConfigMap(t, ns))
	createDeployment(t, c, ns)
	startActor(t, c, ns, deployactor.Options{RolloutDelay: 50 * time.Millisecond})
	s := newKubeSink(t, c, kubeTarget(ns, ModeConfigMap, gate.ProfileRouter202608), Options{})

	res := mustApply(t, s, mustRead(t, s), Meta{}, set(filter, gate.KeyMaxTTFTPenaltyMs, 5000))
	if res.Outcome != OutcomeApplied || !res.Pending {
		t.Fatalf("result %+v", res)
	}
	// A scale is not a restart.
	if _, err := c.AppsV1().Deployments(ns).Patch(context.Background(), depName, types.MergePatchType, []byte(`{"spec":{"replicas":3}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	snap := mustRead(t, s)
	if snap.State.Pending == nil {
		t.Fatal("a scale resolved the pending restart")
	}
	res = mustApply(t, s, snap, Meta{}, set(filter, gate.KeyMaxTTFTPenaltyMs, 4000))
	if res.Outcome != OutcomeHeld || res.Hold.Reason != HoldPendingRestart || !strings.Contains(res.Hold.Message, "rollout restart") {
		t.Fatalf("apply while pending: %+v", res)
	}
	// kubectl rollout restart.
	restart := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339))
	d, err := c.AppsV1().Deployments(ns).Patch(context.Background(), depName, types.StrategicMergePatchType, []byte(restart), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	if _, err := deployactor.WaitForDeployment(wctx, c, ns, depName, func(x *appsv1.Deployment) bool {
		return x.Generation >= d.Generation && deployactor.RolloutComplete(x)
	}); err != nil {
		t.Fatal(err)
	}
	snap = mustRead(t, s)
	st := snap.State
	if st.Pending != nil || st.EffectiveAt.IsZero() || st.History[0].Status != StatusEffective || st.History[0].EffectiveAt == nil {
		t.Fatalf("state after the restart: %+v (note %q)", st, st.PendingNote)
	}
	if ann := getConfigMap(t, c, ns, cmName).Annotations; ann[AnnotationPendingRestart] != "" || ann[AnnotationEffectiveAt] == "" {
		t.Fatalf("annotations after the restart: %v", ann)
	}
	res = mustApply(t, s, snap, Meta{}, set(filter, gate.KeyMaxTTFTPenaltyMs, 4000))
	if res.Outcome != OutcomeApplied {
		t.Fatalf("apply after the restart: %+v", res)
	}
}

// eppHealthy plays an EPP of build profile prof: its pods come up only when
// the ConfigMap's config passes that build's strict decoding.
func eppHealthy(t testing.TB, c kubernetes.Interface, ns, prof string) func(corev1.PodTemplateSpec) bool {
	build := mustProfile(t, prof)
	return func(corev1.PodTemplateSpec) bool {
		cm, err := c.CoreV1().ConfigMaps(ns).Get(context.Background(), cmName, metav1.GetOptions{})
		if err != nil {
			return false
		}
		f, err := eppconfig.Parse([]byte(cm.Data[cmKey]), "epp")
		if err != nil {
			return false
		}
		for _, in := range f.Filters() {
			if _, err := in.Params(build); err != nil {
				return false
			}
		}
		return true
	}
}

func TestKubeRolloutCrashLoopIsRolledBack(t *testing.T) {
	env, ns := needEnv(t)
	c := env.Client
	orig := createConfigMap(t, c, sampleConfigMap(t, ns))
	createDeployment(t, c, ns)
	// The EPP runs the Aug 2026 build, but the target wrongly declares penalty-mode.
	a := startActor(t, c, ns, deployactor.Options{RolloutDelay: 50 * time.Millisecond, ProgressDeadline: 500 * time.Millisecond,
		Healthy: eppHealthy(t, c, ns, gate.ProfileRouter202608)})
	fc := testingclock.NewFakeClock(time.Now())
	stepper(t, fc, time.Second)
	s := newKubeSink(t, c, kubeTarget(ns, ModeRollout, gate.ProfilePenaltyMode), Options{Clock: fc, PollInterval: time.Second, RolloutTimeout: time.Hour})

	res := mustApply(t, s, mustRead(t, s), Meta{Reason: "matchedTokens"}, set(filter, gate.KeyPenaltyMode, "matchedTokens", gate.KeyMaxTTFTPenaltyMs, 30000))
	if res.Outcome != OutcomeRolledBack || res.Hold == nil || res.Hold.Reason != HoldRolloutFailed ||
		!strings.Contains(res.Hold.Message, "progress deadline exceeded") {
		t.Fatalf("result %+v hold %+v", res, res.Hold)
	}
	after := getConfigMap(t, c, ns, cmName)
	if after.Data[cmKey] != orig.Data[cmKey] {
		t.Fatalf("not restored byte for byte:\n%s", eppconfig.Diff("orig", "now", []byte(orig.Data[cmKey]), []byte(after.Data[cmKey])))
	}
	st, err := decodeAnnotations(after.Annotations)
	if err != nil {
		t.Fatal(err)
	}
	if st.Hold == nil || st.Hold.Reason != HoldRolloutFailed || st.Pending != nil || len(st.History) != 2 ||
		st.History[0].Status != StatusRolledBack || st.History[0].Failure.Reason != HoldRolloutFailed ||
		st.History[1].Kind != KindAutoRollback || st.History[1].Undoes != 1 || st.History[1].Status != StatusEffective {
		t.Fatalf("state %+v", st)
	}
	// The EPP runs the restored config.
	d, err := c.AppsV1().Deployments(ns).Get(context.Background(), depName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Spec.Template.Annotations[AnnotationConfigHash] != ConfigHash([]byte(orig.Data[cmKey])) {
		t.Fatal("pod template does not carry the restored config's hash")
	}
	if run, ok := a.Running(); !ok || run.Annotations[AnnotationConfigHash] != ConfigHash([]byte(orig.Data[cmKey])) {
		t.Fatalf("running template %v", run.Annotations)
	}
	var warned bool
	for _, e := range gatetunerEvents(t, c, ns, cmName) {
		warned = warned || strings.HasPrefix(e, "Warning GateRolledBack: rollout-failed")
	}
	if !warned {
		t.Fatalf("no rollback event: %q", gatetunerEvents(t, c, ns, cmName))
	}
	// Held until a person clears it.
	res = mustApply(t, s, mustRead(t, s), Meta{}, set(filter, gate.KeyMaxTTFTPenaltyMs, 20000))
	if res.Outcome != OutcomeHeld || res.Hold.Reason != HoldRolloutFailed {
		t.Fatalf("apply while held: %+v", res)
	}
}

func TestKubeKeyDefaultsToTheOneHoldingThePlugin(t *testing.T) {
	env, ns := needEnv(t)
	c := env.Client
	both := sampleConfigMap(t, ns)
	both.Name = "both-hold"
	both.Data["copy.yaml"] = both.Data[cmKey]
	none := sampleConfigMap(t, ns)
	none.Name = "none-holds"
	delete(none.Data, cmKey)
	none.Data["notes.txt"] = "not an EPP config: [unclosed"
	only := sampleConfigMap(t, ns)
	only.Name = "only-instance"
	for _, cm := range []*corev1.ConfigMap{sampleConfigMap(t, ns), only, both, none} {
		createConfigMap(t, c, cm)
	}
	for _, tc := range []struct {
		name, configMap string
		plugins         []string
		wantErr         []string // each in the read error; none: the read and the write work
	}{
		{name: "the only key holding the named plugin", configMap: cmName, plugins: []string{filter}},
		{name: "the only key holding the only instance", configMap: only.Name},
		{name: "several keys hold it", configMap: both.Name, plugins: []string{filter},
			wantErr: []string{"data keys copy.yaml, default-plugins.yaml each hold", "set the target's key"}},
		{name: "no key holds it", configMap: none.Name,
			wantErr: []string{"no data key holds", "(keys: notes.txt, payload-agnostic.yaml)", "set the target's key"}},
		{name: "no key holds the named plugin", configMap: cmName, plugins: []string{"other-filter"},
			wantErr: []string{`no data key holds plugin "other-filter"`, "(keys: default-plugins.yaml, payload-agnostic.yaml)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := kubeTarget(ns, ModeConfigMap, gate.ProfileRouter202608)
			target.ConfigMap, target.Key, target.Deployment, target.Plugins = tc.configMap, "", "", tc.plugins
			s := newKubeSink(t, c, target, Options{})
			if tc.wantErr != nil {
				before := getConfigMap(t, c, ns, tc.configMap)
				_, err := s.Read(context.Background())
				if err == nil || !errors.Is(err, ErrMalformed) {
					t.Fatalf("read error %v, want ErrMalformed", err)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("read error %q lacks %q", err, w)
					}
				}
				if after := getConfigMap(t, c, ns, tc.configMap); after.ResourceVersion != before.ResourceVersion {
					t.Fatal("a failed read changed the ConfigMap")
				}
				return
			}
			orig := getConfigMap(t, c, ns, tc.configMap)
			snap := mustRead(t, s)
			if string(snap.Text) != orig.Data[cmKey] {
				t.Fatalf("read %q, want the %s text", snap.Text, cmKey)
			}
			if res := mustApply(t, s, snap, Meta{Reason: "key default"}, set(filter, gate.KeyMaxTTFTPenaltyMs, 7000)); res.Outcome != OutcomeApplied {
				t.Fatalf("result %+v", res)
			}
			after := getConfigMap(t, c, ns, tc.configMap)
			want := strings.Replace(orig.Data[cmKey], "maxTTFTPenaltyMs: 18000 ", "maxTTFTPenaltyMs: 7000 ", 1)
			if after.Data[cmKey] != want || after.Data["payload-agnostic.yaml"] != orig.Data["payload-agnostic.yaml"] || len(after.Data) != 2 {
				t.Fatalf("after the write:\n%s", eppconfig.Diff("want", "got", []byte(want), []byte(after.Data[cmKey])))
			}
		})
	}
}
