package vmharness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/gatetuner/gatetuner/test/internal/proc"
)

// Defaults applied by New to zero Options fields.
const (
	// DefaultRetention keeps any backfilled past (VictoriaMetrics drops older samples on import).
	DefaultRetention    = "100y"
	DefaultReadyTimeout = time.Minute
	DefaultStopTimeout  = 30 * time.Second
)

// Options configure a VictoriaMetrics server.
type Options struct {
	// Binary to run; empty means Find.
	Binary string
	// WorkDir holds the storage and the log; empty means a new temporary folder that Close
	// removes.
	WorkDir string
	// Retention is -retentionPeriod; empty means DefaultRetention.
	Retention string
	// ExtraFlags are appended to the command line.
	ExtraFlags []string
	// ReadyTimeout bounds the wait for /health; zero means DefaultReadyTimeout.
	ReadyTimeout time.Duration
}

// Server is a running (or stopped) VictoriaMetrics single-node process.
type Server struct {
	opts       Options
	bin        string
	port       int
	workDir    string
	ownWorkDir bool
	logPath    string
	api        v1.API
	p          *proc.Process
}

// Start starts a server for the test and stops it, removing its files, when the test ends; if
// the test failed, the tail of the server's log is logged. A missing binary skips the test
// under -short and fails it otherwise.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.Binary == "" {
		opts.Binary = Require(t)
	}
	if opts.WorkDir == "" {
		opts.WorkDir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout(opts)+time.Minute)
	defer cancel()
	s, err := New(ctx, opts)
	if err != nil {
		t.Fatalf("start victoria-metrics: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("victoria-metrics log tail (%s):\n%s", s.LogPath(), s.LogTail(40))
		}
		s.Close()
	})
	return s
}

// New starts a server on a free loopback port and waits until it is healthy. ctx bounds the
// start only; call Close (or Stop) to end it.
func New(ctx context.Context, opts Options) (*Server, error) {
	if opts.Binary == "" {
		b, err := Find()
		if err != nil {
			return nil, err
		}
		opts.Binary = b
	}
	if opts.Retention == "" {
		opts.Retention = DefaultRetention
	}
	s := &Server{opts: opts, bin: opts.Binary, workDir: opts.WorkDir}
	if s.workDir == "" {
		dir, err := os.MkdirTemp("", "vmharness-*")
		if err != nil {
			return nil, fmt.Errorf("create work dir: %w", err)
		}
		s.workDir, s.ownWorkDir = dir, true
	}
	s.logPath = filepath.Join(s.workDir, "victoria-metrics.log")
	port, err := proc.FreePort()
	if err != nil {
		s.cleanup()
		return nil, err
	}
	s.port = port
	client, err := api.NewClient(api.Config{Address: s.URL()})
	if err != nil {
		s.cleanup()
		return nil, fmt.Errorf("victoria-metrics api client: %w", err)
	}
	s.api = v1.NewAPI(client)
	if err := s.start(ctx); err != nil {
		s.cleanup()
		return nil, err
	}
	return s, nil
}

func readyTimeout(o Options) time.Duration {
	if o.ReadyTimeout > 0 {
		return o.ReadyTimeout
	}
	return DefaultReadyTimeout
}

func (s *Server) args() []string {
	args := []string{
		"-storageDataPath=" + s.DataDir(),
		"-httpListenAddr=127.0.0.1:" + strconv.Itoa(s.port),
		"-retentionPeriod=" + s.opts.Retention,
	}
	return append(args, s.opts.ExtraFlags...)
}

func (s *Server) start(ctx context.Context) error {
	p, err := proc.Start(s.bin, s.args(), s.workDir, s.logPath)
	if err != nil {
		return err
	}
	s.p = p
	ctx, cancel := context.WithTimeout(ctx, readyTimeout(s.opts))
	defer cancel()
	if err := p.WaitHTTP(ctx, s.URL()+"/health"); err != nil {
		p.Stop(DefaultStopTimeout)
		return err
	}
	return nil
}

// Stop ends the process (SIGTERM, then SIGKILL after DefaultStopTimeout) and keeps its data
// and port for Restart.
func (s *Server) Stop() {
	if s.p != nil {
		s.p.Stop(DefaultStopTimeout)
	}
}

// Restart stops the server if it runs and starts it again on the same data and port.
func (s *Server) Restart(ctx context.Context) error {
	s.Stop()
	return s.start(ctx)
}

// Running reports whether the process is alive.
func (s *Server) Running() bool { return s.p != nil && s.p.Running() }

// Close stops the server and removes the work dir if New created it.
func (s *Server) Close() {
	s.Stop()
	s.cleanup()
}

func (s *Server) cleanup() {
	if s.ownWorkDir {
		_ = os.RemoveAll(s.workDir)
	}
}

// URL is the server's base URL, which serves the Prometheus query API under /api/v1.
func (s *Server) URL() string { return "http://127.0.0.1:" + strconv.Itoa(s.port) }

// Addr is the server's host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// DataDir is the storage folder.
func (s *Server) DataDir() string { return filepath.Join(s.workDir, "data") }

// LogPath is the file the server's output goes to.
func (s *Server) LogPath() string { return s.logPath }

// LogTail returns the last n lines of the server's log.
func (s *Server) LogTail(n int) string { return proc.LogTail(s.logPath, n) }

// API is a client_golang API client for the server.
func (s *Server) API() v1.API { return s.api }

// Query runs an instant query at ts.
func (s *Server) Query(ctx context.Context, q string, ts time.Time) (model.Value, v1.Warnings, error) {
	v, w, _, err := s.api.Query(ctx, q, ts)
	if err != nil {
		return nil, w, fmt.Errorf("query %q at %s: %w", q, ts.UTC().Format(time.RFC3339), err)
	}
	return v, w, nil
}

// QueryRange runs a range query.
func (s *Server) QueryRange(ctx context.Context, q string, r v1.Range) (model.Value, v1.Warnings, error) {
	v, w, _, err := s.api.QueryRange(ctx, q, r)
	if err != nil {
		return nil, w, fmt.Errorf("query_range %q: %w", q, err)
	}
	return v, w, nil
}
