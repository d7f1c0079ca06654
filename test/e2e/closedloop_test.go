package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/deployactor"
	"github.com/gatetuner/gatetuner/test/fleetsim"
	"github.com/gatetuner/gatetuner/test/fleetsim/epp"
	simlive "github.com/gatetuner/gatetuner/test/fleetsim/live"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenarios"
	"github.com/gatetuner/gatetuner/test/fleetsim/truth"
	"github.com/gatetuner/gatetuner/test/kubeharness"
	"github.com/gatetuner/gatetuner/test/promharness"
	"github.com/gatetuner/gatetuner/test/simenv"
	"github.com/gatetuner/gatetuner/tuner/sink"
)

// The closed loop runs prompt-shift's last two phases (evening: agents take
// over and contexts grow past 50k tokens; late: ~78k-token prompts), each
// 20 minutes compressed to 6 in content: the default bar goes stale there
// (hotspots pin requests to pods far behind), which the daemon must fix.
const (
	timeScale  = 10.0 / 3
	firstPhase = 4
)

const (
	cmName, cmKey, depName = "epp", "epp-config.yaml", "epp"
)

// TestClosedLoop runs the daemon in rollout mode against a live simulated
// pool for each build profile, concurrently, and judges the outcome against
// the same seed run with no daemon.
func TestClosedLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("a 12-minute real-time closed loop")
	}
	env := kubeharness.Start(t)
	bin := buildDaemon(t)
	for _, profile := range []string{gate.ProfileRouter202608, gate.ProfilePenaltyMode} {
		t.Run(profile, func(t *testing.T) {
			t.Parallel()
			runClosedLoop(t, env, bin, profile)
		})
	}
}

func buildDaemon(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "gatetuner")
	cmd := exec.Command("go", "build", "-o", out, "../../cmd/gatetuner")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build gatetuner: %v\n%s", err, b)
	}
	return out
}

type loopResult struct {
	Profile     string        `json:"profile"`
	Applies     []sink.Entry  `json:"applies"`
	Tuned       []phaseResult `json:"tuned"`
	Baseline    []phaseResult `json:"baseline"`
	Samples     []sample      `json:"samples"`
	Restarted   time.Time     `json:"daemonRestartedAt"`
	OutageStart time.Time     `json:"prometheusOutageStart"`
	OutageEnd   time.Time     `json:"prometheusOutageEnd"`
	Start       time.Time     `json:"start"`
	// Holds counts the cycles held by reason, from the daemon's
	// gatetuner_holds_total since its restart (read just before it stops).
	Holds map[string]float64 `json:"holdsSinceRestart"`
}

type phaseResult struct {
	Name        string   `json:"name"`
	Start       float64  `json:"start"`
	End         float64  `json:"end"`
	TTFTP90     float64  `json:"ttftP90"`
	Requests    int      `json:"requests"`
	WronglyHeld *float64 `json:"wronglyHeld"`
	Forfeited   *float64 `json:"forfeited"`
	Known       int64    `json:"known"`
	HeldWrong   int64    `json:"heldWrong"`
	RelWrong    int64    `json:"releasedWrong"`
}

type sample struct {
	T       float64  `json:"t"`
	Bar     *float64 `json:"barTokens"`
	Mode    string   `json:"mode"`
	TTFTP90 *float64 `json:"ttftP90"`
	Held    *float64 `json:"wronglyHeld"`
}

