package mesh_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/meshtest"
)

// syncEvery is memMesh's CatalogSyncInterval: short, so that the shortest
// tombstone TTL it allows (mesh.Config.MinTombstoneTTL, 9.6s) is short.
const syncEvery = 200 * time.Millisecond

// tombstoneTTL is the churn tests' TTL, the shortest round one allowed. A
// shorter one (these tests used 500ms) can be collected everywhere while a
// node still holds the deleted record (the deletion's broadcast waits
// behind hundreds of others, and a sync repairs it only seconds later), and
// that node hands the record back to the others.
const tombstoneTTL = 10 * time.Second

// memMesh starts n nodes on an in-memory network with fast timings, the
// given tombstone TTL and a 100ms maintenance tick, joined to the first.
func memMesh(tb testing.TB, n int, ttl time.Duration) []*mesh.Mesh {
	tb.Helper()
	network := &meshtest.Network{}
	var nodes []*mesh.Mesh
	for i := range n {
		name := fmt.Sprintf("t%02d", i)
		id, err := mesh.NewIdentity()
		if err != nil {
			tb.Fatal(err)
		}
		m, err := mesh.New(mesh.Config{
			Name: name, Identity: id, Transport: network.NewTransport(name),
			Local:                     mesh.NodeState{Tier: mesh.TierEdge, Site: "s", Labels: map[string]string{}},
			Memberlist:                meshtest.FastTimings,
			TombstoneTTL:              ttl,
			CatalogSyncInterval:       syncEvery,
			CoordinatePublishInterval: 100 * time.Millisecond,
		})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { m.Close() })
		if i > 0 {
			if err := m.Join(context.Background(), []string{nodes[0].GossipAddr()}); err != nil {
				tb.Fatal(err)
			}
		}
		nodes = append(nodes, m)
	}
	meshtest.WaitFor(tb, 30*time.Second, "every node sees every other alive", func() bool {
		for _, m := range nodes {
			if m.NumAlive() != n {
				return false
			}
		}
		return true
	})
	return nodes
}

// TestTombstonesCollectedUnderChurn applies and deletes many records from
// every node at once; once the TTL passes, every node's catalog is back to
// the records that stayed, and a deleted record does not come back.
func TestTombstonesCollectedUnderChurn(t *testing.T) {
	t.Parallel()
	nodes := memMesh(t, 3, tombstoneTTL)
	keep := json.RawMessage(`{"keep":true}`)
	if _, err := nodes[0].Put("policies/keep", keep, mesh.PutOptions{Scope: mesh.ScopeGlobal}); err != nil {
		t.Fatal(err)
	}
	meshtest.WaitFor(t, 10*time.Second, "the kept record everywhere", func() bool {
		for _, m := range nodes {
			if _, err := m.Get("policies/keep"); err != nil {
				return false
			}
		}
		return true
	})
	base := nodes[2].CatalogStats()
	for i := range 300 {
		m := nodes[i%len(nodes)]
		key := fmt.Sprintf("policies/churn-%d", i)
		if _, err := m.Put(key, json.RawMessage(`{"replicas":1}`)); err != nil {
			t.Fatal(err)
		}
		if err := m.Delete(key); err != nil {
			t.Fatal(err)
		}
	}
	if st := nodes[0].CatalogStats(); st.Tombstones == 0 {
		t.Fatalf("no tombstones right after the churn: %+v", st)
	}
	meshtest.Poll(t, 60*time.Second, 50*time.Millisecond, "tombstones collected on every node", func() bool {
		for _, m := range nodes {
			if st := m.CatalogStats(); st.Tombstones != 0 || st.Live != base.Live {
				return false
			}
		}
		return true
	}, func() {
		for _, m := range nodes {
			t.Logf("%s: %+v (live before the churn: %d)", m.Name(), m.CatalogStats(), base.Live)
		}
	})
	for _, m := range nodes {
		if st := m.CatalogStats(); st.Bytes > base.Bytes*11/10 {
			t.Errorf("%s: catalog %d bytes after churn, %d before", m.Name(), st.Bytes, base.Bytes)
		}
		if _, err := m.Get("policies/churn-7"); err == nil {
			t.Errorf("%s: a deleted record came back", m.Name())
		}
		if _, err := m.Get("policies/keep"); err != nil {
			t.Errorf("%s: the kept record is gone: %v", m.Name(), err)
		}
	}
}

