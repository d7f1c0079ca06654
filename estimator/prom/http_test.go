package prom_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"

	"github.com/gatetuner/gatetuner/estimator/prom"
)

const okVector = `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"a"},"value":[1700000000,"42"]}]}}`

// reply is one scripted response of the fault-injecting server.
type reply struct {
	status  int
	body    string
	header  map[string]string
	block   bool // wait until the client gives up
	hangFor time.Duration
}

// faultServer answers requests from a script (the last reply repeats) and
// records what it received.
type faultServer struct {
	t      *testing.T
	mu     sync.Mutex
	script []reply
	reqs   []*http.Request
	forms  []string
	// aborted counts blocked requests whose client went away.
	aborted int
	srv     *httptest.Server
}

func newFaultServer(t *testing.T, script ...reply) *faultServer {
	t.Helper()
	f := &faultServer{t: t, script: script}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *faultServer) serve(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	f.mu.Lock()
	i := min(len(f.reqs), len(f.script)-1)
	f.reqs = append(f.reqs, r)
	f.forms = append(f.forms, r.Form.Encode())
	rep := f.script[i]
	f.mu.Unlock()
	if rep.block {
		select {
		case <-r.Context().Done():
			f.mu.Lock()
			f.aborted++
			f.mu.Unlock()
		case <-time.After(30 * time.Second):
		}
		return
	}
	if rep.hangFor > 0 {
		time.Sleep(rep.hangFor)
	}
	for k, v := range rep.header {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(rep.status)
	_, _ = io.WriteString(w, rep.body)
}

func (f *faultServer) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reqs)
}

func (f *faultServer) request(i int) *http.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reqs[i]
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func fastRetry(attempts int) prom.RetryPolicy {
	return prom.RetryPolicy{MaxAttempts: attempts, InitialBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond}
}

func TestHTTPFaults(t *testing.T) {
	apiErr := func(typ, msg string) string {
		return fmt.Sprintf(`{"status":"error","errorType":%q,"error":%q}`, typ, msg)
	}
	tests := []struct {
		name         string
		script       []reply
		timeout      time.Duration
		wantKind     prom.Kind // 0 = success
		wantSentinel error
		wantRequests int
		wantStatus   int
	}{
		{
			name:         "5xx then success is retried",
			script:       []reply{{status: 502, body: "bad gateway"}, {status: 503, body: "unavailable"}, {status: 200, body: okVector}},
			wantRequests: 3,
		},
		{
			name:         "429 then success is retried",
			script:       []reply{{status: 429, body: "slow down", header: map[string]string{"Retry-After": "0"}}, {status: 200, body: okVector}},
			wantRequests: 2,
		},
		{
			name:         "persistent 5xx gives up after max attempts",
			script:       []reply{{status: 500, body: "boom"}},
			wantKind:     prom.KindUnavailable,
			wantSentinel: prom.ErrUnavailable,
			wantRequests: 3,
			wantStatus:   500,
		},
		{
			name:         "400 bad query is not retried",
			script:       []reply{{status: 400, body: apiErr("bad_data", `1:6: parse error: unclosed left parenthesis`)}},
			wantKind:     prom.KindBadQuery,
			wantSentinel: prom.ErrBadQuery,
			wantRequests: 1,
			wantStatus:   400,
		},
		{
			name:         "422 execution error is a bad query",
			script:       []reply{{status: 422, body: apiErr("execution", "query processing would load too many samples into memory")}},
			wantKind:     prom.KindBadQuery,
			wantSentinel: prom.ErrBadQuery,
			wantRequests: 1,
			wantStatus:   422,
		},
		{
			name:         "server-side evaluation timeout is not retried",
			script:       []reply{{status: 503, body: apiErr("timeout", "query timed out in expression evaluation")}},
			wantKind:     prom.KindTimeout,
			wantSentinel: prom.ErrTimeout,
			wantRequests: 1,
			wantStatus:   503,
		},
		{
			name:         "401 is rejected, not retried",
			script:       []reply{{status: 401, body: "unauthorized"}},
			wantKind:     prom.KindRejected,
			wantSentinel: prom.ErrRejected,
			wantRequests: 1,
			wantStatus:   401,
		},
		{
			name:         "200 with garbage is a bad response",
			script:       []reply{{status: 200, body: "<html>login</html>"}},
			wantKind:     prom.KindBadResponse,
			wantSentinel: prom.ErrBadResponse,
			wantRequests: 1,
			wantStatus:   200,
		},
		{
			name:         "slow server hits the per-query timeout",
			script:       []reply{{block: true}},
			timeout:      150 * time.Millisecond,
			wantKind:     prom.KindTimeout,
			wantSentinel: prom.ErrTimeout,
			wantRequests: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFaultServer(t, tc.script...)
			var events []prom.QueryEvent
			q, err := prom.NewHTTP(prom.HTTPConfig{
				Address: fs.srv.URL, Timeout: tc.timeout, Retry: fastRetry(3), Logger: quietLogger(),
				Observer: func(ev prom.QueryEvent) { events = append(events, ev) },
			})
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			vec, _, err := q.Query(context.Background(), `sum(rate(vllm:prompt_tokens_total[2m]))`, time.Unix(1700000000, 0))
			if got := fs.count(); got != tc.wantRequests {
				t.Errorf("server saw %d requests, want %d", got, tc.wantRequests)
			}
			if len(events) != 1 || events[0].Attempts != tc.wantRequests || events[0].Backend != "http" || events[0].Type != prom.InstantQuery {
				t.Errorf("observer saw %+v", events)
			}
			if tc.wantKind == 0 {
				if err != nil {
					t.Fatalf("want success, got %v", err)
				}
				if len(vec) != 1 || vec[0].Value != 42 || vec[0].Metric["pod"] != "a" {
					t.Fatalf("got %v", vec)
				}
				return
			}
			var qe *prom.Error
			if !errors.As(err, &qe) {
				t.Fatalf("error %v (%T) is not a *prom.Error", err, err)
			}
			if qe.Kind != tc.wantKind || !errors.Is(err, tc.wantSentinel) || prom.KindOf(err) != tc.wantKind {
				t.Fatalf("kind %v, want %v: %v", qe.Kind, tc.wantKind, err)
			}
			if qe.Attempts != tc.wantRequests || qe.StatusCode != tc.wantStatus {
				t.Fatalf("attempts %d status %d, want %d %d: %v", qe.Attempts, qe.StatusCode, tc.wantRequests, tc.wantStatus, err)
			}
			if events[0].Err == nil {
				t.Error("observer not told about the error")
			}
		})
	}
}

