package mesh_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/meshtest"
)

// memNode starts one node on network with fast timings and the given
// reconnect interval; it joins nobody.
func memNode(tb testing.TB, network *meshtest.Network, name, site string, reconnect time.Duration) *mesh.Mesh {
	tb.Helper()
	id, err := mesh.NewIdentity()
	if err != nil {
		tb.Fatal(err)
	}
	m, err := mesh.New(mesh.Config{
		Name: name, Identity: id, Transport: network.NewTransport(name),
		Local:             mesh.NodeState{Tier: mesh.TierEdge, Site: site, Labels: map[string]string{}},
		Memberlist:        meshtest.FastTimings,
		ReconnectInterval: reconnect,
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close() })
	return m
}

func statusAt(m *mesh.Mesh, name string) mesh.Status {
	for _, mb := range m.Members() {
		if mb.Name == name {
			return mb.Status
		}
	}
	return ""
}

// TestPartitionHeals cuts a four-node mesh in two for longer than memberlist
// gossips to the dead (one second with fast timings), then heals the
// network: the reconnect loop merges both sides again, with no restart, and
// a record written on one side during the cut reaches the other.
func TestPartitionHeals(t *testing.T) {
	t.Parallel()
	network := &meshtest.Network{}
	names := []string{"a1", "a2", "b1", "b2"}
	var nodes []*mesh.Mesh
	for _, n := range names {
		nodes = append(nodes, memNode(t, network, n, n[:1], 200*time.Millisecond))
	}
	for _, m := range nodes[1:] {
		if err := m.Join(context.Background(), []string{nodes[0].GossipAddr()}); err != nil {
			t.Fatal(err)
		}
	}
	allAlive := func() bool {
		for _, m := range nodes {
			if m.NumAlive() != len(nodes) {
				return false
			}
		}
		return true
	}
	meshtest.WaitFor(t, 30*time.Second, "one mesh of four", allAlive)

	network.Partition([]string{"a1", "a2"}, []string{"b1", "b2"})
	// A whole site gone is unreachable, not two failed nodes.
	meshtest.WaitFor(t, 30*time.Second, "each side sees the other site unreachable", func() bool {
		return statusAt(nodes[0], "b1") == mesh.StatusUnreachable && statusAt(nodes[0], "b2") == mesh.StatusUnreachable &&
			statusAt(nodes[3], "a1") == mesh.StatusUnreachable && statusAt(nodes[3], "a2") == mesh.StatusUnreachable
	})
	if _, err := nodes[3].Put("policies/written-in-the-cut", []byte(`{}`), mesh.PutOptions{Scope: mesh.ScopeGlobal}); err != nil {
		t.Fatal(err)
	}
	// Well past GossipToTheDeadTime: memberlist alone never merges now.
	time.Sleep(2 * time.Second) // the cut's length is what is under test
	network.Heal()
	meshtest.WaitFor(t, 30*time.Second, "one mesh of four again", allAlive)
	meshtest.WaitFor(t, 10*time.Second, "the record written in the cut on the other side", func() bool {
		_, err := nodes[0].Get("policies/written-in-the-cut")
		return err == nil
	})
}

// TestJoinSkipsSelfAndKeepsTrying: a node whose join list holds its own
// address and a peer that is not up yet skips the first; when Join gives up
// (its context ends), the reconnect loop still finds the peer once it
// starts.
func TestJoinSkipsSelfAndKeepsTrying(t *testing.T) {
	t.Parallel()
	network := &meshtest.Network{}
	a := memNode(t, network, "a", "s", 200*time.Millisecond)
	if err := a.Join(context.Background(), []string{a.GossipAddr()}); err != nil {
		t.Fatalf("join with only its own address: %v, want nil (nothing to join)", err)
	}
	// The in-memory network hands out ports in order: b's is next.
	host, p, _ := net.SplitHostPort(a.GossipAddr())
	port, _ := strconv.Atoi(p)
	bAddr := net.JoinHostPort(host, strconv.Itoa(port+1))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Join(ctx, []string{a.GossipAddr(), bAddr}); err == nil {
		t.Fatal("join with nobody up succeeded")
	}
	b := memNode(t, network, "b", "s", time.Hour)
	if b.GossipAddr() != bAddr {
		t.Fatalf("b is at %s, want %s", b.GossipAddr(), bAddr)
	}
	meshtest.WaitFor(t, 10*time.Second, "a and b in one mesh", func() bool {
		return a.NumAlive() == 2 && b.NumAlive() == 2
	})
}

// TestNameTakenIsRefused: a second node started with a name an alive node
// of another identity holds is told to stop (Fatal), and the others keep
// the first node's document under that name.
func TestNameTakenIsRefused(t *testing.T) {
	t.Parallel()
	network := &meshtest.Network{}
	y := memNode(t, network, "y", "s", time.Hour)
	x1 := memNode(t, network, "x", "s", time.Hour)
	if err := x1.Join(context.Background(), []string{y.GossipAddr()}); err != nil {
		t.Fatal(err)
	}
	meshtest.WaitFor(t, 10*time.Second, "x and y in one mesh", func() bool {
		n, err := y.Node("x")
		return err == nil && n.ID == x1.ID() && y.NumAlive() == 2
	})
	x2 := memNode(t, network, "x", "s", time.Hour)
	if err := x2.Join(context.Background(), []string{y.GossipAddr()}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-x2.Fatal():
		if !strings.Contains(err.Error(), `name "x" is already held by node `+x1.ID()) || !strings.Contains(err.Error(), "-name") {
			t.Errorf("fatal error %q", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second x was not told to stop")
	}
	select {
	case err := <-x1.Fatal():
		t.Errorf("the first x was told to stop: %v", err)
	default:
	}
	if n, err := y.Node("x"); err != nil || n.ID != x1.ID() {
		t.Errorf("y's node x is %s (%v), want the first x %s", n.ID, err, x1.ID())
	}
}

// TestConvergesUnderLoss: with 20% of packets lost on every link, a
// document change and a catalog record still reach every node.
func TestConvergesUnderLoss(t *testing.T) {
	t.Parallel()
	network := &meshtest.Network{Loss: func(from, to string) float64 { return 0.2 }}
	var nodes []*mesh.Mesh
	for _, n := range []string{"l1", "l2", "l3", "l4", "l5"} {
		nodes = append(nodes, memNode(t, network, n, "s", 200*time.Millisecond))
	}
	for _, m := range nodes[1:] {
		if err := m.Join(context.Background(), []string{nodes[0].GossipAddr()}); err != nil {
			t.Fatal(err)
		}
	}
	meshtest.WaitFor(t, 30*time.Second, "one mesh of five under loss", func() bool {
		for _, m := range nodes {
			if m.NumAlive() != len(nodes) {
				return false
			}
		}
		return true
	})
	if err := nodes[4].Update(func(s *mesh.NodeState) { s.Labels["k"] = "v" }); err != nil {
		t.Fatal(err)
	}
	if _, err := nodes[2].Put("policies/lossy", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	meshtest.WaitFor(t, 30*time.Second, "the label and the record everywhere", func() bool {
		for _, m := range nodes {
			n, err := m.Node("l5")
			if err != nil || n.Labels["k"] != "v" {
				return false
			}
			if _, err := m.Get("policies/lossy"); err != nil {
				return false
			}
		}
		return true
	})
	if network.Dropped.Load() == 0 {
		t.Error("no packet was lost")
	}
}
