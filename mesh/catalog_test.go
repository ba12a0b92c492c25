package mesh_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/meshtest"
	"github.com/strata-mesh/strata/storage"
)

func TestCatalogReplicates(t *testing.T) {
	nodes := cluster(t, 3)
	small := json.RawMessage(`{"replicas":2}`)
	large := json.RawMessage(fmt.Sprintf(`{"yaml":%q}`, strings.Repeat("x", 5000)))
	if _, err := nodes[0].m.Put("policies/a", small); err != nil {
		t.Fatal(err)
	}
	if _, err := nodes[1].m.Put("policies/b", large); err != nil {
		t.Fatal(err)
	}
	meshtest.WaitFor(t, 10*time.Second, "both entries everywhere", func() bool {
		for _, n := range nodes {
			a, errA := n.m.Get("policies/a")
			b, errB := n.m.Get("policies/b")
			if errA != nil || errB != nil || string(a.Value) != string(small) || string(b.Value) != string(large) {
				return false
			}
		}
		return true
	})
	if got := nodes[2].m.List("policies/"); len(got) != 2 || got[0].Key != "policies/a" {
		t.Errorf("List = %v", got)
	}
	// A write counts as a change of its table, here and where it
	// replicates, and of no other table.
	pol, other := nodes[2].m.TableVersion("policies"), nodes[2].m.TableVersion("jobs")
	if _, err := nodes[0].m.Put("policies/d", small); err != nil {
		t.Fatal(err)
	}
	meshtest.WaitFor(t, 10*time.Second, "a third node to count the write", func() bool { return nodes[2].m.TableVersion("policies") > pol })
	if got := nodes[2].m.TableVersion("jobs"); got != other {
		t.Errorf("jobs changed %d times by a write of a policy", got-other)
	}

	// Concurrent writes of one key converge on one value everywhere.
	for i, n := range nodes {
		if _, err := n.m.Put("policies/c", json.RawMessage(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	meshtest.WaitFor(t, 10*time.Second, "one winner for a key written everywhere at once", func() bool {
		first, err := nodes[0].m.Get("policies/c")
		if err != nil {
			return false
		}
		for _, n := range nodes[1:] {
			e, err := n.m.Get("policies/c")
			if err != nil || string(e.Value) != string(first.Value) || e.Version != first.Version {
				return false
			}
		}
		return true
	})

	if err := nodes[2].m.Delete("policies/a"); err != nil {
		t.Fatal(err)
	}
	meshtest.WaitFor(t, 10*time.Second, "the delete everywhere", func() bool {
		for _, n := range nodes {
			if _, err := n.m.Get("policies/a"); !errors.Is(err, mesh.ErrNotFound) {
				return false
			}
		}
		return true
	})

	// A restarted node has the catalog from its store at once.
	v := nodes[1]
	name, dir, id, addr := v.m.Name(), v.dir, v.id, v.m.GossipAddr()
	v.kill()
	back := start(t, name, dir, id, testKey, addr, mesh.TierOnprem)
	if e, err := back.m.Get("policies/b"); err != nil || string(e.Value) != string(large) {
		t.Errorf("after restart Get = %v, %v", e.Key, err)
	}
	if _, err := back.m.Get("policies/a"); !errors.Is(err, mesh.ErrNotFound) {
		t.Errorf("deleted key after restart: err = %v", err)
	}
}

// TestSupersededWriteIsRefused: a write that Config.Prefer ranks below the
// value held is not made (it would be undone wherever the held value is)
// and says so; a delete, and a write ranked above, are made.
func TestSupersededWriteIsRefused(t *testing.T) {
	t.Parallel()
	db, err := storage.Open(storage.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	num := func(e mesh.Entry) int {
		var n int
		_ = json.Unmarshal(e.Value, &n)
		return n
	}
	m, err := mesh.New(mesh.Config{Name: "a", Identity: newID(t), BindAddr: "127.0.0.1:0", DB: db, Registerer: prometheus.NewRegistry(),
		Prefer: func(a, b mesh.Entry) int { return num(a) - num(b) }})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Put("placements/x", json.RawMessage("5")); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Put("placements/x", json.RawMessage("4")); !errors.Is(err, mesh.ErrSuperseded) {
		t.Errorf("older write: err = %v, want ErrSuperseded", err)
	}
	if e, _ := m.Get("placements/x"); num(e) != 5 {
		t.Errorf("held %s after a superseded write, want 5", e.Value)
	}
	if _, err := m.Put("placements/x", json.RawMessage("6")); err != nil {
		t.Errorf("newer write: %v", err)
	}
	if err := m.Delete("placements/x"); err != nil {
		t.Errorf("delete: %v", err)
	}
	if _, err := m.Put("placements/x", json.RawMessage("1")); err != nil {
		t.Errorf("write after a delete: %v", err)
	}
}

// TestNotifySendsAtOnce: a write's Notify names members that act on it
// next. With gossip, probes and anti-entropy all off, the only way an
// entry leaves its writer is that direct send: the notified member gets
// it, with the entry it depends on, and the other member gets nothing.
func TestNotifySendsAtOnce(t *testing.T) {
	t.Parallel()
	quiet := func(c *memberlist.Config) {
		meshtest.FastTimings(c)
		c.ProbeInterval, c.GossipInterval, c.PushPullInterval = time.Hour, time.Hour, time.Hour
	}
	var nodes []*mesh.Mesh
	for _, name := range []string{"writer", "told", "other"} {
		db, err := storage.Open(storage.Options{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		m, err := mesh.New(mesh.Config{Name: name, Identity: newID(t), BindAddr: "127.0.0.1:0", GossipKey: testKey, DB: db,
			Local: mesh.NodeState{Tier: mesh.TierEdge, Site: "s"}, Memberlist: quiet, CatalogSyncInterval: time.Hour, TombstoneTTL: 4 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close(); db.Close() })
		nodes = append(nodes, m)
	}
	writer, told, other := nodes[0], nodes[1], nodes[2]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, m := range []*mesh.Mesh{told, other} {
		if err := m.Join(ctx, []string{writer.GossipAddr()}); err != nil {
			t.Fatal(err)
		}
	}
	meshtest.WaitFor(t, 10*time.Second, "the writer to see both alive", func() bool {
		return statusOf(writer, "told") == mesh.StatusAlive && statusOf(writer, "other") == mesh.StatusAlive
	})
	dep, err := writer.Put("policies/p", json.RawMessage(`{"v":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := writer.Put("placements/p", json.RawMessage(`{"epoch":1}`), mesh.PutOptions{
		Deps: []mesh.Dep{{Key: dep.Key, Version: dep.Version}}, Notify: []string{"told", "writer", "nobody"}}); err != nil {
		t.Fatal(err)
	}
	meshtest.WaitFor(t, 10*time.Second, "the notified member to hold the entry and what it depends on", func() bool {
		_, errP := told.Get("placements/p")
		_, errD := told.Get("policies/p")
		return errP == nil && errD == nil
	})
	for _, key := range []string{"placements/p", "policies/p"} {
		if _, err := other.Get(key); err == nil {
			t.Errorf("%s reached a member not notified, with gossip off", key)
		}
	}
}
