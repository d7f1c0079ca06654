package prom

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// Defaults applied by NewHTTP to zero HTTPConfig fields.
const (
	DefaultHTTPTimeout    = 30 * time.Second
	DefaultMaxAttempts    = 3
	DefaultInitialBackoff = 250 * time.Millisecond
	DefaultMaxBackoff     = 5 * time.Second
	DefaultJitter         = 0.2
)

// RetryPolicy says how often and how patiently a query is retried after a
// network error, a 5xx or a 429. Other failures are never retried.
type RetryPolicy struct {
	// MaxAttempts counts the first try; 1 disables retries.
	MaxAttempts int
	// InitialBackoff doubles after every failed attempt up to MaxBackoff.
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	// Jitter spreads each delay uniformly by ±Jitter of itself (0..1).
	Jitter float64
}

// HTTPConfig configures the HTTP querier.
type HTTPConfig struct {
	// Address is the base URL of a Prometheus-compatible API, e.g.
	// http://prometheus:9090 or https://mimir/prometheus.
	Address string
	// BearerToken is sent as "Authorization: Bearer"; exclusive with
	// BearerTokenFile.
	BearerToken string
	// BearerTokenFile is re-read whenever it changes (projected
	// ServiceAccount tokens rotate in place).
	BearerTokenFile string
	// TLS applies to https addresses.
	TLS TLSConfig
	// Headers are sent with every request, e.g. X-Scope-OrgID.
	Headers map[string]string
	// Timeout bounds one Query or QueryRange call including its retries;
	// it is also sent as the query's timeout parameter.
	Timeout time.Duration
	Retry   RetryPolicy
	// Observer, if set, is told about every call.
	Observer Observer
	// Transport replaces the default transport (TLS must then be zero).
	Transport http.RoundTripper
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Rand returns uniform numbers in [0,1) for jitter; defaults to math/rand/v2.
	Rand func() float64
}

// HTTP is a Querier over the Prometheus HTTP API (Prometheus, Thanos,
// Mimir, Cortex, VictoriaMetrics).
type HTTP struct {
	api    v1.API
	client api.Client // the raw client, for DetectBackend
	cfg    HTTPConfig
	close  func()
}

var _ Querier = (*HTTP)(nil)

