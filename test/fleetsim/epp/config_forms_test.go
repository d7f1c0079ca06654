package epp

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gatetuner/gatetuner/gate"
)

// TestParseEPPConfigReadsEmbeddedForms: simulate --epp-config takes the
// forms gatetuner edits (Helm values, HelmRelease, Application, List).
func TestParseEPPConfigReadsEmbeddedForms(t *testing.T) {
	prof, err := gate.LookupProfile("")
	if err != nil {
		t.Fatal(err)
	}
	for name, wantMax := range map[string]float64{
		"helm-values-router.yaml": 18000, "helm-values-inference-extension.yaml": 30000, "flux-helmrelease.yaml": 12000,
		"argocd-application-values.yaml": 18000, "argocd-application-valuesobject.yaml": 9000, "list-configmaps.yaml": 18000,
	} {
		data, err := os.ReadFile(filepath.Join("..", "..", "..", "tuner", "eppconfig", "testdata", "forms", name))
		if err != nil {
			t.Fatal(err)
		}
		s, err := ParseConfig(data, "", prof)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if s.MaxTTFTPenaltyMs != wantMax {
			t.Errorf("%s: maxTTFTPenaltyMs %v, want %v", name, s.MaxTTFTPenaltyMs, wantMax)
		}
	}
}
