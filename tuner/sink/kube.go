package sink

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gatetuner/gatetuner/tuner/eppconfig"
)

// kubeStore keeps a target in a ConfigMap and rolls its EPP Deployment.
type kubeStore struct {
	target Target
	client kubernetes.Interface
	opts   Options

	mu  sync.Mutex
	key string // the data key the last load used (target.Key, or the one found)
}

func (k *kubeStore) source() string {
	return fmt.Sprintf("configmap %s/%s key %s", k.target.Namespace, k.target.ConfigMap, k.dataKey())
}

// dataKey is the target's key, else the key the last load found holding the plugin.
func (k *kubeStore) dataKey() string {
	if k.target.Key != "" {
		return k.target.Key
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.key == "" {
		return "(the one holding the plugin)"
	}
	return k.key
}

func (k *kubeStore) load(ctx context.Context) (*object, error) {
	t := k.target
	cm, err := k.client.CoreV1().ConfigMaps(t.Namespace).Get(ctx, t.ConfigMap, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read configmap %s/%s: %w", t.Namespace, t.ConfigMap, err)
	}
	key := t.Key
	if key == "" {
		if key, err = keyHoldingPlugin(t, cm.Data); err != nil {
			return nil, err
		}
		k.mu.Lock()
		k.key = key
		k.mu.Unlock()
	}
	text, ok := cm.Data[key]
	if !ok {
		return nil, fmt.Errorf("%w: configmap %s/%s has no data key %q (keys: %s)", ErrMalformed, t.Namespace, t.ConfigMap, key, strings.Join(sortedKeys(cm.Data), ", "))
	}
	st, err := decodeAnnotations(cm.Annotations)
	if err != nil {
		return nil, fmt.Errorf("%w: configmap %s/%s: %w", ErrMalformed, t.Namespace, t.ConfigMap, err)
	}
	return &object{text: []byte(text), state: st, version: cm.ResourceVersion, raw: cm, key: key}, nil
}

// keyHoldingPlugin finds the one data key whose EPP config holds the target's
// first plugin (the only prefix-cache-affinity-filter when none is named);
// none or several is an error naming the keys.
func keyHoldingPlugin(t Target, data map[string]string) (string, error) {
	sel := t.selectors()[0]
	var holding []string
	for _, key := range sortedKeys(data) {
		f, err := eppconfig.Parse([]byte(data[key]), fmt.Sprintf("configmap %s/%s key %s", t.Namespace, t.ConfigMap, key))
		if err != nil {
			continue // not an EPP config (or not one gatetuner can read): it cannot hold the plugin
		}
		if _, err := f.Select(sel); err == nil {
			holding = append(holding, key)
		}
	}
	switch len(holding) {
	case 1:
		return holding[0], nil
	case 0:
		return "", fmt.Errorf("%w: configmap %s/%s: no data key holds %s (keys: %s); set the target's key", ErrMalformed,
			t.Namespace, t.ConfigMap, sel, strings.Join(sortedKeys(data), ", "))
	default:
		return "", fmt.Errorf("%w: configmap %s/%s: data keys %s each hold %s; set the target's key", ErrMalformed,
			t.Namespace, t.ConfigMap, strings.Join(holding, ", "), sel)
	}
}

// sortedKeys lists a ConfigMap's data keys in order.
func sortedKeys(data map[string]string) []string {
	keys := make([]string, 0, len(data))
	for key := range data {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	return keys
}

// write updates the ConfigMap with the read object's resourceVersion as the
// precondition; the API server answers 409 Conflict when it changed.
func (k *kubeStore) write(ctx context.Context, base *object, text []byte, st State) (*object, error) {
	t := k.target
	cm := base.raw.(*corev1.ConfigMap).DeepCopy()
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[base.key] = string(text)
	ann, err := encodeAnnotations(cm.Annotations, st, k.opts.HistoryLimit)
	if err != nil {
		return nil, err
	}
	cm.Annotations = ann
	cm.ResourceVersion = base.version
	out, err := k.client.CoreV1().ConfigMaps(t.Namespace).Update(ctx, cm, metav1.UpdateOptions{FieldManager: FieldManager})
	if apierrors.IsConflict(err) {
		return nil, errConflict
	}
	if err != nil {
		return nil, fmt.Errorf("update configmap %s/%s: %w", t.Namespace, t.ConfigMap, err)
	}
	st2, err := decodeAnnotations(out.Annotations)
	if err != nil {
		return nil, fmt.Errorf("%w: configmap %s/%s after the write: %w", ErrMalformed, t.Namespace, t.ConfigMap, err)
	}
	return &object{text: []byte(out.Data[base.key]), state: st2, version: out.ResourceVersion, raw: out, key: base.key}, nil
}

func (k *kubeStore) deployment(ctx context.Context) (*appsv1.Deployment, error) {
	t := k.target
	d, err := k.client.AppsV1().Deployments(t.Namespace).Get(ctx, t.Deployment, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read deployment %s/%s: %w", t.Namespace, t.Deployment, err)
	}
	return d, nil
}

func (k *kubeStore) pendingInfo(ctx context.Context, p *Pending) error {
	if k.target.Deployment == "" {
		return nil
	}
	d, err := k.deployment(ctx)
	if err != nil {
		return err
	}
	p.Generation = d.Generation
	p.TemplateHash = templateHash(d.Spec.Template)
	return nil
}

// restartStatus resolves a pending write when the EPP Deployment rolled a pod
// template created after the write (kubectl rollout restart, or our config
// hash) and that rollout is complete.
func (k *kubeStore) restartStatus(ctx context.Context, p *Pending) (bool, time.Time, string, error) {
	t := k.target
	if t.Deployment == "" {
		return false, time.Time{}, "no EPP deployment configured: restart the EPP and record it with MarkRestarted", nil
	}
	d, err := k.deployment(ctx)
	if err != nil {
		return false, time.Time{}, "", err
	}
	if p.TemplateHash != "" && templateHash(d.Spec.Template) == p.TemplateHash {
		return false, time.Time{}, fmt.Sprintf("deployment %s has not rolled since the write: run `kubectl -n %s rollout restart deployment/%s`", t.Deployment, t.Namespace, t.Deployment), nil
	}
	if p.TemplateHash == "" && d.Spec.Template.Annotations[AnnotationConfigHash] != p.ConfigHash {
		return false, time.Time{}, fmt.Sprintf("deployment %s: pod template does not carry config hash %s", t.Deployment, short(p.ConfigHash)), nil
	}
	done, failed, msg := rolloutStatus(d)
	if failed {
		return false, time.Time{}, "a rollout after the write failed: " + msg, nil
	}
	if !done {
		return false, time.Time{}, "a rollout after the write is in progress: " + msg, nil
	}
	at := k.opts.Clock.Now().UTC()
	if c := progressing(d); c != nil && c.Reason == reasonNewReplicaSetAvailable && c.LastUpdateTime.After(p.Since) && c.LastUpdateTime.Time.Before(at) {
		at = c.LastUpdateTime.UTC()
	}
	return true, at, fmt.Sprintf("deployment %s rolled out generation %d after the write", t.Deployment, d.Generation), nil
}

// restart patches the EPP pod template with the config hash (a rollout) and
// waits, bounded, until the Deployment reports it available.
func (k *kubeStore) restart(ctx context.Context, _ *object, hash string) (time.Time, error) {
	t := k.target
	deployments := k.client.AppsV1().Deployments(t.Namespace)
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{AnnotationConfigHash: hash}}}}})
	if err != nil {
		return time.Time{}, fmt.Errorf("encode deployment patch: %w", err)
	}
	d, err := deployments.Patch(ctx, t.Deployment, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	if err != nil {
		return time.Time{}, fmt.Errorf("patch deployment %s/%s: %w", t.Namespace, t.Deployment, err)
	}
	clk := k.opts.Clock
	deadline := clk.Now().Add(k.opts.RolloutTimeout)
	msg := "not observed yet"
	for {
		if got := d.Spec.Template.Annotations[AnnotationConfigHash]; got != hash {
			return time.Time{}, &rolloutError{msg: fmt.Sprintf("deployment %s: the pod template was changed by someone else during the rollout (config hash %s, want %s)", t.Deployment, short(got), short(hash))}
		}
		done, failed, m := rolloutStatus(d)
		msg = m
		if failed {
			return time.Time{}, &rolloutError{msg: fmt.Sprintf("deployment %s: %s", t.Deployment, m)}
		}
		if done {
			return clk.Now().UTC(), nil
		}
		if !clk.Now().Before(deadline) {
			return time.Time{}, &rolloutError{msg: fmt.Sprintf("deployment %s not available within %s: %s", t.Deployment, k.opts.RolloutTimeout, msg)}
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("wait for deployment %s/%s (%s): %w", t.Namespace, t.Deployment, msg, ctx.Err())
		case <-clk.After(k.opts.PollInterval):
		}
		if d, err = deployments.Get(ctx, t.Deployment, metav1.GetOptions{}); err != nil {
			if ctx.Err() != nil {
				return time.Time{}, fmt.Errorf("wait for deployment %s/%s: %w", t.Namespace, t.Deployment, ctx.Err())
			}
			return time.Time{}, fmt.Errorf("read deployment %s/%s during the rollout: %w", t.Namespace, t.Deployment, err)
		}
	}
}