// NewHTTP validates cfg, reads the token file and TLS files once, and
// returns a querier. It sends no request.
func NewHTTP(cfg HTTPConfig) (*HTTP, error) {
	u, err := url.Parse(cfg.Address)
	if err != nil {
		return nil, fmt.Errorf("prometheus address %q: %w", cfg.Address, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("prometheus address %q: want http(s)://host[:port][/path]", cfg.Address)
	}
	if cfg.BearerToken != "" && cfg.BearerTokenFile != "" {
		return nil, errors.New("prometheus: set bearerToken or bearerTokenFile, not both")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultHTTPTimeout
	}
	if cfg.Retry.MaxAttempts <= 0 {
		cfg.Retry.MaxAttempts = DefaultMaxAttempts
	}
	if cfg.Retry.InitialBackoff <= 0 {
		cfg.Retry.InitialBackoff = DefaultInitialBackoff
	}
	if cfg.Retry.MaxBackoff <= 0 {
		cfg.Retry.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.Retry.MaxBackoff < cfg.Retry.InitialBackoff {
		cfg.Retry.MaxBackoff = cfg.Retry.InitialBackoff
	}
	if cfg.Retry.Jitter < 0 || cfg.Retry.Jitter > 1 {
		return nil, fmt.Errorf("prometheus retry jitter %v: want 0..1", cfg.Retry.Jitter)
	}
	if cfg.Retry.Jitter == 0 {
		cfg.Retry.Jitter = DefaultJitter
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	headers := http.Header{}
	for k, v := range cfg.Headers {
		if http.CanonicalHeaderKey(k) == "Authorization" && (cfg.BearerToken != "" || cfg.BearerTokenFile != "") {
			return nil, errors.New("prometheus: an Authorization header conflicts with the bearer token")
		}
		headers.Set(k, v)
	}

	base := cfg.Transport
	closeIdle := func() {}
	if base == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		if !cfg.TLS.isZero() {
			tc, err := cfg.TLS.build(cfg.Logger)
			if err != nil {
				return nil, fmt.Errorf("prometheus TLS: %w", err)
			}
			t.TLSClientConfig = tc
		}
		base, closeIdle = t, t.CloseIdleConnections
	} else if !cfg.TLS.isZero() {
		return nil, errors.New("prometheus: TLS options need the default transport")
	}
	var tokens *tokenSource
	switch {
	case cfg.BearerTokenFile != "":
		tokens = &tokenSource{file: &reloadingFile{path: cfg.BearerTokenFile, log: cfg.Logger}}
		if _, err := tokens.token(); err != nil {
			return nil, fmt.Errorf("prometheus: %w", err)
		}
	case cfg.BearerToken != "":
		tokens = &tokenSource{static: cfg.BearerToken}
	}
	client, err := api.NewClient(api.Config{
		Address:      strings.TrimRight(cfg.Address, "/"),
		RoundTripper: exactSteps{&authTransport{base: base, headers: headers, token: tokens}},
	})
	if err != nil {
		return nil, fmt.Errorf("prometheus client: %w", err)
	}
	return &HTTP{api: v1.NewAPI(client), client: client, cfg: cfg, close: closeIdle}, nil
}

// Close releases idle connections.
func (h *HTTP) Close() { h.close() }

// Query evaluates q at ts; see Querier.
func (h *HTTP) Query(ctx context.Context, q string, ts time.Time) (model.Vector, v1.Warnings, error) {
	start := time.Now()
	v, w, attempts, err := h.do(ctx, q, func(ctx context.Context) (model.Value, v1.Warnings, error) {
		v, w, _, err := h.api.Query(ctx, q, ts, v1.WithTimeout(h.cfg.Timeout))
		return v, w, err
	})
	var vec model.Vector
	if err == nil {
		vec, err = asVector(q, v, attempts)
	}
	h.observe(InstantQuery, q, start, attempts, len(vec), w, err)
	if err != nil {
		return nil, w, err
	}
	return vec, w, nil
}

// QueryRange evaluates q over r; see Querier.
func (h *HTTP) QueryRange(ctx context.Context, q string, r v1.Range) (model.Matrix, v1.Warnings, error) {
	start := time.Now()
	v, w, attempts, err := h.do(ctx, q, func(ctx context.Context) (model.Value, v1.Warnings, error) {
		v, w, _, err := h.api.QueryRange(ctx, q, r, v1.WithTimeout(h.cfg.Timeout))
		return v, w, err
	})
	var m model.Matrix
	if err == nil {
		var ok bool
		if m, ok = v.(model.Matrix); !ok {
			err = &Error{Kind: KindBadResponse, Query: q, Attempts: attempts, Err: fmt.Errorf("range query returned a %s", typeName(v))}
		}
	}
	h.observe(RangeQuery, q, start, attempts, len(m), w, err)
	if err != nil {
		return nil, w, err
	}
	return m, w, nil
}

func (h *HTTP) observe(t QueryType, q string, start time.Time, attempts, series int, w v1.Warnings, err error) {
	if h.cfg.Observer == nil {
		return
	}
	h.cfg.Observer(QueryEvent{Backend: "http", Type: t, Query: q, Attempts: attempts,
		Duration: time.Since(start), Series: series, Warnings: len(w), Err: err})
}

// do runs call with retries; it returns the attempts made and an *Error.
func (h *HTTP) do(parent context.Context, q string, call func(context.Context) (model.Value, v1.Warnings, error)) (model.Value, v1.Warnings, int, error) {
	ctx, cancel := context.WithTimeout(parent, h.cfg.Timeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		x := &exchange{}
		v, w, err := call(withExchange(ctx, x))
		if err == nil {
			return v, w, attempt, nil
		}
		qe := classify(parent, ctx, q, x, err)
		qe.Attempts = attempt
		if qe.Kind != KindUnavailable || attempt >= h.cfg.Retry.MaxAttempts {
			return nil, w, attempt, qe
		}
		delay := h.backoff(attempt, x.retryAfter)
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < delay {
			// Waiting would outlive the timeout: fail now with the real cause.
			return nil, w, attempt, qe
		}
		h.cfg.Logger.Debug("prometheus query failed, retrying", "query", q, "attempt", attempt, "delay", delay, "err", err)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			ce := classify(parent, ctx, q, x, ctx.Err())
			ce.Attempts = attempt
			// The cause is the context; the query error that made it retry is
			// context for a person, not an error to match.
			ce.Err = fmt.Errorf("%w (while waiting to retry after: %v)", ce.Err, err) //nolint:errorlint // see above
			return nil, w, attempt, ce
		case <-t.C:
		}
	}
}

// backoff is the delay before attempt+1: exponential with jitter, or the
// server's Retry-After when that is longer (capped at MaxBackoff).
func (h *HTTP) backoff(attempt int, retryAfter time.Duration) time.Duration {
	p := h.cfg.Retry
	d := float64(p.InitialBackoff) * math.Pow(2, float64(attempt-1))
	d = math.Min(d, float64(p.MaxBackoff))
	d *= 1 + p.Jitter*(2*h.cfg.Rand()-1)
	if ra := float64(retryAfter); ra > d {
		d = math.Min(ra, float64(p.MaxBackoff))
	}
	return time.Duration(d)
}

// classify turns an attempt's error into an *Error. parent is the caller's
// context, ctx the one carrying the per-query timeout.
func classify(parent, ctx context.Context, q string, x *exchange, err error) *Error {
	e := &Error{Query: q, StatusCode: x.status, Err: err}
	switch {
	case parent.Err() != nil:
		if errors.Is(parent.Err(), context.DeadlineExceeded) {
			e.Kind = KindTimeout
		} else {
			e.Kind = KindCanceled
		}
		return e
	case ctx.Err() != nil:
		e.Kind = KindTimeout
		return e
	}
	var cv *tls.CertificateVerificationError
	if errors.As(err, &cv) {
		// A certificate the configured roots do not accept will not change
		// by retrying: a configuration problem.
		e.Kind = KindRejected
		return e
	}
	var ae *v1.Error
	if !errors.As(err, &ae) {
		// Transport failures: refused, reset, DNS, TLS, EOF.
		e.Kind = KindUnavailable
		return e
	}
	switch ae.Type {
	case v1.ErrBadData, v1.ErrExec:
		e.Kind = KindBadQuery
	case v1.ErrTimeout:
		e.Kind = KindTimeout
	case v1.ErrCanceled:
		e.Kind = KindCanceled
	case v1.ErrServer:
		// Prometheus answers an evaluation timeout with 503 {"errorType":"timeout"}.
		if apiErrorType(ae.Detail) == string(v1.ErrTimeout) {
			e.Kind = KindTimeout
		} else {
			e.Kind = KindUnavailable
		}
	case v1.ErrClient:
		switch x.status {
		case http.StatusTooManyRequests:
			e.Kind = KindUnavailable
		case http.StatusBadRequest, http.StatusUnprocessableEntity:
			e.Kind = KindBadQuery
		default:
			e.Kind = KindRejected
		}
	default:
		e.Kind = KindBadResponse
	}
	return e
}

func apiErrorType(body string) string {
	var r struct {
		ErrorType string `json:"errorType"`
	}
	if json.Unmarshal([]byte(body), &r) != nil {
		return ""
	}
	return r.ErrorType
}

func typeName(v model.Value) string {
	if v == nil {
		return "nil"
	}
	return v.Type().String()
}

// asVector accepts a vector, or a scalar as a one-sample vector without labels.
func asVector(q string, v model.Value, attempts int) (model.Vector, error) {
	switch x := v.(type) {
	case model.Vector:
		return x, nil
	case *model.Scalar:
		return model.Vector{{Metric: model.Metric{}, Value: x.Value, Timestamp: x.Timestamp}}, nil
	case model.Matrix, *model.String:
		return nil, &Error{Kind: KindBadQuery, Query: q, Attempts: attempts, Err: fmt.Errorf("instant query yields a %s, want a vector or scalar", typeName(v))}
	}
	return nil, &Error{Kind: KindBadResponse, Query: q, Attempts: attempts, Err: fmt.Errorf("unexpected result %s", typeName(v))}
}
