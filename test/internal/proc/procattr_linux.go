package proc

import (
	"os/exec"
	"syscall"
)

// setProcAttr has the kernel kill the component if the test binary dies without running its
// cleanups (for instance on a -timeout panic).
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
