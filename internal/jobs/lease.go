package jobs

import (
	"context"
	"sync"
	"time"

	"github.com/strata-mesh/strata/mesh"
)

// DefaultLease is how long a training job goes on running on a node that
// is cut off from its site. A controller places a job again, away from a
// failed node of a reachable site, only once the node has been failed for
// longer than the lease and a margin (controller.JobGrace), so by then the
// node has stopped the run itself, or, if it was paused, will not record
// the run's outcome when it resumes: a job never runs to completion twice.
const DefaultLease = 10 * time.Second

// pauseGap is how late a lease tick may be before the node counts itself
// paused (stopped, frozen, starved), long enough for its peers to have
// failed it.
const pauseGap = 4 * time.Second

// lease tracks whether this node may go on running jobs: it may while it
// sees another node alive, or knows no other node of its site (a site of
// one node cut off is seen unreachable as a whole, so its work stays).
type lease struct {
	every time.Duration

	mu       sync.Mutex
	lastTick time.Time
	lastOK   time.Time
	lapsed   time.Time // when the lease was last seen lapsed (zero: never)
}

// tick records one check at now: healthy says whether the node sees
// another node alive (or knows no other node of its site). It reports
// whether the lease is lapsed now.
func (l *lease) tick(now time.Time, healthy bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lastTick.IsZero() {
		l.lastTick, l.lastOK = now, now
	}
	gap := now.Sub(l.lastTick)
	l.lastTick = now
	switch {
	case gap > pauseGap:
		// Paused: peers may have failed this node meanwhile, whatever it
		// sees now.
		l.lapsed = now
		return true
	case healthy:
		l.lastOK = now
	}
	if now.Sub(l.lastOK) > l.every {
		l.lapsed = now
		return true
	}
	return false
}

// lapsedSince reports whether the lease lapsed at or after t, as of now.
// A check late by more than pauseGap counts as a lapse by itself: right
// after a pause, a run's end can be seen before the next check runs.
func (l *lease) lapsedSince(t, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.lastTick.IsZero() && now.Sub(l.lastTick) > pauseGap {
		l.lapsed = now
	}
	return !l.lapsed.IsZero() && !l.lapsed.Before(t)
}

// restartIn returns how long until jobs may start again after the last
// lapse: twice the lease, so that a placement made elsewhere meanwhile has
// reached this node first.
func (l *lease) restartIn(now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lapsed.IsZero() {
		return 0
	}
	return max(0, l.lapsed.Add(2*l.every).Sub(now))
}

// healthy reports whether this node sees another node alive, or knows no
// other node of its site.
func healthy(self mesh.NodeState, nodes []mesh.Node) bool {
	siteMates := 0
	for _, n := range nodes {
		if n.ID == self.ID || n.Status == mesh.StatusLeft {
			continue
		}
		if n.Status == mesh.StatusAlive {
			return true
		}
		if n.Site == self.Site {
			siteMates++
		}
	}
	return siteMates == 0
}

// keepLease checks the lease twice a second until ctx ends; when it lapses
// it stops every run started before (they are fenced: see finish).
func (j *Runner) keepLease(ctx context.Context) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		if !j.lease.tick(now, healthy(j.cfg.Mesh.Local(), j.cfg.Mesh.Nodes())) {
			continue
		}
		j.mu.Lock()
		for key, lj := range j.runs {
			if lj.cancel != nil && lj.started.Before(now) && lj.stopped == "" {
				lj.stopped = stopFenced
				lj.cancel()
				lj.cancel = nil
				j.log.Warn("stopping training job: this node is cut off from its site (or was paused) for longer than its lease, and another node may be given the job",
					"job", key, "lease", j.cfg.Lease)
			}
		}
		j.mu.Unlock()
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// begin starts the lease at now, before any job runs: a pause from then
// on shows as a late check. (A lease checked first by keepLease's ticker,
// half a second in, let a run that started and was paused within that
// half second record its outcome.)
func (l *lease) begin(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastTick, l.lastOK = now, now
}

// lapse records a lapse at now: jobs start again after restartIn.
func (l *lease) lapse(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lapsed = now
}
