// Package scenarios holds the built-in scenarios (README.md describes
// them); their traces come from package traces.
package scenarios

import (
	"embed"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/gatetuner/gatetuner/test/fleetsim/scenario"
	"github.com/gatetuner/gatetuner/test/fleetsim/traces"
)

//go:embed *.yaml
var files embed.FS

// Names lists the built-in scenarios.
func Names() []string {
	ents, err := fs.ReadDir(files, ".")
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".yaml"); ok {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// Source returns a built-in scenario's YAML and the file name its errors
// carry (scenarios/<name>.yaml).
func Source(name string) (data []byte, file string, err error) {
	file = path.Join("scenarios", name+".yaml")
	rel, ok := strings.CutPrefix(file, "scenarios/")
	if ok {
		data, err = files.ReadFile(rel)
	}
	if !ok || err != nil {
		return nil, file, fmt.Errorf("built-in scenario %q not found (have: %s)", name, strings.Join(Names(), ", "))
	}
	return data, file, nil
}

// Load parses a built-in scenario by name (see Names); its trace, if any,
// reads from package traces.
func Load(name string) (*scenario.Scenario, error) {
	data, file, err := Source(name)
	if err != nil {
		return nil, err
	}
	sc, err := scenario.Parse(file, data)
	if err == nil && sc.Trace != nil {
		written := sc.Trace.Written()
		sc.Trace.UseOpen("embedded:"+written, func() (io.ReadCloser, error) { return traces.Open(written) })
	}
	return sc, err
}
