package dataplane

import (
	"context"
	"sync"
	"time"
)

// limiter is a token bucket: rate bytes per second, holding at most burst
// bytes. A nil *limiter does not limit.
type limiter struct {
	rate  float64
	burst float64

	now func() time.Time // time.Now; tests replace it

	mu     sync.Mutex
	tokens float64
	last   time.Time
}

func newLimiter(rate int64) *limiter {
	if rate <= 0 {
		return nil
	}
	// A burst of 50 ms worth of bytes (at least 64 KiB) smooths the
	// scheduling of writers without letting a link overshoot its cap for
	// long.
	burst := float64(rate) / 20
	if burst < 64<<10 {
		burst = 64 << 10
	}
	return &limiter{rate: float64(rate), burst: burst, tokens: burst, last: time.Now(), now: time.Now}
}

// wait blocks until n bytes may pass. n larger than the burst is taken in
// one debt: the caller waits until it is paid.
func (l *limiter) wait(ctx context.Context, n int) error {
	if l == nil {
		return nil
	}
	d := l.reserve(n)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// reserve takes n bytes' worth of tokens and returns how long the caller
// must wait for them.
func (l *limiter) reserve(n int) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.tokens += now.Sub(l.last).Seconds() * l.rate
	if l.tokens > l.burst {
		l.tokens = l.burst
	}
	l.last = now
	l.tokens -= float64(n)
	if l.tokens >= 0 {
		return 0
	}
	return time.Duration(-l.tokens / l.rate * float64(time.Second))
}
