package meshtest

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"
)

// BusyLoops starts k processes that each keep a core busy beside the
// test, as an edge host's other work does: shell loops that stop when the
// test ends, after limit, or when this process is gone, whichever comes
// first, so that none outlives a test that was killed.
func BusyLoops(tb testing.TB, k int, limit time.Duration) {
	tb.Helper()
	script := fmt.Sprintf(`end=$(( $(date +%%s) + %d )); p=%d
while [ "$(date +%%s)" -lt "$end" ] && kill -0 "$p" 2>/dev/null; do
  i=0; while [ "$i" -lt 20000 ]; do i=$((i+1)); done
done`, int(limit.Seconds())+1, os.Getpid())
	for range k {
		c := exec.Command("sh", "-c", script)
		if err := c.Start(); err != nil {
			tb.Skipf("cannot start a busy loop: %v", err)
		}
		tb.Cleanup(func() {
			_ = c.Process.Kill()
			_ = c.Wait()
		})
	}
}
