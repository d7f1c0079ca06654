package prom

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
)

// TLSConfig are the TLS settings for an https address.
type TLSConfig struct {
	// CAFile holds PEM CA certificates that replace the system pool.
	CAFile string
	// CertFile and KeyFile hold a PEM client certificate and key; both are
	// re-read when either file changes (cert-manager style rotation).
	CertFile string
	KeyFile  string
	// ServerName overrides the name checked against the server certificate.
	ServerName string
	// InsecureSkipVerify disables server certificate verification.
	InsecureSkipVerify bool
}

func (c TLSConfig) isZero() bool { return c == TLSConfig{} }

func (c TLSConfig) build(log *slog.Logger) (*tls.Config, error) {
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         c.ServerName,
		InsecureSkipVerify: c.InsecureSkipVerify, //nolint:gosec // explicit user option
	}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s holds no PEM certificate", c.CAFile)
		}
		cfg.RootCAs = pool
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, errors.New("TLS client certificate needs both certFile and keyFile")
	}
	if c.CertFile != "" {
		cert := &reloadingFile{path: c.CertFile, log: log}
		key := &reloadingFile{path: c.KeyFile, log: log}
		load := func() (*tls.Certificate, error) {
			cb, err := cert.get()
			if err != nil {
				return nil, err
			}
			kb, err := key.get()
			if err != nil {
				return nil, err
			}
			pair, err := tls.X509KeyPair(cb, kb)
			if err != nil {
				return nil, fmt.Errorf("load client certificate %s / %s: %w", c.CertFile, c.KeyFile, err)
			}
			return &pair, nil
		}
		if _, err := load(); err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return load() }
	}
	return cfg, nil
}

// reloadingFile caches a file's content and re-reads it when the file it
// names changes (size, modification time or identity, which covers the
// atomic symlink swap of Kubernetes projected volumes). A failed re-read
// keeps serving the last good content.
type reloadingFile struct {
	path string
	log  *slog.Logger

	mu   sync.Mutex
	info os.FileInfo
	data []byte
}

func (f *reloadingFile) get() ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, err := os.Stat(f.path)
	if err == nil && f.info != nil && os.SameFile(st, f.info) && st.ModTime().Equal(f.info.ModTime()) && st.Size() == f.info.Size() {
		return f.data, nil
	}
	var data []byte
	if err == nil {
		data, err = os.ReadFile(f.path)
	}
	if err != nil {
		if f.data != nil {
			f.log.Warn("re-read failed, keeping the previous content", "file", f.path, "err", err)
			return f.data, nil
		}
		return nil, fmt.Errorf("read %s: %w", f.path, err)
	}
	f.info, f.data = st, data
	return data, nil
}

// tokenSource yields the bearer token: a fixed one or a file's content.
type tokenSource struct {
	static string
	file   *reloadingFile
}

func (t *tokenSource) token() (string, error) {
	if t.file == nil {
		return t.static, nil
	}
	b, err := t.file.get()
	if err != nil {
		return "", fmt.Errorf("bearer token: %w", err)
	}
	return string(bytes.TrimSpace(b)), nil
}

// exchange records the last HTTP status and Retry-After of one attempt; the
// transport finds it in the request's context.
type exchange struct {
	status     int
	retryAfter time.Duration
}

type exchangeKey struct{}

func withExchange(ctx context.Context, x *exchange) context.Context {
	return context.WithValue(ctx, exchangeKey{}, x)
}

// authTransport adds headers and the bearer token, and records the status.
type authTransport struct {
	base    http.RoundTripper
	headers http.Header
	token   *tokenSource
}

func (t *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	for k, vs := range t.headers {
		r.Header.Del(k)
		for _, v := range vs {
			r.Header.Add(k, v)
		}
	}
	if t.token != nil {
		tok, err := t.token.token()
		if err != nil {
			return nil, err
		}
		if tok != "" {
			r.Header.Set("Authorization", "Bearer "+tok)
		}
	}
	resp, err := t.base.RoundTrip(r)
	if x, ok := req.Context().Value(exchangeKey{}).(*exchange); ok && resp != nil {
		x.status = resp.StatusCode
		x.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	return resp, err
}

// parseRetryAfter reads delay-seconds or an HTTP date; 0 when absent or bad.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
