package trainer_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-mesh/strata/trainer"
)

// TestExecMembersRunNicer: a job member, and what it starts, run at
// niceness 10, below the agent, so that a host busy with its jobs still
// runs the agent when its peers probe it.
func TestExecMembersRunNicer(t *testing.T) {
	// Linux's getpriority returns 20 - nice.
	prio, err := syscall.Getpriority(syscall.PRIO_PROCESS, 0)
	own := 20 - prio
	if err != nil || own >= 10 {
		t.Skipf("this process already runs at niceness 10 or nicer (%d, %v)", own, err)
	}
	job := testJob(t, `sh -c 'echo $$ > "$STRATA_OUTPUT_DIR/pid.tmp" && mv "$STRATA_OUTPUT_DIR/pid.tmp" "$STRATA_OUTPUT_DIR/pid"; exec sleep 60'`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, err := trainer.NewExec(trainer.ExecOptions{}).Launch(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		_ = waitRun(t, r)
	}()
	// The member's child, forked by the member's shell as it starts
	// (before a fix, a child forked just while the launcher lowered the
	// group's priority kept the agent's: 1 run in a few hundred, under
	// load).
	nice := func() (int, bool) {
		b, err := os.ReadFile(filepath.Join(job.OutputDir, "pid"))
		if err != nil {
			return 0, false
		}
		stat, err := os.ReadFile("/proc/" + strings.TrimSpace(string(b)) + "/stat")
		if err != nil {
			return 0, false
		}
		// Fields after the command name (which may hold spaces): state is
		// field 3, nice field 19.
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		n, err := strconv.Atoi(f[19-3])
		return n, err == nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, ok := nice()
		if ok && n == 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the member's child runs at niceness %d (read: %v), want 10", n, ok)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not a settle delay
	}
	// Once the member has exited, no thread of the agent runs nicer: the
	// one that started it ended with it. (Or, if that was the main thread,
	// the Go runtime parked it for good: it never ends, and runs nothing.)
	cancel()
	_ = waitRun(t, r)
	deadline = time.Now().Add(30 * time.Second)
	for {
		niced := nicedThreads(t, own)
		if len(niced) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("threads of the agent still run nicer than it after the member exited (tid:nice): %v", niced)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not a settle delay
	}
}

// nicedThreads lists the threads of this process but the main one whose
// niceness is not own, as "tid:nice".
func nicedThreads(t *testing.T, own int) []string {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	var niced []string
	for _, task := range tasks {
		if task.Name() == strconv.Itoa(os.Getpid()) {
			continue
		}
		stat, err := os.ReadFile("/proc/self/task/" + task.Name() + "/stat")
		if err != nil {
			continue // ended since
		}
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if f[19-3] != strconv.Itoa(own) {
			niced = append(niced, task.Name()+":"+f[19-3])
		}
	}
	return niced
}
