package main

import (
	"errors"
	"fmt"
	"strings"
)

// Exit codes, the same for every command (docs/cli.md).
const (
	// exitOK: the command did its job.
	exitOK = 0
	// exitFailure: a runtime failure (I/O, an unreachable Prometheus, a
	// cycle that errored, a write that failed).
	exitFailure = 1
	// exitUsage: a usage or configuration error, found before any work.
	exitUsage = 2
	// exitNothing: the command ran but concluded nothing usable: every
	// record was bad, the tuner held, the estimate is inconclusive.
	exitNothing = 3
)

// exitError carries a process exit code; run maps it (exitCode).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageErr is a usage or configuration error found before any work: exit 2.
func usageErr(format string, a ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, a...)}
}

// asUsage marks err as a usage/configuration error (exit 2).
func asUsage(err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: exitUsage, err: err}
}

// asFailure marks err as a runtime failure (exit 1).
func asFailure(err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: exitFailure, err: err}
}

// nothingErr says the command ran but concluded nothing usable: exit 3.
func nothingErr(format string, a ...any) error {
	return &exitError{code: exitNothing, err: fmt.Errorf(format, a...)}
}

// exitCode maps a command's error to the process exit code: the code an
// exitError carries, 2 for cobra's own usage errors, else 1.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "accepts ", "unknown help topic", "required flag"} {
		if strings.HasPrefix(msg, p) {
			return exitUsage
		}
	}
	return exitFailure
}
