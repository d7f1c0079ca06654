package sink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/eppconfig"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

// newFileTarget writes sample into a fresh directory and opens a file sink on it.
func newFileTarget(t *testing.T, sample string, plugins []string, profile string, opts Options) (Sink, string) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, readTestdata(t, sample), 0o640); err != nil {
		t.Fatal(err)
	}
	if opts.Clock == nil {
		opts.Clock = testingclock.NewFakeClock(t0)
	}
	opts.Logger = testLogger(t)
	opts.Identity = "test"
	s, err := New(Target{Name: "prod", File: path, Plugins: plugins, Profile: mustProfile(t, profile)}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s, path
}

func TestFileApplyWritesSpliceAndSidecarRoundTrips(t *testing.T) {
	fc := testingclock.NewFakeClock(t0)
	s, path := newFileTarget(t, "epp-config-production-commented.yaml", []string{"prefill-affinity"}, gate.ProfileRouter202608, Options{Clock: fc})
	orig := readTestdata(t, "epp-config-production-commented.yaml")

	snap := mustRead(t, s)
	if got := ownedValue(t, snap, "prefill-affinity", gate.KeyMaxTTFTPenaltyMs); got != "30000" {
		t.Fatalf("maxTTFTPenaltyMs read as %s, want 30000", got)
	}
	if snap.Instances[0].Params.PeakPrefillThroughput != 4783 {
		t.Fatalf("params: %+v", snap.Instances[0].Params)
	}
	if snap.State.Pending != nil || len(snap.State.History) != 0 {
		t.Fatalf("fresh target has state: %+v", snap.State)
	}

	res := mustApply(t, s, snap, Meta{Reason: "wrongly-held 17.2% -> 0.4%", Evidence: "drain 4100 tok/s conf 0.82", RecommendationHash: "r1"},
		set("prefill-affinity", gate.KeyMaxTTFTPenaltyMs, 12000, gate.KeyPeakPrefillThroughput, 4100))
	if res.Outcome != OutcomeApplied || !res.Pending || res.Attempts != 1 || res.Recomputed {
		t.Fatalf("result %+v", res)
	}
	got, _ := os.ReadFile(path)
	want := strings.Replace(string(orig), "peakPrefillThroughput: 4783\n", "peakPrefillThroughput: 4100\n", 1)
	want = strings.Replace(want, "maxTTFTPenaltyMs: 30000\n", "maxTTFTPenaltyMs: 12000\n", 1)
	if string(got) != want {
		t.Fatalf("file after apply:\n%s", eppconfig.Diff("want", "got", []byte(want), got))
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o640 {
		t.Fatalf("file mode %v, want 0640 kept", fi.Mode().Perm())
	}

	// The state is in the sidecar and reads back.
	if _, err := os.Stat(SidecarPath(path)); err != nil {
		t.Fatalf("sidecar: %v", err)
	}
	snap2 := mustRead(t, s)
	st := snap2.State
	if len(st.History) != 1 || st.Pending == nil || st.Pending.Seq != 1 || st.Pending.ConfigHash != ConfigHash(got) {
		t.Fatalf("state after apply: %+v", st)
	}
	en := st.History[0]
	ic := en.Instances[0]
	if en.Kind != KindApply || en.By != "test" || en.Reason != "wrongly-held 17.2% -> 0.4%" || en.RecommendationHash != "r1" ||
		en.Status != StatusPendingRestart || !en.At.Equal(t0) || ic.Plugin != "prefill-affinity" ||
		ic.Old["maxTTFTPenaltyMs"] != "30000" || ic.New["maxTTFTPenaltyMs"] != "12000" ||
		ic.Old["peakPrefillThroughput"] != "4783" || ic.New["peakPrefillThroughput"] != "4100" ||
		ic.OldBarTokens != 30000*4783/1000.0 || ic.NewBarTokens != 12000*4100/1000.0 {
		t.Fatalf("history entry %+v", en)
	}

	// Pending restart holds the next write.
	res = mustApply(t, s, snap2, Meta{}, set("prefill-affinity", gate.KeyMaxTTFTPenaltyMs, 11000))
	if res.Outcome != OutcomeHeld || res.Hold.Reason != HoldPendingRestart {
		t.Fatalf("second apply while pending: %+v", res)
	}
	// A restart before the write does not resolve it.
	if err := s.MarkRestarted(context.Background(), t0.Add(-time.Minute)); !errors.Is(err, ErrNoPendingRestart) {
		t.Fatalf("MarkRestarted before the write: %v, want ErrNoPendingRestart", err)
	}
	restart := t0.Add(3 * time.Minute)
	if err := s.MarkRestarted(context.Background(), restart); err != nil {
		t.Fatal(err)
	}
	snap3 := mustRead(t, s)
	if snap3.State.Pending != nil || !snap3.State.EffectiveAt.Equal(restart) ||
		snap3.State.History[0].Status != StatusEffective || !snap3.State.History[0].EffectiveAt.Equal(restart) {
		t.Fatalf("state after restart: %+v", snap3.State)
	}
	// Writing the values already there changes nothing.
	res = mustApply(t, s, snap3, Meta{}, set("prefill-affinity", gate.KeyMaxTTFTPenaltyMs, 12000))
	if res.Outcome != OutcomeUnchanged {
		t.Fatalf("same values: %+v", res)
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, got) {
		t.Fatal("an unchanged apply rewrote the file")
	}
}

func TestFileAtomicWriteFailureLeavesOriginal(t *testing.T) {
	for _, file := range []string{"config", "sidecar"} {
		for _, step := range []string{"create", "write", "sync", "rename"} {
			t.Run(file+"/"+step, func(t *testing.T) {
				s, path := newFileTarget(t, "epp-config-production-commented.yaml", nil, gate.ProfileRouter202608, Options{})
				orig, _ := os.ReadFile(path)
				fs := s.(*engine).store.(*fileStore)
				victim := path
				if file == "sidecar" {
					victim = SidecarPath(path)
				}
				injected := fmt.Errorf("injected %s failure", step)
				fs.fault = func(st, p string) error {
					if st == step && p == victim {
						return injected
					}
					return nil
				}
				snap := mustRead(t, s)
				_, err := s.Apply(context.Background(), snap, []eppconfig.Change{set("prefill-affinity", gate.KeyMaxTTFTPenaltyMs, 1000)}, Meta{})
				if !errors.Is(err, injected) {
					t.Fatalf("apply: %v, want the injected failure", err)
				}
				if got, _ := os.ReadFile(path); !bytes.Equal(got, orig) {
					t.Fatal("the config changed although its write failed")
				}
				if _, err := os.Stat(SidecarPath(path)); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("sidecar left behind after a failed write: %v", err)
				}
				entries, _ := os.ReadDir(filepath.Dir(path))
				for _, e := range entries {
					if strings.Contains(e.Name(), ".tmp-") {
						t.Fatalf("temporary file left: %s", e.Name())
					}
				}
				// Without the fault the same apply goes through.
				fs.fault = nil
				if res := mustApply(t, s, mustRead(t, s), Meta{}, set("prefill-affinity", gate.KeyMaxTTFTPenaltyMs, 1000)); res.Outcome != OutcomeApplied {
					t.Fatalf("retry: %+v", res)
				}
			})
		}
	}
}

