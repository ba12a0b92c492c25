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

// spawn starts cmd, sets the niceness of its process group to workNice
// (what it starts later inherits it; it runs at the agent's priority for
// the moment between), and returns a channel that gets what cmd.Wait
// returns. niceErr says why the niceness could not be lowered (the agent
// runs nicer than workNice itself).
func spawn(cmd *exec.Cmd) (exited <-chan error, niceErr, err error) {
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	niceErr = syscall.Setpriority(syscall.PRIO_PGRP, cmd.Process.Pid, workNice)
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	return waited, niceErr, nil
}