const reasonNewReplicaSetAvailable = "NewReplicaSetAvailable"

// rolloutStatus applies the rules of `kubectl rollout status`: the latest
// generation observed, all replicas updated and available, no old replicas
// left; ProgressDeadlineExceeded is a failure.
func rolloutStatus(d *appsv1.Deployment) (done, failed bool, msg string) {
	if d.Status.ObservedGeneration < d.Generation {
		return false, false, fmt.Sprintf("generation %d not observed yet (observed %d)", d.Generation, d.Status.ObservedGeneration)
	}
	if c := progressing(d); c != nil && c.Reason == "ProgressDeadlineExceeded" {
		return false, true, fmt.Sprintf("progress deadline exceeded (%s)", c.Message)
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	switch {
	case s.UpdatedReplicas < want:
		return false, false, fmt.Sprintf("%d of %d new replicas updated", s.UpdatedReplicas, want)
	case s.Replicas > s.UpdatedReplicas:
		return false, false, fmt.Sprintf("%d old replicas pending termination", s.Replicas-s.UpdatedReplicas)
	case s.AvailableReplicas < s.UpdatedReplicas || s.AvailableReplicas < want:
		return false, false, fmt.Sprintf("%d of %d updated replicas available", s.AvailableReplicas, s.UpdatedReplicas)
	}
	return true, false, fmt.Sprintf("generation %d: %d of %d replicas updated and available", d.Generation, s.AvailableReplicas, want)
}

func progressing(d *appsv1.Deployment) *appsv1.DeploymentCondition {
	for i := range d.Status.Conditions {
		if d.Status.Conditions[i].Type == appsv1.DeploymentProgressing {
			return &d.Status.Conditions[i]
		}
	}
	return nil
}

// templateHash fingerprints a pod template (sha256 of its JSON).
func templateHash(t corev1.PodTemplateSpec) string {
	b, err := json.Marshal(t)
	if err != nil {
		b = []byte(t.String())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// maxNote bounds an Event note (the API rejects more than 1 kB).
const maxNote = 1024

// event creates an events.k8s.io/v1 Event regarding the ConfigMap; failures
// are logged, never returned.
func (k *kubeStore) event(ctx context.Context, obj *object, warning bool, reason, action, note string) {
	t := k.target
	now := k.opts.Clock.Now()
	typ := corev1.EventTypeNormal
	if warning {
		typ = corev1.EventTypeWarning
	}
	ref := corev1.ObjectReference{Kind: "ConfigMap", APIVersion: "v1", Namespace: t.Namespace, Name: t.ConfigMap}
	if obj != nil {
		if cm, ok := obj.raw.(*corev1.ConfigMap); ok {
			ref.UID, ref.ResourceVersion = cm.UID, cm.ResourceVersion
		}
	}
	ev := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Namespace: t.Namespace, Name: eventName(t.ConfigMap, now)},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: FieldManager,
		ReportingInstance:   clipBytes(k.opts.Identity, 128),
		Action:              action,
		Reason:              reason,
		Regarding:           ref,
		Note:                clipBytes(note, maxNote),
		Type:                typ,
	}
	if t.Deployment != "" {
		ev.Related = &corev1.ObjectReference{Kind: "Deployment", APIVersion: "apps/v1", Namespace: t.Namespace, Name: t.Deployment}
	}
	if _, err := k.client.EventsV1().Events(t.Namespace).Create(ctx, ev, metav1.CreateOptions{FieldManager: FieldManager}); err != nil {
		k.opts.Logger.Warn("sink: record event", "target", t.Name, "reason", reason, "err", err)
	}
}

// eventName is "<configmap>.<time><random>", unique like the names client-go gives Events.
func eventName(object string, now time.Time) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	suffix := fmt.Sprintf(".%x%s", now.UnixNano(), hex.EncodeToString(b[:]))
	if len(object)+len(suffix) > 253 {
		object = strings.TrimRight(object[:253-len(suffix)], ".-")
	}
	return object + suffix
}

// clipBytes bounds s to n bytes on a rune boundary.
func clipBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
