// Package proc runs a test component (a server binary) as a child process: its output goes to
// a log file, it dies with the test binary, and it is stopped with SIGTERM, then SIGKILL.
package proc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is one started component.
type Process struct {
	name    string
	logPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	werr error         // cmd.Wait result, valid after done is closed
}

// Start runs bin with args in dir, appending its output to logPath.
func Start(bin string, args []string, dir, logPath string) (*Process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log %s: %w", logPath, err)
	}
	fmt.Fprintf(logf, "=== proc: starting %s %v\n", bin, args)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = dir
	setProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &Process{name: bin, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		_ = logf.Close()
		p.mu.Lock()
		p.werr = err
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// WaitHTTP polls url until it answers 200, the process exits or ctx ends.
func (p *Process) WaitHTTP(ctx context.Context, url string) error {
	client := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
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
		case <-p.done:
			p.mu.Lock()
			werr := p.werr
			p.mu.Unlock()
			return fmt.Errorf("%s exited before %s answered: %w\nlog tail (%s):\n%s", p.name, url, werr, p.logPath, p.LogTail(30))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s: %w\nlog tail (%s):\n%s", p.name, url, ctx.Err(), p.logPath, p.LogTail(30))
		case <-tick.C:
		}
	}
}

// Stop sends SIGTERM and waits up to timeout before SIGKILL. Stopping twice is a no-op.
func (p *Process) Stop(timeout time.Duration) {
	p.mu.Lock()
	cmd := p.cmd
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-p.done
	}
}

// Running reports whether the process is alive.
func (p *Process) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// LogPath is the file the process's output goes to.
func (p *Process) LogPath() string { return p.logPath }

// LogTail returns the last n lines of the log.
func (p *Process) LogTail(n int) string { return LogTail(p.logPath, n) }

// LogTail returns the last n lines of the file at path (its last 64 KiB at most).
func LogTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > 64<<10 {
		_, _ = f.Seek(st.Size()-64<<10, io.SeekStart)
	}
	b, err := io.ReadAll(f)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Sprintf("(read log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// FreePort returns a TCP port free on the loopback interface.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
