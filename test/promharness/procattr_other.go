//go:build !linux

package promharness

import "os/exec"

// setProcAttr sets nothing off Linux, which lacks a parent-death signal.
func setProcAttr(*exec.Cmd) {}
