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

// spawn starts cmd and returns a channel that gets what cmd.Wait
// returns. There is no niceness to set.
func spawn(cmd *exec.Cmd) (exited <-chan error, niceErr, err error) {
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	return waited, nil, nil
}
