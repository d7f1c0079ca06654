package deploy

import (
	"fmt"
	"go/ast"
	goparser "go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// dockerInstr is one Dockerfile instruction as BuildKit's parser reads it
// (continuation lines joined, flags kept).
type dockerInstr struct {
	cmd  string // upper case
	args string
}

// dockerfile is a Dockerfile parsed by BuildKit's frontend.
type dockerfile struct {
	ins      []dockerInstr
	stages   []instructions.Stage
	metaArgs []instructions.ArgCommand
}

// parseDockerfile parses text with BuildKit's Dockerfile parser and
// instruction parser, running BuildKit's linter rules; lint are the parser
// warnings and rule violations `docker build --check` would print.
func parseDockerfile(text string) (df dockerfile, lint []string, err error) {
	res, err := parser.Parse(strings.NewReader(text))
	if err != nil {
		return df, nil, fmt.Errorf("BuildKit parser: %w", err)
	}
	for _, w := range res.Warnings {
		lint = append(lint, fmt.Sprintf("parser: %s (line %d)", w.Short, w.Location.Start.Line))
	}
	lt := linter.New(&linter.Config{Warn: func(rule, desc, url, msg string, loc []parser.Range) {
		line := 0
		if len(loc) > 0 {
			line = loc[0].Start.Line
		}
		lint = append(lint, fmt.Sprintf("%s: %s (line %d, %s)", rule, msg, line, url))
	}})
	df.stages, df.metaArgs, err = instructions.Parse(res.AST, lt)
	if err != nil {
		return df, lint, fmt.Errorf("BuildKit instructions: %w", err)
	}
	if err := lt.Error(); err != nil {
		return df, lint, err
	}
	for _, n := range res.AST.Children {
		_, args, _ := strings.Cut(strings.TrimSpace(n.Original), " ")
		df.ins = append(df.ins, dockerInstr{cmd: strings.ToUpper(n.Value), args: strings.Join(strings.Fields(args), " ")})
	}
	return df, lint, nil
}

// TestDockerfileLintCatchesMistakes: the BuildKit checks above are live — a
// Dockerfile with mixed-case stage keywords fails them.
func TestDockerfileLintCatchesMistakes(t *testing.T) {
	_, lint, err := parseDockerfile("FROM golang:1.26 as Build\nRUN true\nFROM scratch\nMAINTAINER x\n")
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(lint, "\n")
	for _, rule := range []string{"FromAsCasing", "StageNameCasing", "MaintainerDeprecated"} {
		if !strings.Contains(joined, rule) {
			t.Errorf("BuildKit lint did not report %s:\n%s", rule, joined)
		}
	}
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
	df, lint, err := parseDockerfile(string(text))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lint {
		t.Errorf("%s: %s", dockerfilePath, l)
	}
	ins := df.ins
	if len(df.stages) != 2 || df.stages[0].Name != "build" || df.stages[1].BaseName != "${RUNTIME_IMAGE}" {
		t.Errorf("BuildKit stages %+v: want build and a ${RUNTIME_IMAGE} stage", df.stages)
	}
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

	checkBuildContext(t, root, copies)
}

// checkBuildContext reads the Dockerfile's .dockerignore as BuildKit does
// (moby/patternmatcher and its ignorefile reader): the test-component cache
// (hundreds of MB), .git and build outputs stay out of the context, and
// nothing the build copies or compiles is excluded.
func checkBuildContext(t *testing.T, root string, copies []string) {
	t.Helper()
	f, err := os.Open(dockerfilePath + ".dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	m, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatalf("%s.dockerignore: %v", dockerfilePath, err)
	}
	excluded := func(p string) bool {
		ok, err := m.MatchesOrParentMatches(p)
		if err != nil {
			t.Fatalf("match %s: %v", p, err)
		}
		return ok
	}
	for _, p := range []string{".cache/bin/kube-v1.37.2/kube-apiserver", ".git/HEAD", "bin/gatetuner", "gatetuner", "deploy/deploy.test"} {
		if !excluded(p) {
			t.Errorf("%s.dockerignore keeps %s in the build context", dockerfilePath, p)
		}
	}
	needed := []string{"go.mod", "go.sum"}
	for _, c := range copies {
		if strings.HasPrefix(c, "--from=") {
			continue
		}
		fields := strings.Fields(c)
		for _, src := range fields[:len(fields)-1] {
			if !strings.HasPrefix(src, "--") && src != "." {
				needed = append(needed, src)
			}
		}
	}
	// Every Go source of the binary's packages (COPY . . brings them).
	cmd := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.Dir}}{{range .GoFiles}} {{.}}{{end}}{{end}}", "./cmd/gatetuner")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux") // the image's build
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list ./cmd/gatetuner: %v\n%s", err, stderr)
	}
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 || !strings.HasPrefix(fields[0], root+string(filepath.Separator)) {
			continue // a module dependency, not in the context
		}
		rel, _ := filepath.Rel(root, fields[0])
		for _, g := range fields[1:] {
			needed = append(needed, filepath.ToSlash(filepath.Join(rel, g)))
		}
	}
	for _, p := range needed {
		if excluded(p) {
			t.Errorf("%s.dockerignore excludes %s, which the build needs", dockerfilePath, p)
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
		file, err := goparser.ParseFile(fset, f, nil, goparser.SkipObjectResolution)
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
