// Package kubeharness runs a real Kubernetes API server (kube-apiserver backed by etcd) for
// tests, with real authentication (static tokens, ServiceAccount tokens) and real RBAC.
//
// The binaries are built at pinned versions by `make test-components`
// (test/kubeharness/build-components.sh) into the cache directory: $GATETUNER_CACHE, or
// <module root>/.cache when the variable is unset. The server runs no controllers and no
// kubelets: objects are stored and validated, RBAC is enforced, but nothing reconciles them
// (see package deployactor for a Deployment controller stand-in). Namespaces are never
// finalized, and the aggregated ClusterRoles (admin, edit, view) have no rules because
// kube-controller-manager aggregates them: tests declare the roles they bind.
//
// One server per test:
//
//	func TestSomething(t *testing.T) {
//		env := kubeharness.Start(t, kubeharness.WithUser("alice", "devs"))
//		ctx := t.Context()
//		if err := env.CreateNamespace(ctx, "epp"); err != nil {
//			t.Fatal(err)
//		}
//		if err := env.ApplyManifests(ctx, rbacYAML); err != nil {
//			t.Fatal(err)
//		}
//		alice, err := env.ClientForUser("alice")
//		...
//	}
//
// One server shared by a package (TestMain), or by a long end-to-end test:
//
//	func TestMain(m *testing.M) {
//		flag.Parse()
//		if testing.Short() {
//			os.Exit(m.Run()) // tests needing the server skip themselves
//		}
//		env, err := kubeharness.New(context.Background(), kubeharness.Options{})
//		if err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1)
//		}
//		shared = env
//		code := m.Run()
//		env.Stop()
//		os.Exit(code)
//	}
//
// Start skips the test under `go test -short` and fails it, naming the missing binary and
// `make test-components`, when the components are absent.
package kubeharness
