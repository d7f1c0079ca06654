// Package receiver serves the OTLP trace endpoints the EPP (or an
// OpenTelemetry Collector) exports gate spans to: OTLP/gRPC
// (opentelemetry.proto.collector.trace.v1.TraceService/Export) and
// OTLP/HTTP (POST /v1/traces, protobuf or JSON, optionally gzip), each on a
// listen address of its own. Every request is bounded before it is decoded:
// connections per listener, bytes on the wire and decompressed, exports
// decoded at once (a full house answers 429 / ResourceExhausted with a
// retry delay, never a queue), and spans per second per peer. An optional
// bearer token is compared in constant time. The spans go to a
// window.Set, which routes them to their targets.
package receiver

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/netutil"
	"google.golang.org/grpc"

	"github.com/gatetuner/gatetuner/tuner/spans/window"
)

// Config bounds and places the receiver.
type Config struct {
	// GRPCAddr and HTTPAddr are listen addresses ("" disables one; ":0"
	// picks a free port).
	GRPCAddr, HTTPAddr string
	// BearerToken, when set, is required as "Authorization: Bearer <token>"
	// (HTTP header or gRPC metadata).
	BearerToken string
	// MaxBodyBytes bounds an HTTP body on the wire (default 4 MiB).
	MaxBodyBytes int64
	// MaxDecodedBytes bounds a decompressed HTTP body and a gRPC message
	// (gRPC applies it to both the wire and the decompressed size;
	// default 16 MiB).
	MaxDecodedBytes int64
	// MaxConcurrent bounds the exports decoded at once (default 4).
	MaxConcurrent int
	// MaxConns bounds the connections per listener (default 64).
	MaxConns int
	// PeerSpansPerSecond and PeerBurst are each peer's token bucket in spans
	// (defaults 50,000/s and 100,000).
	PeerSpansPerSecond float64
	PeerBurst          int
	// RetryAfter is the delay a throttled sender is told (default 1 s).
	RetryAfter time.Duration
	// SyncInterval is how often the windows are fsynced (default 1 s).
	SyncInterval time.Duration
}

func (c *Config) defaults() {
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 4 << 20
	}
	if c.MaxDecodedBytes <= 0 {
		c.MaxDecodedBytes = 16 << 20
	}
	if c.MaxConcurrent <= 0 {
		c.MaxConcurrent = 4
	}
	if c.MaxConns <= 0 {
		c.MaxConns = 64
	}
	if c.PeerSpansPerSecond <= 0 {
		c.PeerSpansPerSecond = 50000
	}
	if c.PeerBurst <= 0 {
		c.PeerBurst = 100000
	}
	if c.RetryAfter <= 0 {
		c.RetryAfter = time.Second
	}
	if c.SyncInterval <= 0 {
		c.SyncInterval = time.Second
	}
}

// Refusal names why a whole export request was refused.
type Refusal uint8

// Refusals.
const (
	// RefusedAuth: missing or wrong bearer token (401 / Unauthenticated).
	RefusedAuth Refusal = iota
	// RefusedTooLarge: over a byte bound (413 / ResourceExhausted).
	RefusedTooLarge
	// RefusedMalformed: not an ExportTraceServiceRequest (400 /
	// InvalidArgument).
	RefusedMalformed
	// RefusedBusy: MaxConcurrent exports already decoding (429 /
	// ResourceExhausted with a retry delay).
	RefusedBusy
	// RefusedThrottled: the peer's span rate is spent (429 /
	// ResourceExhausted with a retry delay).
	RefusedThrottled
	// RefusedUnsupported: wrong method, path, content type or encoding
	// (405, 404, 415).
	RefusedUnsupported
	NumRefusals
)

var refusalNames = [NumRefusals]string{"unauthenticated", "too-large", "malformed", "busy", "throttled", "unsupported"}

// String names the refusal.
func (r Refusal) String() string {
	if r < NumRefusals {
		return refusalNames[r]
	}
	return fmt.Sprintf("Refusal(%d)", uint8(r))
}

// Stats are the receiver's counts since it started: plain values for the
// caller's metrics.
type Stats struct {
	// Requests counts export requests received on both transports.
	Requests uint64
	// Refused counts requests refused whole, by reason.
	Refused [NumRefusals]uint64
	// DroppedSpans counts the spans of requests refused after decoding
	// (throttled).
	DroppedSpans uint64
	// PersistErrors counts exports whose spans a window could not write
	// (kept in memory).
	PersistErrors uint64
	// Spans holds the span counts: received, gate, skipped, malformed by
	// fault, unrouted, ambiguous, and each target's window.
	Spans window.SetStats
}

// Receiver serves OTLP trace exports into a window.Set.
type Receiver struct {
	cfg     Config
	set     *window.Set
	sem     chan struct{}
	peers   *peerLimiter
	grpcSrv *grpc.Server
	httpSrv *http.Server

	requests, dropped, persistErrs atomic.Uint64
	refused                        [NumRefusals]atomic.Uint64

	mu        sync.Mutex
	grpcLis   net.Listener
	httpLis   net.Listener
	stop      chan struct{}
	stopOnce  sync.Once
	done      sync.WaitGroup
	lastError error
}

