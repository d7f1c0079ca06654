package kubeharness

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// AdminUser is the name of the harness's administrator (group system:masters).
const AdminUser = "kubeharness-admin"

// DefaultStartTimeout bounds how long New waits for etcd and the API server to become ready.
const DefaultStartTimeout = 2 * time.Minute

// logTailLines is how many log lines error messages and failure reports include.
const logTailLines = 40

// User is a static user authenticated by a bearer token (the API server's token auth file).
type User struct {
	// Name is the user name RBAC subjects refer to (kind: User).
	Name string
	// Groups are the user's groups (kind: Group subjects).
	Groups []string
	// Token is the bearer token; a random one is generated when empty.
	Token string
}

// Options configures the API server started by New or Start.
type Options struct {
	// Users are static users besides the administrator; reach them with ClientForUser.
	Users []User
	// StartTimeout bounds startup; DefaultStartTimeout when zero.
	StartTimeout time.Duration
	// APIServerFlags are extra kube-apiserver flags, appended after the harness's own.
	APIServerFlags []string
	// Binaries overrides the component paths; FindBinaries is used when zero.
	Binaries Binaries
	// Logger receives progress messages; slog.Default() when nil.
	Logger *slog.Logger
}

// Option changes Options; used with Start.
type Option func(*Options)

// WithUser declares a static user with the given groups and a generated token.
func WithUser(name string, groups ...string) Option {
	return func(o *Options) { o.Users = append(o.Users, User{Name: name, Groups: groups}) }
}

// WithUsers declares static users with explicit tokens and groups.
func WithUsers(users ...User) Option {
	return func(o *Options) { o.Users = append(o.Users, users...) }
}

// WithStartTimeout bounds startup.
func WithStartTimeout(d time.Duration) Option {
	return func(o *Options) { o.StartTimeout = d }
}

// WithAPIServerFlags appends kube-apiserver flags.
func WithAPIServerFlags(flags ...string) Option {
	return func(o *Options) { o.APIServerFlags = append(o.APIServerFlags, flags...) }
}

// WithLogger sets the progress logger.
func WithLogger(l *slog.Logger) Option {
	return func(o *Options) { o.Logger = l }
}

// Env is a running etcd + kube-apiserver pair and clients for it.
type Env struct {
	// Config is the administrator's client configuration (group system:masters).
	Config *rest.Config
	// Client is the administrator's typed client.
	Client kubernetes.Interface
	// Dir is the temporary directory holding data, certificates and logs; removed by Stop.
	Dir string
	// URL is the API server's https URL.
	URL string
	// StartupTime is how long New took from launching etcd to the API server being ready.
	StartupTime time.Duration

	users      map[string]User
	kubeconfig string
	etcd       *process
	apiserver  *process
	log        *slog.Logger
	stopOnce   sync.Once

	applyMu sync.Mutex
	applier *applier
}

// New starts etcd and kube-apiserver on free loopback ports in a new temporary directory and
// waits until the API server is ready. The caller must call Stop.
func New(ctx context.Context, opts Options) (*Env, error) {
	if opts.Binaries == (Binaries{}) {
		b, err := FindBinaries()
		if err != nil {
			return nil, err
		}
		opts.Binaries = b
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	// Free ports are picked by binding and releasing them; another process can grab one in
	// between, so a start that fails on a taken address is retried with fresh ports.
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		env, err := start(ctx, opts)
		if err == nil {
			return env, nil
		}
		lastErr = err
		if !errors.Is(err, errAddressInUse) {
			break
		}
		opts.Logger.Info("kubeharness: port taken, retrying with fresh ports", "attempt", attempt+1)
	}
	return nil, lastErr
}

var errAddressInUse = errors.New("address already in use")

