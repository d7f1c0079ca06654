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
	if len(df.stages) != 2 || df.stages[0].Name != "build" {
		t.Errorf("BuildKit stages %+v: want a build stage and the final stage", df.stages)
	}
	var froms, runs, copies, users, entry []string
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
		}
	}
	// The bases, pinned by digest: golang on the build platform, distroless' nonroot static image.
	buildFrom := regexp.MustCompile(`^--platform=\$BUILDPLATFORM golang:(\d+\.\d+\.\d+)@sha256:[0-9a-f]{64} AS build$`)
	runtimeFrom := regexp.MustCompile(`^(gcr\.io/distroless/static-debian12:nonroot)@sha256:[0-9a-f]{64}$`)
	if len(froms) != 2 || !buildFrom.MatchString(froms[0]) || !runtimeFrom.MatchString(froms[1]) {
		t.Fatalf("stages %q: want golang:X.Y.Z@sha256:… on the build platform AS build, then gcr.io/distroless/static-debian12:nonroot@sha256:…", froms)
	}
	goVersion := buildFrom.FindStringSubmatch(froms[0])[1]
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
		`org.opencontainers.image.base.name="` + runtimeFrom.FindStringSubmatch(froms[1])[1] + `"`, `org.opencontainers.image.title=`} {
		if !strings.Contains(label, want) {
			t.Errorf("the final stage's labels lack %s: %s", want, label)
		}
	}
	for _, a := range []string{"VERSION", "COMMIT"} {
		if !finalArgs[a] {
			t.Errorf("the final stage does not declare ARG %s, which its labels use", a)
		}
	}

	// The Go toolchain of the build stage is at least the one go.mod asks for
	// (the official image sets GOTOOLCHAIN=local: it will not fetch a newer one).
	modText, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go\s+(\S+)\s*$`).FindSubmatch(modText)
	if goLine == nil {
		t.Fatal("go.mod has no go directive")
	}
	if compareVersions(goVersion, string(goLine[1])) < 0 {
		t.Errorf("the build stage's golang:%s is older than go.mod's go %s", goVersion, goLine[1])
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

// pinnedDigest matches an image reference pinned by digest.
var pinnedDigest = regexp.MustCompile(`@sha256:[0-9a-f]{64}$`)

// unpinnedBases lists the stages of a Dockerfile whose base image is not
// pinned by digest: a stage built on an earlier stage or on scratch needs
// none; an image given by tag, by build argument or by a malformed digest is
// reported.
func unpinnedBases(t *testing.T, text string) []string {
	t.Helper()
	df, _, err := parseDockerfile(text)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	var earlier []string
	for _, st := range df.stages {
		switch {
		case slices.Contains(earlier, strings.ToLower(st.BaseName)), st.BaseName == "scratch":
		case !pinnedDigest.MatchString(st.BaseName):
			out = append(out, fmt.Sprintf("FROM %s (line %d)", st.BaseName, st.Location[0].Start.Line))
		}
		if st.Name != "" {
			earlier = append(earlier, strings.ToLower(st.Name))
		}
	}
	return out
}

// TestDockerfileBasesArePinnedByDigest: every image deploy/Dockerfile builds
// on is pinned by digest, and the check refuses a base given by tag or by a
// build argument.
func TestDockerfileBasesArePinnedByDigest(t *testing.T) {
	text, err := os.ReadFile(dockerfilePath)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range unpinnedBases(t, string(text)) {
		t.Errorf("%s: base image not pinned by digest: %s", dockerfilePath, u)
	}
	const digest = "@sha256:6c2a5538f964f1c82f97ad14988bf05de100d922d159d0e398b54c7b0ca0c6c9"
	cases := []struct {
		name     string
		text     string
		unpinned int
	}{
		{"by digest", "FROM golang:1.26.8" + digest + " AS build\nFROM build\nFROM scratch\n", 0},
		{"by tag", "FROM golang:1.26.8 AS build\nFROM scratch\n", 1},
		{"by build argument", "ARG IMAGE=golang:1.26.8" + digest + "\nFROM ${IMAGE}\n", 1},
		{"short digest", "FROM golang:1.26.8@sha256:6c2a5538\n", 1},
		{"second stage by tag", "FROM golang:1.26.8" + digest + " AS build\nFROM gcr.io/distroless/static-debian12:nonroot\n", 1},
	}
	for _, c := range cases {
		if got := unpinnedBases(t, c.text); len(got) != c.unpinned {
			t.Errorf("%s: unpinned %q, want %d", c.name, got, c.unpinned)
		}
	}
}
