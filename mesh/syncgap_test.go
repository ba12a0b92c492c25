package mesh

import (
	"encoding/json"
	"net"
	"testing"
	"time"
)

// TestSyncWaitsAfterALongOne: a digest that keeps differing asks for a
// sync once CatalogSyncInterval has passed since the last, unless the
// last took long: then it waits syncCostShare times as long as that took.
func TestSyncWaitsAfterALongOne(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		took, since time.Duration
		sync        bool
	}{
		{0, 6 * time.Second, true},                     // the interval passed
		{0, 4 * time.Second, false},                    // within the interval
		{time.Second, 6 * time.Second, false},          // a 1 s sync: 20 s apart
		{time.Second, 21 * time.Second, true},          // and then one is due
		{10 * time.Millisecond, 6 * time.Second, true}, // a short one changes nothing
	} {
		now := time.Now()
		// The buckets were asked for a moment ago, and the difference
		// outlasted them.
		m := &Mesh{cfg: Config{CatalogSyncInterval: 5 * time.Second}, kv: map[string]*held{}, syncs: make(chan string, 1), work: make(chan job, 1),
			members: map[string]*memberInfo{"b": {ip: net.IPv4(127, 0, 0, 1), port: 7946, status: StatusAlive,
				catalogDiffers: now.Add(-catalogSyncAfter - bucketRepairGrace), bucketsAsked: now}},
			lastCatalogSync: now.Add(-c.since), lastSyncTook: c.took}
		m.compareCatalog("b", 42) // ours is 0: they differ
		if got := len(m.syncs) == 1; got != c.sync || len(m.work) != 0 {
			t.Errorf("last sync %v ago took %v: sync asked for = %v, want %v (%d bucket repairs asked)", c.since, c.took, got, c.sync, len(m.work))
		}
	}
}

// TestBucketsBeforeAFullSync: a digest that differs first asks the peer to
// compare buckets, at once and at most every bucketRepairEvery; a full
// sync only once the difference has outlasted that by bucketRepairGrace.
func TestBucketsBeforeAFullSync(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for _, c := range []struct {
		differs, asked  time.Duration // ago
		buckets, synced bool
	}{
		{2 * time.Second, 0, true, false},                        // never asked: the buckets
		{2 * time.Second, 500 * time.Millisecond, false, false},  // asked just now, not yet outlasted
		{10 * time.Second, 500 * time.Millisecond, false, true},  // outlasted: the full sync
		{10 * time.Second, 2 * time.Second, true, false},         // the buckets again first
		{500 * time.Millisecond, 10 * time.Second, false, false}, // a difference too fresh
	} {
		mi := &memberInfo{ip: net.IPv4(127, 0, 0, 1), port: 7946, status: StatusAlive, catalogDiffers: now.Add(-c.differs)}
		if c.asked > 0 {
			mi.bucketsAsked = now.Add(-c.asked)
		}
		m := &Mesh{cfg: Config{CatalogSyncInterval: 5 * time.Second}, kv: map[string]*held{}, syncs: make(chan string, 1), work: make(chan job, 1),
			members: map[string]*memberInfo{"b": mi}, lastCatalogSync: now.Add(-time.Hour)}
		m.compareCatalog("b", 42)
		var buckets bool
		select {
		case j := <-m.work:
			buckets = j.kind == msgBuckets && j.to == "b"
		default:
		}
		if synced := len(m.syncs) == 1; buckets != c.buckets || synced != c.synced {
			t.Errorf("differing for %v, buckets asked %v ago: buckets %v, full sync %v; want %v, %v", c.differs, c.asked, buckets, synced, c.buckets, c.synced)
		}
	}
}

// TestPeriodicPushPullLeavesTheCatalogToDigests: memberlist's periodic
// push/pull carries only the catalog entries and node documents got
// lately, unless a live member has not shown that its acks carry digests
// (or syncs are off); a join, which a catalog sync is, always carries
// them all.
func TestPeriodicPushPullLeavesTheCatalogToDigests(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name            string
		syncs           time.Duration
		digests         bool
		periodicEntries bool
	}{
		{"every member sends digests", 5 * time.Second, true, false},
		{"a member has not shown it sends digests", 5 * time.Second, false, true},
		{"digest syncs off", -1, true, true},
	} {
		m := &Mesh{cfg: Config{CatalogSyncInterval: c.syncs}, docs: map[string]*NodeState{
			"old": {ID: "old", Name: "old", Version: 1, got: time.Now().Add(-2 * recentEntries)},
			"new": {ID: "new", Name: "new", Version: 1, got: time.Now()},
		},
			kv: map[string]*held{
				"policies/old": holding(&Entry{Key: "policies/old", Value: []byte(`{}`), Version: 1, Origin: "x", seen: int64(time.Since(monoBase) - 2*recentEntries)}),
				"policies/new": holding(&Entry{Key: "policies/new", Value: []byte(`{}`), Version: 1, Origin: "x", seen: int64(time.Since(monoBase))}),
			},
			members: map[string]*memberInfo{"b": {status: StatusAlive, digests: c.digests}, "gone": {status: StatusFailed}}}
		d := &delegate{m: m}
		for _, join := range []bool{false, true} {
			var pp pushPull
			if err := json.Unmarshal(d.LocalState(join), &pp); err != nil {
				t.Fatal(err)
			}
			want := 1 // the recent one
			if join || c.periodicEntries {
				want = 2
			}
			if len(pp.Entries) != want {
				t.Errorf("%s, join %v: %d entries sent, want %d", c.name, join, len(pp.Entries), want)
			}
			if len(pp.Nodes) != want {
				t.Errorf("%s, join %v: %d documents sent, want %d", c.name, join, len(pp.Nodes), want)
			}
		}
	}
}
