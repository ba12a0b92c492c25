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