func TestFileConcurrentEditIsMergedOrHeld(t *testing.T) {
	t.Run("other content changed: recomputed, both kept", func(t *testing.T) {
		s, path := newFileTarget(t, "epp-config-production-commented.yaml", nil, gate.ProfileRouter202608, Options{})
		s.(*engine).opts.beforeWrite = func(attempt int) {
			if attempt == 1 {
				b, _ := os.ReadFile(path)
				b = append([]byte("# edited by a person while gatetuner computed\n"), b...)
				b = bytes.Replace(b, []byte("weight: 6"), []byte("weight: 7"), 1)
				if err := os.WriteFile(path, b, 0o644); err != nil {
					t.Error(err)
				}
			}
		}
		res := mustApply(t, s, mustRead(t, s), Meta{}, set("prefill-affinity", gate.KeyMaxTTFTPenaltyMs, 9000))
		if res.Outcome != OutcomeApplied || res.Attempts != 2 || !res.Recomputed {
			t.Fatalf("result %+v", res)
		}
		b, _ := os.ReadFile(path)
		for _, want := range []string{"# edited by a person while gatetuner computed\n", "weight: 7", "maxTTFTPenaltyMs: 9000\n"} {
			if !bytes.Contains(b, []byte(want)) {
				t.Fatalf("lost %q:\n%s", want, b)
			}
		}
	})
	t.Run("owned key changed: held, not overwritten", func(t *testing.T) {
		s, path := newFileTarget(t, "epp-config-production-commented.yaml", nil, gate.ProfileRouter202608, Options{})
		snap := mustRead(t, s)
		b, _ := os.ReadFile(path)
		b = bytes.Replace(b, []byte("maxTTFTPenaltyMs: 30000"), []byte("maxTTFTPenaltyMs: 25000"), 1)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		res := mustApply(t, s, snap, Meta{}, set("prefill-affinity", gate.KeyMaxTTFTPenaltyMs, 9000))
		if res.Outcome != OutcomeHeld || res.Hold.Reason != HoldChangedExternally || !strings.Contains(res.Hold.Message, "25000") {
			t.Fatalf("result %+v", res)
		}
		if got, _ := os.ReadFile(path); !bytes.Equal(got, b) {
			t.Fatal("held write changed the file")
		}
	})
}

