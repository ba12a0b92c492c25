package infer

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Stats counts the HTTP inference requests a model version answered since
// the server started: Served in all, Failed of them with a server error
// (5xx). A client's bad request is not the version's failure.
type Stats struct {
	Served uint64 `json:"served"`
	Failed uint64 `json:"failed"`
}

// Traffic is how busy a model version is here now: what the agent
// gossips so that others forward by load, not only by distance.
type Traffic struct {
	// Served counts the requests answered since the server started.
	Served uint64
	// Inflight is the requests being handled now, those waiting for a
	// batch or a runner included.
	Inflight int64
	// P50 and P99 are the handling times (body read to answer written)
	// of the requests answered in the last TrafficWindow; zero when none
	// were.
	P50, P99 time.Duration
	// Recent is how many requests P50 and P99 were taken over (at most
	// recentRequests).
	Recent int
	// Sites counts the requests answered since the server started by the
	// client site they came from (Config.Origin); requests from no known
	// site, and from sites beyond the first MaxOriginSites, are in none.
	Sites map[string]uint64
}

// MaxOriginSites bounds the client sites counted per model version.
const MaxOriginSites = 32

// TrafficWindow is how far back Traffic's handling times look.
const TrafficWindow = 30 * time.Second

// recentRequests bounds the handling times kept per model version: enough
// for a p99 that means something, small enough to sort every few seconds.
const recentRequests = 512

type versionStats struct {
	served, failed atomic.Uint64
	inflight       atomic.Int64
	// p50 and p50At cache the median handling time (see slow).
	p50   atomic.Int64 // time.Duration
	p50At atomic.Int64 // unix nanoseconds

	mu     sync.Mutex
	sites  map[string]uint64             // answered, by client site
	took   [recentRequests]time.Duration // a ring of handling times
	at     [recentRequests]time.Time     // when each request ended
	next   int
	filled bool
}

// statsOf returns name@ver's counters, made on first use. Counts outlive
// Unload.
func (s *Server) statsOf(name, ver string) *versionStats {
	v, ok := s.stats.Load(name + "@" + ver)
	if !ok {
		v, _ = s.stats.LoadOrStore(name+"@"+ver, &versionStats{})
	}
	return v.(*versionStats)
}

// Stats returns the request counts of name at version (zero when it never
// served here). Counts outlive Unload.
func (s *Server) Stats(name, ver string) Stats {
	v, ok := s.stats.Load(name + "@" + ver)
	if !ok {
		return Stats{}
	}
	st := v.(*versionStats)
	return Stats{Served: st.served.Load(), Failed: st.failed.Load()}
}

// Traffic returns how busy name at version is here (zero when it never
// served here).
func (s *Server) Traffic(name, ver string) Traffic {
	v, ok := s.stats.Load(name + "@" + ver)
	if !ok {
		return Traffic{}
	}
	return v.(*versionStats).traffic(time.Now())
}

// SlowAnswer is the median handling time at which a model version's
// requests are offered to other replicas whatever is in flight here (see
// Config.SpillInflight).
const SlowAnswer = 5 * time.Millisecond

// slow says whether the version's median handling time over the recent
// requests is SlowAnswer or more, as of at most a quarter second ago: it
// is asked for every request, and sorting the recent ones is not free.
func (st *versionStats) slow(now time.Time) bool {
	if at := st.p50At.Load(); now.UnixNano()-at > int64(250*time.Millisecond) && st.p50At.CompareAndSwap(at, now.UnixNano()) {
		st.p50.Store(int64(st.traffic(now).P50))
	}
	return time.Duration(st.p50.Load()) >= SlowAnswer
}

// begin counts a request in flight, from client site origin ("" for
// none known); the returned func ends it with its status code.
func (st *versionStats) begin(origin string) func(code int) {
	st.inflight.Add(1)
	start := time.Now()
	return func(code int) {
		end := time.Now()
		st.inflight.Add(-1)
		st.served.Add(1)
		if code >= 500 {
			st.failed.Add(1)
		}
		st.record(end.Sub(start), end, origin)
	}
}

// record keeps a request's handling time, took, that ended at end, and
// counts it for its client site.
func (st *versionStats) record(took time.Duration, end time.Time, origin string) {
	st.mu.Lock()
	if _, ok := st.sites[origin]; origin != "" && (ok || len(st.sites) < MaxOriginSites) {
		if st.sites == nil {
			st.sites = map[string]uint64{}
		}
		st.sites[origin]++
	}
	st.took[st.next], st.at[st.next] = took, end
	st.next = (st.next + 1) % recentRequests
	st.filled = st.filled || st.next == 0
	st.mu.Unlock()
}

func (st *versionStats) traffic(now time.Time) Traffic {
	t := Traffic{Served: st.served.Load(), Inflight: st.inflight.Load()}
	st.mu.Lock()
	t.Sites = maps.Clone(st.sites)
	n := st.next
	if st.filled {
		n = recentRequests
	}
	took := make([]time.Duration, 0, n)
	for i := range n {
		if now.Sub(st.at[i]) <= TrafficWindow {
			took = append(took, st.took[i])
		}
	}
	st.mu.Unlock()
	if len(took) == 0 {
		return t
	}
	slices.Sort(took)
	t.Recent = len(took)
	t.P50 = took[len(took)/2]
	t.P99 = took[min(len(took)-1, len(took)*99/100)]
	return t
}
