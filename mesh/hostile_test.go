package mesh_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/meshtest"
)

// TestStalledMemberIsSuspectThenFailed stalls a member (its transport drops
// everything from then on) and watches the others report it suspect, then
// failed. The status comes from memberlist's member state: the meshes log
// nothing at all, so no log line can be what tells them.
func TestStalledMemberIsSuspectThenFailed(t *testing.T) {
	network := &meshtest.Network{}
	var nodes []*mesh.Mesh
	var transports []*meshtest.Transport
	for i := range 3 {
		name := fmt.Sprintf("s%d", i)
		id := newID(t)
		tr := network.NewTransport(name)
		m, err := mesh.New(mesh.Config{
			Name: name, Identity: id, Transport: tr,
			Local:      mesh.NodeState{Tier: mesh.TierEdge, Site: "s", Labels: map[string]string{}},
			Memberlist: meshtest.FastTimings,
			Logger:     slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		if i > 0 {
			if err := m.Join(context.Background(), []string{nodes[0].GossipAddr()}); err != nil {
				t.Fatal(err)
			}
		}
		nodes, transports = append(nodes, m), append(transports, tr)
	}
	meshtest.WaitFor(t, 30*time.Second, "every node sees every other alive", func() bool {
		for _, m := range nodes {
			if m.NumAlive() != len(nodes) {
				return false
			}
		}
		return true
	})

	transports[2].Shutdown() // stalled: no packet or stream in or out
	victim := nodes[2].Name()
	seen := map[int][]mesh.Status{}
	meshtest.WaitFor(t, 20*time.Second, "the stalled node to be failed on the others", func() bool {
		done := true
		for i := range 2 {
			st := statusOf(nodes[i], victim)
			if h := seen[i]; len(h) == 0 || h[len(h)-1] != st {
				seen[i] = append(seen[i], st)
			}
			done = done && st == mesh.StatusFailed
		}
		return done
	})
	sawSuspect := false
	for i := range 2 {
		h := seen[i]
		for j, st := range h {
			if st == mesh.StatusSuspect && j+1 < len(h) && h[len(h)-1] == mesh.StatusFailed {
				sawSuspect = true
			}
		}
		t.Logf("%s saw %s go %v", nodes[i].Name(), victim, h)
	}
	if !sawSuspect {
		t.Error("no node reported the stalled member suspect before failed")
	}
}

// TestNameConflictIsReported starts a second agent under a name already in
// the mesh, with another identity and address: the seed logs the conflict
// as an error and counts it.
func TestNameConflictIsReported(t *testing.T) {
	seed := start(t, "seed", t.TempDir(), newID(t), testKey, "", mesh.TierEdge)
	first := start(t, "dup", t.TempDir(), newID(t), testKey, "", mesh.TierEdge)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := first.m.Join(ctx, []string{seed.m.GossipAddr()}); err != nil {
		t.Fatal(err)
	}
	meshtest.WaitFor(t, 10*time.Second, "the first dup to be alive on the seed", func() bool {
		return statusOf(seed.m, "dup") == mesh.StatusAlive
	})
	second := start(t, "dup", t.TempDir(), newID(t), testKey, "", mesh.TierEdge)
	jctx, jcancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer jcancel()
	_ = second.m.Join(jctx, []string{seed.m.GossipAddr()})
	meshtest.WaitFor(t, 10*time.Second, "the conflict to be counted", func() bool {
		return counterValue(t, seed.reg, "strata_gossip_name_conflicts_total") > 0
	})
	// Counted first, then logged (the log is rate-limited, the count is
	// not): a read of the log right after the count can come between.
	logged := func() bool {
		logs := seed.logs.String()
		return strings.Contains(logs, "level=ERROR") && strings.Contains(logs, "gossip name conflict")
	}
	meshtest.Poll(t, 10*time.Second, 20*time.Millisecond, "the conflict to be logged as an error", logged, func() {
		t.Logf("log:\n%s", seed.logs.String())
	})
	if got, _ := seed.m.Node("dup"); got.ID != first.m.ID() {
		t.Errorf("seed holds dup as %s, want the first one %s", got.ID, first.m.ID())
	}
}

// TestJunkPacketFloodIsRateLimited floods a keyed agent with empty and
// label-prefixed packets from one keyless sender: each is counted, and the
// log holds about a line per second for that source, not one per packet.
func TestJunkPacketFloodIsRateLimited(t *testing.T) {
	n := start(t, "flooded", t.TempDir(), newID(t), testKey, "", mesh.TierEdge)
	conn, err := net.Dial("udp", n.m.GossipAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	src := conn.LocalAddr().String()
	began := time.Now()
	label := []byte{244, 5, 'o', 't', 'h', 'e', 'r', 2, 0}
	for i := range 4000 {
		if i%2 == 0 {
			_, _ = conn.Write(nil)
		} else {
			_, _ = conn.Write(label)
		}
		if i%500 == 0 {
			time.Sleep(10 * time.Millisecond) // leave the socket buffer room
		}
	}
	meshtest.WaitFor(t, 10*time.Second, "most of the flood to be counted", func() bool {
		return counterValue(t, n.reg, "strata_gossip_peer_warnings_total") >= 1000
	})
	elapsed := time.Since(began)
	lines := strings.Count(n.logs.String(), src)
	if max := int(elapsed/time.Second) + 2; lines > max {
		t.Errorf("%d log lines name the flooding source in %v; want at most %d", lines, elapsed, max)
	}
	if lines == 0 {
		t.Errorf("the flood was not logged at all:\n%s", n.logs.String())
	}
	if counterValue(t, n.reg, "strata_gossip_log_suppressed_total") == 0 {
		t.Error("nothing counted as suppressed")
	}
}

// memAddr is a net.Addr for an address on a meshtest.Network.
type memAddr string

func (a memAddr) Network() string { return "mem" }
func (a memAddr) String() string  { return string(a) }

// TestPingWhileStarting: memberlist.Create reads packets before it
// returns, so a peer's ping can be answered while mesh.New is still
// waiting for it. Answering asks the mesh's broadcast queue for the
// member count; that once dereferenced the memberlist that New had not
// stored yet, and the agent crashed. Here a ping waits in each new agent's
// queue before New starts, and every one is answered.
func TestPingWhileStarting(t *testing.T) {
	t.Parallel()
	network := &meshtest.Network{}
	mlc := memberlist.DefaultLANConfig()
	mlc.Name, mlc.Transport, mlc.LogOutput = "pinger", network.NewTransport("pinger"), io.Discard
	pinger, err := memberlist.Create(mlc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pinger.Shutdown() })
	for i := range 20 {
		name := fmt.Sprintf("n%d", i)
		tr := network.NewTransport(name)
		pinged := make(chan error, 1)
		go func() {
			_, err := pinger.Ping(name, memAddr(tr.Addr()))
			pinged <- err
		}()
		meshtest.WaitFor(t, 5*time.Second, "the ping in "+name+"'s queue", func() bool { return len(tr.PacketCh()) > 0 })
		m, err := mesh.New(mesh.Config{
			Name: name, Identity: newID(t), Transport: tr,
			Local:      mesh.NodeState{Tier: mesh.TierEdge, Site: "s", Labels: map[string]string{}},
			Memberlist: meshtest.FastTimings,
			Logger:     slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := <-pinged; err != nil {
			t.Errorf("ping of %s while it started: %v", name, err)
		}
		m.Close()
	}
}
