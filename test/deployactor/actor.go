// Package deployactor plays the Deployment controller for one Deployment on an API server
// that runs no controllers (the kubeharness test server, or the fleet simulator's live mode).
//
// The actor does not create ReplicaSets or Pods. It watches one Deployment and, when a new
// generation appears, writes through the status subresource the status the real controller
// would report while its pods roll: new pods appear (updatedReplicas) at once, become
// available after Options.RolloutDelay when Options.Healthy accepts the pod template, and
// otherwise crash-loop until the progress deadline passes (Progressing=False,
// ProgressDeadlineExceeded) while the old pods keep serving.
//
//	a := deployactor.New(client, "epp", "epp", deployactor.Options{
//		RolloutDelay: 2 * time.Second,
//		OnRollout:    func(t corev1.PodTemplateSpec) { sim.Reload(t) },
//	})
//	go a.Run(ctx)
//	...
//	err := a.WaitForRollouts(ctx, 2)
package deployactor

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
)

// Condition reasons written by the actor, as the Deployment controller writes them.
const (
	ReasonNewReplicaSetAvailable   = "NewReplicaSetAvailable"
	ReasonReplicaSetUpdated        = "ReplicaSetUpdated"
	ReasonProgressDeadlineExceeded = "ProgressDeadlineExceeded"
	ReasonDeploymentPaused         = "DeploymentPaused"
	ReasonMinimumReplicasAvailable = "MinimumReplicasAvailable"
	ReasonMinimumReplicasMissing   = "MinimumReplicasUnavailable"
)

// retryInterval is how soon a failed status write is retried.
const retryInterval = time.Second

// Options configures an Actor.
type Options struct {
	// RolloutDelay is how long new pods take to start before Healthy is asked.
	RolloutDelay time.Duration
	// ProgressDeadline overrides spec.progressDeadlineSeconds when positive.
	ProgressDeadline time.Duration
	// Healthy decides whether pods of a template become available; nil means always.
	Healthy func(tmpl corev1.PodTemplateSpec) bool
	// OnRollout is called when a new template becomes the running one (its pods are
	// available), before the status says so; nil means no callback.
	OnRollout func(tmpl corev1.PodTemplateSpec)
	// Clock measures delays and deadlines; the real clock when nil.
	Clock clock.Clock
	// Logger receives rollout events; slog.Default() when nil.
	Logger *slog.Logger
}

// Actor plays the Deployment controller for one Deployment.
type Actor struct {
	client          kubernetes.Interface
	namespace, name string
	opts            Options
	clock           clock.Clock
	log             *slog.Logger

	// Owned by the Run goroutine.
	store   cache.Store
	handled int64 // last generation whose spec was taken into account
	paused  bool
	pending *rollout
	running *template
	started bool
	uid     types.UID

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every observable change
	rollouts int
	settled  int64 // last generation whose outcome is written to the status
	current  *template
	lastErr  error
}

// template is a pod template and its hash (the pod-template-hash the controller would use).
type template struct {
	spec corev1.PodTemplateSpec
	hash string
}

// rollout is a template whose pods are starting or crash-looping.
type rollout struct {
	template
	readyAt          time.Time
	deadlineAt       time.Time // zero: no deadline
	evaluated        bool      // Healthy was asked (it said no, or the rollout would be done)
	deadlineExceeded bool
}

// New returns an actor for the Deployment namespace/name; call Run to start it.
func New(client kubernetes.Interface, namespace, name string, opts Options) *Actor {
	c := opts.Clock
	if c == nil {
		c = clock.RealClock{}
	}
	l := opts.Logger
	if l == nil {
		l = slog.Default()
	}
	return &Actor{
		client:    client,
		namespace: namespace,
		name:      name,
		opts:      opts,
		clock:     c,
		log:       l.With("deployment", namespace+"/"+name),
		changed:   make(chan struct{}),
	}
}

