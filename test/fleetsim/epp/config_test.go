package epp

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gatetuner/gatetuner/gate"
)

func profile(t testing.TB, name string) gate.Profile {
	t.Helper()
	p, err := gate.LookupProfile(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParseEPPConfigReadsTheAffinityFilter(t *testing.T) {
	prod, err := os.ReadFile(filepath.Join("testdata", "epp-config-production-commented.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	twoGates, err := os.ReadFile(filepath.Join("testdata", "epp-config-two-gates.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	router := profile(t, gate.ProfileRouter202608)
	for _, tc := range []struct {
		name    string
		data    []byte
		plugin  string
		prof    gate.Profile
		check   func(gate.Settings) bool
		wantErr string
	}{
		{"production, by type", prod, "", router, func(s gate.Settings) bool {
			return s.MaxTTFTPenaltyMs == 30000 && s.PeakPrefillThroughput == 4783 && s.AffinityThreshold == 0.8
		}, ""},
		{"production, by name", prod, "prefill-affinity", router, func(s gate.Settings) bool { return s.PeakPrefillThroughput == 4783 }, ""},
		{"two gates need a name", twoGates, "", router, nil, "2 plugins match"},
		{"two gates, strict", twoGates, "strict-affinity-filter", router, func(s gate.Settings) bool {
			return s.AffinityThreshold == 0.99 && s.Source == gate.SourceLatencyPredictor && s.MaxTTFTPenaltyMs == 5000
		}, ""},
		{"unknown plugin name", twoGates, "nope", router, nil, `no plugin named "nope" (affinity filters: strict-affinity-filter, loose-affinity-filter)`},
		{"no parameters keeps the defaults", []byte("plugins:\n- type: prefix-cache-affinity-filter\n"), "", router,
			func(s gate.Settings) bool { return s == DefaultSettings() }, ""},
		// Was router-newest with maxInFlightRequestsDelta, a build that does not exist: the v2 build
		// is the calibration build at 066c20ea1 (no request gate).
		{"v2 build semantics", []byte("plugins:\n- type: prefix-cache-affinity-filter\n  parameters: {prefillCalibrationFingerprint: fp}\n"), "",
			profile(t, gate.ProfileRouterCalibrationV2), func(s gate.Settings) bool { return s.Semantics == gate.SemanticsV2 }, ""},
		{"a key the build rejects", []byte("plugins:\n- type: prefix-cache-affinity-filter\n  parameters: {penaltyMode: matchedTokens}\n"), "",
			router, nil, "crash-loop"},
		{"no filter", []byte("plugins:\n- type: queue-scorer\n"), "", router, nil, "no plugin of type prefix-cache-affinity-filter"},
		{"plugins not a list", []byte("plugins: {a: 1}\n"), "", router, nil, "plugins must be a list"},
		{"nested parameter", []byte("plugins:\n- type: prefix-cache-affinity-filter\n  parameters: {affinityThreshold: [1]}\n"), "", router, nil, "must be a scalar"},
		{"not YAML", []byte("plugins: ["), "", router, nil, "invalid YAML"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ParseConfig(tc.data, tc.plugin, tc.prof)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(s) {
				t.Errorf("settings %s", s.String())
			}
		})
	}
}

func TestEPPConfigFileRereadsTheFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cfg.yaml")
	src := ConfigFile{Path: p, Profile: profile(t, gate.ProfilePenaltyMode)}
	if _, err := src.LoadSettings(); err == nil {
		t.Fatal("missing file loaded")
	}
	for _, bar := range []string{"1000", "2000"} {
		doc := "plugins:\n- type: prefix-cache-affinity-filter\n  parameters:\n    penaltyMode: matchedTokens\n    maxTTFTPenaltyMs: " + bar + "\n"
		if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := src.LoadSettings()
		if err != nil {
			t.Fatal(err)
		}
		if s.Mode != gate.ModeMatchedTokens || s.MaxTTFTPenaltyMs != map[string]float64{"1000": 1000, "2000": 2000}[bar] {
			t.Errorf("settings %s", s.String())
		}
	}
}

func FuzzParseEPPConfig(f *testing.F) {
	for _, n := range []string{"epp-config-production-commented.yaml", "epp-config-two-gates.yaml"} {
		data, err := os.ReadFile(filepath.Join("testdata", n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, "")
		f.Add(data, "strict-affinity-filter")
	}
	f.Add([]byte("plugins:\n- type: prefix-cache-affinity-filter\n  parameters: {MaxTTFTPenaltyMs: 1, maxTTFTPenaltyMs: 2}\n"), "")
	f.Add([]byte("---\n---\nplugins: []\n"), "x")
	prof := profile(f, gate.ProfileRouterCalibrationV2) // was router-newest: the v2 build with a threshold in [0, 1]
	f.Fuzz(func(t *testing.T, data []byte, plugin string) {
		s, err := ParseConfig(data, plugin, prof)
		if err != nil {
			return
		}
		if s.Semantics != gate.SemanticsV2 || s.AffinityThreshold > 1 || s.MaxTTFTPenaltyMs < 0 {
			t.Fatalf("accepted settings the build would reject: %s", s.String())
		}
	})
}
