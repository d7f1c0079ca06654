package receiver

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"sync"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/gatetuner/gatetuner/tuner/spans"
)

// TracesPath is the OTLP/HTTP traces path.
const TracesPath = "/v1/traces"

const (
	mediaProto = "application/x-protobuf"
	mediaJSON  = "application/json"
)

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// ServeHTTP serves OTLP/HTTP trace exports.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.requests.Add(1)
	media, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type"))
	if media != mediaJSON {
		media = mediaProto // errors are answered in protobuf unless the request was JSON
	}
	if req.URL.Path != TracesPath {
		r.fail(w, media, http.StatusNotFound, RefusedUnsupported, "span receiver: only "+TracesPath)
		return
	}
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		r.fail(w, media, http.StatusMethodNotAllowed, RefusedUnsupported, "span receiver: POST only")
		return
	}
	if !r.authorized(req.Header.Get("Authorization")) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="gatetuner"`)
		r.fail(w, media, http.StatusUnauthorized, RefusedAuth, "span receiver: missing or wrong bearer token")
		return
	}
	if ct, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type")); ct != mediaProto && ct != mediaJSON {
		r.fail(w, media, http.StatusUnsupportedMediaType, RefusedUnsupported,
			fmt.Sprintf("span receiver: content type %q, want %s or %s", ct, mediaProto, mediaJSON))
		return
	}
	if req.ContentLength > r.cfg.MaxBodyBytes {
		r.fail(w, media, http.StatusRequestEntityTooLarge, RefusedTooLarge,
			fmt.Sprintf("span receiver: body of %d bytes over %d", req.ContentLength, r.cfg.MaxBodyBytes))
		return
	}
	if !r.acquire() {
		r.tooMany(w, media, RefusedBusy, "span receiver: busy")
		return
	}
	defer r.release()
	r.exportHTTP(w, req, media)
}

func (r *Receiver) exportHTTP(w http.ResponseWriter, req *http.Request, media string) {
	buf := bufPool.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= 1<<20 { // a larger buffer is left to the collector
			buf.Reset()
			bufPool.Put(buf)
		}
	}()
	buf.Reset()
	code, why, err := r.readBody(req, buf)
	if err != nil {
		r.fail(w, media, code, why, "span receiver: "+err.Error())
		return
	}
	msg := &coltracepb.ExportTraceServiceRequest{}
	if media == mediaJSON {
		err = spans.DecodeJSON(buf.Bytes(), msg)
	} else {
		err = proto.Unmarshal(buf.Bytes(), msg)
	}
	if err != nil {
		r.fail(w, media, http.StatusBadRequest, RefusedMalformed, "span receiver: not an ExportTraceServiceRequest: "+err.Error())
		return
	}
	res, tmsg, ok := r.export(msg, remoteHost(req.RemoteAddr))
	if !ok {
		r.tooMany(w, media, RefusedThrottled, tmsg) // counted by export
		return
	}
	write(w, media, http.StatusOK, res)
}

// readBody reads the body, decompressed, within the byte bounds.
func (r *Receiver) readBody(req *http.Request, buf *bytes.Buffer) (int, Refusal, error) {
	body := io.Reader(http.MaxBytesReader(nil, req.Body, r.cfg.MaxBodyBytes))
	switch enc := req.Header.Get("Content-Encoding"); enc {
	case "", "identity":
	case "gzip":
		gz, err := gzip.NewReader(body)
		if err != nil {
			return tooLargeOr(err, http.StatusBadRequest, RefusedMalformed, "gzip")
		}
		defer gz.Close()
		body = gz
	default:
		return http.StatusUnsupportedMediaType, RefusedUnsupported, fmt.Errorf("content encoding %q, want gzip or none", enc)
	}
	n, err := buf.ReadFrom(io.LimitReader(body, r.cfg.MaxDecodedBytes+1))
	if err != nil {
		return tooLargeOr(err, http.StatusBadRequest, RefusedMalformed, "read body")
	}
	if n > r.cfg.MaxDecodedBytes {
		return http.StatusRequestEntityTooLarge, RefusedTooLarge, fmt.Errorf("decompressed body over %d bytes", r.cfg.MaxDecodedBytes)
	}
	return 0, 0, nil
}

func tooLargeOr(err error, code int, why Refusal, what string) (int, Refusal, error) {
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return http.StatusRequestEntityTooLarge, RefusedTooLarge, fmt.Errorf("body over %d bytes", mb.Limit)
	}
	return code, why, fmt.Errorf("%s: %w", what, err)
}

func remoteHost(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// fail answers an error as OTLP/HTTP does: a google.rpc.Status body.
func (r *Receiver) fail(w http.ResponseWriter, media string, code int, why Refusal, msg string) {
	r.refuse(why)
	write(w, media, code, &status.Status{Code: int32(grpcCode(code)), Message: msg})
}

// tooMany answers 429 with Retry-After; the OTLP/HTTP exporters wait that
// long and retry.
func (r *Receiver) tooMany(w http.ResponseWriter, media string, why Refusal, msg string) {
	if why != RefusedThrottled {
		r.refuse(why)
	}
	secs := max(int((r.cfg.RetryAfter+999_999_999)/1e9), 1)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	write(w, media, http.StatusTooManyRequests, &status.Status{Code: int32(codes.ResourceExhausted), Message: msg})
}

func grpcCode(httpCode int) codes.Code {
	switch httpCode {
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusRequestEntityTooLarge, http.StatusTooManyRequests:
		return codes.ResourceExhausted
	case http.StatusBadRequest:
		return codes.InvalidArgument
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusUnsupportedMediaType:
		return codes.Unimplemented
	}
	return codes.Unknown
}

func write(w http.ResponseWriter, media string, code int, m proto.Message) {
	var b []byte
	if media == mediaJSON {
		b, _ = protojson.Marshal(m)
	} else {
		b, _ = proto.Marshal(m)
	}
	w.Header().Set("Content-Type", media)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(code)
	_, _ = w.Write(b)
}
