package deploy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// dockerInstr is one Dockerfile instruction with continuation lines joined.
type dockerInstr struct {
	cmd  string // upper case
	args string
}

func parseDockerfile(t *testing.T, text string) []dockerInstr {
	t.Helper()
	var out []dockerInstr
	var cur strings.Builder
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, dockerInstr{cmd: strings.ToUpper(cmd), args: strings.Join(strings.Fields(args), " ")})
		cur.Reset()
	}
	return out
}

// moduleRoot is the folder holding go.mod above this package.
func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for ; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		if filepath.Dir(dir) == dir {
			t.Fatal("no go.mod above the test's folder")
		}
	}
}

// TestDockerfileBuildsTheStaticBinaryAsNonRoot checks what can be checked
// without a Docker engine: the stages, the static build of ./cmd/gatetuner
// with the Makefile's flags and the linker variables main defines, the
// distroless nonroot base and user 65532, and that every path it copies
// exists in the build context (the repository root).
func TestDockerfileBuildsTheStaticBinaryAsNonRoot(t *testing.T) {
	root := moduleRoot(t)
	text, err := os.ReadFile(dockerfilePath)
	if err != nil {
		t.Fatal(err)
	}
	ins := parseDockerfile(t, string(text))
	var froms, runs, copies, users, entry []string
	args := map[string]string{}
	for _, in := range ins {
		switch in.cmd {
		case "FROM":
			froms = append(froms, in.args)
		case "RUN":
			runs = append(runs, in.args)
		case "COPY":
			copies = append(copies, in.args)
		case "USER":
			users = append(users, in.args)
		case "ENTRYPOINT":
			entry = append(entry, in.args)
		case "ARG":
			k, v, _ := strings.Cut(in.args, "=")
			if _, seen := args[k]; !seen {
				args[k] = v
			}
		}
	}
	if len(froms) != 2 || froms[0] != "--platform=$BUILDPLATFORM ${BUILD_IMAGE} AS build" || froms[1] != "${RUNTIME_IMAGE}" {
		t.Fatalf("stages %q: want a ${BUILD_IMAGE} build stage on the build platform and a ${RUNTIME_IMAGE} stage", froms)
	}
	// The bases are build args (a release pins them by digest); by default golang at
	// GO_VERSION and distroless' nonroot static image, optionally pinned by digest.
	if b := args["BUILD_IMAGE"]; !regexp.MustCompile(`^golang:\$\{GO_VERSION\}(@sha256:[0-9a-f]{64})?$`).MatchString(b) {
		t.Errorf("BUILD_IMAGE default %q: want golang:${GO_VERSION}[@sha256:…]", b)
	}
	if r := args["RUNTIME_IMAGE"]; !regexp.MustCompile(`^gcr\.io/distroless/static:nonroot(@sha256:[0-9a-f]{64})?$`).MatchString(r) {
		t.Errorf("RUNTIME_IMAGE default %q: want gcr.io/distroless/static:nonroot[@sha256:…]", r)
	}
	// OCI labels on the final image, stamped from the final stage's own VERSION and COMMIT args
	// (an ARG declared only in the build stage would be empty there).
	final := ins[slices.IndexFunc(ins, func(in dockerInstr) bool { return in.cmd == "FROM" && in.args == froms[1] }):]
	finalArgs := map[string]bool{}
	var label string
	for _, in := range final {
		switch in.cmd {
		case "ARG":
			k, _, _ := strings.Cut(in.args, "=")
			finalArgs[k] = true
		case "LABEL":
			label += in.args + " "
		}
	}
	for _, want := range []string{`org.opencontainers.image.source="https://github.com/gatetuner/gatetuner"`,
		`org.opencontainers.image.version="${VERSION}"`, `org.opencontainers.image.revision="${COMMIT}"`,
		`org.opencontainers.image.base.name="${RUNTIME_IMAGE}"`, `org.opencontainers.image.title=`} {
		if !strings.Contains(label, want) {
			t.Errorf("the final stage's labels lack %s: %s", want, label)
		}
	}
	for _, a := range []string{"VERSION", "COMMIT", "RUNTIME_IMAGE"} {
		if !finalArgs[a] {
			t.Errorf("the final stage does not declare ARG %s, which its labels use", a)
		}
	}

	// The Go toolchain of the build stage is at least the one go.mod asks for.
	modText, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go\s+(\S+)\s*$`).FindSubmatch(modText)
	if goLine == nil {
		t.Fatal("go.mod has no go directive")
	}
	if compareVersions(args["GO_VERSION"], string(goLine[1])) < 0 {
		t.Errorf("GO_VERSION %s is older than go.mod's go %s", args["GO_VERSION"], goLine[1])
	}

	// The build: static, trimmed, stamped like `make build`.
	var build string
	for _, r := range runs {
		if strings.Contains(r, "go build") {
			build = r
		}
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "./cmd/gatetuner", "-o /out/gatetuner"} {
		if !strings.Contains(build, want) {
			t.Errorf("the go build step lacks %q: %s", want, build)
		}
	}
	ldflags := regexp.MustCompile(`-ldflags "([^"]*)"`).FindStringSubmatch(build)
	if ldflags == nil {
		t.Fatalf("no -ldflags in %s", build)
	}
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	makeFlags := regexp.MustCompile(`(?m)^LDFLAGS\s*:=\s*(.*)$`).FindSubmatch(makefile)
	normVars := regexp.MustCompile(`\$[({]([A-Z_]+)[)}]`)
	if makeFlags == nil || normVars.ReplaceAllString(string(makeFlags[1]), "$$$1") != normVars.ReplaceAllString(ldflags[1], "$$$1") {
		t.Errorf("Dockerfile ldflags %q differ from the Makefile's %q", ldflags[1], makeFlags)
	}
	for _, v := range regexp.MustCompile(`-X main\.(\w+)=`).FindAllStringSubmatch(ldflags[1], -1) {
		if !mainDeclaresString(t, filepath.Join(root, "cmd", "gatetuner"), v[1]) {
			t.Errorf("-X main.%s: package main in cmd/gatetuner declares no string variable %s", v[1], v[1])
		}
	}

	// The final image: the binary alone, run as distroless' nonroot user (the Deployment's runAsUser).
	if !slices.Contains(copies, "--from=build /out/gatetuner /gatetuner") {
		t.Errorf("the final stage does not copy /out/gatetuner from the build stage: %q", copies)
	}
	if len(users) != 1 || users[0] != "65532:65532" {
		t.Errorf("USER %q, want 65532:65532", users)
	}
	if len(entry) != 1 || entry[0] != `["/gatetuner"]` {
		t.Errorf("ENTRYPOINT %q, want [\"/gatetuner\"]", entry)
	}
	for _, c := range copies {
		if strings.HasPrefix(c, "--from=") {
			continue
		}
		fields := strings.Fields(c)
		for _, src := range fields[:len(fields)-1] {
			if strings.HasPrefix(src, "--") {
				continue
			}
			if _, err := os.Stat(filepath.Join(root, src)); err != nil {
				t.Errorf("COPY %s: not in the build context (the repository root): %v", src, err)
			}
		}
	}

	// The test-component cache (hundreds of MB) stays out of the build context.
	ignore, err := os.ReadFile(dockerfilePath + ".dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{".cache", ".git", "bin"} {
		if !slices.Contains(strings.Fields(string(ignore)), want) {
			t.Errorf("%s.dockerignore does not exclude %s", dockerfilePath, want)
		}
	}
}

// compareVersions compares dotted numeric versions ("1.26.8" < "1.27").
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(as), len(bs)); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x - y
		}
	}
	return 0
}

// mainDeclaresString reports whether the Go package in dir declares a
// package-level string variable name (what -X can set).
func mainDeclaresString(t *testing.T, dir, name string) bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range file.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if id.Name != name {
						continue
					}
					if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "string" {
						return true
					}
					if vs.Type == nil && i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							return true
						}
					}
				}
			}
		}
	}
	return false
}
