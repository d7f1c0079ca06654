// Package leader elects one gatetuner replica to write, with a Kubernetes
// Lease (client-go leaderelection and LeaseLock).
//
// Only the leader runs onLead; its context ends when leadership is lost or
// the caller's context ends. Unlike client-go's ReleaseOnCancel, the Lease is
// released only after onLead has returned, so a new leader never writes
// while the old one is still finishing a write.
package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Defaults of Config's durations (client-go's recommended values).
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// Config configures an election.
type Config struct {
	// Client talks to the API server.
	Client kubernetes.Interface
	// Namespace and Name locate the Lease.
	Namespace string
	Name      string
	// Identity names this candidate (unique per replica, e.g. the pod name).
	Identity string
	// LeaseDuration is how long non-leaders wait before taking over an
	// unrenewed Lease; RenewDeadline is how long the leader retries renewing
	// before giving up; RetryPeriod is the wait between tries.
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// OnNewLeader, when set, is told every newly observed leader's identity.
	OnNewLeader func(identity string)
	// Logger receives transitions; slog.Default() when nil.
	Logger *slog.Logger
}

// Elector runs one candidate.
type Elector struct {
	cfg     Config
	lock    *resourcelock.LeaseLock
	log     *slog.Logger
	leading atomic.Bool
	leader  atomic.Value // string
	running atomic.Bool
}

// New validates cfg and returns a candidate; call Run to take part.
func New(cfg Config) (*Elector, error) {
	if cfg.Client == nil {
		return nil, errors.New("leader election: a client is required")
	}
	if cfg.Namespace == "" || cfg.Name == "" || cfg.Identity == "" {
		return nil, fmt.Errorf("leader election: namespace, name and identity are required (got %q, %q, %q)", cfg.Namespace, cfg.Name, cfg.Identity)
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.RenewDeadline == 0 {
		cfg.RenewDeadline = DefaultRenewDeadline
	}
	if cfg.RetryPeriod == 0 {
		cfg.RetryPeriod = DefaultRetryPeriod
	}
	if cfg.LeaseDuration < time.Second {
		return nil, fmt.Errorf("leader election: lease duration %s is under 1s (the Lease stores whole seconds)", cfg.LeaseDuration)
	}
	if cfg.LeaseDuration <= cfg.RenewDeadline {
		return nil, fmt.Errorf("leader election: lease duration %s must exceed the renew deadline %s", cfg.LeaseDuration, cfg.RenewDeadline)
	}
	if cfg.RenewDeadline <= time.Duration(leaderelection.JitterFactor*float64(cfg.RetryPeriod)) {
		return nil, fmt.Errorf("leader election: renew deadline %s must exceed %g × the retry period %s", cfg.RenewDeadline, leaderelection.JitterFactor, cfg.RetryPeriod)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	e := &Elector{
		cfg: cfg,
		lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.Name},
			Client:     cfg.Client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.Identity},
		},
		log: log.With("lease", cfg.Namespace+"/"+cfg.Name, "identity", cfg.Identity),
	}
	e.leader.Store("")
	return e, nil
}

// IsLeader reports whether this candidate leads now (onLead is running and
// its context is live).
func (e *Elector) IsLeader() bool { return e.leading.Load() }

// Leader returns the identity of the last observed leader ("" if none yet).
func (e *Elector) Leader() string { return e.leader.Load().(string) }

// Identity returns the candidate's identity.
func (e *Elector) Identity() string { return e.cfg.Identity }

// Run takes part in the election until ctx ends: whenever this candidate
// acquires the Lease it runs onLead with a context that ends when leadership
// is lost or ctx ends, then campaigns again. On return onLead has returned
// and the Lease, if still held, has been released. Run may be called once.
func (e *Elector) Run(ctx context.Context, onLead func(ctx context.Context)) error {
	if !e.running.CompareAndSwap(false, true) {
		return errors.New("leader election: Run called twice")
	}
	for ctx.Err() == nil {
		if err := e.term(ctx, onLead); err != nil {
			return err
		}
	}
	return nil
}

// term campaigns once: acquire, lead until the Lease is lost or ctx ends,
// wait for onLead to return, release.
func (e *Elector) term(ctx context.Context, onLead func(ctx context.Context)) error {
	lock := &watchedLock{Interface: e.lock, identity: e.cfg.Identity}
	finished := make(chan struct{})
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   e.cfg.LeaseDuration,
		RenewDeadline:   e.cfg.RenewDeadline,
		RetryPeriod:     e.cfg.RetryPeriod,
		ReleaseOnCancel: false, // released below, after onLead returned
		Name:            e.cfg.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				defer close(finished)
				if lctx.Err() != nil {
					return
				}
				e.leading.Store(true)
				defer e.leading.Store(false)
				e.log.Info("leader: started leading")
				onLead(lctx)
			},
			OnStoppedLeading: func() { e.leading.Store(false) },
			OnNewLeader: func(id string) {
				e.leader.Store(id)
				e.log.Info("leader: observed leader", "leader", id)
				if e.cfg.OnNewLeader != nil {
					e.cfg.OnNewLeader(id)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	le.Run(ctx)
	e.leading.Store(false)
	if lock.acquired.Load() {
		// client-go started OnStartedLeading in a goroutine: wait for onLead.
		<-finished
		e.log.Info("leader: stopped leading")
		e.release() //nolint:contextcheck // the leading context has ended: releasing the Lease needs a fresh one
	}
	return nil
}

// watchedLock records whether this candidate ever wrote itself into the
// Lease, i.e. whether client-go acquired it and started OnStartedLeading.
type watchedLock struct {
	resourcelock.Interface
	identity string
	acquired atomic.Bool
}

func (l *watchedLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Create(ctx, r)
	if err == nil && r.HolderIdentity == l.identity {
		l.acquired.Store(true)
	}
	return err
}

func (l *watchedLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Update(ctx, r)
	if err == nil && r.HolderIdentity == l.identity {
		l.acquired.Store(true)
	}
	return err
}

// release gives the Lease up if this candidate still holds it, so another
// takes over without waiting for it to expire.
func (e *Elector) release() {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.RenewDeadline)
	defer cancel()
	for attempt := 0; attempt < 5; attempt++ {
		rec, _, err := e.lock.Get(ctx)
		if err != nil {
			e.log.Warn("leader: read lease to release it", "err", err)
			return
		}
		if rec.HolderIdentity != e.cfg.Identity {
			return
		}
		now := metav1.NewTime(time.Now())
		err = e.lock.Update(ctx, resourcelock.LeaderElectionRecord{
			LeaderTransitions:    rec.LeaderTransitions,
			LeaseDurationSeconds: 1,
			RenewTime:            now,
			AcquireTime:          now,
		})
		if err == nil {
			e.log.Info("leader: released lease")
			return
		}
		e.log.Warn("leader: release lease", "attempt", attempt+1, "err", err)
	}
}

// Run takes part in the election described by cfg until ctx ends, running
// onLead while leading (see Elector.Run). Use New to also ask IsLeader.
func Run(ctx context.Context, cfg Config, onLead func(ctx context.Context)) error {
	e, err := New(cfg)
	if err != nil {
		return err
	}
	return e.Run(ctx, onLead)
}