func start(ctx context.Context, opts Options) (_ *Env, retErr error) {
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	began := time.Now()

	removeStaleDirs(opts.Logger)
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		return nil, fmt.Errorf("create harness dir: %w", err)
	}
	if err := writeFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid()))); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	e := &Env{Dir: dir, users: map[string]User{}, log: opts.Logger}
	defer func() {
		if retErr != nil {
			e.Stop()
		}
	}()

	certs, err := writePKI(dir)
	if err != nil {
		return nil, err
	}
	adminToken, err := randomToken()
	if err != nil {
		return nil, err
	}
	tokenFile := filepath.Join(dir, "tokens.csv")
	if err := e.writeTokenFile(tokenFile, adminToken, opts.Users); err != nil {
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	etcdClientURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	etcdPeerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	securePort := ports[2]
	e.URL = "https://127.0.0.1:" + strconv.Itoa(securePort)

	e.etcd, err = startProcess("etcd", opts.Binaries.Etcd, filepath.Join(dir, "etcd.log"), []string{
		"--name=kubeharness",
		"--data-dir=" + filepath.Join(dir, "etcd"),
		"--listen-client-urls=" + etcdClientURL,
		"--advertise-client-urls=" + etcdClientURL,
		"--listen-peer-urls=" + etcdPeerURL,
		"--initial-advertise-peer-urls=" + etcdPeerURL,
		"--initial-cluster=kubeharness=" + etcdPeerURL,
		// Throwaway data: skip fsync so a loaded machine does not stall the test.
		"--unsafe-no-fsync",
	})
	if err != nil {
		return nil, err
	}
	if err := waitEtcd(ctx, e.etcd, etcdClientURL); err != nil {
		return nil, e.startError("etcd", e.etcd, err)
	}

	args := []string{
		"--etcd-servers=" + etcdClientURL,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(securePort),
		"--cert-dir=" + filepath.Join(dir, "apiserver-certs"),
		"--tls-cert-file=" + certs.servingCertFile,
		"--tls-private-key-file=" + certs.servingKeyFile,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + certs.saPublicKeyFile,
		"--service-account-signing-key-file=" + certs.saPrivateKeyFile,
		"--token-auth-file=" + tokenFile,
		"--authorization-mode=RBAC",
		"--service-cluster-ip-range=10.0.0.0/24",
		"--profiling=false",
	}
	args = append(args, opts.APIServerFlags...)
	e.apiserver, err = startProcess("kube-apiserver", opts.Binaries.APIServer, filepath.Join(dir, "kube-apiserver.log"), args)
	if err != nil {
		return nil, err
	}

	e.Config = &rest.Config{
		Host:            e.URL,
		BearerToken:     adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: certs.caPEM},
		QPS:             200,
		Burst:           400,
		Timeout:         30 * time.Second,
	}
	if err := waitReady(ctx, e.apiserver, e.URL, adminToken, certs.caPEM); err != nil {
		return nil, e.startError("kube-apiserver", e.apiserver, err)
	}
	e.Client, err = kubernetes.NewForConfig(e.Config)
	if err != nil {
		return nil, fmt.Errorf("admin client: %w", err)
	}
	// The bootstrap controller creates the default namespace shortly after /readyz passes.
	if err := pollUntil(ctx, 100*time.Millisecond, func() (bool, error) {
		_, err := e.Client.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		return nil, e.startError("kube-apiserver", e.apiserver, fmt.Errorf("namespace default never appeared: %w", err))
	}
	if err := e.writeKubeconfig(); err != nil {
		return nil, err
	}
	e.StartupTime = time.Since(began)
	e.log.Info("kubeharness: API server ready", "url", e.URL, "startup", e.StartupTime.Round(time.Millisecond), "dir", dir)
	return e, nil
}

// startError wraps a startup failure with the tail of the component's log.
func (e *Env) startError(name string, p *process, err error) error {
	tail := tailFile(p.logPath, logTailLines)
	if strings.Contains(tail, "address already in use") {
		err = fmt.Errorf("%w: %w", errAddressInUse, err)
	}
	return fmt.Errorf("start %s: %w\n--- last %d lines of %s ---\n%s", name, err, logTailLines, p.logPath, tail)
}

func (e *Env) writeTokenFile(path, adminToken string, users []User) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s,%s,%s,\"system:masters\"\n", adminToken, AdminUser, AdminUser)
	for _, u := range users {
		if u.Name == "" || u.Name == AdminUser {
			return fmt.Errorf("static user name %q is empty or reserved", u.Name)
		}
		if _, dup := e.users[u.Name]; dup {
			return fmt.Errorf("static user %q declared twice", u.Name)
		}
		if u.Token == "" {
			t, err := randomToken()
			if err != nil {
				return err
			}
			u.Token = t
		}
		for _, field := range append([]string{u.Token, u.Name}, u.Groups...) {
			if strings.ContainsAny(field, ",\"\n") {
				return fmt.Errorf("static user %q: token, name and groups must not contain commas, quotes or newlines", u.Name)
			}
		}
		e.users[u.Name] = u
		fmt.Fprintf(&b, "%s,%s,%s,\"%s\"\n", u.Token, u.Name, u.Name, strings.Join(u.Groups, ","))
	}
	return writeFile(path, []byte(b.String()))
}

func (e *Env) writeKubeconfig() error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubeharness"] = &clientcmdapi.Cluster{Server: e.URL, CertificateAuthorityData: e.Config.CAData}
	cfg.AuthInfos[AdminUser] = &clientcmdapi.AuthInfo{Token: e.Config.BearerToken}
	cfg.Contexts["kubeharness"] = &clientcmdapi.Context{Cluster: "kubeharness", AuthInfo: AdminUser, Namespace: metav1.NamespaceDefault}
	for name, u := range e.users {
		cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: u.Token}
		cfg.Contexts[name] = &clientcmdapi.Context{Cluster: "kubeharness", AuthInfo: name, Namespace: metav1.NamespaceDefault}
	}
	cfg.CurrentContext = "kubeharness"
	e.kubeconfig = filepath.Join(e.Dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, e.kubeconfig); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

// Kubeconfig returns the path of a kubeconfig file for tools (e.g. kubectl --kubeconfig):
// context "kubeharness" is the administrator, and each static user has a context of its name.
func (e *Env) Kubeconfig() string { return e.kubeconfig }

// ConfigForToken returns a client configuration authenticating with the bearer token only.
func (e *Env) ConfigForToken(token string) *rest.Config {
	cfg := rest.AnonymousClientConfig(e.Config)
	cfg.BearerToken = token
	return cfg
}

