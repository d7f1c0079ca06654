package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/moby/buildkit/client/llb"
	"github.com/moby/buildkit/client/llb/sourceresolver"
	"github.com/moby/buildkit/frontend/dockerfile/dockerfile2llb"
	"github.com/moby/buildkit/solver/pb"
	"github.com/opencontainers/go-digest"
)

// offlineImages answers BuildKit's base-image lookups without a registry:
// each base is an image of the platform asked for, with one layer and only
// PATH in its environment. The lint rules read the platform
// (InvalidBaseImagePlatform) and the environment (UndefinedVar) from it.
type offlineImages struct {
	refs []string // every reference looked up, in order
}

// ResolveImageConfig implements sourceresolver.ImageMetaResolver.
func (r *offlineImages) ResolveImageConfig(_ context.Context, ref string, opt sourceresolver.Opt) (string, digest.Digest, []byte, error) {
	if opt.ImageOpt == nil || opt.ImageOpt.Platform == nil {
		return "", "", nil, fmt.Errorf("lookup of %s without a platform", ref)
	}
	r.refs = append(r.refs, ref)
	p := opt.ImageOpt.Platform
	cfg, err := json.Marshal(map[string]any{
		"os": p.OS, "architecture": p.Architecture, "variant": p.Variant,
		"config": map[string]any{"Env": []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{digest.FromString(ref).String()}},
	})
	return ref, "", cfg, err
}

// lintDockerfile runs BuildKit's full Dockerfile linter — dockerfile2llb's
// DockerfileLint, what `docker build --check` runs — with every rule on,
// the experimental ones included, over text. It returns the warnings
// (rule, message, line), the base images the linter looked up, and the
// error that stopped BuildKit converting the Dockerfile ("" if none).
func lintDockerfile(t *testing.T, text string) (warnings, bases []string, convErr string) {
	t.Helper()
	// A parser directive on top turns the experimental rules on too; it
	// moves every line down by one, which the reported lines undo.
	dt := []byte("# check=experimental=all\n" + text)
	ctx := context.Background()
	src := llb.Local("dockerfile")
	def, err := src.Marshal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sm := llb.NewSourceMap(&src, dockerfilePath, "Dockerfile", dt)
	sm.Definition = def
	images := &offlineImages{}
	res, err := dockerfile2llb.DockerfileLint(ctx, dt, dockerfile2llb.ConvertOpt{
		SourceMap:    sm,
		MetaResolver: images,
	})
	if err != nil {
		t.Fatalf("BuildKit lint: %v", err)
	}
	if res.Error != nil {
		convErr = fmt.Sprintf("%s (line %d)", res.Error.Message, firstLine(res.Error.Location.Ranges)-1)
	}
	for _, w := range res.Warnings {
		line := 0
		if w.Location != nil {
			line = firstLine(w.Location.Ranges) - 1
		}
		warnings = append(warnings, fmt.Sprintf("%s: %s (line %d, %s)", w.RuleName, w.Detail, line, w.URL))
	}
	return warnings, images.refs, convErr
}

// firstLine is the first line of BuildKit source ranges, 0 when there are none.
func firstLine(ranges []*pb.Range) int {
	if len(ranges) == 0 {
		return 0
	}
	return int(ranges[0].GetStart().GetLine())
}

// TestDockerfilePassesBuildKitLint: deploy/Dockerfile draws no warning from
// BuildKit's linter, every rule on, and the linter walked both stages (it
// looked up both bases).
func TestDockerfilePassesBuildKitLint(t *testing.T) {
	text, err := os.ReadFile(dockerfilePath)
	if err != nil {
		t.Fatal(err)
	}
	warnings, bases, convErr := lintDockerfile(t, string(text))
	if convErr != "" {
		t.Errorf("BuildKit could not convert %s: %s", dockerfilePath, convErr)
	}
	for _, w := range warnings {
		t.Errorf("%s: %s", dockerfilePath, w)
	}
	df, _, err := parseDockerfile(string(text))
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range df.stages {
		// BuildKit looks bases up by their normalized name (docker.io/library/golang…).
		if !slices.ContainsFunc(bases, func(ref string) bool { return strings.HasSuffix(ref, st.BaseName) }) {
			t.Errorf("the linter did not resolve stage %q's base %s (looked up: %q)", st.Name, st.BaseName, bases)
		}
	}
}

// TestBuildKitLintCatchesMistakes: the rules that only dockerfile2llb runs
// (not the parser) are live here — each Dockerfile draws its rule.
func TestBuildKitLintCatchesMistakes(t *testing.T) {
	const base = "FROM golang:1.26.8@sha256:6c2a5538f964f1c82f97ad14988bf05de100d922d159d0e398b54c7b0ca0c6c9"
	cases := []struct {
		rule string
		text string
	}{
		{"UndefinedVar", base + "\nWORKDIR /src/$NOT_DECLARED\n"},
		{"UndefinedArgInFrom", "FROM golang${NOT_DECLARED}:1.26.8\n"},
		{"InvalidDefaultArgInFrom", "ARG TAG\nFROM golang:${TAG}\n"},
		{"WorkdirRelativePath", base + "\nWORKDIR src\n"},
		{"JSONArgsRecommended", base + "\nENTRYPOINT /gatetuner run\n"},
		{"SecretsUsedInArgOrEnv", base + "\nARG API_TOKEN\n"},
		{"LegacyKeyValueFormat", base + "\nENV A b\n"},
		{"ConsistentInstructionCasing", base + "\nrun true\n"},
		{"DuplicateStageName", base + " AS build\n" + base + " AS build\n"},
		{"RedundantTargetPlatform", "FROM --platform=$TARGETPLATFORM golang:1.26.8\n"},
		{"InvalidDefinitionDescription", "# the builder\n" + base + " AS build\n"},
	}
	for _, c := range cases {
		t.Run(c.rule, func(t *testing.T) {
			warnings, _, _ := lintDockerfile(t, c.text)
			if !slices.ContainsFunc(warnings, func(w string) bool { return strings.HasPrefix(w, c.rule+":") }) {
				t.Errorf("BuildKit lint did not report %s for\n%s\ngot %q", c.rule, c.text, warnings)
			}
		})
	}
}
