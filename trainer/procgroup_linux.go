package trainer

import (
	"os/exec"
	"runtime"
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

// spawn starts cmd at niceness workNice and returns a channel that gets
// what cmd.Wait returns. niceErr says why the niceness could not be
// lowered (the agent runs nicer than workNice itself); cmd then runs at
// the agent's.
//
// Linux keeps a niceness per thread, and a child starts with the one of
// the thread that forked it. So cmd is started from a thread of its own,
// lowered first: it runs at workNice from its first instruction, and so
// does everything it forks. (Lowering the process group after Start
// missed, now and then, a child that the member was forking at that very
// moment: it ran at the agent's priority for its whole life.) The thread
// is never unlocked, so it runs nothing of the agent's and ends with its
// goroutine, after cmd.Wait: it must outlive cmd, since Pdeathsig
// signals a child when the thread that forked it ends, not the process.
func spawn(cmd *exec.Cmd) (exited <-chan error, niceErr, err error) {
	type start struct{ nice, err error }
	started := make(chan start, 1)
	waited := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		nice := lowerThread()
		if err := cmd.Start(); err != nil {
			started <- start{nice, err}
			return
		}
		started <- start{nice, nil}
		waited <- cmd.Wait()
	}()
	s := <-started
	if s.err != nil {
		return nil, s.nice, s.err
	}
	return waited, s.nice, nil
}

// lowerThread sets the calling thread's niceness to workNice, unless it
// runs at workNice or nicer already.
func lowerThread() error {
	tid := syscall.Gettid()
	prio, err := syscall.Getpriority(syscall.PRIO_PROCESS, tid)
	if err != nil {
		return err
	}
	if 20-prio >= workNice { // the raw getpriority returns 20 - nice
		return nil
	}
	return syscall.Setpriority(syscall.PRIO_PROCESS, tid, workNice)
}
