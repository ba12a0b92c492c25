package infer

import (
	"fmt"
	"testing"
	"time"
)

// TestTraffic: a model version's traffic counts what is in flight, and
// takes its handling times over the recent window only.
func TestTraffic(t *testing.T) {
	t.Parallel()
	var st versionStats
	now := time.Now()
	if got := st.traffic(now); got.Served != 0 || got.Inflight != 0 || got.Recent != 0 || got.Sites != nil {
		t.Fatalf("no requests: %+v", got)
	}
	open := st.begin("")
	if got := st.traffic(now); got.Inflight != 1 || got.Recent != 0 {
		t.Fatalf("one in flight: %+v", got)
	}
	open(200)
	// 100 requests that took 1..100 ms, long ago, then 10 that took 5 ms.
	for i := range 100 {
		st.record(time.Duration(i+1)*time.Millisecond, now.Add(-time.Minute), "")
	}
	for range 10 {
		st.record(5*time.Millisecond, now, "")
	}
	got := st.traffic(now)
	if got.Inflight != 0 || got.Served != 1 || got.Recent != 11 {
		t.Fatalf("after: %+v, want 0 in flight, 1 served, 11 recent", got)
	}
	if got.P50 != 5*time.Millisecond || got.P99 != 5*time.Millisecond {
		t.Errorf("p50 %s, p99 %s: want 5ms, the old requests out of the window", got.P50, got.P99)
	}
	// The ring keeps the last recentRequests: here those that took 512 to
	// 1023 µs.
	for i := range 2 * recentRequests {
		st.record(time.Duration(i)*time.Microsecond, now, "")
	}
	if got := st.traffic(now); got.Recent != recentRequests || got.P50 != 768*time.Microsecond || got.P99 != 1018*time.Microsecond {
		t.Errorf("after a full ring: %+v, want %d recent, p50 768µs, p99 1018µs", got, recentRequests)
	}
}

// TestTrafficBySite: answered requests are counted by their client site,
// those of no site in none, and at most MaxOriginSites sites are kept.
func TestTrafficBySite(t *testing.T) {
	t.Parallel()
	var st versionStats
	for _, origin := range []string{"edge-a", "edge-a", "edge-b", ""} {
		st.begin(origin)(200)
	}
	got := st.traffic(time.Now())
	if got.Served != 4 || len(got.Sites) != 2 || got.Sites["edge-a"] != 2 || got.Sites["edge-b"] != 1 {
		t.Fatalf("by site: served %d, %v; want 4, edge-a 2 and edge-b 1", got.Served, got.Sites)
	}
	got.Sites["edge-a"] = 100 // a copy: the counts stay
	for i := range 2 * MaxOriginSites {
		st.begin(fmt.Sprintf("site-%d", i))(200)
	}
	got = st.traffic(time.Now())
	if len(got.Sites) != MaxOriginSites || got.Sites["edge-a"] != 2 {
		t.Errorf("after %d more sites: %d sites, edge-a %d; want %d and 2", 2*MaxOriginSites, len(got.Sites), got.Sites["edge-a"], MaxOriginSites)
	}
}