func TestFileRestartHook(t *testing.T) {
	// The EPP this hook starts is a router-2026-08 build: penaltyMode crash-loops it.
	eppBuild := mustProfile(t, gate.ProfileRouter202608)
	var restarts []string
	hook := func(_ context.Context, path, hash string) error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if ConfigHash(b) != hash {
			return fmt.Errorf("hook got hash %s for a file hashing to %s", hash, ConfigHash(b))
		}
		restarts = append(restarts, hash)
		f, err := eppconfig.Parse(b, path)
		if err != nil {
			return err
		}
		in, err := f.Select(eppconfig.Target{})
		if err != nil {
			return err
		}
		if _, err := in.Params(eppBuild); err != nil {
			return fmt.Errorf("EPP exited: %w", err)
		}
		return nil
	}
	t.Run("success is effective at once", func(t *testing.T) {
		restarts = nil
		fc := testingclock.NewFakeClock(t0)
		s, path := newFileTarget(t, "epp-config-production-commented.yaml", nil, gate.ProfilePenaltyMode, Options{Clock: fc, RestartHook: hook})
		res := mustApply(t, s, mustRead(t, s), Meta{}, set("prefill-affinity", gate.KeyMaxTTFTPenaltyMs, 20000))
		if res.Outcome != OutcomeApplied || res.Pending || res.Entry.Status != StatusEffective || len(restarts) != 1 {
			t.Fatalf("result %+v, restarts %d", res, len(restarts))
		}
		st := mustRead(t, s).State
		if st.Pending != nil || !st.EffectiveAt.Equal(t0) {
			t.Fatalf("state %+v", st)
		}
		b, _ := os.ReadFile(path)
		if restarts[0] != ConfigHash(b) {
			t.Fatal("hook did not see the written config")
		}
	})
	t.Run("failure rolls back and holds", func(t *testing.T) {
		restarts = nil
		s, path := newFileTarget(t, "epp-config-production-commented.yaml", nil, gate.ProfilePenaltyMode, Options{RestartHook: hook})
		orig, _ := os.ReadFile(path)
		res := mustApply(t, s, mustRead(t, s), Meta{}, set("prefill-affinity", gate.KeyPenaltyMode, "matchedTokens"))
		if res.Outcome != OutcomeRolledBack || res.Hold == nil || res.Hold.Reason != HoldRolloutFailed || len(restarts) != 2 {
			t.Fatalf("result %+v, restarts %d", res, len(restarts))
		}
		if got, _ := os.ReadFile(path); !bytes.Equal(got, orig) {
			t.Fatalf("not restored byte for byte:\n%s", eppconfig.Diff("orig", "got", orig, got))
		}
		snap := mustRead(t, s)
		st := snap.State
		if st.Hold == nil || st.Hold.Reason != HoldRolloutFailed || len(st.History) != 2 ||
			st.History[0].Status != StatusRolledBack || st.History[0].Failure == nil ||
			st.History[1].Kind != KindAutoRollback || st.History[1].Undoes != 1 || st.History[1].Status != StatusEffective {
			t.Fatalf("state %+v", st)
		}
		// The hold stops the tuner, not a person's rollback.
		res = mustApply(t, s, snap, Meta{}, set("prefill-affinity", gate.KeyMaxTTFTPenaltyMs, 20000))
		if res.Outcome != OutcomeHeld || res.Hold.Reason != HoldRolloutFailed {
			t.Fatalf("apply while held: %+v", res)
		}
		res = mustApply(t, s, snap, Meta{Kind: KindRollback}, set("prefill-affinity", gate.KeyMaxTTFTPenaltyMs, 20000))
		if res.Outcome != OutcomeApplied {
			t.Fatalf("rollback while held: %+v", res)
		}
	})
}

