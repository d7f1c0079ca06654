package main

import (
	"io"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/gatetuner/gatetuner/tuner/config"
)

// TestFlagDefaultsAreThePolicyDefaults pins every CLI flag that stands for a
// daemon setting to the daemon's default, so --help and a run without the
// flag mean what the daemon does.
func TestFlagDefaultsAreThePolicyDefaults(t *testing.T) {
	pol, pc := config.DefaultPolicy(), config.DefaultPrometheus()
	a := &app{stdout: io.Discard, stderr: io.Discard}
	tests := []struct {
		cmd  *cobra.Command
		flag string
		want time.Duration
		key  string
	}{
		{newEstimateCmd(a), "lookback", pol.Lookback, "lookback"},
		{newEstimateCmd(a), "window", pol.SaturationWindow, "saturationWindow"},
		{newEstimateCmd(a), "snapshot-step", pol.SnapshotStep, "snapshotStep"},
		{newEstimateCmd(a), "query-timeout", pc.Timeout, "prometheus.timeout"},
		{newEstimateCmd(a), "scrape-interval", pc.ScrapeInterval, "prometheus.scrapeInterval"},
		{newRollbackCmd(a), "timeout", pol.Verification.RolloutTimeout, "verification.rolloutTimeout"},
	}
	for _, tt := range tests {
		f := tt.cmd.Flags().Lookup(tt.flag)
		if f == nil {
			t.Fatalf("%s has no --%s", tt.cmd.Name(), tt.flag)
		}
		if f.DefValue != tt.want.String() {
			t.Errorf("%s --%s defaults to %s, the daemon's %s to %s", tt.cmd.Name(), tt.flag, f.DefValue, tt.key, tt.want)
		}
	}
}
