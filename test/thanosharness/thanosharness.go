// Package thanosharness runs a real Thanos Querier over a real Prometheus for tests, the
// smallest setup that answers the Prometheus query API through Thanos: a `thanos sidecar`
// next to the Prometheus (serving its TSDB, blocks included, over the store API through remote
// read) and a `thanos query` pointed at the sidecar, all on loopback. The Prometheus needs an
// external label (promharness.Options.ExternalLabels), which the querier strips as the replica
// label.
//
// The binary is built by test/vmharness/build-backends.sh into the component cache only when
// asked (`make test-components THANOS=1`); tests that need it fail with that command when it
// is missing, and skip only under -short.
package thanosharness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/test/internal/proc"
)

// Version is the Thanos version built by build-backends.sh; they must match.
const Version = "v0.42.4"

// ReplicaLabel is the external label the Prometheus must carry; the querier deduplicates
// along it and drops it from results.
const ReplicaLabel = "replica"

// Defaults applied to zero Options fields.
const (
	DefaultReadyTimeout = 2 * time.Minute
	DefaultStopTimeout  = 30 * time.Second
)

// ErrNotBuilt reports that the thanos binary is not in the component cache.
var ErrNotBuilt = errors.New("thanos not built")

// BinaryIn is the thanos path inside the component cache cacheDir.
func BinaryIn(cacheDir string) string {
	return proc.CachedBinary(cacheDir, "thanos", Version)
}

// Find locates the thanos binary in the component cache; the error wraps ErrNotBuilt and
// says how to build it.
func Find() (string, error) {
	return proc.FindCached("thanos", Version, "make test-components THANOS=1", ErrNotBuilt)
}

// Require returns the binary; when it is missing it skips the test under -short and fails it
// otherwise.
func Require(t testing.TB) string {
	t.Helper()
	return proc.Require(t, "Thanos (thanosharness)", Find)
}

// Options configure the sidecar and the querier.
type Options struct {
	// Binary to run; empty means Find.
	Binary string
	// PrometheusURL is the Prometheus the sidecar serves, e.g. http://127.0.0.1:9090.
	PrometheusURL string
	// TSDBPath is that Prometheus' data dir.
	TSDBPath string
	// WorkDir holds the logs; empty means a new temporary folder that Close removes.
	WorkDir string
	// ReadyTimeout bounds the wait for both components; zero means DefaultReadyTimeout.
	ReadyTimeout time.Duration
}

// Querier is a running sidecar + querier pair.
type Querier struct {
	workDir    string
	ownWorkDir bool
	httpPort   int
	sidecar    *proc.Process
	query      *proc.Process
}

// Start runs a sidecar and a querier over the Prometheus for the test and stops them when it
// ends, logging their log tails if it failed.
func Start(t testing.TB, opts Options) *Querier {
	t.Helper()
	if opts.Binary == "" {
		opts.Binary = Require(t)
	}
	if opts.WorkDir == "" {
		opts.WorkDir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout(opts)+time.Minute)
	defer cancel()
	q, err := New(ctx, opts)
	if err != nil {
		t.Fatalf("start thanos: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("thanos sidecar log tail:\n%s\nthanos query log tail:\n%s", q.sidecar.LogTail(30), q.query.LogTail(30))
		}
		q.Close()
	})
	return q
}

func readyTimeout(o Options) time.Duration {
	if o.ReadyTimeout > 0 {
		return o.ReadyTimeout
	}
	return DefaultReadyTimeout
}

