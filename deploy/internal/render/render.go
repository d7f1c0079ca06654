// Package render builds the deploy manifests the way users do — kustomize
// (sigs.k8s.io/kustomize/api krusty) and helm template (helm.sh/helm/v3
// engine) — from their Go modules, and decodes the output.
package render

import (
	"bytes"
	"fmt"
	"path"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Kustomize runs `kustomize build dir` with the default options (load
// restrictions on: a kustomization reads nothing outside its own folder).
func Kustomize(dir string) ([]byte, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: encode: %w", dir, err)
	}
	return out, nil
}

// HelmRelease names the release a chart is rendered for.
type HelmRelease struct {
	Name      string
	Namespace string
	// Values override the chart's values.yaml, as `helm template -f` would.
	Values map[string]any
}

// renderFiles renders every template of chartDir for rel, keyed by path.
func renderFiles(chartDir string, rel HelmRelease) (map[string]string, error) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", chartDir, err)
	}
	if rel.Values == nil {
		rel.Values = map[string]any{}
	}
	vals, err := chartutil.ToRenderValues(chrt, rel.Values, chartutil.ReleaseOptions{
		Name: rel.Name, Namespace: rel.Namespace, Revision: 1, IsInstall: true,
	}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, fmt.Errorf("helm values for %s: %w", chartDir, err)
	}
	files, err := engine.Render(chrt, vals)
	if err != nil {
		return nil, fmt.Errorf("helm template %s: %w", chartDir, err)
	}
	return files, nil
}

// HelmNotes renders the chart's NOTES.txt for rel, as `helm install` prints it.
func HelmNotes(chartDir string, rel HelmRelease) (string, error) {
	files, err := renderFiles(chartDir, rel)
	if err != nil {
		return "", err
	}
	for name, body := range files {
		if path.Base(name) == "NOTES.txt" {
			return body, nil
		}
	}
	return "", fmt.Errorf("chart %s has no NOTES.txt", chartDir)
}

// Helm renders chartDir like `helm template NAME chartDir -n NAMESPACE -f
// values`: values coalesced with the chart's defaults and checked against
// values.schema.json when there is one; NOTES.txt and empty documents are
// dropped; documents come out ordered by template path.
func Helm(chartDir string, rel HelmRelease) ([]byte, error) {
	files, err := renderFiles(chartDir, rel)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(files))
	for name := range files {
		if path.Base(name) == "NOTES.txt" {
			continue
		}
		names = append(names, name)
	}
	sort.Strings(names)
	var b bytes.Buffer
	for _, name := range names {
		body := strings.TrimSpace(files[name])
		if body == "" {
			continue
		}
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", name, body)
	}
	return b.Bytes(), nil
}