// TestDependencyMissingUntilReplicated: Missing names a dependency held at
// an older version than the dependent was derived from.
func TestDependencyMissingUntilReplicated(t *testing.T) {
	t.Parallel()
	nodes := memMesh(t, 1, time.Minute)
	m := nodes[0]
	dep := mesh.Dep{Key: "policies/a", Version: 0}
	if got := m.Missing([]mesh.Dep{dep}); len(got) != 1 {
		t.Fatalf("Missing(absent) = %v, want it listed", got)
	}
	e, err := m.Put("policies/a", json.RawMessage(`1`))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Missing([]mesh.Dep{{Key: "policies/a", Version: e.Version}}); len(got) != 0 {
		t.Errorf("Missing(held) = %v, want none", got)
	}
	if got := m.Missing([]mesh.Dep{{Key: "policies/a", Version: e.Version + 1}}); len(got) != 1 {
		t.Errorf("Missing(newer than held) = %v, want it listed", got)
	}
	if err := m.Delete("policies/a"); err != nil {
		t.Fatal(err)
	}
	if got := m.Missing([]mesh.Dep{{Key: "policies/a", Version: e.Version}}); len(got) != 0 {
		t.Errorf("Missing(deleted after) = %v, want none: the reader sees the deletion", got)
	}
}

// BenchmarkCatalogChurn applies and deletes 10,000 policies on a 7-node
// mesh and reports the catalog's size and the bytes of one push/pull
// exchange's catalog before, right after the churn, and once tombstones are
// collected.
func BenchmarkCatalogChurn(b *testing.B) {
	const cycles = 10000
	ttl := tombstoneTTL
	for range b.N {
		nodes := memMesh(b, 7, ttl)
		for i := range 5 {
			if _, err := nodes[i].Put(fmt.Sprintf("policies/base-%d", i), json.RawMessage(`{"replicas":2,"tiers":["edge"]}`)); err != nil {
				b.Fatal(err)
			}
		}
		meshtest.WaitFor(b, 30*time.Second, "base records everywhere", func() bool {
			for _, m := range nodes {
				if m.CatalogStats().Live != 5 {
					return false
				}
			}
			return true
		})
		before := nodes[6].CatalogStats()
		for i := range cycles {
			m := nodes[i%len(nodes)]
			key := fmt.Sprintf("policies/churn-%d", i)
			if _, err := m.Put(key, json.RawMessage(`{"replicas":2,"tiers":["edge"]}`)); err != nil {
				b.Fatal(err)
			}
			if err := m.Delete(key); err != nil {
				b.Fatal(err)
			}
		}
		peak := nodes[6].CatalogStats()
		meshtest.Poll(b, 2*time.Minute, 200*time.Millisecond, "tombstones collected", func() bool {
			for _, m := range nodes {
				if m.CatalogStats().Tombstones != 0 {
					return false
				}
			}
			return true
		}, nil)
		after := nodes[6].CatalogStats()
		b.ReportMetric(float64(before.Bytes), "catalog-bytes-before")
		b.ReportMetric(float64(peak.Bytes), "catalog-bytes-peak")
		b.ReportMetric(float64(after.Bytes), "catalog-bytes-after")
		b.ReportMetric(float64(peak.Tombstones), "tombstones-peak")
		b.ReportMetric(float64(after.Bytes)/float64(before.Bytes), "after/before")
	}
}
