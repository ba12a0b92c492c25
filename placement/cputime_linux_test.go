package placement_test

import "golang.org/x/sys/unix"

// threadCPU is the CPU time the calling thread has used, in nanoseconds;
// time the thread spends preempted or waiting does not count.
func threadCPU() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}
