package live

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/deployactor"
	"github.com/gatetuner/gatetuner/test/fleetsim/epp"
)

// ConfigMapSettings reads the gate's settings from an EPP config held in a
// ConfigMap, through the Kubernetes API, each time it is loaded — as an EPP
// pod reads its mounted config when it starts.
type ConfigMapSettings struct {
	Client    kubernetes.Interface
	Namespace string
	Name      string
	// Key is the data key holding the config ("" = the only key).
	Key     string
	Plugin  string
	Profile gate.Profile
	// Timeout bounds one read (default 10s).
	Timeout time.Duration
}

// LoadSettings reads and decodes the ConfigMap's config.
func (c ConfigMapSettings) LoadSettings() (gate.Settings, error) {
	to := c.Timeout
	if to <= 0 {
		to = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), to)
	defer cancel()
	cm, err := c.Client.CoreV1().ConfigMaps(c.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
	if err != nil {
		return gate.Settings{}, fmt.Errorf("read configmap %s/%s: %w", c.Namespace, c.Name, err)
	}
	key := c.Key
	if key == "" {
		if len(cm.Data) != 1 {
			return gate.Settings{}, fmt.Errorf("configmap %s/%s has %d data keys; name one", c.Namespace, c.Name, len(cm.Data))
		}
		for k := range cm.Data {
			key = k
		}
	}
	text, ok := cm.Data[key]
	if !ok {
		return gate.Settings{}, fmt.Errorf("configmap %s/%s has no key %q", c.Namespace, c.Name, key)
	}
	s, err := epp.ParseConfig([]byte(text), c.Plugin, c.Profile)
	if err != nil {
		return gate.Settings{}, fmt.Errorf("configmap %s/%s key %s: %w", c.Namespace, c.Name, key, err)
	}
	return s, nil
}

// PlayEPP makes a live Fleet play an EPP Deployment on an API server that
// runs no controllers: when the Deployment's pod template changes (a
// rollout), the fleet re-reads its settings (the Fleet's source, e.g.
// ConfigMapSettings) and restarts — its prefix index is emptied — and the
// Deployment's status is updated as the Deployment controller would. A
// config the EPP build rejects makes the new pods crash-loop: they never
// become available and the old settings keep serving. PlayEPP runs until
// ctx ends.
func PlayEPP(ctx context.Context, client kubernetes.Interface, namespace, deployment string, live *Fleet, rolloutDelay time.Duration, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	var pending *gate.Settings
	actor := deployactor.New(client, namespace, deployment, deployactor.Options{
		RolloutDelay: rolloutDelay,
		Healthy: func(corev1.PodTemplateSpec) bool {
			if live.src == nil {
				return true
			}
			s, err := live.src.LoadSettings()
			if err != nil {
				log.Warn("fleetsim: the new EPP pods crash-loop", "error", err)
				return false
			}
			pending = &s
			return true
		},
		OnRollout: func(corev1.PodTemplateSpec) {
			if pending == nil {
				if err := live.Restart(ctx); err != nil {
					log.Warn("fleetsim: EPP restart", "error", err)
				}
				return
			}
			if err := live.RestartWith(ctx, *pending); err != nil {
				log.Warn("fleetsim: EPP restart", "error", err)
			}
			pending = nil
		},
		Logger: log,
	})
	return actor.Run(ctx)
}