func TestHTTPTimeoutAbortsTheRequest(t *testing.T) {
	fs := newFaultServer(t, reply{block: true})
	q, err := prom.NewHTTP(prom.HTTPConfig{Address: fs.srv.URL, Timeout: 100 * time.Millisecond, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	_, _, err = q.QueryRange(context.Background(), "up", v1.Range{Start: time.Unix(0, 0), End: time.Unix(600, 0), Step: time.Minute})
	if !errors.Is(err, prom.ErrTimeout) {
		t.Fatalf("got %v, want ErrTimeout", err)
	}
	// The server's handler sees the client hang up rather than finishing.
	deadline := time.Now().Add(10 * time.Second)
	for {
		fs.mu.Lock()
		n := fs.aborted
		fs.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the blocked request was never aborted")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := fs.forms[0]; !strings.Contains(got, "timeout=100ms") {
		t.Errorf("query timeout not forwarded to the server: %s", got)
	}
}

func TestHTTPCallerCancelStopsRetries(t *testing.T) {
	fs := newFaultServer(t, reply{status: 503, body: "down"})
	q, err := prom.NewHTTP(prom.HTTPConfig{
		Address: fs.srv.URL, Logger: quietLogger(),
		Retry: prom.RetryPolicy{MaxAttempts: 10, InitialBackoff: time.Hour, MaxBackoff: time.Hour},
		// A long timeout so the caller's cancel, not the timeout, ends it.
		Timeout: 2 * time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for fs.count() == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}()
	_, _, err = q.Query(ctx, "up", time.Now())
	if !errors.Is(err, prom.ErrCanceled) {
		t.Fatalf("got %v, want ErrCanceled", err)
	}
	if fs.count() != 1 {
		t.Fatalf("server saw %d requests after cancel, want 1", fs.count())
	}
}

func TestHTTPCallerDeadlineIsATimeout(t *testing.T) {
	fs := newFaultServer(t, reply{block: true})
	q, err := prom.NewHTTP(prom.HTTPConfig{Address: fs.srv.URL, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, _, err = q.Query(ctx, "up", time.Now())
	if !errors.Is(err, prom.ErrTimeout) {
		t.Fatalf("got %v, want ErrTimeout", err)
	}
}

func TestHTTPUnreachableIsUnavailable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close() // nothing listens there now
	q, err := prom.NewHTTP(prom.HTTPConfig{Address: "http://" + addr, Retry: fastRetry(4), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	_, _, err = q.Query(context.Background(), "up", time.Now())
	var qe *prom.Error
	if !errors.As(err, &qe) || qe.Kind != prom.KindUnavailable || qe.Attempts != 4 || qe.StatusCode != 0 {
		t.Fatalf("got %v, want KindUnavailable after 4 attempts", err)
	}
}

func TestHTTPSendsHeadersAndRotatedToken(t *testing.T) {
	fs := newFaultServer(t, reply{status: 200, body: okVector})
	dir := t.TempDir()
	// Like a projected volume: the token file is a symlink swapped atomically.
	writeToken := func(name, tok string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(dir, "token.new")
		_ = os.Remove(link)
		if err := os.Symlink(name, link); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(link, filepath.Join(dir, "token")); err != nil {
			t.Fatal(err)
		}
	}
	writeToken("v1", "token-one")
	q, err := prom.NewHTTP(prom.HTTPConfig{
		Address:         fs.srv.URL + "/prometheus/",
		BearerTokenFile: filepath.Join(dir, "token"),
		Headers:         map[string]string{"X-Scope-OrgID": "tenant-a"},
		Logger:          quietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	if _, _, err := q.Query(ctx, "up", time.Now()); err != nil {
		t.Fatal(err)
	}
	writeToken("v2", "token-two")
	if _, _, err := q.Query(ctx, "up", time.Now()); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"Bearer token-one", "Bearer token-two"} {
		r := fs.request(i)
		if got := r.Header.Get("Authorization"); got != want {
			t.Errorf("request %d Authorization %q, want %q", i, got, want)
		}
		if got := r.Header.Get("X-Scope-OrgID"); got != "tenant-a" {
			t.Errorf("request %d X-Scope-OrgID %q", i, got)
		}
		if r.URL.Path != "/prometheus/api/v1/query" {
			t.Errorf("request %d path %q", i, r.URL.Path)
		}
	}
	// A token file that vanishes keeps the last good token.
	if err := os.Remove(filepath.Join(dir, "token")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := q.Query(ctx, "up", time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := fs.request(2).Header.Get("Authorization"); got != "Bearer token-two" {
		t.Errorf("after the file vanished: Authorization %q", got)
	}
}

func TestHTTPStaticBearerToken(t *testing.T) {
	fs := newFaultServer(t, reply{status: 200, body: okVector})
	q, err := prom.NewHTTP(prom.HTTPConfig{Address: fs.srv.URL, BearerToken: "s3cret", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, _, err := q.Query(context.Background(), "up", time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := fs.request(0).Header.Get("Authorization"); got != "Bearer s3cret" {
		t.Fatalf("Authorization %q", got)
	}
}

func TestHTTPScalarAndMatrixResults(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		wantKind prom.Kind
		wantVal  float64
	}{
		{"scalar becomes one unlabelled sample", `{"status":"success","data":{"resultType":"scalar","result":[1700000000,"3.5"]}}`, 0, 3.5},
		{"matrix from an instant query is a bad query", `{"status":"success","data":{"resultType":"matrix","result":[]}}`, prom.KindBadQuery, 0},
		// client_golang itself refuses to decode string results.
		{"string result is a bad response", `{"status":"success","data":{"resultType":"string","result":[1700000000,"x"]}}`, prom.KindBadResponse, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFaultServer(t, reply{status: 200, body: tc.body})
			q, err := prom.NewHTTP(prom.HTTPConfig{Address: fs.srv.URL, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			vec, _, err := q.Query(context.Background(), "x", time.Unix(1700000000, 0))
			if tc.wantKind != 0 {
				if prom.KindOf(err) != tc.wantKind {
					t.Fatalf("got %v, want kind %v", err, tc.wantKind)
				}
				return
			}
			if err != nil || len(vec) != 1 || float64(vec[0].Value) != tc.wantVal || len(vec[0].Metric) != 0 {
				t.Fatalf("got %v %v", vec, err)
			}
		})
	}
}

func TestHTTPWarningsAreReturned(t *testing.T) {
	fs := newFaultServer(t, reply{status: 200, body: `{"status":"success","warnings":["PromQL info: metric might not be a counter"],"data":{"resultType":"vector","result":[]}}`})
	q, err := prom.NewHTTP(prom.HTTPConfig{Address: fs.srv.URL, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	_, w, err := q.Query(context.Background(), "rate(x[5m])", time.Now())
	if err != nil || len(w) != 1 {
		t.Fatalf("warnings %v err %v", w, err)
	}
}

func TestNewHTTPRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  prom.HTTPConfig
	}{
		{"no scheme", prom.HTTPConfig{Address: "prometheus:9090"}},
		{"ftp scheme", prom.HTTPConfig{Address: "ftp://prometheus"}},
		{"token and token file", prom.HTTPConfig{Address: "http://p", BearerToken: "a", BearerTokenFile: "/x"}},
		{"missing token file", prom.HTTPConfig{Address: "http://p", BearerTokenFile: "/nonexistent/token"}},
		{"authorization header with token", prom.HTTPConfig{Address: "http://p", BearerToken: "a", Headers: map[string]string{"authorization": "Basic x"}}},
		{"cert without key", prom.HTTPConfig{Address: "https://p", TLS: prom.TLSConfig{CertFile: "/c"}}},
		{"missing CA file", prom.HTTPConfig{Address: "https://p", TLS: prom.TLSConfig{CAFile: "/nonexistent/ca.pem"}}},
		{"jitter above 1", prom.HTTPConfig{Address: "http://p", Retry: prom.RetryPolicy{Jitter: 2}}},
		{"TLS with a custom transport", prom.HTTPConfig{Address: "https://p", Transport: http.DefaultTransport, TLS: prom.TLSConfig{InsecureSkipVerify: true}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := prom.NewHTTP(tc.cfg); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}