// Run watches the Deployment and plays its rollouts until ctx ends; it returns nil then.
// Run must be called at most once.
func (a *Actor) Run(ctx context.Context) error {
	poke := make(chan struct{}, 1)
	notify := func() {
		select {
		case poke <- struct{}{}:
		default:
		}
	}
	sel := fields.OneTermEqualSelector("metadata.name", a.name).String()
	deployments := a.client.AppsV1().Deployments(a.namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return deployments.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return deployments.Watch(ctx, o)
		},
	}
	store, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &appsv1.Deployment{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { notify() },
			UpdateFunc: func(any, any) { notify() },
			DeleteFunc: func(any) { notify() },
		},
	})
	a.store = store
	go informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return nil
	}
	a.log.Info("deployactor: watching")

	timer := a.clock.NewTimer(time.Hour)
	timer.Stop()
	for {
		wake := a.reconcile(ctx)
		timer.Stop()
		var timerC <-chan time.Time
		if !wake.IsZero() {
			timer.Reset(max(wake.Sub(a.clock.Now()), 0))
			timerC = timer.C()
		}
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-poke:
		case <-timerC:
		}
	}
}

// reconcile advances the rollout state machine from the cached Deployment and the clock,
// writes the resulting status, and returns when it next needs to run (zero: on events only).
func (a *Actor) reconcile(ctx context.Context) time.Time {
	obj, exists, err := a.store.GetByKey(a.namespace + "/" + a.name)
	if err != nil || !exists {
		return time.Time{}
	}
	d := obj.(*appsv1.Deployment)
	now := a.clock.Now()

	if a.started && d.UID != a.uid {
		// Deleted and created again: a new object, nothing of the old one runs.
		a.log.Info("deployactor: deployment recreated", "uid", d.UID)
		a.started, a.handled, a.paused, a.pending, a.running = false, 0, false, nil, nil
		a.publish(func() { a.current, a.settled = nil, 0 })
	}
	if !a.started {
		a.started, a.uid = true, d.UID
		if d.Status.ObservedGeneration == d.Generation && RolloutComplete(d) {
			// A previous actor (or controller) finished this generation: its template runs.
			a.running = newTemplate(d.Spec.Template)
			a.handled = d.Generation
			a.publish(func() { a.current, a.settled = a.running, d.Generation })
			a.log.Info("deployactor: adopted running template", "generation", d.Generation, "hash", a.running.hash)
		}
	}

	if d.Generation > a.handled {
		a.handleSpec(d, now)
	}
	if a.pending != nil && !a.paused {
		a.advance(now)
	}

	if err := a.writeStatus(ctx, d); err != nil {
		a.log.Warn("deployactor: write status", "err", err)
		a.publish(func() { a.lastErr = err })
		return now.Add(retryInterval)
	}
	a.publish(func() { a.lastErr = nil })
	return a.nextWake()
}

// handleSpec takes a new generation of the spec into account.
func (a *Actor) handleSpec(d *appsv1.Deployment, now time.Time) {
	a.handled = d.Generation
	a.paused = d.Spec.Paused
	t := newTemplate(d.Spec.Template)
	switch {
	case a.running != nil && t.hash == a.running.hash:
		// Scale, or a rollback to the running template: nothing new to start.
		if a.pending != nil {
			a.log.Info("deployactor: rollout abandoned, running template restored", "hash", a.pending.hash)
		}
		a.pending = nil
	case a.pending != nil && t.hash == a.pending.hash:
		// Same template still rolling (scale or metadata change): keep its clock.
	default:
		r := &rollout{template: *t, readyAt: now.Add(a.opts.RolloutDelay)}
		if dl, ok := a.progressDeadline(d); ok {
			r.deadlineAt = now.Add(dl)
		}
		if a.pending != nil {
			a.log.Info("deployactor: rollout superseded", "hash", a.pending.hash)
		}
		a.pending = r
		a.log.Info("deployactor: rollout started", "generation", d.Generation, "hash", r.hash, "readyIn", a.opts.RolloutDelay)
	}
	if a.pending == nil {
		a.publish(func() { a.settled = d.Generation })
	}
}

