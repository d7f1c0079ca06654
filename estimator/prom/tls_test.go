package prom_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gatetuner/gatetuner/estimator/prom"
)

// testCA issues certificates for TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "gatetuner test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns PEM cert and key for cn; server certs get cn as DNS name.
func (ca *testCA) issue(t *testing.T, serial int64, cn string, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = []string{cn}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestHTTPOverMutualTLS(t *testing.T) {
	ca := newTestCA(t)
	srvCert, srvKey := ca.issue(t, 2, "prometheus.monitoring.svc", true)
	pair, err := tls.X509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	var mu sync.Mutex
	var clientCNs []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		clientCNs = append(clientCNs, r.TLS.PeerCertificates[0].Subject.CommonName)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, okVector)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected below
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())

	dir := t.TempDir()
	caFile, certFile, keyFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writeFile(t, caFile, ca.pem)
	c1, k1 := ca.issue(t, 3, "gatetuner-1", false)
	writeFile(t, certFile, c1)
	writeFile(t, keyFile, k1)

	newQ := func(tlsCfg prom.TLSConfig) *prom.HTTP {
		t.Helper()
		q, err := prom.NewHTTP(prom.HTTPConfig{Address: "https://127.0.0.1:" + port, TLS: tlsCfg, Retry: fastRetry(1), Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(q.Close)
		return q
	}
	ctx := context.Background()

	q := newQ(prom.TLSConfig{CAFile: caFile, ServerName: "prometheus.monitoring.svc", CertFile: certFile, KeyFile: keyFile})
	if _, _, err := q.Query(ctx, "up", time.Now()); err != nil {
		t.Fatal(err)
	}
	// Rotate the client certificate in place; new connections present it.
	c2, k2 := ca.issue(t, 4, "gatetuner-2", false)
	writeFile(t, certFile, c2)
	writeFile(t, keyFile, k2)
	q2 := newQ(prom.TLSConfig{CAFile: caFile, ServerName: "prometheus.monitoring.svc", CertFile: certFile, KeyFile: keyFile})
	q.Close() // drop the pooled connection so the next query handshakes again
	if _, _, err := q.Query(ctx, "up", time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := q2.Query(ctx, "up", time.Now()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := append([]string(nil), clientCNs...)
	mu.Unlock()
	if len(got) != 3 || got[0] != "gatetuner-1" || got[1] != "gatetuner-2" || got[2] != "gatetuner-2" {
		t.Fatalf("server saw client certificates %v, want gatetuner-1 then the rotated gatetuner-2", got)
	}

	// Without our CA the server certificate is refused, and that is not retried.
	noCA := newQ(prom.TLSConfig{ServerName: "prometheus.monitoring.svc", CertFile: certFile, KeyFile: keyFile})
	_, _, err = noCA.Query(ctx, "up", time.Now())
	if !errors.Is(err, prom.ErrRejected) {
		t.Fatalf("unknown CA: got %v, want ErrRejected", err)
	}
	// The wrong server name is refused too.
	wrongName := newQ(prom.TLSConfig{CAFile: caFile, ServerName: "other.svc", CertFile: certFile, KeyFile: keyFile})
	if _, _, err := wrongName.Query(ctx, "up", time.Now()); !errors.Is(err, prom.ErrRejected) {
		t.Fatalf("wrong server name: got %v, want ErrRejected", err)
	}
	// InsecureSkipVerify accepts it.
	insecure := newQ(prom.TLSConfig{InsecureSkipVerify: true, CertFile: certFile, KeyFile: keyFile})
	if _, _, err := insecure.Query(ctx, "up", time.Now()); err != nil {
		t.Fatalf("insecureSkipVerify: %v", err)
	}
}
