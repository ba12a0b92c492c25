package backoff

import (
	"math"
	"testing"
	"time"
)

func TestExp(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	for _, tc := range []struct {
		base, limit time.Duration
		n           int
		want        time.Duration
	}{
		// The mesh's join retries: 1s doubling to 30s.
		{time.Second, 30 * time.Second, 1, time.Second},
		{time.Second, 30 * time.Second, 2, 2 * time.Second},
		{time.Second, 30 * time.Second, 5, 16 * time.Second},
		{time.Second, 30 * time.Second, 6, 30 * time.Second},
		{time.Second, 30 * time.Second, 1000, 30 * time.Second},
		// A pull's chunk retries: 50ms doubling to 2s.
		{50 * ms, 2 * time.Second, 1, 50 * ms},
		{50 * ms, 2 * time.Second, 4, 400 * ms},
		{50 * ms, 2 * time.Second, 6, 1600 * ms},
		{50 * ms, 2 * time.Second, 7, 2 * time.Second},
		{50 * ms, 2 * time.Second, 100, 2 * time.Second},
		// Model loads: 5s doubling to 5 minutes.
		{5 * time.Second, 5 * time.Minute, 1, 5 * time.Second},
		{5 * time.Second, 5 * time.Minute, 6, 160 * time.Second},
		{5 * time.Second, 5 * time.Minute, 7, 5 * time.Minute},
		// Edges: no failure yet counts as one, a base over the limit is
		// the limit, and neither a huge n nor a huge limit overflows.
		{time.Second, time.Minute, 0, time.Second},
		{time.Second, time.Minute, -3, time.Second},
		{time.Minute, time.Second, 1, time.Second},
		{0, time.Second, 5, 0},
		{time.Second, math.MaxInt64, math.MaxInt, math.MaxInt64},
		{time.Second, time.Minute, math.MaxInt, time.Minute},
	} {
		if got := Exp(tc.base, tc.limit, tc.n); got != tc.want {
			t.Errorf("Exp(%v, %v, %d) = %v, want %v", tc.base, tc.limit, tc.n, got, tc.want)
		}
	}
}
