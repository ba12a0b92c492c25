package mesh_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/meshtest"
)

// TestLostBroadcastRepaired: an entry whose every gossip copy to a member
// was lost reaches it within seconds, by the catalog digest the probe acks
// carry, not at the next periodic push/pull (set to an hour here). With
// the digest syncs off, it does not arrive.
func TestLostBroadcastRepaired(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		sync   time.Duration
		arrive bool
	}{{"digest syncs", 0, true}, {"no digest syncs", -1, false}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			a, cc, lossy := lossyPair(t, mesh.Config{CatalogSyncInterval: c.sync})
			lossy.Store(true)
			if _, err := a.Put("policies/lost", []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			// A sleep, because the loss window is what is under test: it
			// outlasts every gossip copy of the entry (4 transmissions,
			// 50ms gossip rounds), which memberlist does not report.
			time.Sleep(time.Second)
			lossy.Store(false)
			got := func() bool { _, err := cc.Get("policies/lost"); return err == nil }
			if c.arrive {
				meshtest.WaitFor(t, 15*time.Second, "the lost entry at c", got)
				return
			}
			// A sleep, because what is under test is that nothing arrives:
			// three times what the repaired case takes.
			time.Sleep(6 * time.Second)
			if got() {
				t.Error("the entry reached c with no digest sync and no push/pull: the loss did not lose it, and the test proves nothing")
			}
		})
	}
}

// TestLostBroadcastRepairedByBuckets: with full syncs an hour away (as
// after a long one, with a large catalog), an entry whose every gossip
// copy to c was lost still reaches c within seconds: c's digest differs
// from a's, c sends a its bucket digests, and a answers with its entries
// of the one bucket that differs.
func TestLostBroadcastRepairedByBuckets(t *testing.T) {
	t.Parallel()
	a, c, lossy := lossyPair(t, mesh.Config{})
	for i := range 300 {
		if _, err := a.Put(fmt.Sprintf("policies/p-%d", i), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	// Until a has sent every copy of those, the lost entry's copies wait
	// behind them and outlast the loss.
	meshtest.WaitFor(t, 30*time.Second, "c to hold a's 300 entries, and a to have sent them", func() bool {
		_, err := c.Get("policies/p-299")
		return err == nil && mesh.QueuedBroadcasts(a) <= 1 // the anchor stays
	})
	mesh.NoFullSyncs(a)
	mesh.NoFullSyncs(c)
	lossy.Store(true)
	if _, err := a.Put("policies/lost", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	// The loss lasts until a has sent every copy of the entry (its queue
	// is back to the anchor).
	meshtest.WaitFor(t, 15*time.Second, "a to send every copy of the entry", func() bool { return mesh.QueuedBroadcasts(a) <= 1 })
	lossy.Store(false)
	meshtest.WaitFor(t, 15*time.Second, "the lost entry at c", func() bool { _, err := c.Get("policies/lost"); return err == nil })
	fullA, bucketsA := mesh.CatalogRepairs(a)
	fullC, bucketsC := mesh.CatalogRepairs(c)
	if fullA+fullC != 0 || bucketsA+bucketsC == 0 {
		t.Errorf("full syncs %v, bucket repairs %v; want the buckets alone", fullA+fullC, bucketsA+bucketsC)
	}
}

// TestLostDocumentRepaired: a node's document change whose every gossip
// copy to a member was lost reaches it within seconds: the node's probe
// answers carry its document's version, and the member fetches the newer
// document (no push/pull: set to an hour here). The version also goes out
// in the node's memberlist meta, but that alive broadcast crosses the same
// lossy link.
func TestLostDocumentRepaired(t *testing.T) {
	t.Parallel()
	// No later change of a's (its coordinate) may carry the document.
	a, c, lossy := lossyPair(t, mesh.Config{CoordinatePublishInterval: time.Hour})
	lossy.Store(true)
	if err := a.Update(func(s *mesh.NodeState) { s.Labels["zone"] = "z2" }); err != nil {
		t.Fatal(err)
	}
	// A sleep, because the loss window is what is under test: it outlasts
	// every gossip copy of the change, which memberlist does not report.
	time.Sleep(time.Second)
	lossy.Store(false)
	meshtest.WaitFor(t, 15*time.Second, "a's new document at c", func() bool {
		n, err := c.Node("a")
		return err == nil && n.Labels["zone"] == "z2"
	})
}

// lossyPair starts members a and c, joined, with cfg's intervals: fast
// timings, no periodic push/pull (an hour), and a's silence no failure.
// While the returned flag is set, every packet from a to c is lost.
func lossyPair(t *testing.T, cfg mesh.Config) (a, c *mesh.Mesh, lossy *atomic.Bool) {
	t.Helper()
	lossy = &atomic.Bool{}
	network := &meshtest.Network{Loss: func(from, to string) float64 {
		if lossy.Load() && from == "a" && to == "c" {
			return 1
		}
		return 0
	}}
	node := func(name string) *mesh.Mesh {
		id, err := mesh.NewIdentity()
		if err != nil {
			t.Fatal(err)
		}
		nc := cfg
		nc.Name, nc.Identity, nc.Transport = name, id, network.NewTransport(name)
		nc.Local = mesh.NodeState{Tier: mesh.TierEdge, Site: "s", Labels: map[string]string{}}
		nc.Memberlist = func(mc *memberlist.Config) {
			meshtest.FastTimings(mc)
			mc.PushPullInterval = time.Hour
			mc.SuspicionMult = 20 // a's silence is not a failure
		}
		m, err := mesh.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	a, c = node("a"), node("c")
	if err := c.Join(context.Background(), []string{a.GossipAddr()}); err != nil {
		t.Fatal(err)
	}
	meshtest.WaitFor(t, 10*time.Second, "two members", func() bool { return a.NumAlive() == 2 && c.NumAlive() == 2 })
	return a, c, lossy
}
