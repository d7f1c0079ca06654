//go:build !unix

package promharness

import (
	"context"
	"errors"
)

// lockFile is unsupported off unix; automatic installation needs apt-get anyway.
func lockFile(context.Context, string) (func(), error) {
	return nil, errors.New("file locking is only implemented on unix")
}
