package mesh

import (
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
		m := &Mesh{cfg: Config{CatalogSyncInterval: 5 * time.Second}, kv: map[string]*Entry{}, syncs: make(chan string, 1),
			members:         map[string]*memberInfo{"b": {ip: net.IPv4(127, 0, 0, 1), port: 7946, status: StatusAlive, catalogDiffers: now.Add(-2 * time.Second)}},
			lastCatalogSync: now.Add(-c.since), lastSyncTook: c.took}
		m.compareCatalog("b", 42) // ours is 0: they differ
		if got := len(m.syncs) == 1; got != c.sync {
			t.Errorf("last sync %v ago took %v: sync asked for = %v, want %v", c.since, c.took, got, c.sync)
		}
	}
}
