package sink

import (
	"errors"
	"fmt"
	"io/fs"
)

// pathless drops the path from a file-system error so the message can name
// the path the user gave instead of the resolved one (a mounted ConfigMap's
// file resolves into a timestamped ..data directory). errors.Is still works.
func pathless(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return err
}
