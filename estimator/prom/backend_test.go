package prom_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"

	"github.com/gatetuner/gatetuner/estimator/prom"
)

// backendServer answers the three detection probes with the given bodies ("" → 404), or
// every request with status when it is not 0.
func backendServer(t *testing.T, buildinfo, query, stores string, status int) *prom.HTTP {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if status != 0 {
			w.WriteHeader(status)
			return
		}
		body := map[string]string{"/api/v1/status/buildinfo": buildinfo, "/api/v1/query": query, "/api/v1/stores": stores}[r.URL.Path]
		if body == "" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	q, err := prom.NewHTTP(prom.HTTPConfig{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.Close)
	return q
}

const vector1 = `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"1"]}]}}`

func TestDetectBackendFromWhatEachServes(t *testing.T) {
	for _, tc := range []struct {
		name                      string
		buildinfo, query, stores  string
		want                      prom.Backend
		wantVersion, wantEvidence string
	}{
		{"prometheus", `{"status":"success","data":{"version":"2.42.0","revision":"abc","goVersion":"go1.19"}}`, vector1, "",
			prom.BackendPrometheus, "2.42.0", "revision"},
		{"victoriametrics", `{"status":"success","data":{"version":"2.24.0"}}`,
			strings.TrimSuffix(vector1, "}") + `,"stats":{"seriesFetched":"0","executionTimeMsec":0}}`, "",
			prom.BackendVictoriaMetrics, "", "seriesFetched"},
		{"thanos", `{"status":"success","data":{"version":"0.42.4","revision":"","goVersion":"go1.26"}}`, vector1,
			`{"status":"success","data":{"sidecar":[{"name":"127.0.0.1:1","lastError":null}]}}`,
			prom.BackendThanos, "0.42.4", "/api/v1/stores"},
		{"unknown: no buildinfo", "", vector1, "", prom.BackendUnknown, "", "HTTP 404"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info, err := backendServer(t, tc.buildinfo, tc.query, tc.stores, 0).DetectBackend(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if info.Backend != tc.want || info.Version != tc.wantVersion || !strings.Contains(info.Evidence, tc.wantEvidence) {
				t.Errorf("got %+v, want %s version %q with evidence naming %q", info, tc.want, tc.wantVersion, tc.wantEvidence)
			}
			if (info.Caveat() == "") != (tc.want == prom.BackendPrometheus) {
				t.Errorf("caveat %q for %s", info.Caveat(), tc.want)
			}
		})
	}
}

func TestDetectBackendRefusedIsAnError(t *testing.T) {
	_, err := backendServer(t, "", "", "", http.StatusUnauthorized).DetectBackend(context.Background())
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("error %v, want one naming the 401", err)
	}
}

func TestRangeQueriesAskForExactSteps(t *testing.T) {
	got := map[string]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		got[r.URL.Path] = r.Form.Get("nocache")
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "query_range") {
			_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"matrix","result":[]}}`))
			return
		}
		_, _ = w.Write([]byte(vector1))
	}))
	defer srv.Close()
	q, err := prom.NewHTTP(prom.HTTPConfig{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	at := time.Unix(1_700_000_000, 0)
	if _, _, err := q.QueryRange(ctx, "up", v1.Range{Start: at.Add(-time.Hour), End: at, Step: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := q.Query(ctx, "up", at); err != nil {
		t.Fatal(err)
	}
	if got["/api/v1/query_range"] != "1" || got["/api/v1/query"] != "" {
		t.Errorf("nocache by path %v: want 1 on query_range only", got)
	}
}
