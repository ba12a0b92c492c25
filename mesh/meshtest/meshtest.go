// Package meshtest holds helpers for tests that run several mesh nodes in one
// process: fast memberlist timings, waiting on a condition with a deadline,
// busy loops beside the agents, and reading a component's metrics.
package meshtest

import (
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// FastTimings shortens memberlist's LAN timings so failure detection and
// anti-entropy happen in a second or two on loopback, for tests.
func FastTimings(c *memberlist.Config) {
	c.ProbeInterval = 200 * time.Millisecond
	c.ProbeTimeout = 100 * time.Millisecond
	c.SuspicionMult = 2
	c.SuspicionMaxTimeoutMult = 2
	c.GossipInterval = 50 * time.Millisecond
	c.PushPullInterval = 2 * time.Second
	c.TCPTimeout = time.Second
	c.DeadNodeReclaimTime = time.Nanosecond
	c.GossipToTheDeadTime = time.Second
}

// WaitFor polls cond every 20ms until it returns true or timeout passes,
// then fails the test with what.
func WaitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	Poll(tb, timeout, 20*time.Millisecond, what, cond, nil)
}

// Poll polls cond every interval until it returns true or timeout passes;
// then it calls dump (when not nil) to log what the test needs to explain
// the failure, and fails the test with what.
func Poll(tb testing.TB, timeout, interval time.Duration, what string, cond func() bool, dump func()) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			if dump != nil {
				dump()
			}
			tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(interval) // polling interval, not a settle delay
	}
}

// Elapsed polls cond every 5ms until it returns true and returns how long
// that took, failing the test or benchmark after timeout.
func Elapsed(tb testing.TB, timeout time.Duration, what string, cond func() bool) time.Duration {
	tb.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout {
			tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not a settle delay
	}
	return time.Since(start)
}