// ConfigForUser returns the client configuration of a static user declared in Options.
func (e *Env) ConfigForUser(name string) (*rest.Config, error) {
	u, ok := e.users[name]
	if !ok {
		return nil, fmt.Errorf("static user %q not declared in kubeharness Options", name)
	}
	return e.ConfigForToken(u.Token), nil
}

// ClientForUser returns a typed client for a static user declared in Options.
func (e *Env) ClientForUser(name string) (kubernetes.Interface, error) {
	cfg, err := e.ConfigForUser(name)
	if err != nil {
		return nil, err
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for user %q: %w", name, err)
	}
	return c, nil
}

// ServiceAccountTokenTTL is the lifetime of tokens minted by ServiceAccountClient.
const ServiceAccountTokenTTL = time.Hour

// ServiceAccountClient creates the ServiceAccount ns/name if needed, mints a token for it
// through the TokenRequest API and returns a client and configuration using that token.
func (e *Env) ServiceAccountClient(ctx context.Context, ns, name string) (kubernetes.Interface, *rest.Config, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if _, err := e.Client.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, nil, fmt.Errorf("create serviceaccount %s/%s: %w", ns, name, err)
	}
	ttl := int64(ServiceAccountTokenTTL / time.Second)
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl}}
	tr, err := e.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, tr, metav1.CreateOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("request token for serviceaccount %s/%s: %w", ns, name, err)
	}
	cfg := e.ConfigForToken(tr.Status.Token)
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("client for serviceaccount %s/%s: %w", ns, name, err)
	}
	return c, cfg, nil
}

// CreateNamespace creates the namespace; an existing one is not an error.
func (e *Env) CreateNamespace(ctx context.Context, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := e.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

// LogTails returns the last n lines of the etcd and kube-apiserver logs.
func (e *Env) LogTails(n int) string {
	var b strings.Builder
	for _, p := range []*process{e.etcd, e.apiserver} {
		if p == nil {
			continue
		}
		fmt.Fprintf(&b, "--- last %d lines of %s ---\n%s\n", n, p.logPath, tailFile(p.logPath, n))
	}
	return b.String()
}

// Stop kills the API server and etcd and removes the temporary directory. Safe to call twice.
func (e *Env) Stop() {
	e.stopOnce.Do(func() {
		if e.apiserver != nil {
			e.apiserver.stop(5 * time.Second)
		}
		if e.etcd != nil {
			e.etcd.stop(5 * time.Second)
		}
		if e.Dir != "" {
			if err := os.RemoveAll(e.Dir); err != nil {
				e.log.Warn("kubeharness: remove harness dir", "dir", e.Dir, "err", err)
			}
		}
	})
}

// dirPrefix names harness directories under os.TempDir(); ownerFile inside holds the pid of
// the process that made it.
const (
	dirPrefix = "kubeharness-"
	ownerFile = "owner.pid"
)

// removeStaleDirs removes harness directories left by processes that died without cleaning
// up (a test binary killed by -timeout); their components died with them (Pdeathsig).
func removeStaleDirs(log *slog.Logger) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || processAlive(pid) {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			log.Warn("kubeharness: remove stale harness dir", "dir", dir, "err", err)
		}
	}
}

// freePorts returns n distinct free TCP ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick free port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// pollUntil calls cond every interval until it returns true, an error, or ctx ends.
func pollUntil(ctx context.Context, interval time.Duration, cond func() (bool, error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

func waitEtcd(ctx context.Context, p *process, clientURL string) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	var last string
	err := pollUntil(ctx, 50*time.Millisecond, func() (bool, error) {
		if err := p.exitErr(); err != nil {
			return false, err
		}
		status, body, err := get(ctx, hc, clientURL+"/health", "")
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = fmt.Sprintf("HTTP %d: %s", status, body)
		return status == http.StatusOK && strings.Contains(body, `"health":"true"`), nil
	})
	if err != nil {
		return fmt.Errorf("etcd not healthy: %w (last probe: %s)", err, last)
	}
	return nil
}

func waitReady(ctx context.Context, p *process, url, token string, caPEM []byte) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	hc := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
	}
	defer hc.CloseIdleConnections()
	var last string
	err := pollUntil(ctx, 100*time.Millisecond, func() (bool, error) {
		if err := p.exitErr(); err != nil {
			return false, err
		}
		status, body, err := get(ctx, hc, url+"/readyz?verbose", token)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = fmt.Sprintf("HTTP %d: %s", status, failedChecks(body))
		return status == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("/readyz not ok: %w (last probe: %s)", err, last)
	}
	return nil
}

// failedChecks keeps the failing lines of a verbose /readyz body.
func failedChecks(body string) string {
	var failed []string
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "[-]") {
			failed = append(failed, line)
		}
	}
	if len(failed) == 0 {
		return strings.TrimSpace(body)
	}
	return strings.Join(failed, "; ")
}

func get(ctx context.Context, hc *http.Client, url, token string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return resp.StatusCode, "", err
	}
	return resp.StatusCode, string(body), nil
}
