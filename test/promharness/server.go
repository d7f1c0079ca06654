package promharness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"gopkg.in/yaml.v3"
)

// Defaults applied by New to zero Options fields.
const (
	DefaultRetention      = 90 * 24 * time.Hour
	DefaultScrapeInterval = time.Second
	DefaultReadyTimeout   = 2 * time.Minute
	DefaultStopTimeout    = 30 * time.Second
)

// Target is one static scrape job: loopback host:port addresses and extra
// target labels. Scrapes keep the exposition's own labels (honor_labels).
type Target struct {
	// Job is the job name; empty means "target-<index>".
	Job string
	// Addrs are host:port addresses, e.g. "127.0.0.1:9400".
	Addrs []string
	// Labels are added to every series scraped from Addrs.
	Labels map[string]string
	// MetricsPath defaults to /metrics.
	MetricsPath string
}

// Options configure a Prometheus server.
type Options struct {
	// Binaries to run; zero means Find.
	Binaries Binaries
	// DataDir is the TSDB dir (e.g. from Backfill); empty means a fresh
	// folder inside WorkDir.
	DataDir string
	// WorkDir holds the config file and the log; empty means a new temporary
	// folder that Close removes.
	WorkDir string
	// Retention must reach back to the oldest backfilled sample;
	// zero means DefaultRetention.
	Retention time.Duration
	// ScrapeInterval is the global scrape and evaluation interval; zero
	// means DefaultScrapeInterval.
	ScrapeInterval time.Duration
	// ScrapeTimeout defaults to the scrape interval.
	ScrapeTimeout time.Duration
	// Targets are scraped with honor_labels: true.
	Targets []Target
	// ExternalLabels are the global external_labels (a Thanos sidecar needs one).
	ExternalLabels map[string]string
	// ExtraFlags are appended to the command line.
	ExtraFlags []string
	// ReadyTimeout bounds the wait for /-/ready; zero means
	// DefaultReadyTimeout.
	ReadyTimeout time.Duration
}

// Server is a running (or stopped) Prometheus process.
type Server struct {
	bin        Binaries
	opts       Options
	port       int
	workDir    string
	ownWorkDir bool
	dataDir    string
	configPath string
	logPath    string
	api        v1.API

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	werr error         // cmd.Wait result, valid after done is closed
}

// Start starts a server for the test and stops it, removing its files, when
// the test ends; if the test failed, the tail of the server's log is logged.
// A missing Prometheus skips the test under -short and fails it otherwise.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.Binaries.Prometheus == "" {
		opts.Binaries = Require(t)
	}
	if opts.WorkDir == "" {
		opts.WorkDir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout(opts)+time.Minute)
	defer cancel()
	s, err := New(ctx, opts)
	if err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("prometheus log tail (%s):\n%s", s.LogPath(), s.LogTail(40))
		}
		if err := s.Close(); err != nil {
			t.Errorf("stop prometheus: %v", err)
		}
	})
	return s
}

// New starts a Prometheus server on a free loopback port and waits until it
// is ready. ctx bounds the start only; call Close (or Stop) to end it.
func New(ctx context.Context, opts Options) (*Server, error) {
	if opts.Binaries.Prometheus == "" {
		b, err := Find() //nolint:contextcheck // Find only looks up files and runs --version
		if err != nil {
			return nil, err
		}
		opts.Binaries = b
	}
	if opts.Retention <= 0 {
		opts.Retention = DefaultRetention
	}
	if opts.ScrapeInterval <= 0 {
		opts.ScrapeInterval = DefaultScrapeInterval
	}
	if opts.ScrapeTimeout <= 0 || opts.ScrapeTimeout > opts.ScrapeInterval {
		opts.ScrapeTimeout = opts.ScrapeInterval
	}
	s := &Server{bin: opts.Binaries, opts: opts, workDir: opts.WorkDir}
	if s.workDir == "" {
		dir, err := os.MkdirTemp("", "promharness-*")
		if err != nil {
			return nil, fmt.Errorf("create work dir: %w", err)
		}
		s.workDir, s.ownWorkDir = dir, true
	}
	s.dataDir = opts.DataDir
	if s.dataDir == "" {
		s.dataDir = filepath.Join(s.workDir, "data")
	}
	s.configPath = filepath.Join(s.workDir, "prometheus.yml")
	s.logPath = filepath.Join(s.workDir, "prometheus.log")
	if err := s.writeConfig(opts.Targets); err != nil {
		s.cleanup()
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		s.cleanup()
		return nil, err
	}
	s.port = port
	client, err := api.NewClient(api.Config{Address: s.URL()})
	if err != nil {
		s.cleanup()
		return nil, fmt.Errorf("prometheus api client: %w", err)
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

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

type promConfig struct {
	Global        promGlobal     `yaml:"global"`
	ScrapeConfigs []scrapeConfig `yaml:"scrape_configs,omitempty"`
}

type promGlobal struct {
	ScrapeInterval     string            `yaml:"scrape_interval"`
	ScrapeTimeout      string            `yaml:"scrape_timeout"`
	EvaluationInterval string            `yaml:"evaluation_interval"`
	ExternalLabels     map[string]string `yaml:"external_labels,omitempty"`
}

type scrapeConfig struct {
	JobName       string         `yaml:"job_name"`
	HonorLabels   bool           `yaml:"honor_labels"`
	MetricsPath   string         `yaml:"metrics_path"`
	StaticConfigs []staticConfig `yaml:"static_configs"`
}

type staticConfig struct {
	Targets []string          `yaml:"targets"`
	Labels  map[string]string `yaml:"labels,omitempty"`
}

func (s *Server) writeConfig(targets []Target) error {
	cfg := promConfig{Global: promGlobal{
		ScrapeInterval:     model.Duration(s.opts.ScrapeInterval).String(),
		ScrapeTimeout:      model.Duration(s.opts.ScrapeTimeout).String(),
		EvaluationInterval: model.Duration(s.opts.ScrapeInterval).String(),
		ExternalLabels:     s.opts.ExternalLabels,
	}}
	for i, tg := range targets {
		job := tg.Job
		if job == "" {
			job = "target-" + strconv.Itoa(i)
		}
		path := tg.MetricsPath
		if path == "" {
			path = "/metrics"
		}
		cfg.ScrapeConfigs = append(cfg.ScrapeConfigs, scrapeConfig{
			JobName:       job,
			HonorLabels:   true,
			MetricsPath:   path,
			StaticConfigs: []staticConfig{{Targets: tg.Addrs, Labels: tg.Labels}},
		})
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("encode prometheus config: %w", err)
	}
	// Write then rename so a reload never reads a half-written file.
	tmp := s.configPath + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("write prometheus config: %w", err)
	}
	if err := os.Rename(tmp, s.configPath); err != nil {
		return fmt.Errorf("write prometheus config: %w", err)
	}
	return nil
}

func (s *Server) args() []string {
	args := []string{
		"--config.file=" + s.configPath,
		"--storage.tsdb.path=" + s.dataDir,
		"--storage.tsdb.retention.time=" + model.Duration(s.opts.Retention).String(),
		"--web.listen-address=127.0.0.1:" + strconv.Itoa(s.port),
	}
	return append(args, s.opts.ExtraFlags...)
}

func (s *Server) start(ctx context.Context) error {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open prometheus log: %w", err)
	}
	fmt.Fprintf(logf, "=== promharness: starting %s %v\n", s.bin.Prometheus, s.args())
	cmd := exec.Command(s.bin.Prometheus, s.args()...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = s.workDir
	setProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("start %s: %w", s.bin.Prometheus, err)
	}
	done := make(chan struct{})
	s.mu.Lock()
	s.cmd, s.done, s.werr = cmd, done, nil
	s.mu.Unlock()
	go func() {
		err := cmd.Wait()
		_ = logf.Close()
		s.mu.Lock()
		s.werr = err
		s.mu.Unlock()
		close(done)
	}()
	if err := s.waitReady(ctx, done); err != nil {
		_ = s.Stop()
		return fmt.Errorf("%w\nlog tail (%s):\n%s", err, s.logPath, s.LogTail(30))
	}
	return nil
}