func runClosedLoop(t *testing.T, env *kubeharness.Env, bin, profile string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	full, err := scenarios.Load("prompt-shift")
	if err != nil {
		t.Fatal(err)
	}
	base := full.Clone()
	base.Phases = base.Phases[firstPhase:]
	prof, err := gate.LookupProfile(profile)
	if err != nil {
		t.Fatal(err)
	}
	ns := "e2e-" + profile
	if err := env.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	// The EPP: its config in a ConfigMap (defaults), its Deployment.
	def := epp.DefaultSettings()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cmName, Namespace: ns},
		Data: map[string]string{cmKey: string(simenv.EPPConfig(base, def, false))}}
	if _, err := env.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	one := int32(1)
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: depName, Namespace: ns}, Spec: appsv1.DeploymentSpec{
		Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "epp"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "epp"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "epp", Image: "ghcr.io/llm-d/llm-d-router:v0.5"}}}}}}
	if _, err := env.Client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The simulated pool plays the EPP: settings from the ConfigMap, restarts on rollouts.
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	live, err := simlive.New(base, simlive.Options{Seed: 1, TimeScale: timeScale, Logger: logger,
		Settings: simlive.ConfigMapSettings{Client: env.Client, Namespace: ns, Name: cmName, Key: cmKey, Plugin: base.EPP.Plugin, Profile: prof}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	dur := time.Duration(float64(base.Duration()) / timeScale)
	fleetAddr := serve(t, live)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = live.Run(ctx, time.Second) }()
	crashLoops := make(chan string, 16)
	go func() {
		defer wg.Done()
		actor := deployactor.New(env.Client, ns, depName, deployactor.Options{RolloutDelay: 2 * time.Second, Logger: logger,
			Healthy: func(corev1.PodTemplateSpec) bool {
				if _, err := (simlive.ConfigMapSettings{Client: env.Client, Namespace: ns, Name: cmName, Key: cmKey, Plugin: base.EPP.Plugin, Profile: prof}).LoadSettings(); err != nil {
					crashLoops <- err.Error()
					return false
				}
				return true
			},
			OnRollout: func(corev1.PodTemplateSpec) { _ = live.Restart(ctx) }})
		_ = actor.Run(ctx)
	}()
	defer func() { cancel(); wg.Wait() }()

	// A real Prometheus scrapes the pool and the daemon.
	daemonAddr := freeAddr(t)
	promSrv := promharness.Start(t, promharness.Options{ScrapeInterval: 5 * time.Second, Targets: []promharness.Target{
		{Job: "fleet", Addrs: []string{fleetAddr}}, {Job: "gatetuner", Addrs: []string{daemonAddr}, Labels: map[string]string{"namespace": ns}}}})

	// The daemon, as a process, with a ServiceAccount bound to the shipped Role.
	kubeconfig := serviceAccountKubeconfig(t, env, ns)
	cfgPath := writeConfig(t, ns, profile, base, promSrv.URL(), kubeconfig, daemonAddr)
	d := startDaemon(t, bin, cfgPath)
	defer func() { d.stop(t) }()

	res := loopResult{Profile: profile, Start: start}
	sp := &sampler{}
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	killAt, outageAt := start.Add(dur*40/100), start.Add(dur*65/100)
	killed, outage := false, false
	for time.Since(start) < dur+5*time.Second {
		select {
		case msg := <-crashLoops:
			t.Errorf("the EPP crash-looped: %s", msg)
		case <-tick.C:
			res.Samples = append(res.Samples, sp.take(ctx, t, env, ns, promSrv, live, prof, start))
		}
		if !killed && time.Now().After(killAt) {
			killed = true
			d.kill(t)
			time.Sleep(10 * time.Second)
			d = startDaemon(t, bin, cfgPath)
			res.Restarted = time.Now()
			t.Logf("[%s] daemon killed and restarted at +%s", profile, time.Since(start).Round(time.Second))
		}
		if !outage && time.Now().After(outageAt) {
			outage = true
			res.OutageStart = time.Now()
			if err := promSrv.Stop(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(60 * time.Second)
			res.OutageEnd = time.Now()
			if err := promSrv.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			t.Logf("[%s] Prometheus was down from +%s to +%s", profile, res.OutageStart.Sub(start).Round(time.Second), res.OutageEnd.Sub(start).Round(time.Second))
		}
	}
	res.Holds = daemonHolds(t, daemonAddr)
	d.stop(t)

	// What the daemon did, from the target's own history.
	cmNow, err := env.Client.CoreV1().ConfigMaps(ns).Get(ctx, cmName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var history []sink.Entry
	if h := cmNow.Annotations[sink.AnnotationHistory]; h != "" {
		if err := json.Unmarshal([]byte(h), &history); err != nil {
			t.Fatalf("history annotation: %v", err)
		}
	}
	for _, e := range history {
		if e.Kind == sink.KindApply {
			res.Applies = append(res.Applies, e)
		}
	}
	tuned := live.Truth()
	comp, err := base.Compressed(timeScale)
	if err != nil {
		t.Fatal(err)
	}
	// The live pool starts cold at the first phase: so does the baseline.
	baseline, err := fleetsim.Run(ctx, comp, fleetsim.Options{Seed: 1, Warmup: time.Nanosecond, SettingsFor: func(int) gate.Settings { return def }})
	if err != nil {
		t.Fatal(err)
	}
	res.Tuned, res.Baseline = phases(tuned), phases(baseline)
	writeResult(t, &res)
	judge(t, &res, profile, cmNow)
	if !live.Healthy() {
		t.Errorf("the simulated EPP is unhealthy at the end: %v", live.LastError())
	}
}

func phases(tr *truth.Truth) []phaseResult {
	var out []phaseResult
	for _, p := range tr.Phases {
		pr := phaseResult{Name: p.Name, Start: p.Start, End: p.End, TTFTP90: p.TTFT.P90, Requests: p.Requests,
			WronglyHeld: p.WronglyHeldRate, Forfeited: p.ForfeitedRate, Known: p.Verdicts.Known(),
			HeldWrong: p.Verdicts.HeldWrong, RelWrong: p.Verdicts.ReleasedWrong}
		out = append(out, pr)
	}
	return out
}

// judge asserts what the closed loop must never do — including making TTFT
// p90 worse than 2.5× the no-daemon run — and reports what it achieved
// against that run (the performance targets are reported, not
// asserted: a single EPP restart in this window costs more than any setting
// wins back, see TestRestartCostDominatesTheClosedLoop and
// docs/benchmarks.md).
func judge(t *testing.T, res *loopResult, profile string, cm *corev1.ConfigMap) {
	t.Helper()
	if len(res.Applies) > 3 {
		t.Errorf("%d applies, want at most 3", len(res.Applies))
	}
	for _, e := range res.Applies {
		if !e.At.Before(res.OutageStart) && e.At.Before(res.OutageEnd.Add(5*time.Second)) {
			t.Errorf("apply #%d at %s, while Prometheus was down (%s–%s)", e.Seq, e.At, res.OutageStart, res.OutageEnd)
		}
		if e.Status == sink.StatusRolledBack || e.Status == sink.StatusFailed {
			t.Errorf("apply #%d ended %s: %+v", e.Seq, e.Status, e.Failure)
		}
	}
	// No extra apply from the restart: the restarted daemon resumed the
	// cooldown from the target's annotations.
	for i := 1; i < len(res.Applies); i++ {
		prev, cur := res.Applies[i-1], res.Applies[i]
		eff := prev.At
		if prev.EffectiveAt != nil {
			eff = *prev.EffectiveAt
		}
		if cur.At.Sub(eff) < 5*time.Minute {
			t.Errorf("apply #%d came %s after #%d took effect, inside the 5m cooldown", cur.Seq, cur.At.Sub(eff).Round(time.Second), prev.Seq)
		}
	}
	firstAt := 0.0 // seconds of the compressed (live) scenario
	if len(res.Applies) == 0 {
		t.Logf("[%s] the daemon never applied; holds since its restart: %v (history: %q)", profile, res.Holds, cm.Annotations[sink.AnnotationHistory])
	} else {
		first := res.Applies[0].At
		if res.Applies[0].EffectiveAt != nil {
			first = *res.Applies[0].EffectiveAt
		}
		firstAt = first.Sub(res.Start).Seconds()
	}
	var tunedP90, baseP90, n float64
	var tunedHeld, tunedKnown, baseHeld, baseKnown, tunedRel, baseRel int64
	for i, p := range res.Tuned {
		b := res.Baseline[i]
		if p.End <= firstAt {
			continue
		}
		w := float64(p.Requests)
		tunedP90 += p.TTFTP90 * w
		baseP90 += b.TTFTP90 * w
		n += w
		tunedHeld, tunedKnown, tunedRel = tunedHeld+p.HeldWrong, tunedKnown+p.Known, tunedRel+p.RelWrong
		baseHeld, baseKnown, baseRel = baseHeld+b.HeldWrong, baseKnown+b.Known, baseRel+b.RelWrong
	}
	if n == 0 {
		return
	}
	tunedP90, baseP90 = tunedP90/n, baseP90/n
	th := float64(tunedHeld) / float64(max(tunedKnown, 1))
	bh := float64(baseHeld) / float64(max(baseKnown, 1))
	tf := float64(tunedRel) / float64(max(tunedKnown, 1))
	bf := float64(baseRel) / float64(max(baseKnown, 1))
	t.Logf("[%s] phases from the first apply (+%.0fs; the whole run without one): TTFT p90 %.2fs vs %.2fs without the daemon (%+.0f%%); wrongly held %.2f%% vs %.2f%%; forfeited %.2f%% vs %.2f%%",
		profile, firstAt, tunedP90, baseP90, 100*(tunedP90/baseP90-1), th*100, bh*100, tf*100, bf*100)
	// The daemon must never make the pool worse: the restart-cost guard
	// holds when a rollout's re-prefill backlog costs more than the
	// recommendation saves. The live run differs from the batch baseline by
	// ~15 % on its own (real-time ticks), and an apply early in the run, while
	// the lookback still sees a cold pool, can under-price a restart (a
	// restart that changes nothing at 15 % of the run costs 2.1×,
	// TestRestartCostDominatesTheClosedLoop): the margin is 2.5×, which still
	// catches the 3.6–4.0× meltdowns of the applies under load that the linear
	// restart cost let through.
	if tunedP90 > 2.5*baseP90 {
		t.Errorf("[%s] TTFT p90 %.2fs from the first apply on, %.1f× the no-daemon run's %.2fs: the daemon made the pool worse", profile, tunedP90, tunedP90/baseP90, baseP90)
	}
}

// serve serves the fleet's /metrics on a free loopback port.
func serve(t *testing.T, h http.Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// serviceAccountKubeconfig binds a ServiceAccount to the shipped Role and
// writes a kubeconfig holding its token: the daemon runs with exactly that.
func serviceAccountKubeconfig(t *testing.T, env *kubeharness.Env, ns string) string {
	ctx := context.Background()
	rbac, err := sink.RenderRBAC(sink.RBACConfig{ServiceAccount: "gatetuner", ServiceAccountNamespace: ns, LeaseNamespace: ns,
		Targets: []sink.RBACTarget{{Namespace: ns, ConfigMaps: []string{cmName}, Deployments: []string{depName}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.ApplyManifests(ctx, rbac); err != nil {
		t.Fatalf("apply RBAC: %v", err)
	}
	_, rc, err := env.ServiceAccountClient(ctx, ns, "gatetuner")
	if err != nil {
		t.Fatal(err)
	}
	return writeKubeconfig(t, rc)
}

func writeKubeconfig(t *testing.T, rc *rest.Config) string {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthorityData: rc.CAData, CertificateAuthority: rc.CAFile}
	cfg.AuthInfos["gatetuner"] = &clientcmdapi.AuthInfo{Token: rc.BearerToken}
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "gatetuner"}
	cfg.CurrentContext = "e2e"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, p); err != nil {
		t.Fatal(err)
	}
	return p
}

func writeConfig(t *testing.T, ns, profile string, sc *scenario.Scenario, promURL, kubeconfig, addr string) string {
	et := simenv.EstimatorTarget(sc)
	cfg := fmt.Sprintf(`# Closed-loop e2e: prompt-shift compressed %.2gx, so the guards' clocks are too.
prometheus:
  url: %s
  timeout: 10s
kubernetes:
  kubeconfig: %s
leaderElection:
  enabled: true
  namespace: %s
  leaseDuration: 6s
  renewDeadline: 4s
  retryPeriod: 1s
server:
  address: %s
targets:
- name: %s
  namespace: %s
  configMap: %s
  key: %s
  plugin: %s
  deployment: %s
  profile: %s
  mode: rollout
  schedule: "@every 15s"
  lookback: 90s
  saturationWindow: 20s
  snapshotStep: 5s
  cooldown: 5m
  dailyBudget: 3
  budgetWindow: 15m
  restartWarmup: 15s   # agents think ~5 s: active sessions return within ~15 s
  minDecisions: 100
  blockSizeTokens: %d
  maxNumBatchedTokens: %d
  selector:
    vllm: '%s'
    epp: '%s'
  verification:
    window: 30s
    ttftMargin: 1.0
    rolloutTimeout: 60s
`, timeScale, promURL, kubeconfig, ns, addr, sc.Target, ns, cmName, cmKey, sc.EPP.Plugin, depName, profile,
		sc.EPP.PrefixIndex.BlockSizeTokens, sc.Pods.Engine.MaxNumBatchedTokens, et.VLLMSelector, et.EPPSelector)
	p := filepath.Join(t.TempDir(), "gatetuner.yaml")
	if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

type daemonProc struct {
	cmd *exec.Cmd
	log string
}

func startDaemon(t *testing.T, bin, cfg string) *daemonProc {
	logPath := filepath.Join(t.TempDir(), "gatetuner.log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--config", cfg)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), "POD_NAME=gatetuner-"+fmt.Sprint(time.Now().UnixNano()))
	if runtime.GOOS == "linux" {
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemonProc{cmd: cmd, log: logPath}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			lines := strings.Split(string(b), "\n")
			t.Logf("daemon log tail (%s):\n%s", logPath, strings.Join(lines[max(0, len(lines)-60):], "\n"))
		}
	})
	return d
}

func (d *daemonProc) kill(t *testing.T) {
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	_ = d.cmd.Wait()
}

func (d *daemonProc) stop(t *testing.T) {
	if d.cmd.ProcessState != nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-done
	}
}

// daemonHolds reads the daemon's gatetuner_holds_total by reason (nil when
// the daemon does not answer).
func daemonHolds(t *testing.T, addr string) map[string]float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Logf("read the daemon's metrics: %v", err)
		return nil
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Logf("parse the daemon's metrics: %v", err)
		return nil
	}
	out := map[string]float64{}
	if f := fams["gatetuner_holds_total"]; f != nil {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}