// New starts the sidecar, waits until it has read the Prometheus' external labels, starts the
// querier and waits until the querier lists the sidecar as a store. ctx bounds the start.
func New(ctx context.Context, opts Options) (*Querier, error) {
	if opts.Binary == "" {
		b, err := Find()
		if err != nil {
			return nil, err
		}
		opts.Binary = b
	}
	if opts.PrometheusURL == "" || opts.TSDBPath == "" {
		return nil, errors.New("thanosharness: PrometheusURL and TSDBPath are required")
	}
	q := &Querier{workDir: opts.WorkDir}
	if q.workDir == "" {
		dir, err := os.MkdirTemp("", "thanosharness-*")
		if err != nil {
			return nil, fmt.Errorf("create work dir: %w", err)
		}
		q.workDir, q.ownWorkDir = dir, true
	}
	ports := make([]int, 4)
	for i := range ports {
		p, err := proc.FreePort()
		if err != nil {
			q.Close()
			return nil, err
		}
		ports[i] = p
	}
	sideHTTP, sideGRPC, qGRPC := ports[0], ports[1], ports[3]
	q.httpPort = ports[2]
	ctx, cancel := context.WithTimeout(ctx, readyTimeout(opts))
	defer cancel()

	var err error
	q.sidecar, err = proc.Start(opts.Binary, []string{"sidecar",
		"--prometheus.url=" + opts.PrometheusURL,
		"--tsdb.path=" + opts.TSDBPath,
		"--http-address=127.0.0.1:" + strconv.Itoa(sideHTTP),
		"--grpc-address=127.0.0.1:" + strconv.Itoa(sideGRPC),
	}, q.workDir, filepath.Join(q.workDir, "sidecar.log"))
	if err != nil {
		q.Close()
		return nil, err
	}
	if err := q.sidecar.WaitHTTP(ctx, "http://127.0.0.1:"+strconv.Itoa(sideHTTP)+"/-/ready"); err != nil {
		q.Close()
		return nil, err
	}
	storeAddr := "127.0.0.1:" + strconv.Itoa(sideGRPC)
	q.query, err = proc.Start(opts.Binary, []string{"query",
		"--http-address=127.0.0.1:" + strconv.Itoa(q.httpPort),
		"--grpc-address=127.0.0.1:" + strconv.Itoa(qGRPC),
		"--endpoint=" + storeAddr,
		"--query.replica-label=" + ReplicaLabel,
	}, q.workDir, filepath.Join(q.workDir, "query.log"))
	if err != nil {
		q.Close()
		return nil, err
	}
	if err := q.query.WaitHTTP(ctx, q.URL()+"/-/ready"); err != nil {
		q.Close()
		return nil, err
	}
	if err := q.waitStore(ctx, storeAddr); err != nil {
		q.Close()
		return nil, err
	}
	return q, nil
}

// waitStore polls /api/v1/stores until the querier lists addr.
func (q *Querier) waitStore(ctx context.Context, addr string) error {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, q.URL()+"/api/v1/stores", nil)
		if err != nil {
			return err
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			last = string(b)
			var body struct {
				Data map[string][]struct {
					Name      string  `json:"name"`
					LastError *string `json:"lastError"`
				} `json:"data"`
			}
			if json.Unmarshal(b, &body) == nil {
				for _, stores := range body.Data {
					for _, s := range stores {
						if s.Name == addr && (s.LastError == nil || *s.LastError == "") {
							return nil
						}
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("thanos query never listed the sidecar %s as a store: %w (last /api/v1/stores: %s)\nsidecar log tail:\n%s\nquery log tail:\n%s",
				addr, ctx.Err(), strings.TrimSpace(last), q.sidecar.LogTail(20), q.query.LogTail(10))
		case <-tick.C:
		}
	}
}

// URL is the querier's base URL, which serves the Prometheus query API under /api/v1.
func (q *Querier) URL() string { return "http://127.0.0.1:" + strconv.Itoa(q.httpPort) }

// Close stops the querier, then the sidecar, and removes the work dir if New created it.
func (q *Querier) Close() {
	if q.query != nil {
		q.query.Stop(DefaultStopTimeout)
	}
	if q.sidecar != nil {
		q.sidecar.Stop(DefaultStopTimeout)
	}
	if q.ownWorkDir {
		_ = os.RemoveAll(q.workDir)
	}
}
