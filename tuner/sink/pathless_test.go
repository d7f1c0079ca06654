package sink

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gatetuner/gatetuner/gate"
)

// TestReadErrorNamesThePathGiven: a file target mounted the way a ConfigMap
// volume is (a symlink into a timestamped directory) that goes away is named
// by the path the user configured, not the resolved one.
func TestReadErrorNamesThePathGiven(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "..2026_12_01_20_00_00.123")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	real := filepath.Join(data, "epp.yaml")
	if err := os.WriteFile(real, readTestdata(t, "epp-config-production-commented.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	given := filepath.Join(dir, "epp.yaml")
	if err := os.Symlink(real, given); err != nil {
		t.Fatal(err)
	}
	s, err := New(Target{Name: "prod", File: given, Profile: mustProfile(t, gate.ProfileRouter202608)}, Options{Logger: testLogger(t), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(real); err != nil {
		t.Fatal(err)
	}
	_, err = s.Read(context.Background())
	if err == nil || !strings.Contains(err.Error(), given) || strings.Contains(err.Error(), "..2026") || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want one naming %s (and still fs.ErrNotExist)", err, given)
	}
}
