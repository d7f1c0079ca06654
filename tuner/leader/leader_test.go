package leader_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gatetuner/gatetuner/test/kubeharness"
	"github.com/gatetuner/gatetuner/tuner/leader"
)

const ns = "gatetuner"

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// writer is a daemon's write loop: while leading it appends its identity to a
// ConfigMap with a resourceVersion precondition, and the test records who
// wrote while someone else was writing.
type writer struct {
	mu      sync.Mutex
	active  map[string]bool
	overlap []string
	writes  map[string]int
}

func (w *writer) lead(t *testing.T, c kubernetes.Interface, id string) func(context.Context) {
	return func(ctx context.Context) {
		w.mu.Lock()
		for other := range w.active {
			w.overlap = append(w.overlap, fmt.Sprintf("%s started leading while %s was", id, other))
		}
		w.active[id] = true
		w.mu.Unlock()
		defer func() {
			w.mu.Lock()
			delete(w.active, id)
			w.mu.Unlock()
		}()
		for ctx.Err() == nil {
			cm, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "epp", metav1.GetOptions{})
			if err == nil {
				cm.Data["writers"] += id + "\n"
				_, err = c.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
			}
			if err == nil {
				w.mu.Lock()
				w.writes[id]++
				w.mu.Unlock()
			} else if ctx.Err() == nil && !strings.Contains(err.Error(), "the object has been modified") {
				t.Errorf("%s: write: %v", id, err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}

func (w *writer) count(id string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writes[id]
}

func TestTwoDaemonsOneWriter(t *testing.T) {
	env := kubeharness.Start(t)
	ctx := context.Background()
	if err := env.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	c := env.Client
	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "epp"}, Data: map[string]string{"writers": ""}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w := &writer{active: map[string]bool{}, writes: map[string]int{}}
	cfg := func(id string) leader.Config {
		return leader.Config{Client: c, Namespace: ns, Name: "gatetuner", Identity: id,
			LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond, Logger: quietLogger()}
	}
	type daemon struct {
		el     *leader.Elector
		cancel context.CancelFunc
		done   chan error
	}
	start := func(id string) *daemon {
		el, err := leader.New(cfg(id))
		if err != nil {
			t.Fatal(err)
		}
		dctx, cancel := context.WithCancel(ctx)
		d := &daemon{el: el, cancel: cancel, done: make(chan error, 1)}
		go func() { d.done <- el.Run(dctx, w.lead(t, c, id)) }()
		t.Cleanup(func() {
			cancel()
			<-d.done
		})
		return d
	}
	a, b := start("gatetuner-a"), start("gatetuner-b")

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("a leader", func() bool { return a.el.IsLeader() || b.el.IsLeader() })
	first, second := a, b
	if b.el.IsLeader() {
		first, second = b, a
	}
	firstID, secondID := first.el.Identity(), second.el.Identity()
	waitFor("the leader to write", func() bool { return w.count(firstID) >= 5 })
	// Several lease periods: the other candidate never writes.
	time.Sleep(3 * time.Second)
	if n := w.count(secondID); n != 0 || second.el.IsLeader() {
		t.Fatalf("%s wrote %d times while %s led", secondID, n, firstID)
	}
	if first.el.Leader() != firstID || second.el.Leader() != firstID {
		t.Fatalf("observed leaders %q and %q, want %q", first.el.Leader(), second.el.Leader(), firstID)
	}

	// The leader stops: it releases the Lease and the other takes over.
	stopped := time.Now()
	first.cancel()
	if err := <-first.done; err != nil {
		t.Fatal(err)
	}
	first.done <- nil // for the cleanup
	firstWrites := w.count(firstID)
	waitFor("the other to take over", func() bool { return second.el.IsLeader() && w.count(secondID) >= 3 })
	t.Logf("take-over after %s (lease duration 2s; released on stop)", time.Since(stopped).Round(10*time.Millisecond))
	if w.count(firstID) != firstWrites {
		t.Fatalf("%s wrote after it stopped", firstID)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.overlap) > 0 {
		t.Fatalf("two writers at once: %v", w.overlap)
	}
	l, err := c.CoordinationV1().Leases(ns).Get(ctx, "gatetuner", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != secondID {
		t.Fatalf("lease %+v %v", l.Spec, err)
	}
}

func TestConfigValidation(t *testing.T) {
	for name, cfg := range map[string]leader.Config{
		"no client":              {Namespace: ns, Name: "l", Identity: "a"},
		"sub-second lease":       {Client: &fakeClient{}, Namespace: ns, Name: "l", Identity: "a", LeaseDuration: 500 * time.Millisecond, RenewDeadline: 400 * time.Millisecond, RetryPeriod: 100 * time.Millisecond},
		"renew beyond the lease": {Client: &fakeClient{}, Namespace: ns, Name: "l", Identity: "a", LeaseDuration: 2 * time.Second, RenewDeadline: 3 * time.Second},
		"no identity":            {Client: &fakeClient{}, Namespace: ns, Name: "l"},
	} {
		if _, err := leader.New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// fakeClient satisfies kubernetes.Interface for validation only (never called).
type fakeClient struct{ kubernetes.Interface }
