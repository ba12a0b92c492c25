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
	if own, err := syscall.Getpriority(syscall.PRIO_PROCESS, 0); err != nil || 20-own > 10 {
		t.Skipf("this process already runs nicer than 10 (%d, %v)", 20-own, err)
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
	// The member's child, started by a shell that may have forked it
	// before or after the launcher lowered the group's priority.
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
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the member's child runs at niceness %d (read: %v), want 10", n, ok)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not a settle delay
	}
}
