package receiver

import (
	"context"
	"fmt"
	"net"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/encoding/gzip" // the OTLP exporters' gzip compressor
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// rawRequest is a request's bytes, decoded by the handler itself.
type rawRequest struct{ b []byte }

// serverCodec hands requests over undecoded and encodes replies as
// protobuf: grpc answers a message its codec cannot decode with Internal,
// and a malformed export must be InvalidArgument.
type serverCodec struct{}

func (serverCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("span receiver: cannot encode %T", v)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("span receiver: encode reply: %w", err)
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (serverCodec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*rawRequest)
	if !ok {
		return fmt.Errorf("span receiver: cannot decode into %T", v)
	}
	r.b = data.Materialize()
	return nil
}

func (serverCodec) Name() string { return "proto" }

// The service is described here rather than registered through the
// generated RegisterTraceServiceServer so that the token and the decode
// slot are checked before the message is read and decoded.
func (r *Receiver) newGRPCServer() *grpc.Server {
	s := grpc.NewServer(
		grpc.ForceServerCodecV2(serverCodec{}),
		grpc.MaxRecvMsgSize(int(r.cfg.MaxDecodedBytes)),
		grpc.MaxConcurrentStreams(uint32(2*r.cfg.MaxConcurrent)),
		grpc.ConnectionTimeout(10*time.Second),
	)
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "opentelemetry.proto.collector.trace.v1.TraceService",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Export",
			Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				return r.exportGRPC(ctx, dec)
			},
		}},
		Metadata: "opentelemetry/proto/collector/trace/v1/trace_service.proto",
	}, r)
	return s
}

func (r *Receiver) exportGRPC(ctx context.Context, dec func(any) error) (any, error) {
	r.requests.Add(1)
	md, _ := metadata.FromIncomingContext(ctx)
	auth := ""
	if v := md.Get("authorization"); len(v) > 0 {
		auth = v[0]
	}
	if !r.authorized(auth) {
		r.refuse(RefusedAuth)
		return nil, status.Error(codes.Unauthenticated, "span receiver: missing or wrong bearer token")
	}
	if !r.acquire() {
		r.refuse(RefusedBusy)
		return nil, r.throttled("span receiver: busy")
	}
	defer r.release()
	var raw rawRequest
	if err := dec(&raw); err != nil {
		if status.Code(err) == codes.ResourceExhausted {
			r.refuse(RefusedTooLarge)
		}
		return nil, err
	}
	req := &coltracepb.ExportTraceServiceRequest{}
	if err := proto.Unmarshal(raw.b, req); err != nil {
		r.refuse(RefusedMalformed)
		return nil, status.Error(codes.InvalidArgument, "span receiver: not an ExportTraceServiceRequest: "+err.Error())
	}
	res, msg, ok := r.export(req, peerAddr(ctx))
	if !ok {
		return nil, r.throttled(msg)
	}
	return res, nil
}

// throttled is ResourceExhausted with RetryInfo, which the OTLP exporters
// read as "retry after the delay".
func (r *Receiver) throttled(msg string) error {
	st := status.New(codes.ResourceExhausted, msg)
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(r.cfg.RetryAfter)}); err == nil {
		st = d
	}
	return st.Err()
}

func peerAddr(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	if h, _, err := net.SplitHostPort(p.Addr.String()); err == nil {
		return h
	}
	return p.Addr.String()
}

// export ingests a decoded request for a peer. ok is false when the peer is
// throttled (msg says so); otherwise the response carries partial success
// when some gate spans were rejected.
func (r *Receiver) export(req *coltracepb.ExportTraceServiceRequest, from string) (*coltracepb.ExportTraceServiceResponse, string, bool) {
	n := 0
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			n += len(ss.GetSpans())
		}
	}
	if !r.peers.allow(from, n, time.Now()) {
		r.refuse(RefusedThrottled)
		r.dropped.Add(uint64(n))
		return nil, fmt.Sprintf("span receiver: %s over %v spans/s", from, r.cfg.PeerSpansPerSecond), false
	}
	in, err := r.set.Ingest(req)
	if err != nil {
		r.persistErrs.Add(1)
	}
	res := &coltracepb.ExportTraceServiceResponse{}
	if rej := in.Rejected(); rej > 0 {
		res.PartialSuccess = &coltracepb.ExportTracePartialSuccess{
			RejectedSpans: int64(rej),
			ErrorMessage:  rejectionMessage(&in),
		}
	}
	return res, "", true
}
