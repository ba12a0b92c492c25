//go:build !unix

package trainer

import (
	"os"
	"os/exec"
)

// ownProcessGroup is a no-op without Unix process groups: only the member's
// own process is stopped.
func ownProcessGroup(cmd *exec.Cmd) {}

// terminateGroup kills the process (there is no SIGTERM to send).
func terminateGroup(pid int) { killGroup(pid) }

// killGroup kills the process.
func killGroup(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Kill()
	}
}

// lowerPriority does nothing: there is no niceness to set.
func lowerPriority(pid int) error { return nil }