// advance moves the pending rollout on: pods become available or crash-loop, deadlines pass.
func (a *Actor) advance(now time.Time) {
	r := a.pending
	if !r.evaluated && !now.Before(r.readyAt) {
		r.evaluated = true
		if a.opts.Healthy == nil || a.opts.Healthy(*r.spec.DeepCopy()) {
			if a.opts.OnRollout != nil {
				a.opts.OnRollout(*r.spec.DeepCopy())
			}
			a.running, a.pending = &r.template, nil
			a.log.Info("deployactor: rollout complete", "generation", a.handled, "hash", r.hash)
			a.publish(func() { a.rollouts++; a.current = a.running; a.settled = a.handled })
			return
		}
		a.log.Info("deployactor: new pods crash-looping", "generation", a.handled, "hash", r.hash)
		a.publish(func() { a.settled = a.handled })
	}
	if !r.deadlineExceeded && !r.deadlineAt.IsZero() && !now.Before(r.deadlineAt) {
		r.deadlineExceeded = true
		a.log.Info("deployactor: progress deadline exceeded", "generation", a.handled, "hash", r.hash)
	}
}

// nextWake is the next time the state machine changes on its own.
func (a *Actor) nextWake() time.Time {
	r := a.pending
	if r == nil || a.paused {
		return time.Time{}
	}
	var wake time.Time
	if !r.evaluated {
		wake = r.readyAt
	}
	if !r.deadlineExceeded && !r.deadlineAt.IsZero() && (wake.IsZero() || r.deadlineAt.Before(wake)) {
		wake = r.deadlineAt
	}
	return wake
}

func (a *Actor) progressDeadline(d *appsv1.Deployment) (time.Duration, bool) {
	if a.opts.ProgressDeadline > 0 {
		return a.opts.ProgressDeadline, true
	}
	if d.Spec.ProgressDeadlineSeconds == nil || *d.Spec.ProgressDeadlineSeconds == math.MaxInt32 {
		return 0, false
	}
	return time.Duration(*d.Spec.ProgressDeadlineSeconds) * time.Second, true
}

// writeStatus writes the status the current state implies: on the cached Deployment first,
// on a fresh read after a conflict.
func (a *Actor) writeStatus(ctx context.Context, cached *appsv1.Deployment) error {
	deployments := a.client.AppsV1().Deployments(a.namespace)
	d := cached.DeepCopy()
	first := true
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !first {
			var err error
			d, err = deployments.Get(ctx, a.name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("get deployment %s/%s: %w", a.namespace, a.name, err)
			}
		}
		first = false
		if d.UID != a.uid || d.Generation > a.handled {
			return nil // a newer spec: the informer event triggers the next reconcile
		}
		want := a.status(d, a.clock.Now())
		if equality.Semantic.DeepEqual(want, d.Status) {
			return nil
		}
		d.Status = want
		if _, err := deployments.UpdateStatus(ctx, d, metav1.UpdateOptions{}); err != nil {
			if apierrors.IsNotFound(err) {
				return nil // deleted: the informer reports it
			}
			if apierrors.IsConflict(err) {
				return err // retried on a fresh read
			}
			return fmt.Errorf("update status of deployment %s/%s: %w", a.namespace, a.name, err)
		}
		return nil
	})
}

