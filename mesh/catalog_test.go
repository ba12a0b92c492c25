package mesh_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/meshtest"
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
