//go:build unix && !linux

package trainer

import (
	"os/exec"
	"syscall"
)

// ownProcessGroup starts cmd in a new process group, so that stopping a
// member also stops whatever it spawned (torchrun's workers, a shell's
// children).
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// terminateGroup sends SIGTERM to the process group led by pid.
func terminateGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGTERM) }

// killGroup sends SIGKILL to the process group led by pid.
func killGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGKILL) }

// lowerPriority sets the niceness of every process in the group led by
// pid to workNice; what they start later inherits it.
func lowerPriority(pid int) error { return syscall.Setpriority(syscall.PRIO_PGRP, pid, workNice) }