// status computes the Deployment status for the actor's state, keeping condition times that
// did not change.
func (a *Actor) status(d *appsv1.Deployment, now time.Time) appsv1.DeploymentStatus {
	desired := int32(1)
	if d.Spec.Replicas != nil {
		desired = *d.Spec.Replicas
	}
	st := PodCounts(d.Spec.Strategy, desired, a.running != nil, a.pending != nil)
	s := appsv1.DeploymentStatus{
		ObservedGeneration:  a.handled,
		Replicas:            st.Old + st.New,
		UpdatedReplicas:     st.New,
		ReadyReplicas:       st.Available,
		AvailableReplicas:   st.Available,
		UnavailableReplicas: max(desired-st.Available, 0),
	}

	avail := condition(appsv1.DeploymentAvailable, corev1.ConditionTrue, ReasonMinimumReplicasAvailable, "Deployment has minimum availability.")
	if st.Available < desired-maxUnavailable(d.Spec.Strategy, desired) {
		avail = condition(appsv1.DeploymentAvailable, corev1.ConditionFalse, ReasonMinimumReplicasMissing, "Deployment does not have minimum availability.")
	}
	var prog appsv1.DeploymentCondition
	switch {
	case a.paused:
		prog = condition(appsv1.DeploymentProgressing, corev1.ConditionUnknown, ReasonDeploymentPaused, "Deployment is paused")
	case a.pending == nil && a.running != nil:
		prog = condition(appsv1.DeploymentProgressing, corev1.ConditionTrue, ReasonNewReplicaSetAvailable,
			fmt.Sprintf("ReplicaSet %q has successfully progressed.", a.rsName(a.running)))
	case a.pending != nil && a.pending.deadlineExceeded:
		prog = condition(appsv1.DeploymentProgressing, corev1.ConditionFalse, ReasonProgressDeadlineExceeded,
			fmt.Sprintf("ReplicaSet %q has timed out progressing.", a.rsName(&a.pending.template)))
	case a.pending != nil:
		prog = condition(appsv1.DeploymentProgressing, corev1.ConditionTrue, ReasonReplicaSetUpdated,
			fmt.Sprintf("ReplicaSet %q is progressing.", a.rsName(&a.pending.template)))
	}
	for _, c := range []appsv1.DeploymentCondition{avail, prog} {
		if c.Type == "" {
			continue
		}
		c.LastUpdateTime = metav1.NewTime(now)
		c.LastTransitionTime = metav1.NewTime(now)
		if old := findCondition(d.Status, c.Type); old != nil {
			if old.Status == c.Status {
				c.LastTransitionTime = old.LastTransitionTime
			}
			if old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message {
				c.LastUpdateTime = old.LastUpdateTime
			}
		}
		s.Conditions = append(s.Conditions, c)
	}
	return s
}

func (a *Actor) rsName(t *template) string { return a.name + "-" + t.hash }

// Counts are the pods of a Deployment during a rollout.
type Counts struct {
	// Old are pods of the running (previous) template; all available.
	Old int32
	// New are pods of the rolling template; none available while it rolls.
	New int32
	// Available are the available pods.
	Available int32
}

// PodCounts returns the pods the Deployment controller keeps for desired replicas: all of the
// running template when nothing rolls; while a template rolls (its pods not available), as
// many new pods as the strategy's surge and unavailability allow and the old pods it must keep.
func PodCounts(strategy appsv1.DeploymentStrategy, desired int32, hasRunning, rolling bool) Counts {
	switch {
	case !rolling && hasRunning:
		return Counts{New: desired, Available: desired}
	case !rolling:
		return Counts{}
	case !hasRunning || strategy.Type == appsv1.RecreateDeploymentStrategyType:
		return Counts{New: desired}
	}
	surge, unavailable := maxSurge(strategy, desired), maxUnavailable(strategy, desired)
	old := max(desired-unavailable, 0)
	return Counts{Old: old, New: min(desired, surge+unavailable), Available: old}
}

// maxSurge resolves the rolling update's maxSurge (25 % by default, rounded up).
func maxSurge(s appsv1.DeploymentStrategy, desired int32) int32 {
	surge, _ := resolveFenceposts(s, desired)
	return surge
}

// maxUnavailable resolves the rolling update's maxUnavailable (25 % by default, rounded down);
// Recreate allows none while pods exist. Both zero is not allowed: unavailable becomes 1.
func maxUnavailable(s appsv1.DeploymentStrategy, desired int32) int32 {
	if s.Type == appsv1.RecreateDeploymentStrategyType {
		return 0
	}
	_, unavailable := resolveFenceposts(s, desired)
	return min(unavailable, desired)
}