// New returns a receiver into set; Start listens.
func New(cfg Config, set *window.Set) *Receiver {
	cfg.defaults()
	r := &Receiver{
		cfg:   cfg,
		set:   set,
		sem:   make(chan struct{}, cfg.MaxConcurrent),
		peers: newPeerLimiter(cfg.PeerSpansPerSecond, cfg.PeerBurst),
		stop:  make(chan struct{}),
	}
	r.grpcSrv = r.newGRPCServer()
	r.httpSrv = &http.Server{
		Handler:           r,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	return r
}

// Start listens on the configured addresses and serves in the background.
func (r *Receiver) Start() error {
	if r.cfg.GRPCAddr == "" && r.cfg.HTTPAddr == "" {
		return errors.New("span receiver: no listen address")
	}
	var lc net.ListenConfig
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cfg.GRPCAddr != "" {
		l, err := lc.Listen(context.Background(), "tcp", r.cfg.GRPCAddr)
		if err != nil {
			return fmt.Errorf("span receiver: OTLP/gRPC listen: %w", err)
		}
		r.grpcLis = netutil.LimitListener(l, r.cfg.MaxConns)
		r.done.Go(func() { r.served(r.grpcSrv.Serve(r.grpcLis)) })
	}
	if r.cfg.HTTPAddr != "" {
		l, err := lc.Listen(context.Background(), "tcp", r.cfg.HTTPAddr)
		if err != nil {
			if r.grpcLis != nil {
				r.grpcSrv.Stop()
			}
			return fmt.Errorf("span receiver: OTLP/HTTP listen: %w", err)
		}
		r.httpLis = netutil.LimitListener(l, r.cfg.MaxConns)
		r.done.Go(func() { r.served(r.httpSrv.Serve(r.httpLis)) })
	}
	r.done.Go(r.syncLoop)
	return nil
}

func (r *Receiver) served(err error) {
	if err == nil || errors.Is(err, http.ErrServerClosed) || errors.Is(err, grpc.ErrServerStopped) {
		return
	}
	r.mu.Lock()
	r.lastError = err
	r.mu.Unlock()
}

func (r *Receiver) syncLoop() {
	t := time.NewTicker(r.cfg.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			if err := r.set.Sync(); err != nil {
				r.persistErrs.Add(1)
			}
		}
	}
}

// GRPCAddr returns the gRPC listener's address ("" when not listening).
func (r *Receiver) GRPCAddr() string { return addrOf(&r.mu, &r.grpcLis) }

// HTTPAddr returns the HTTP listener's address ("" when not listening).
func (r *Receiver) HTTPAddr() string { return addrOf(&r.mu, &r.httpLis) }

func addrOf(mu *sync.Mutex, l *net.Listener) string {
	mu.Lock()
	defer mu.Unlock()
	if *l == nil {
		return ""
	}
	return (*l).Addr().String()
}

// Err returns a listener's failure, if one stopped serving.
func (r *Receiver) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastError
}

// Shutdown stops both servers, letting exports in progress finish until ctx
// ends, and syncs the windows (the caller closes the set).
func (r *Receiver) Shutdown(ctx context.Context) error {
	first := false
	r.stopOnce.Do(func() { close(r.stop); first = true })
	if !first {
		return nil
	}
	stopped := make(chan struct{})
	go func() { r.grpcSrv.GracefulStop(); close(stopped) }()
	err := r.httpSrv.Shutdown(ctx)
	select {
	case <-stopped:
	case <-ctx.Done():
		r.grpcSrv.Stop()
		<-stopped
	}
	r.done.Wait()
	return errors.Join(err, r.set.Sync())
}

// Stats returns the receiver's counts.
func (r *Receiver) Stats() Stats {
	s := Stats{Requests: r.requests.Load(), DroppedSpans: r.dropped.Load(), PersistErrors: r.persistErrs.Load(),
		Spans: r.set.Stats()}
	for i := range s.Refused {
		s.Refused[i] = r.refused[i].Load()
	}
	return s
}

func (r *Receiver) refuse(why Refusal) { r.refused[why].Add(1) }

// authorized compares an Authorization value with the token in constant
// time.
func (r *Receiver) authorized(header string) bool {
	if r.cfg.BearerToken == "" {
		return true
	}
	tok, ok := strings.CutPrefix(header, "Bearer ")
	if !ok {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(tok), []byte(r.cfg.BearerToken)) == 1
}

// acquire takes a decode slot without waiting.
func (r *Receiver) acquire() bool {
	select {
	case r.sem <- struct{}{}:
		return true
	default:
		return false
	}
}

func (r *Receiver) release() { <-r.sem }
