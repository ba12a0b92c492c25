// Package backoff computes exponential retry delays, so that the agent's
// retry loops (joining the mesh, pulling chunks, loading models) share one
// schedule rule instead of each doubling by hand. Jitter, if any, is the
// caller's.
package backoff

import "time"

// Exp is the delay after the n-th failure in a row: base, doubled for each
// failure after the first, at most limit. An n below 1 counts as 1.
//
//	Exp(time.Second, 30*time.Second, 1) // 1s
//	Exp(time.Second, 30*time.Second, 3) // 4s
//	Exp(time.Second, 30*time.Second, 9) // 30s
func Exp(base, limit time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d > 0 && d < limit; i++ {
		if d > limit/2 {
			return limit
		}
		d *= 2
	}
	return min(d, limit)
}