func resolveFenceposts(s appsv1.DeploymentStrategy, desired int32) (int32, int32) {
	def := intstr.FromString("25%")
	surgeV, unavailV := &def, &def
	if ru := s.RollingUpdate; ru != nil {
		if ru.MaxSurge != nil {
			surgeV = ru.MaxSurge
		}
		if ru.MaxUnavailable != nil {
			unavailV = ru.MaxUnavailable
		}
	}
	surge, err := intstr.GetScaledValueFromIntOrPercent(surgeV, int(desired), true)
	if err != nil {
		surge = 0
	}
	unavailable, err := intstr.GetScaledValueFromIntOrPercent(unavailV, int(desired), false)
	if err != nil {
		unavailable = 0
	}
	if surge == 0 && unavailable == 0 {
		unavailable = 1
	}
	return int32(surge), int32(unavailable)
}

func condition(t appsv1.DeploymentConditionType, s corev1.ConditionStatus, reason, msg string) appsv1.DeploymentCondition {
	return appsv1.DeploymentCondition{Type: t, Status: s, Reason: reason, Message: msg}
}

func findCondition(s appsv1.DeploymentStatus, t appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	for i := range s.Conditions {
		if s.Conditions[i].Type == t {
			return &s.Conditions[i]
		}
	}
	return nil
}

func newTemplate(spec corev1.PodTemplateSpec) *template {
	return &template{spec: *spec.DeepCopy(), hash: TemplateHash(spec)}
}

// TemplateHash returns a pod-template-hash-like label value for the template.
func TemplateHash(spec corev1.PodTemplateSpec) string {
	b, err := json.Marshal(spec)
	if err != nil {
		// PodTemplateSpec always marshals; keep a stable value rather than panic.
		b = []byte(spec.String())
	}
	h := fnv.New32a()
	h.Write(b)
	return rand.SafeEncodeString(strconv.FormatUint(uint64(h.Sum32()), 10))
}

// publish applies an observable change and wakes the waiters.
func (a *Actor) publish(change func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	change()
	close(a.changed)
	a.changed = make(chan struct{})
}

// Rollouts returns how many templates became the running one (the initial one included).
func (a *Actor) Rollouts() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rollouts
}

// Running returns the template whose pods are available, if any.
func (a *Actor) Running() (corev1.PodTemplateSpec, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.current == nil {
		return corev1.PodTemplateSpec{}, false
	}
	return *a.current.spec.DeepCopy(), true
}

// Err returns the last status-write error, nil after a successful write.
func (a *Actor) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastErr
}

// WaitForRollouts blocks until at least n rollouts completed or ctx ends.
func (a *Actor) WaitForRollouts(ctx context.Context, n int) error {
	return a.waitUntil(ctx, func() bool { return a.rollouts >= n },
		func() string { return fmt.Sprintf("%d of %d rollouts", a.rollouts, n) })
}

// WaitForGeneration blocks until the outcome of generation (or a later one) is settled:
// the rollout completed, or its pods were found unhealthy, or no rollout was needed.
func (a *Actor) WaitForGeneration(ctx context.Context, generation int64) error {
	return a.waitUntil(ctx, func() bool { return a.settled >= generation },
		func() string { return fmt.Sprintf("generation %d settled, want %d", a.settled, generation) })
}

func (a *Actor) waitUntil(ctx context.Context, done func() bool, state func() string) error {
	for {
		a.mu.Lock()
		ok, ch, st, lastErr := done(), a.changed, state(), a.lastErr
		a.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return fmt.Errorf("deployactor %s/%s: %s: %w (last status write: %w)", a.namespace, a.name, st, ctx.Err(), lastErr)
			}
			return fmt.Errorf("deployactor %s/%s: %s: %w", a.namespace, a.name, st, ctx.Err())
		case <-ch:
		}
	}
}