func (s *Server) waitReady(ctx context.Context, done <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout(s.opts))
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+"/-/ready", nil)
		if err != nil {
			return fmt.Errorf("build readiness request: %w", err)
		}
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-done:
			s.mu.Lock()
			werr := s.werr
			s.mu.Unlock()
			return fmt.Errorf("prometheus exited before it was ready: %w", werr)
		case <-ctx.Done():
			return fmt.Errorf("prometheus not ready at %s/-/ready: %w", s.URL(), ctx.Err())
		case <-tick.C:
		}
	}
}

// Stop ends the process (SIGTERM, then SIGKILL after DefaultStopTimeout)
// and keeps its data dir and port for Restart. Stopping a stopped server is
// a no-op.
func (s *Server) Stop() error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-done:
	default:
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(DefaultStopTimeout):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	s.mu.Lock()
	s.cmd = nil
	s.mu.Unlock()
	return nil
}

// Restart stops the server if it runs and starts it again on the same data
// dir, port and configuration.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.Stop(); err != nil {
		return err
	}
	return s.start(ctx)
}

// Running reports whether the process is alive.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// Close stops the server and removes the work dir if New created it.
func (s *Server) Close() error {
	err := s.Stop()
	s.cleanup()
	return err
}

func (s *Server) cleanup() {
	if s.ownWorkDir {
		_ = os.RemoveAll(s.workDir)
	}
}

// SetTargets replaces the scrape targets and has the running server reload
// its configuration (SIGHUP), waiting until every new address is an active
// target.
func (s *Server) SetTargets(ctx context.Context, targets []Target) error {
	if err := s.writeConfig(targets); err != nil {
		return err
	}
	s.opts.Targets = targets
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		return nil // picked up by the next Restart
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		return fmt.Errorf("signal prometheus to reload: %w", err)
	}
	want := map[string]bool{}
	for _, tg := range targets {
		for _, a := range tg.Addrs {
			want[a] = true
		}
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		res, err := s.api.Targets(ctx)
		if err == nil {
			seen := 0
			for _, at := range res.Active {
				if want[string(at.DiscoveredLabels["__address__"])] {
					seen++
				}
			}
			if seen >= len(want) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for reloaded targets: %w (last error: %w)\nlog tail:\n%s", ctx.Err(), err, s.LogTail(20))
		case <-tick.C:
		}
	}
}

// URL is the server's base URL, e.g. http://127.0.0.1:39123.
func (s *Server) URL() string { return "http://127.0.0.1:" + strconv.Itoa(s.port) }

// Addr is the server's host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// DataDir is the TSDB dir the server runs on.
func (s *Server) DataDir() string { return s.dataDir }

// LogPath is the file the server's output goes to.
func (s *Server) LogPath() string { return s.logPath }

// Binaries are the binaries this server runs.
func (s *Server) Binaries() Binaries { return s.bin }

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

// LogTail returns the last n lines of the server's log.
func (s *Server) LogTail(n int) string {
	b, err := readTail(s.logPath, 64<<10)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return tail(string(b), n)
}

func readTail(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if off := st.Size() - limit; off > 0 {
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return nil, err
		}
	}
	b, err := io.ReadAll(f)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b, nil
}
