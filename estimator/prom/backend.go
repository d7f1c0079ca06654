package prom

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Backend names the engine behind a Prometheus-compatible query API.
type Backend string

// Backends the estimator is tested against (docs/estimator.md, "Backends").
const (
	// BackendPrometheus is Prometheus itself.
	BackendPrometheus Backend = "prometheus"
	// BackendVictoriaMetrics is VictoriaMetrics (single-node, or vmselect of a cluster).
	BackendVictoriaMetrics Backend = "victoriametrics"
	// BackendThanos is a Thanos Querier.
	BackendThanos Backend = "thanos"
	// BackendUnknown answers the API but none of the probes told what it is.
	BackendUnknown Backend = "unknown"
)

// BackendInfo is what DetectBackend found, with the evidence it rests on.
type BackendInfo struct {
	Backend Backend `json:"backend"`
	// Version is the engine's own version when it says so (Prometheus, Thanos); empty for
	// VictoriaMetrics, whose buildinfo reports a fixed Prometheus version instead.
	Version string `json:"version,omitempty"`
	// Evidence says which answer decided it.
	Evidence string `json:"evidence"`
}

// Caveat says how the backend's query semantics differ from Prometheus' in ways that touch the
// estimator, and what the querier does about them (docs/estimator.md, "Backends").
func (b BackendInfo) Caveat() string {
	switch b.Backend {
	case BackendVictoriaMetrics:
		return "MetricsQL rate/increase count from the last sample before the window and do not extrapolate; " +
			"range queries of 50 or more steps are shifted onto multiples of the step unless nocache=1, which this querier sends"
	case BackendThanos:
		return "PromQL evaluated by the querier over the store API; replica labels must be deduplicated (--query.replica-label)"
	case BackendUnknown:
		return "not a backend the estimator is tested against: results are unverified"
	}
	return ""
}

// probeTimeout bounds each detection request.
const probeTimeout = 10 * time.Second

// DetectBackend asks the API which engine serves it:
//   - GET /api/v1/status/buildinfo: Prometheus and Thanos report their version, revision and Go
//     version (Thanos with a 0.x version); VictoriaMetrics answers a fixed {"version":"2.24.0"}
//     and nothing else (app/vmselect/main.go at v1.151.0);
//   - an instant query of vector(1): VictoriaMetrics adds "stats":{"seriesFetched":...} to
//     every response (app/vmselect/prometheus/query_response.qtpl at v1.151.0), Prometheus
//     only on request and without that field;
//   - GET /api/v1/stores answers only on a Thanos Querier (pkg/api/query at v0.42.4).
//
// A transport error or a refused request is returned; an engine that answers but matches
// none of the probes is BackendUnknown.
func (h *HTTP) DetectBackend(ctx context.Context) (BackendInfo, error) {
	var bi struct {
		Status string `json:"status"`
		Data   struct {
			Version   string `json:"version"`
			Revision  string `json:"revision"`
			GoVersion string `json:"goVersion"`
		} `json:"data"`
	}
	status, err := h.getJSON(ctx, "/api/v1/status/buildinfo", nil, &bi)
	if err != nil {
		return BackendInfo{}, err
	}
	var q struct {
		Stats map[string]json.RawMessage `json:"stats"`
	}
	if _, err := h.getJSON(ctx, "/api/v1/query", url.Values{"query": {"vector(1)"}}, &q); err != nil {
		return BackendInfo{}, err
	}
	if _, ok := q.Stats["seriesFetched"]; ok {
		return BackendInfo{Backend: BackendVictoriaMetrics,
			Evidence: fmt.Sprintf("query responses carry stats.seriesFetched; buildinfo version %q", bi.Data.Version)}, nil
	}
	var stores struct {
		Status string `json:"status"`
	}
	if st, err := h.getJSON(ctx, "/api/v1/stores", nil, &stores); err == nil && st == http.StatusOK && stores.Status == "success" {
		return BackendInfo{Backend: BackendThanos, Version: bi.Data.Version,
			Evidence: fmt.Sprintf("/api/v1/stores answers; buildinfo version %q", bi.Data.Version)}, nil
	}
	if status == http.StatusOK && bi.Status == "success" && bi.Data.Revision != "" && bi.Data.GoVersion != "" && majorVersion(bi.Data.Version) >= 2 {
		return BackendInfo{Backend: BackendPrometheus, Version: bi.Data.Version,
			Evidence: fmt.Sprintf("buildinfo version %q revision %q", bi.Data.Version, bi.Data.Revision)}, nil
	}
	return BackendInfo{Backend: BackendUnknown,
		Evidence: fmt.Sprintf("buildinfo HTTP %d version %q revision %q; no VictoriaMetrics query stats; no /api/v1/stores", status, bi.Data.Version, bi.Data.Revision)}, nil
}

// getJSON GETs path with args and decodes a JSON body into into. It returns the HTTP status;
// a non-JSON body leaves into untouched, a transport error or a 401/403 is an error.
func (h *HTTP) getJSON(ctx context.Context, path string, args url.Values, into any) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	u := h.client.URL(path, nil)
	u.RawQuery = args.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, fmt.Errorf("detect backend: %w", err)
	}
	resp, body, err := h.client.Do(ctx, req)
	if err != nil {
		return 0, fmt.Errorf("detect backend: GET %s: %w", path, err)
	}
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		return resp.StatusCode, fmt.Errorf("detect backend: GET %s: %s", path, resp.Status)
	}
	_ = json.Unmarshal(body, into)
	return resp.StatusCode, nil
}

func majorVersion(v string) int {
	major, _, _ := strings.Cut(strings.TrimPrefix(v, "v"), ".")
	n, err := strconv.Atoi(major)
	if err != nil {
		return -1
	}
	return n
}

// exactSteps makes range queries evaluate at exactly the requested start, end and step on
// every backend: VictoriaMetrics rounds the start of a range query with 50 or more points
// down to a multiple of the step (and the end with it), for its rollup result cache, unless
// the request carries nocache=1 (AdjustStartEnd and alignStartEnd in
// app/vmselect/promql/eval.go, called from queryRangeHandler in
// app/vmselect/prometheus/prometheus.go, at v1.151.0). Every saturation window then ends up
// to one step before the estimator's grid point, the newest data goes unread, and the window
// set differs from Prometheus' on the same data. Prometheus and Thanos ignore the parameter.
type exactSteps struct{ base http.RoundTripper }

func (t exactSteps) RoundTrip(req *http.Request) (*http.Response, error) {
	if !strings.HasSuffix(req.URL.Path, "/api/v1/query_range") {
		return t.base.RoundTrip(req)
	}
	r := req.Clone(req.Context())
	q := r.URL.Query()
	q.Set("nocache", "1")
	r.URL.RawQuery = q.Encode()
	return t.base.RoundTrip(r)
}
