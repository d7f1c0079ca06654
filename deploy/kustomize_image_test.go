package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distribution/reference"
)

// kustomizeImagePlaceholder is the image the kustomize base names: not an
// image, the name an overlay's `images:` entry replaces with yours.
const kustomizeImagePlaceholder = "SET-THE-GATETUNER-IMAGE"

// kustomizeOverlays is every overlay shipped under kustomize/overlays.
func kustomizeOverlays(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("kustomize/overlays")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, filepath.Join("kustomize/overlays", e.Name()))
		}
	}
	if len(out) == 0 {
		t.Fatal("no overlay under kustomize/overlays")
	}
	return out
}

// TestKustomizeBaseNamesNoImage: the base's only image is the placeholder,
// which is no valid image reference (upper case), so applying the base
// alone pulls nothing from any registry — its pods stop at
// InvalidImageName, naming it — and the base sets no image of its own that
// would keep an overlay's `images:` entry from matching.
func TestKustomizeBaseNamesNoImage(t *testing.T) {
	if _, err := reference.ParseNormalizedNamed(kustomizeImagePlaceholder); err == nil {
		t.Errorf("placeholder %q parses as an image reference: a registry could serve it", kustomizeImagePlaceholder)
	}
	objs := kustomizeObjects(t, kustomizeBase)
	for _, dep := range ofKind(objs, "Deployment") {
		for _, c := range deploymentOf(t, objs).Spec.Template.Spec.Containers {
			if c.Image != kustomizeImagePlaceholder {
				t.Errorf("base Deployment %s container %s: image %q, want the placeholder %q", dep.GetName(), c.Name, c.Image, kustomizeImagePlaceholder)
			}
		}
	}
}

// TestKustomizeOverlaysSetTheImage: every shipped overlay replaces the
// placeholder with an image reference pinned by a tag other than latest or
// by a digest.
func TestKustomizeOverlaysSetTheImage(t *testing.T) {
	for _, dir := range kustomizeOverlays(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			objs := kustomizeObjects(t, dir)
			for _, c := range deploymentOf(t, objs).Spec.Template.Spec.Containers {
				if msg := imageProblem(c.Image); msg != "" {
					t.Errorf("%s: container %s: image %q: %s", dir, c.Name, c.Image, msg)
				}
			}
		})
	}
}

// imageProblem says what keeps image from being an image an overlay should
// deploy, "" if nothing does.
func imageProblem(image string) string {
	if strings.Contains(image, kustomizeImagePlaceholder) {
		return "still the base's placeholder: set it with `images: - name: " + kustomizeImagePlaceholder + "`"
	}
	ref, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "not an image reference: " + err.Error()
	}
	_, tagged := ref.(reference.Tagged)
	_, digested := ref.(reference.Digested)
	switch {
	case digested:
	case !tagged:
		return "neither a tag nor a digest"
	case ref.(reference.Tagged).Tag() == "latest":
		return "tag latest"
	}
	return ""
}

// TestImageProblem pins what the overlay check accepts and refuses.
func TestImageProblem(t *testing.T) {
	cases := []struct {
		image string
		ok    bool
	}{
		{"registry.example.com/platform/gatetuner:v0.1.0", true},
		{"registry.example.com/platform/gatetuner@sha256:" + strings.Repeat("0", 64), true},
		{"localhost:5000/gatetuner:v1", true},
		{kustomizeImagePlaceholder, false},
		{"registry.example.com/" + kustomizeImagePlaceholder + ":v1", false},
		{"gatetuner", false},
		{"registry.example.com/platform/gatetuner", false},
		{"registry.example.com/platform/gatetuner:latest", false},
	}
	for _, c := range cases {
		if got := imageProblem(c.image); (got == "") != c.ok {
			t.Errorf("imageProblem(%q) = %q, want ok=%v", c.image, got, c.ok)
		}
	}
}
