package mesh_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/meshtest"
	"github.com/strata-mesh/strata/storage"
)

var testKey = bytes.Repeat([]byte{7}, 32)

type node struct {
	m    *mesh.Mesh
	db   *storage.DB
	dir  string
	id   mesh.Identity
	reg  *prometheus.Registry
	logs *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs a mesh node on loopback with real sockets. bind "" picks a port.
func start(tb testing.TB, name, dir string, id mesh.Identity, key []byte, bind string, tier string, tweaks ...func(*mesh.Config)) *node {
	tb.Helper()
	db, err := storage.Open(storage.Options{Dir: dir})
	if err != nil {
		tb.Fatal(err)
	}
	if bind == "" {
		bind = "127.0.0.1:0"
	}
	n := &node{db: db, dir: dir, id: id, reg: prometheus.NewRegistry(), logs: &syncBuffer{}}
	cfg := mesh.Config{
		Name:        name,
		Identity:    id,
		BindAddr:    bind,
		GossipKey:   key,
		Local:       mesh.NodeState{Tier: tier, Site: "site-" + tier, Region: "r1", Labels: map[string]string{"role": "test"}},
		DB:          db,
		Registerer:  n.reg,
		Logger:      slog.New(slog.NewTextHandler(n.logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Memberlist:  meshtest.FastTimings,
		RejoinGrace: 2 * time.Second,
	}
	for _, tw := range tweaks {
		tw(&cfg)
	}
	n.m, err = mesh.New(cfg)
	if err != nil {
		db.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() { n.kill() })
	return n
}

func (n *node) kill() {
	n.m.Close()
	n.db.Close()
}

func newID(tb testing.TB) mesh.Identity {
	tb.Helper()
	id, err := mesh.NewIdentity()
	if err != nil {
		tb.Fatal(err)
	}
	return id
}

func statusOf(m *mesh.Mesh, name string) mesh.Status {
	n, err := m.Node(name)
	if err != nil {
		return ""
	}
	return n.Status
}

func cluster(t *testing.T, n int) []*node {
	t.Helper()
	tiers := []string{mesh.TierEdge, mesh.TierOnprem, mesh.TierCloud}
	var nodes []*node
	for i := range n {
		nodes = append(nodes, start(t, "n"+string(rune('a'+i)), t.TempDir(), newID(t), testKey, "", tiers[i%3]))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, nd := range nodes[1:] {
		if err := nd.m.Join(ctx, []string{nodes[0].m.GossipAddr()}); err != nil {
			t.Fatal(err)
		}
	}
	meshtest.WaitFor(t, 10*time.Second, "every node to see every other alive with its document", func() bool {
		for _, a := range nodes {
			for _, b := range nodes {
				if statusOf(a.m, b.m.Name()) != mesh.StatusAlive {
					return false
				}
				got, _ := a.m.Node(b.m.Name())
				if got.Tier != b.m.Local().Tier {
					return false
				}
			}
		}
		return true
	})
	return nodes
}

func TestJoinConvergeAndPropagate(t *testing.T) {
	nodes := cluster(t, 4)
	for _, a := range nodes {
		got, err := a.m.Node(nodes[2].m.ID())
		if err != nil {
			t.Fatalf("%s: lookup by ID: %v", a.m.Name(), err)
		}
		if got.Name != nodes[2].m.Name() || got.Site != "site-"+got.Tier {
			t.Errorf("%s sees %s as %+v", a.m.Name(), nodes[2].m.Name(), got.NodeState)
		}
	}

	if err := nodes[1].m.Update(func(s *mesh.NodeState) { s.Labels["gpu-health"] = "degraded" }); err != nil {
		t.Fatal(err)
	}
	want := nodes[1].m.Local().Version
	meshtest.WaitFor(t, 10*time.Second, "the label change to reach every node", func() bool {
		for _, a := range nodes {
			got, err := a.m.Node(nodes[1].m.Name())
			if err != nil || got.Labels["gpu-health"] != "degraded" || got.Version != want {
				return false
			}
		}
		return true
	})
}

func TestLargeDocumentTravelsByFetch(t *testing.T) {
	nodes := cluster(t, 3)
	// 16 GPUs with long names: far over a gossip packet, so the change can
	// only travel by the meta digest and a fetch (or push/pull).
	err := nodes[0].m.Update(func(s *mesh.NodeState) {
		for i := range 16 {
			s.Capabilities.GPUs = append(s.Capabilities.GPUs, mesh.GPU{Index: i, UUID: strings.Repeat("f", 40), Model: "NVIDIA H100 80GB HBM3", Memory: 80 << 30, Healthy: true, Source: mesh.SourceDeclared})
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	meshtest.WaitFor(t, 10*time.Second, "16 GPUs to be seen everywhere", func() bool {
		for _, a := range nodes {
			got, err := a.m.Node(nodes[0].m.Name())
			if err != nil || len(got.Capabilities.GPUs) != 16 {
				return false
			}
		}
		return true
	})
}

// TestCompressedAndPlainGossipMix joins a member that compresses gossip
// to one that does not: each reads the other's large document (fetched
// over TCP) and large catalog entry.
func TestCompressedAndPlainGossipMix(t *testing.T) {
	a := start(t, "zip", t.TempDir(), newID(t), testKey, "", mesh.TierEdge, func(c *mesh.Config) { c.Compress = true })
	b := start(t, "plain", t.TempDir(), newID(t), testKey, "", mesh.TierCloud)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.m.Join(ctx, []string{a.m.GossipAddr()}); err != nil {
		t.Fatal(err)
	}
	for i, n := range []*node{a, b} {
		err := n.m.Update(func(s *mesh.NodeState) {
			for j := range 16 {
				s.Capabilities.GPUs = append(s.Capabilities.GPUs, mesh.GPU{Index: j, UUID: strings.Repeat("f", 40), Model: "NVIDIA H100 80GB HBM3", Memory: 80 << 30, Healthy: true, Source: mesh.SourceDeclared})
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.m.Put(fmt.Sprintf("policies/p%d", i), []byte(fmt.Sprintf(`{"yaml":%q}`, strings.Repeat("y", 3000)))); err != nil {
			t.Fatal(err)
		}
	}
	meshtest.WaitFor(t, 15*time.Second, "each member's document and entry at the other", func() bool {
		for _, pair := range [][2]*node{{a, b}, {b, a}} {
			got, err := pair[0].m.Node(pair[1].m.Name())
			if err != nil || len(got.Capabilities.GPUs) != 16 || len(pair[0].m.List("policies/")) != 2 {
				return false
			}
		}
		return true
	})
}

// TestConcurrentWritesStoreTheLatest writes one key from many goroutines
// at once, each write synced outside the mesh's lock: after a restart the
// store holds the last version written. (A slower write putting an older
// version back needs an interleaving this rarely produces; the test
// checks that every write is stored, and the latest last.)
func TestConcurrentWritesStoreTheLatest(t *testing.T) {
	dir, id := t.TempDir(), newID(t)
	n := start(t, "w", dir, id, testKey, "", mesh.TierEdge)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				if _, err := n.m.Put("policies/p", []byte(fmt.Sprintf(`{"g":%d,"i":%d}`, g, i))); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	want, ok := n.m.Lookup("policies/p")
	if !ok {
		t.Fatal("policies/p not held")
	}
	n.kill()
	again := start(t, "w", dir, id, testKey, "", mesh.TierEdge)
	got, ok := again.m.Lookup("policies/p")
	if !ok || got.Version != want.Version || !bytes.Equal(got.Value, want.Value) {
		t.Errorf("after a restart: version %d %s; want the last written, %d %s", got.Version, got.Value, want.Version, want.Value)
	}
}

// TestUnsyncedWriteStored: a write stored without waiting for the disk is
// in the store after the agent stops, as a synced one is.
func TestUnsyncedWriteStored(t *testing.T) {
	dir, id := t.TempDir(), newID(t)
	n := start(t, "u", dir, id, testKey, "", mesh.TierEdge)
	want, err := n.m.Put("placements/p", []byte(`{"epoch":1}`), mesh.PutOptions{Unsynced: true})
	if err != nil {
		t.Fatal(err)
	}
	n.kill()
	again := start(t, "u", dir, id, testKey, "", mesh.TierEdge)
	if got, ok := again.m.Lookup("placements/p"); !ok || got.Version != want.Version {
		t.Errorf("after a restart: %+v (held %v); want version %d", got, ok, want.Version)
	}
}

func TestKilledNodeFailsAndRestartsWithSameIdentity(t *testing.T) {
	nodes := cluster(t, 3)
	victim := nodes[2]
	name, id, dir := victim.m.Name(), victim.m.ID(), victim.dir
	addr := victim.m.GossipAddr()
	oldVersion := victim.m.Local().Version
	victim.kill() // no Leave: what the others see after SIGKILL

	// Each node of the cluster is a site of its own, so with the victim
	// its whole site is gone: unreachable, the status of a failed node
	// whose site has no other node that answers.
	sawSuspect := false
	meshtest.WaitFor(t, 15*time.Second, "the killed node to be failed (its site unreachable) everywhere", func() bool {
		a, b := statusOf(nodes[0].m, name), statusOf(nodes[1].m, name)
		sawSuspect = sawSuspect || a == mesh.StatusSuspect || b == mesh.StatusSuspect
		return a == mesh.StatusUnreachable && b == mesh.StatusUnreachable
	})
	// The agent whose probe failed first reports suspect until the
	// suspicion timeout (at least 400ms with these timings).
	if !sawSuspect {
		t.Error("no agent reported the killed node suspect before failed")
	}

	// Restart from the same data dir and address: same ID, and a version
	// past every earlier one so its document wins.
	back := start(t, name, dir, victim.id, testKey, addr, mesh.TierCloud)
	if back.m.ID() != id {
		t.Fatalf("restarted ID = %s, want %s", back.m.ID(), id)
	}
	if v := back.m.Local().Version; v <= oldVersion {
		t.Fatalf("restarted version %d not past %d", v, oldVersion)
	}
	// The restarted node knows its peers from its store before rejoining.
	if got, err := back.m.Node(nodes[0].m.Name()); err != nil || got.Status != mesh.StatusUnknown {
		t.Errorf("before rejoin, stored peer = %+v, %v; want status unknown", got.Status, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := back.m.Join(ctx, nil); err != nil { // seeds from the store
		t.Fatal(err)
	}
	meshtest.WaitFor(t, 15*time.Second, "the restarted node to be alive everywhere", func() bool {
		return statusOf(nodes[0].m, name) == mesh.StatusAlive && statusOf(nodes[1].m, name) == mesh.StatusAlive &&
			statusOf(back.m, nodes[0].m.Name()) == mesh.StatusAlive
	})
	got, _ := nodes[0].m.Node(name)
	if got.ID != id {
		t.Errorf("peers see ID %s, want %s", got.ID, id)
	}
}

func TestLeaveIsLeft(t *testing.T) {
	nodes := cluster(t, 3)
	if err := nodes[2].m.Leave(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	name := nodes[2].m.Name()
	nodes[2].kill()
	meshtest.WaitFor(t, 10*time.Second, "the node that left to be left everywhere", func() bool {
		return statusOf(nodes[0].m, name) == mesh.StatusLeft && statusOf(nodes[1].m, name) == mesh.StatusLeft
	})
}

func TestWrongGossipKeyIsRefusedAndCounted(t *testing.T) {
	good := start(t, "good", t.TempDir(), newID(t), testKey, "", mesh.TierEdge)
	for _, tc := range []struct {
		name string
		key  []byte
	}{
		{"wrong-key", bytes.Repeat([]byte{9}, 32)},
		{"no-key", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := start(t, tc.name, t.TempDir(), newID(t), tc.key, "", mesh.TierEdge)
			ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
			defer cancel()
			if err := bad.m.Join(ctx, []string{good.m.GossipAddr()}); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("join with %s: err = %v, want it to keep failing until the deadline", tc.name, err)
			}
			if _, err := good.m.Node(tc.name); err == nil {
				t.Errorf("good node knows %s", tc.name)
			}
			if len(good.m.Members()) != 1 {
				t.Errorf("good node members = %v, want only itself", good.m.Members())
			}
			meshtest.WaitFor(t, 5*time.Second, "the refusal to be counted", func() bool {
				return counterValue(t, good.reg, "strata_gossip_refused_total") > 0
			})
		})
	}
	if !strings.Contains(good.logs.String(), "refused gossip") {
		t.Errorf("refusal not logged; logs:\n%s", good.logs.String())
	}
	if n := strings.Count(good.logs.String(), "refused gossip"); n > 2 {
		t.Errorf("refusal logged %d times; want it rate-limited", n)
	}
}

func counterValue(tb testing.TB, reg *prometheus.Registry, name string) float64 {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

func TestRTTEstimates(t *testing.T) {
	nodes := cluster(t, 3)
	a, b := nodes[1].m.Name(), nodes[2].m.Name()
	// Any node can estimate between two others once coordinates spread.
	meshtest.WaitFor(t, 15*time.Second, "coordinates of both nodes at a third", func() bool {
		_, err := nodes[0].m.RTT(a, b)
		return err == nil
	})
	rtt, err := nodes[0].m.RTT(a, b)
	if err != nil {
		t.Fatal(err)
	}
	// On loopback, real RTTs are well under 10ms; the estimate must be too.
	if rtt < 0 || rtt > 10*time.Millisecond {
		t.Errorf("RTT(%s,%s) = %s, want within [0, 10ms] on loopback", a, b, rtt)
	}
	// A node is 0 from itself, by name or ID, although its coordinate's
	// distance to itself is twice its height.
	if rtt, err := nodes[0].m.RTT(a, nodes[1].m.ID()); err != nil || rtt != 0 {
		t.Errorf("RTT(%s, itself) = %s, %v; want 0", a, rtt, err)
	}
	if _, err := nodes[0].m.RTT(a, "nope"); !errors.Is(err, mesh.ErrUnknownNode) {
		t.Errorf("RTT to unknown node: err = %v, want ErrUnknownNode", err)
	}
}

func TestConfigValidate(t *testing.T) {
	c := mesh.Config{BindAddr: "nope", GossipKey: []byte{1, 2, 3}, TombstoneTTL: 10 * time.Second}
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate accepted a bad config")
	}
	for _, want := range []string{"Name is required", "Identity is required", "bind address", "gossip key must be 16, 24 or 32 bytes",
		"TombstoneTTL 10s is shorter than 24s (three catalog syncs)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate error %q lacks %q", err, want)
		}
	}
	if _, err := mesh.DecodeGossipKey("!!"); err == nil {
		t.Error("DecodeGossipKey accepted non-base64")
	}
}

// TestBurstOfWritesReachesPeersPastTheQueueBound: a burst of writes longer
// than the broadcast queue's bound is pruned from the queue, and every
// write still reaches the peer (by the bucket repair).
func TestBurstOfWritesReachesPeersPastTheQueueBound(t *testing.T) {
	nodes := cluster(t, 2)
	const n = 3000
	for i := range n {
		if _, err := nodes[0].m.Put(fmt.Sprintf("policies/p-%d", i), []byte(`{}`), mesh.PutOptions{Unsynced: true}); err != nil {
			t.Fatal(err)
		}
	}
	if got := counterValue(t, nodes[0].reg, "strata_gossip_broadcasts_pruned_total"); got == 0 {
		t.Errorf("%d writes in a burst pruned no broadcast", n)
	}
	meshtest.WaitFor(t, 30*time.Second, "every write at the peer", func() bool {
		return len(nodes[1].m.List("policies/")) == n
	})
}
