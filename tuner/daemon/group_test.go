package daemon

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/estimator/prom"
	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/test/fleetsim"
	"github.com/gatetuner/gatetuner/test/fleetsim/epp"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/scenarios"
	"github.com/gatetuner/gatetuner/test/simenv"
	"github.com/gatetuner/gatetuner/tuner"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/sink"
)

// twoFilters is an EPP config whose two scheduling profiles each gate with
// their own affinity filter instance.
const twoFilters = `apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: approx-prefix-cache-producer
  parameters:
    blockSizeTokens: 256
- type: inflight-load-producer
# Chat traffic.
- name: prefill-affinity
  type: prefix-cache-affinity-filter
  parameters:
    affinityThreshold: 0.8
    maxTTFTPenaltyMs: 18000        # hand-picked at deploy time
    peakPrefillThroughput: 15928   # tok/s
# Batch traffic.
- name: prefill-affinity-batch
  type: prefix-cache-affinity-filter
  parameters:
    affinityThreshold: 0.8
    maxTTFTPenaltyMs: 18000
    peakPrefillThroughput: 15928
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: prefill-affinity
  - pluginRef: max-score-picker
- name: batch
  plugins:
  - pluginRef: prefill-affinity-batch
  - pluginRef: max-score-picker
`

// groupEnv fills an embedded Prometheus with prompt-shift's night (where
// the default bar is too lax) and writes twoFilters to a file.
func groupEnv(t *testing.T) (*prom.Embedded, *scenario.Scenario, string, time.Time) {
	t.Helper()
	ctx := context.Background()
	sc, err := scenarios.Load("prompt-shift")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	emb, err := prom.NewEmbedded(prom.EmbeddedConfig{Dir: filepath.Join(dir, "tsdb"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { emb.Close() })
	_, end, err := simenv.Fill(ctx, emb, sc, fleetsim.Options{Seed: 1, First: "night", Last: "night",
		SettingsFor: func(int) gate.Settings { return epp.DefaultSettings() }})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "epp-config.yaml")
	if err := os.WriteFile(path, []byte(twoFilters), 0o644); err != nil {
		t.Fatal(err)
	}
	return emb, sc, path, end.Add(7 * time.Second)
}

func groupTarget(sc *scenario.Scenario, name, path, plugin string, mode string) config.Target {
	pol := config.DefaultPolicy()
	pol.Mode = mode
	pol.Schedule = "@every 1m"
	pol.Lookback = 20 * time.Minute
	// The evidence is the phase the test filled, and the joint write is
	// tested, not the auto apply window (which needs every window of a day).
	pol.History, pol.DayLength, pol.WindowWidth = 20*time.Minute, 2*time.Hour, 20*time.Minute
	pol.ApplyWindow = &config.ApplyWindow{Always: true}
	pol.Cooldown = 20 * time.Minute
	pol.RestartWarmup = 5 * time.Second
	bs := sc.EPP.PrefixIndex.BlockSizeTokens
	pol.BlockSizeTokens = &bs
	et := simenv.EstimatorTarget(sc)
	return config.Target{Name: name, File: path, Plugin: plugin, Profile: gate.ProfileRouter202608,
		MaxNumBatchedTokens: sc.Pods.Engine.MaxNumBatchedTokens, Selector: config.Selector{VLLM: et.VLLMSelector, EPP: et.EPPSelector}, Policy: pol}
}

// twoTargetDaemon is a daemon in configmap mode over groupEnv with one
// target per filter instance of twoFilters.
func twoTargetDaemon(t *testing.T) (*Daemon, string) {
	t.Helper()
	emb, sc, path, at := groupEnv(t)
	cfg := &config.Config{Prometheus: config.Prometheus{URL: "embedded"}, Targets: []config.Target{
		groupTarget(sc, "chat", path, "prefill-affinity", config.ModeConfigMap),
		groupTarget(sc, "batch", path, "prefill-affinity-batch", config.ModeConfigMap)}}
	d, err := New(context.Background(), cfg, Deps{Querier: emb, Clock: func() time.Time { return at }, Seed: 1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d, path
}

// TestTargetsSharingOneConfigWriteOnce: two filter instances of one EPP
// config are two targets; when both pass their guards, the daemon writes
// both edits in one write — one history entry, one pending restart — every
// other byte kept, and both reports say applied.
func TestTargetsSharingOneConfigWriteOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates prompt-shift's night")
	}
	ctx := context.Background()
	d, path := twoTargetDaemon(t)
	reps, err := d.RunOnce(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != 2 {
		t.Fatalf("%d reports, want 2", len(reps))
	}
	for _, r := range reps {
		if r.Result != tuner.ResultApplied || r.Apply == nil {
			t.Fatalf("%s: %s %+v, want applied", r.Target, r.Result, r.Hold)
		}
	}
	if reps[0].Apply.Seq != reps[1].Apply.Seq {
		t.Fatalf("history entries #%d and #%d: want one write", reps[0].Apply.Seq, reps[1].Apply.Seq)
	}
	snap, err := d.Targets()[0].Sink.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(snap.State.History); n != 1 {
		t.Fatalf("%d history entries, want 1: %+v", n, snap.State.History)
	}
	if snap.State.Pending == nil {
		t.Fatal("no pending restart after the write")
	}
	for _, name := range []string{"chat", "batch"} {
		if !strings.Contains(snap.State.History[0].Reason, name+": ") {
			t.Errorf("history reason %q does not name target %s", snap.State.History[0].Reason, name)
		}
	}
	// Both instances carry the new bar; everything else is byte-for-byte.
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, tg := range d.Targets() {
		snap, err := tg.Sink.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		in, ok := snap.Instance(tg.Config.Plugin)
		if want := reps[i].Recommendation.MaxTTFTPenaltyMs; !ok || in.Params.MaxTTFTPenaltyMs != want {
			t.Fatalf("%s: maxTTFTPenaltyMs %v, want %v", tg.Config.Plugin, in.Params.MaxTTFTPenaltyMs, want)
		}
	}
	if strings.Count(string(got), "18000") != 0 {
		t.Fatalf("an instance kept the old value:\n%s", got)
	}
	gl, wl := strings.Split(string(got), "\n"), strings.Split(twoFilters, "\n")
	if len(gl) != len(wl) {
		t.Fatalf("the write changed the line count:\n%s", got)
	}
	changed := 0
	for i := range gl {
		if gl[i] != wl[i] {
			changed++
			if !strings.Contains(wl[i], "maxTTFTPenaltyMs: 18000") || !strings.HasPrefix(gl[i], "    maxTTFTPenaltyMs: ") {
				t.Errorf("line %d changed beyond the owned value: %q → %q", i+1, wl[i], gl[i])
			}
		}
	}
	if changed != 2 {
		t.Errorf("%d lines changed, want the two maxTTFTPenaltyMs lines:\n%s", changed, got)
	}
	// The next cycle of either target waits for the EPP restart.
	reps, err = d.RunOnce(ctx, "batch")
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != 1 || reps[0].Target != "batch" || reps[0].Hold == nil || reps[0].Hold.Reason != tuner.HoldPendingRestart {
		t.Fatalf("after the joint write: %+v, want batch held pending-restart", reps)
	}
}

// TestTargetsSharingOneConfigMustAgree: targets on one config with different
// schedules or modes are a configuration error naming both.
func TestTargetsSharingOneConfigMustAgree(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "epp.yaml")
	if err := os.WriteFile(path, []byte(twoFilters), 0o644); err != nil {
		t.Fatal(err)
	}
	emb, err := prom.NewEmbedded(prom.EmbeddedConfig{Dir: filepath.Join(dir, "tsdb"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	sc, err := scenarios.Load("prompt-shift")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		edit  func(*config.Target)
		wants string
	}{
		{"different schedules", func(c *config.Target) { c.Schedule = "@every 5m" }, "same mode and schedule"},
		{"different modes", func(c *config.Target) { c.Mode = config.ModeOff }, "same mode and schedule"},
		{"a target without a plugin name", func(c *config.Target) { c.Plugin = "" }, "name the plugin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := groupTarget(sc, "batch", path, "prefill-affinity-batch", config.ModeConfigMap)
			tc.edit(&b)
			cfg := &config.Config{Prometheus: config.Prometheus{URL: "embedded"}, Targets: []config.Target{
				groupTarget(sc, "chat", path, "prefill-affinity", config.ModeConfigMap), b}}
			d, err := New(ctx, cfg, Deps{Querier: emb, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err == nil {
				d.Close()
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.wants) || !strings.Contains(err.Error(), "chat") || !strings.Contains(err.Error(), "batch") {
				t.Fatalf("error %q: want it to say %q and name both targets", err, tc.wants)
			}
		})
	}
}

// editBeforeRead is a sink that edits its file just before each Read: an
// external edit landing between the targets' reads and the joint write.
type editBeforeRead struct {
	sink.Sink
	path, from, to string
}

func (e *editBeforeRead) Read(ctx context.Context) (*sink.Snapshot, error) {
	b, err := os.ReadFile(e.path)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(e.path, []byte(strings.Replace(string(b), e.from, e.to, 1)), 0o644); err != nil {
		return nil, err
	}
	return e.Sink.Read(ctx)
}

// TestJointWriteHoldsOnAnExternalEdit: when an owned key of one of the
// instances changes between the cycle's reads and the joint write, nothing
// is written and both targets hold changed-externally.
func TestJointWriteHoldsOnAnExternalEdit(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates prompt-shift's night")
	}
	ctx := context.Background()
	d, path := twoTargetDaemon(t)
	edited := strings.Replace(twoFilters, "maxTTFTPenaltyMs: 18000\n", "maxTTFTPenaltyMs: 9000\n", 1)
	d.groups[0].joint = &editBeforeRead{Sink: d.groups[0].joint, path: path, from: "maxTTFTPenaltyMs: 18000\n", to: "maxTTFTPenaltyMs: 9000\n"}
	reps, err := d.RunOnce(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reps {
		if r.Result != tuner.ResultHeld || r.Hold == nil || r.Hold.Reason != tuner.HoldChangedExternally {
			t.Fatalf("%s: %s %+v, want held changed-externally", r.Target, r.Result, r.Hold)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != edited {
		t.Fatalf("the config is not exactly the external edit:\n%s", got)
	}
}
