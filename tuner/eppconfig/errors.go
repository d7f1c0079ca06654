package eppconfig

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Sentinel errors; every error the package returns is an *Error wrapping one
// of these or a *gate.ParamError.
var (
	// ErrMalformed marks input that is not valid YAML or not a valid EndpointPickerConfig.
	ErrMalformed = errors.New("malformed")
	// ErrNoConfig marks a source holding no EndpointPickerConfig.
	ErrNoConfig = errors.New("no EndpointPickerConfig")
	// ErrNotFound marks a plugin or data key that does not exist.
	ErrNotFound = errors.New("not found")
	// ErrAmbiguous marks a selection that matches several filter instances or data keys.
	ErrAmbiguous = errors.New("ambiguous")
	// ErrCaseConflict marks keys of one mapping that differ only in case.
	ErrCaseConflict = errors.New("keys differ only in case")
	// ErrUnsupported marks YAML the editor cannot splice safely (aliases, anchors,
	// merge keys, multi-line or block values, non-literal ConfigMap values).
	ErrUnsupported = errors.New("unsupported")
	// ErrUnintended marks an edit whose result differs from the original by more
	// than the intended change; the edit is refused.
	ErrUnintended = errors.New("edit would change more than intended")
	// ErrInvalidChange marks a change request that cannot be honoured as asked.
	ErrInvalidChange = errors.New("invalid change")
)

// Error is a one-line error naming the source, line, data key and plugin it is about.
type Error struct {
	Source  string // file name or other label of the input
	Line    int    // 1-based line in the source; 0 when unknown
	DataKey string // ConfigMap data key; "" for a bare config
	Plugin  string // plugin name; "" when not about one plugin
	Err     error
}

// Error renders "source:line: data key "k": plugin "p": message" on one line.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(orInput(e.Source))
	if e.Line > 0 {
		b.WriteString(":")
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.DataKey != "" {
		fmt.Fprintf(&b, "data key %q: ", e.DataKey)
	}
	if e.Plugin != "" {
		fmt.Fprintf(&b, "plugin %q: ", e.Plugin)
	}
	if e.Err != nil {
		b.WriteString(e.Err.Error())
	}
	return oneLine(b.String())
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

func orInput(source string) string {
	if source == "" {
		return "<input>"
	}
	return source
}

// oneLine folds a possibly multi-line message onto one line.
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' })
	for i := range fields {
		fields[i] = strings.TrimSpace(fields[i])
	}
	return strings.Join(fields, "; ")
}

// kindError is an error message marked with a sentinel.
type kindError struct {
	kind error
	msg  string
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }

func errorf(kind error, format string, a ...any) error {
	return &kindError{kind: kind, msg: fmt.Sprintf(format, a...)}
}

var yamlLineRE = regexp.MustCompile(`line (\d+): `)

// yamlMessage strips the "yaml: " prefix and "line N: " markers from a YAML
// library error and returns the message with the first line number it named
// (0 if none).
func yamlMessage(err error) (string, int) {
	msg := oneLine(err.Error())
	line := 0
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
	}
	msg = yamlLineRE.ReplaceAllString(msg, "")
	msg = strings.ReplaceAll(msg, "yaml: ", "")
	msg = strings.TrimPrefix(msg, "error converting YAML to JSON: ")
	msg = strings.TrimPrefix(msg, "unmarshal errors:; ")
	return strings.TrimSpace(msg), line
}
