package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gatetuner/gatetuner/exporter"
	"github.com/gatetuner/gatetuner/tuner/config"
	"github.com/gatetuner/gatetuner/tuner/daemon"
)

func init() { commands = append(commands, newRunCmd) }

type runOpts struct {
	config, address, logLevel, logFormat string
}

func newRunCmd(a *app) *cobra.Command {
	var o runOpts
	cmd := &cobra.Command{
		Use:   "run --config FILE",
		Short: "Run the daemon: a guarded tuning cycle per target on its schedule",
		Long: `run loads the targets of a config file (docs/config.md; GATETUNER_* environment
variables override scalar keys), runs one cycle per target on its cron schedule
while it holds the leader Lease (when leader election is enabled), and serves
/metrics, /healthz, /readyz and /reports. Modes: off (recommend only, the default),
configmap and rollout. SIGTERM finishes running cycles and releases the Lease.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDaemon(cmd.Context(), a, &o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.config, "config", "", "config file (YAML)")
	f.StringVar(&o.address, "address", "", "listen address for /metrics, /healthz, /readyz (overrides server.address)")
	addLogFlags(f, &o.logLevel, &o.logFormat)
	return cmd
}

// loadConfig reads a config file through viper (file, GATETUNER_* env).
func loadConfig(a *app, path string) (*config.Config, error) {
	if path == "" {
		return nil, usageErr("--config is required (see docs/config.md)")
	}
	if _, err := os.Stat(path); err != nil {
		return nil, usageErr("--config: %v", err)
	}
	a.v.SetConfigFile(path)
	c, err := config.Load(a.v)
	if err != nil {
		return nil, asUsage(err)
	}
	return c, nil
}

func runDaemon(ctx context.Context, a *app, o *runOpts) error {
	logger, err := newLogger(a, o.logLevel, o.logFormat)
	if err != nil {
		return err
	}
	cfg, err := loadConfig(a, o.config)
	if err != nil {
		return err
	}
	if o.address != "" {
		cfg.Server.Address = o.address
	}
	metrics := exporter.New(version, commit)
	tr, err := exporter.SetupTracing(ctx, os.Getenv, version)
	if err != nil {
		return asUsage(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tr.Shutdown(sctx)
	}()
	d, err := daemon.New(ctx, cfg, daemon.Deps{Logger: logger, Metrics: metrics, Tracer: tr.Tracer})
	if err != nil {
		return asUsage(err)
	}
	defer d.Close()
	ln, err := net.Listen("tcp", cfg.Server.Address)
	if err != nil {
		return usageErr("listen %s: %v", cfg.Server.Address, err)
	}
	srv := &http.Server{Handler: d.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("http server", "error", err)
		}
	}()
	d.StartupCheck(ctx) // a target that cannot work warns, shows in /reports and gatetuner_target_up
	logger.Info("gatetuner running", "version", version, "address", ln.Addr().String(), "targets", len(cfg.Targets),
		"leaderElection", cfg.LeaderElection.Enabled, "tracing", tr.Exporting)
	runErr := d.Run(ctx)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	logger.Info("gatetuner stopped")
	return runErr
}

func addLogFlags(f interface {
	StringVar(p *string, name, value, usage string)
}, level, format *string) {
	f.StringVar(level, "log-level", "info", "log level: debug, info, warn, error")
	f.StringVar(format, "log-format", "text", "log format: text or json")
}

func newLogger(a *app, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usageErr("--log-level: %v", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "json":
		return slog.New(slog.NewJSONHandler(a.stderr, opts)), nil
	case "text", "":
		return slog.New(slog.NewTextHandler(a.stderr, opts)), nil
	}
	return nil, usageErr("--log-format must be text or json, got %q", format)
}
