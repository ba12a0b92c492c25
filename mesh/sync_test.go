package mesh_test

import (
	"context"
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
			var lossy atomic.Bool
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
				m, err := mesh.New(mesh.Config{
					Name: name, Identity: id, Transport: network.NewTransport(name),
					Local: mesh.NodeState{Tier: mesh.TierEdge, Site: "s", Labels: map[string]string{}},
					Memberlist: func(mc *memberlist.Config) {
						meshtest.FastTimings(mc)
						mc.PushPullInterval = time.Hour
						mc.SuspicionMult = 20 // a's silence is not a failure
					},
					CatalogSyncInterval: c.sync,
				})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { m.Close() })
				return m
			}
			a, cc := node("a"), node("c")
			if err := cc.Join(context.Background(), []string{a.GossipAddr()}); err != nil {
				t.Fatal(err)
			}
			meshtest.WaitFor(t, 10*time.Second, "two members", func() bool { return a.NumAlive() == 2 && cc.NumAlive() == 2 })
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

// TestLostDocumentRepaired: a node's document change whose every gossip
// copy to a member was lost reaches it within seconds: the node's probe
// answers carry its document's version, and the member fetches the newer
// document (no push/pull: set to an hour here). Before, the version went
// out in the node's memberlist meta, whose alive broadcast crossed the
// same lossy link.
func TestLostDocumentRepaired(t *testing.T) {
	t.Parallel()
	var lossy atomic.Bool
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
		m, err := mesh.New(mesh.Config{
			Name: name, Identity: id, Transport: network.NewTransport(name),
			Local: mesh.NodeState{Tier: mesh.TierEdge, Site: "s", Labels: map[string]string{}},
			Memberlist: func(mc *memberlist.Config) {
				meshtest.FastTimings(mc)
				mc.PushPullInterval = time.Hour
				mc.SuspicionMult = 20 // a's silence is not a failure
			},
			// No later change of a's (its coordinate) may carry the document.
			CoordinatePublishInterval: time.Hour,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	a, c := node("a"), node("c")
	if err := c.Join(context.Background(), []string{a.GossipAddr()}); err != nil {
		t.Fatal(err)
	}
	meshtest.WaitFor(t, 10*time.Second, "two members", func() bool { return a.NumAlive() == 2 && c.NumAlive() == 2 })
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
