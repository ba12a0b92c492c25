package jobs

import (
	"testing"
	"time"
)

// TestLease: the lease lapses after its time without another node in
// sight, and at once when the checks stopped for longer than pauseGap (a
// pause), also when asked before the next check runs; jobs start again
// twice the lease after.
func TestLease(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	l := lease{every: 10 * time.Second}
	for s := time.Duration(0); s <= 10*time.Second; s += 500 * time.Millisecond {
		if l.tick(at(s), s < 2*time.Second) {
			t.Fatalf("lapsed at %s, within the lease", s)
		}
	}
	if !l.tick(at(12500*time.Millisecond), false) {
		t.Fatal("not lapsed 10.5s after the last healthy check")
	}
	if !l.lapsedSince(at(5*time.Second), at(13*time.Second)) || l.lapsedSince(at(13*time.Second), at(13*time.Second)) {
		t.Error("lapsedSince: a run started before the lapse is fenced, one started after is not")
	}
	if d := l.restartIn(at(20 * time.Second)); d != 12500*time.Millisecond {
		t.Errorf("restartIn = %s, want 12.5s (twice the lease after the lapse)", d)
	}

	// A pause: the last check was at 1s; the run's end is seen at 9s,
	// before any check ran after the pause.
	p := lease{every: 10 * time.Second}
	p.tick(at(0), true)
	p.tick(at(time.Second), true)
	if !p.lapsedSince(at(500*time.Millisecond), at(9*time.Second)) {
		t.Error("a run that ended across an 8s pause is not fenced")
	}
	// A pause right after start, before the first periodic check: the
	// lease began when the runner did.
	b := lease{every: 10 * time.Second}
	b.begin(at(0))
	if !b.lapsedSince(at(200*time.Millisecond), at(20*time.Second)) {
		t.Error("a run that ended across a pause before the first check is not fenced")
	}
	q := lease{every: 10 * time.Second}
	q.tick(at(0), true)
	q.tick(at(time.Second), true)
	if q.lapsedSince(at(500*time.Millisecond), at(3*time.Second)) {
		t.Error("a 2s late check (under pauseGap) fenced a run")
	}
	if !q.tick(at(8*time.Second), true) {
		t.Error("a check 7s late is not a lapse")
	}
}
