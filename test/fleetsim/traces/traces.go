// Package traces holds the request traces the built-in scenarios replay
// (Mooncake format, gzip-compressed JSON lines; docs/traces.md).
package traces

import (
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
)

//go:embed *.jsonl.gz
var files embed.FS

// Open opens the named trace.
func Open(name string) (io.ReadCloser, error) {
	f, err := files.Open(path.Clean(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no embedded trace %q (have: %s)", name, strings.Join(Names(), ", "))
	}
	return f, err
}

// Names lists the traces.
func Names() []string {
	ents, _ := fs.ReadDir(files, ".")
	out := make([]string, 0, len(ents))
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}
