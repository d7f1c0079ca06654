// Package prom is the estimator's PromQL query layer: a Querier over a remote
// Prometheus-compatible HTTP API (HTTP) and over an embedded TSDB and PromQL
// engine fed by a simulator or a built-in scraper (Embedded).
package prom

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// Querier runs PromQL instant and range queries.
type Querier interface {
	// Query evaluates q at ts. A scalar result comes back as one sample
	// with no labels; a range-vector or string result is a KindBadQuery error.
	Query(ctx context.Context, q string, ts time.Time) (model.Vector, v1.Warnings, error)
	// QueryRange evaluates q at every step of r.
	QueryRange(ctx context.Context, q string, r v1.Range) (model.Matrix, v1.Warnings, error)
}

// Kind classifies a failed query so callers can tell a Prometheus they cannot
// reach from a query it will never answer.
type Kind int

// Kinds of query failure.
const (
	// KindUnavailable: network error, 5xx or 429 after all retries.
	KindUnavailable Kind = iota + 1
	// KindTimeout: the per-query timeout or the caller's deadline passed,
	// or the server reported that evaluation timed out.
	KindTimeout
	// KindCanceled: the caller's context was canceled.
	KindCanceled
	// KindBadQuery: the query does not parse, fails to evaluate (e.g. too
	// many samples) or yields a result type the method cannot return.
	KindBadQuery
	// KindRejected: the server refused the request itself (401, 403, 404
	// or another 4xx that is not about the query): a configuration problem.
	KindRejected
	// KindBadResponse: the server answered something that is not a valid
	// Prometheus API response.
	KindBadResponse
)

// String returns the kind's name.
func (k Kind) String() string {
	switch k {
	case KindUnavailable:
		return "unavailable"
	case KindTimeout:
		return "timeout"
	case KindCanceled:
		return "canceled"
	case KindBadQuery:
		return "bad query"
	case KindRejected:
		return "rejected"
	case KindBadResponse:
		return "bad response"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Sentinels matched by errors.Is against an *Error of the same kind.
var (
	ErrUnavailable = errors.New("prometheus unavailable")
	ErrTimeout     = errors.New("prometheus query timed out")
	ErrCanceled    = errors.New("prometheus query canceled")
	ErrBadQuery    = errors.New("bad prometheus query")
	ErrRejected    = errors.New("prometheus rejected the request")
	ErrBadResponse = errors.New("bad prometheus response")
)

func (k Kind) sentinel() error {
	switch k {
	case KindUnavailable:
		return ErrUnavailable
	case KindTimeout:
		return ErrTimeout
	case KindCanceled:
		return ErrCanceled
	case KindBadQuery:
		return ErrBadQuery
	case KindRejected:
		return ErrRejected
	case KindBadResponse:
		return ErrBadResponse
	}
	return nil
}

// Error is a failed query. Use errors.As to read it, or errors.Is with the
// Err* sentinels to test its kind.
type Error struct {
	Kind  Kind
	Query string
	// Attempts is how many requests were sent (1 for Embedded).
	Attempts int
	// StatusCode is the last HTTP status, 0 when there was none.
	StatusCode int
	// Err is the underlying cause.
	Err error
}

// Error describes the failure with its query.
func (e *Error) Error() string {
	s := fmt.Sprintf("query %q: %s", e.Query, e.Kind)
	if e.StatusCode != 0 {
		s += fmt.Sprintf(" (HTTP %d)", e.StatusCode)
	}
	if e.Attempts > 1 {
		s += fmt.Sprintf(" after %d attempts", e.Attempts)
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is the sentinel of e's kind.
func (e *Error) Is(target error) bool {
	s := e.Kind.sentinel()
	return s != nil && target == s
}

// KindOf returns the kind of err's *Error, or 0 when err is not one.
func KindOf(err error) Kind {
	var qe *Error
	if errors.As(err, &qe) {
		return qe.Kind
	}
	return 0
}

// QueryType says whether an event is an instant or a range query.
type QueryType string

// Query types.
const (
	InstantQuery QueryType = "instant"
	RangeQuery   QueryType = "range"
)

// QueryEvent describes one finished Query or QueryRange call.
type QueryEvent struct {
	// Backend is "http" or "embedded".
	Backend  string
	Type     QueryType
	Query    string
	Attempts int
	Duration time.Duration
	// Series is the number of series returned.
	Series   int
	Warnings int
	// Err is nil on success; otherwise an *Error.
	Err error
}

// Observer receives a QueryEvent after every call; it must not block and
// must be safe for concurrent use when the querier is shared.
type Observer func(QueryEvent)