func TestFilePausedAndMalformedState(t *testing.T) {
	s, path := newFileTarget(t, "epp-config-production-commented.yaml", nil, gate.ProfileRouter202608, Options{})
	snap := mustRead(t, s)
	if err := os.WriteFile(SidecarPath(path), []byte(`{"version":1,"paused":true,"history":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	res := mustApply(t, s, snap, Meta{}, set("prefill-affinity", gate.KeyMaxTTFTPenaltyMs, 1000))
	if res.Outcome != OutcomeHeld || res.Hold.Reason != HoldPaused {
		t.Fatalf("paused: %+v", res)
	}
	if err := os.WriteFile(SidecarPath(path), []byte(`{"version":1,"history":[{"seq":1,"kind":"apply"`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(context.Background()); !errors.Is(err, ErrMalformed) {
		t.Fatalf("read with a broken sidecar: %v, want ErrMalformed", err)
	}
}

func TestBatchTwoInstancesOneWrite(t *testing.T) {
	var restarts int
	hook := func(context.Context, string, string) error { restarts++; return nil }
	s, path := newFileTarget(t, "epp-config-two-gates.yaml", []string{"strict-affinity-filter", "loose-affinity-filter"}, gate.ProfileRouter202608, Options{RestartHook: hook})
	snap := mustRead(t, s)
	if len(snap.Instances) != 2 {
		t.Fatalf("instances %d", len(snap.Instances))
	}
	res := mustApply(t, s, snap, Meta{},
		set("strict-affinity-filter", gate.KeyMaxTTFTPenaltyMs, 4000),
		set("loose-affinity-filter", gate.KeyMaxTTFTPenaltyMs, 6000))
	if res.Outcome != OutcomeApplied || restarts != 1 || len(res.Entry.Instances) != 2 {
		t.Fatalf("result %+v, restarts %d", res, restarts)
	}
	b, _ := os.ReadFile(path)
	if strings.Count(string(b), "maxTTFTPenaltyMs: 4000\n") != 1 || strings.Count(string(b), "maxTTFTPenaltyMs: 6000\n") != 1 {
		t.Fatalf("config:\n%s", b)
	}
	// A change to an instance the target does not manage is refused.
	s2, _ := newFileTarget(t, "epp-config-two-gates.yaml", []string{"strict-affinity-filter"}, gate.ProfileRouter202608, Options{})
	_, err := s2.Apply(context.Background(), mustRead(t, s2), []eppconfig.Change{set("loose-affinity-filter", gate.KeyMaxTTFTPenaltyMs, 1)}, Meta{})
	if !errors.Is(err, ErrInvalidChange) {
		t.Fatalf("unmanaged instance: %v", err)
	}
	// And so is a key gatetuner does not own.
	_, err = s2.Apply(context.Background(), mustRead(t, s2), []eppconfig.Change{set("strict-affinity-filter", gate.KeyAffinityThreshold, 0.5)}, Meta{})
	if !errors.Is(err, ErrInvalidChange) {
		t.Fatalf("unowned key: %v", err)
	}
	// Merge combines targets sharing the config.
	m, err := Merge(Target{Name: "a", File: path, Plugins: []string{"strict-affinity-filter"}}, Target{Name: "b", File: path, Plugins: []string{"loose-affinity-filter"}})
	if err != nil || m.Name != "a+b" || len(m.Plugins) != 2 {
		t.Fatalf("merge: %+v %v", m, err)
	}
	if _, err := Merge(Target{File: path, Plugins: []string{"x"}}, Target{File: path + "2", Plugins: []string{"y"}}); err == nil {
		t.Fatal("merged targets of two files")
	}
}

func TestRestoreChanges(t *testing.T) {
	s, path := newFileTarget(t, "epp-config-production-commented.yaml", nil, gate.ProfilePenaltyMode, Options{RestartHook: func(context.Context, string, string) error { return nil }})
	orig, _ := os.ReadFile(path)
	mustApply(t, s, mustRead(t, s), Meta{}, set("prefill-affinity", gate.KeyMaxTTFTPenaltyMs, 20000))
	mustApply(t, s, mustRead(t, s), Meta{}, set("prefill-affinity", gate.KeyPenaltyMode, "matchedTokens", gate.KeyPeakPrefillThroughput, 5000))
	snap := mustRead(t, s)

	// Default: undo the last apply (entry 2): penaltyMode removed, ppt back.
	changes, en, err := RestoreChanges(snap, 0)
	if err != nil || en.Seq != 2 {
		t.Fatalf("restore: %v %+v", err, en)
	}
	out, diff, err := snap.Preview(changes)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "penaltyMode") || !strings.Contains(string(out), "peakPrefillThroughput: 4783\n") || !strings.Contains(diff, "-    penaltyMode: matchedTokens") {
		t.Fatalf("undo entry 2:\n%s", diff)
	}
	// --to 1: the values before entry 1, i.e. the original file.
	changes, _, err = RestoreChanges(snap, 1)
	if err != nil {
		t.Fatal(err)
	}
	res := mustApply(t, s, snap, Meta{Kind: KindRollback, Undoes: 1}, changes...)
	if res.Outcome != OutcomeApplied || res.Entry.Kind != KindRollback {
		t.Fatalf("rollback: %+v", res)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, orig) {
		t.Fatalf("rollback to 1 is not the original:\n%s", eppconfig.Diff("orig", "got", orig, got))
	}
	if _, _, err := RestoreChanges(snap, 9); err == nil {
		t.Fatal("restored a missing entry")
	}
}

func TestReadOnlySinkNeverWrites(t *testing.T) {
	s, path := newFileTarget(t, "epp-config-production-commented.yaml", nil, gate.ProfileRouter202608, Options{ReadOnly: true})
	orig, _ := os.ReadFile(path)
	snap := mustRead(t, s)
	if _, err := s.Apply(context.Background(), snap, []eppconfig.Change{set("", gate.KeyMaxTTFTPenaltyMs, 1)}, Meta{}); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("apply: %v", err)
	}
	if err := s.MarkRestarted(context.Background(), t0); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("mark restarted: %v", err)
	}
	if _, diff, err := snap.Preview([]eppconfig.Change{set("", gate.KeyMaxTTFTPenaltyMs, 1)}); err != nil || !strings.Contains(diff, "+    maxTTFTPenaltyMs: 1\n") {
		t.Fatalf("preview: %v\n%s", err, diff)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, orig) {
		t.Fatal("read-only sink wrote")
	}
	if _, err := os.Stat(SidecarPath(path)); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("read-only sink wrote state")
	}
}

func TestTargetValidate(t *testing.T) {
	prof := mustProfile(t, gate.ProfileRouter202608)
	ok := Target{Namespace: "llm-d", ConfigMap: "epp", Key: "default-plugins.yaml", Profile: prof}
	for name, tc := range map[string]struct {
		t     Target
		valid bool
	}{
		"configmap mode without deployment":  {ok, true},
		"rollout needs a deployment":         {func() Target { x := ok; x.Mode = ModeRollout; return x }(), false},
		"rollout with deployment":            {func() Target { x := ok; x.Mode, x.Deployment = ModeRollout, "epp"; return x }(), true},
		"unknown mode":                       {func() Target { x := ok; x.Mode = "auto"; return x }(), false},
		"no key: the one holding the plugin": {func() Target { x := ok; x.Key = ""; return x }(), true},
		"bad key":                            {func() Target { x := ok; x.Key = "a/b"; return x }(), false},
		"bad configmap name":                 {func() Target { x := ok; x.ConfigMap = "EPP_cm"; return x }(), false},
		"plugin twice":                       {func() Target { x := ok; x.Plugins = []string{"a", "a"}; return x }(), false},
		"file":                               {Target{File: "/etc/epp/config.yaml"}, true},
		"file with a deployment":             {Target{File: "x.yaml", Deployment: "epp"}, false},
		"file with a mode":                   {Target{File: "x.yaml", Mode: ModeRollout}, false},
	} {
		if err := tc.t.Validate(); (err == nil) != tc.valid {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := New(ok, Options{}); err == nil {
		t.Error("a Kubernetes sink without a client")
	}
	if _, err := New(Target{File: "x.yaml"}, Options{Verify: &Verify{}}); err == nil {
		t.Error("verification without a querier")
	}
}

// TestFileStateFileConfigurable: with StateFile set, the state goes there
// and nothing appears next to the config (a Git checkout stays clean).
func TestFileStateFileConfigurable(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "repo", "config.yaml")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, readTestdata(t, "epp-config-production-commented.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state", "prod.json")
	if err := os.MkdirAll(filepath.Dir(state), 0o755); err != nil {
		t.Fatal(err)
	}
	opts := Options{Clock: testingclock.NewFakeClock(t0), Logger: testLogger(t), Identity: "test"}
	s, err := New(Target{Name: "prod", File: path, StateFile: state, Plugins: []string{"prefill-affinity"}, Profile: mustProfile(t, "")}, opts)
	if err != nil {
		t.Fatal(err)
	}
	snap := mustRead(t, s)
	mustApply(t, s, snap, Meta{Reason: "r"}, set("prefill-affinity", gate.KeyMaxTTFTPenaltyMs, 12000))
	if _, err := os.Stat(state); err != nil {
		t.Fatalf("state file: %v", err)
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("the config's directory holds %v, want only config.yaml", names)
	}
	if got := mustRead(t, s).State; len(got.History) != 1 {
		t.Fatalf("history read back from the state file: %+v", got.History)
	}
	if _, err := New(Target{Name: "prod", File: path, StateFile: path, Profile: mustProfile(t, "")}, opts); err == nil {
		t.Fatal("a state file equal to the config was accepted")
	}
}

// TestFileTargetInEveryForm: a file target holding its config in a Helm
// values file, a HelmRelease, an Application or a List is applied by splice
// (only the owned line changes) and read back.
func TestFileTargetInEveryForm(t *testing.T) {
	for _, tc := range []struct{ file, key, plugin, old string }{
		{"helm-values-router.yaml", "prefix-affinity.yaml", "", "18000"},
		{"flux-helmrelease.yaml", "tuned.yaml", "", "12000"},
		{"argocd-application-values.yaml", "custom-plugins.yaml", "", "18000"},
		{"argocd-application-valuesobject.yaml", "affinity.yaml", "gate", "9000"},
		{"list-configmaps.yaml", "default-plugins.yaml", "", "18000"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			orig, err := os.ReadFile(filepath.Join("..", "eppconfig", "testdata", "forms", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), tc.file)
			if err := os.WriteFile(path, orig, 0o644); err != nil {
				t.Fatal(err)
			}
			var plugins []string
			if tc.plugin != "" {
				plugins = []string{tc.plugin}
			}
			opts := Options{Clock: testingclock.NewFakeClock(t0), Logger: testLogger(t), Identity: "test"}
			s, err := New(Target{Name: "prod", File: path, Key: tc.key, Plugins: plugins, Profile: mustProfile(t, "")}, opts)
			if err != nil {
				t.Fatal(err)
			}
			snap := mustRead(t, s)
			name := snap.Instances[0].Instance.Plugin.Name
			if got := ownedValue(t, snap, name, gate.KeyMaxTTFTPenaltyMs); got != tc.old {
				t.Fatalf("maxTTFTPenaltyMs read as %s, want %s", got, tc.old)
			}
			if res := mustApply(t, s, snap, Meta{Reason: "r"}, set(name, gate.KeyMaxTTFTPenaltyMs, 4092)); res.Outcome != OutcomeApplied {
				t.Fatalf("result %+v", res)
			}
			got, _ := os.ReadFile(path)
			gl, ol := strings.Split(string(got), "\n"), strings.Split(string(orig), "\n")
			if len(gl) != len(ol) {
				t.Fatalf("line count %d -> %d", len(ol), len(gl))
			}
			changed := 0
			for i := range ol {
				if gl[i] != ol[i] {
					changed++
					if strings.Replace(ol[i], "maxTTFTPenaltyMs: "+tc.old, "maxTTFTPenaltyMs: 4092", 1) != gl[i] {
						t.Errorf("line %d: %q -> %q", i+1, ol[i], gl[i])
					}
				}
			}
			if changed != 1 {
				t.Errorf("%d lines changed, want 1", changed)
			}
			if got := ownedValue(t, mustRead(t, s), name, gate.KeyMaxTTFTPenaltyMs); got != "4092" {
				t.Errorf("read back %s", got)
			}
		})
	}
}
