package trainer

import (
	"os/exec"
	"syscall"
)

// ownProcessGroup starts cmd in a new process group, so that stopping a
// member also stops whatever it spawned (torchrun's workers, a shell's
// children), and has the kernel kill it when the agent dies: a training
// run does not outlive an agent killed with -9, whose job its controller
// may give to another node. Only the member's own process gets that
// signal; what it spawned (a shell's children, torchrun's workers) is not
// reached by it.
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// terminateGroup sends SIGTERM to the process group led by pid.
func terminateGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGTERM) }

// killGroup sends SIGKILL to the process group led by pid.
func killGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGKILL) }

// lowerPriority sets the niceness of every process in the group led by
// pid, and of each of their threads (Linux keeps a niceness per thread;
// PRIO_PGRP reaches them all), to workNice; what they start later
// inherits it. It fails, and the group keeps the agent's niceness, when
// the agent runs nicer than workNice itself.
func lowerPriority(pid int) error { return syscall.Setpriority(syscall.PRIO_PGRP, pid, workNice) }
