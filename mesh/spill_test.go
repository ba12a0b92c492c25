package mesh_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/meshtest"
	"github.com/strata-mesh/strata/storage"
)

// TestSpilledEntriesReadBack: the entries of a table named in
// Config.Spill, once settled, keep their values in the store alone, and
// every reader still gets them as written: Get, List, Lookup, federation,
// a catalog that decodes them afresh, a member that joins (push/pull) and
// a write over one that Config.Prefer compares. ListMeta lists them without
// their values; the catalog's byte count does not move.
func TestSpilledEntriesReadBack(t *testing.T) {
	t.Parallel()
	num := func(e mesh.Entry) int {
		var v struct{ Epoch int }
		_ = json.Unmarshal(e.Value, &v)
		return v.Epoch
	}
	start := func(name string, seeds ...string) *mesh.Mesh {
		db, err := storage.Open(storage.Options{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		m, err := mesh.New(mesh.Config{Name: name, Identity: newID(t), BindAddr: "127.0.0.1:0", GossipKey: testKey, DB: db,
			Spill: catalog.Cached, Registerer: prometheus.NewRegistry(), Memberlist: meshtest.FastTimings,
			Prefer: func(a, b mesh.Entry) int { return num(a) - num(b) }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close(); db.Close() })
		if len(seeds) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := m.Join(ctx, seeds); err != nil {
				t.Fatal(err)
			}
		}
		return m
	}
	const n = 80 // over loadScanMin: a listing reads them in one scan
	a := start("a")
	b := start("b", a.GossipAddr())
	want := map[string]string{}
	for i := range n {
		pol := fmt.Sprintf("policies/InferenceService/s-%d", i)
		e, err := a.Put(pol, json.RawMessage(fmt.Sprintf(`{"kind":"InferenceService","name":"s-%d"}`, i)), mesh.PutOptions{Scope: mesh.ScopeGlobal})
		if err != nil {
			t.Fatal(err)
		}
		want[pol] = string(e.Value)
		pl := fmt.Sprintf("placements/InferenceService/s-%d", i)
		e, err = a.Put(pl, json.RawMessage(fmt.Sprintf(`{"key":"InferenceService/s-%d","epoch":1}`, i)),
			mesh.PutOptions{Deps: []mesh.Dep{{Key: pol, Version: e.Version}}})
		if err != nil {
			t.Fatal(err)
		}
		want[pl] = string(e.Value)
	}
	if _, err := a.Put("jobs/j", json.RawMessage(`{"name":"j"}`)); err != nil {
		t.Fatal(err)
	}
	want["jobs/j"] = `{"name":"j"}`
	meshtest.WaitFor(t, 20*time.Second, "b to hold every entry", func() bool { return len(b.Keys("")) == len(want) })
	bytesBefore := b.CatalogStats().Bytes

	// Spilled once in the store: b writes what it merges there within a
	// second (Config.PersistInterval).
	spilled := 0
	meshtest.WaitFor(t, 20*time.Second, "b to spill the policies and placements", func() bool {
		spilled += mesh.SpillDue(b)
		return spilled >= 2*n
	})
	if spilled != 2*n {
		t.Fatalf("spilled %d entries, want %d (the policies and placements, not the job)", spilled, 2*n)
	}
	if got := mesh.SpillDue(b); got != 0 {
		t.Errorf("spilled %d again", got)
	}
	if got := b.CatalogStats().Bytes; got != bytesBefore {
		t.Errorf("catalog bytes %d after the spill, %d before", got, bytesBefore)
	}
	check := func(m *mesh.Mesh, what string) {
		t.Helper()
		got := map[string]string{}
		for _, e := range m.List("") {
			got[e.Key] = string(e.Value)
			if g, err := m.Get(e.Key); err != nil || string(g.Value) != want[e.Key] || len(g.Sig) != len(e.Sig) {
				t.Errorf("%s: Get(%s) = %s, %v", what, e.Key, g.Value, err)
			}
			if l, ok := m.Lookup(e.Key); !ok || string(l.Value) != want[e.Key] {
				t.Errorf("%s: Lookup(%s) = %s, %v", what, e.Key, l.Value, ok)
			}
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: List has %s = %q, want %q", what, k, got[k], v)
			}
		}
	}
	check(b, "b, spilled")
	meta := b.ListMeta("placements/")
	if len(meta) != n || !meta[0].Spilled() || meta[0].Value != nil {
		t.Fatalf("ListMeta: %d entries, the first spilled %v with value %q", len(meta), meta[0].Spilled(), meta[0].Value)
	}
	if e, err := b.Load(meta[0]); err != nil || string(e.Value) != want[e.Key] || e.Spilled() {
		t.Errorf("Load(%s) = %s, %v", meta[0].Key, e.Value, err)
	}
	// Federation lists the global ones (the policies) without their
	// values, and reads those it sends.
	global := b.GlobalEntriesMeta()
	if len(global) != n || !global[0].Spilled() {
		t.Fatalf("GlobalEntriesMeta: %d entries, the first spilled %v", len(global), global[0].Spilled())
	}
	if e, err := b.LoadGlobal(global[0]); err != nil || string(e.Value) != want[e.Key] {
		t.Errorf("LoadGlobal(%s) = %s, %v", global[0].Key, e.Value, err)
	}
	if all := b.GlobalEntries(); len(all) != n || string(all[n-1].Value) != want[all[n-1].Key] {
		t.Errorf("GlobalEntries: %d entries", len(all))
	}
	// LoadEach reads the spilled values in one go.
	for _, e := range b.LoadEach("placements/", b.ListMeta("placements/")) {
		if e.Spilled() || string(e.Value) != want[e.Key] {
			t.Errorf("LoadEach: %s spilled %v, %s", e.Key, e.Spilled(), e.Value)
		}
	}
	// A catalog that has decoded nothing reads each value from the store.
	cat := catalog.New(b, nil)
	pls, err := cat.Placements.List()
	if err != nil || len(pls) != n {
		t.Fatalf("catalog placements: %d, %v", len(pls), err)
	}
	if p, err := cat.Placements.Value("InferenceService/s-7"); err != nil || p.Epoch != 1 || p.Key != "InferenceService/s-7" {
		t.Errorf("catalog placement s-7 = %+v, %v", p, err)
	}
	var cur catalog.Cursor
	if ch, _ := cat.Policies.Next(&cur); len(ch) != n {
		t.Errorf("a new reader of the policies read %d, want %d", len(ch), n)
	}

	// A member that joins b alone gets every entry from b's store.
	a.Close()
	c := start("c", b.GossipAddr())
	meshtest.WaitFor(t, 20*time.Second, "c to hold every entry", func() bool { return len(c.Keys("")) == len(want) })
	check(c, "c, joined from b")

	// A placement deleted after it was listed is not found, not
	// undecodable: the catalog leaves it out of its listing.
	stale := staleMeta{Mesh: b, placements: b.ListMeta("placements/")}
	if err := b.Delete("placements/InferenceService/s-9"); err != nil {
		t.Fatal(err)
	}
	if pls, err := catalog.New(stale, nil).Placements.List(); err != nil || len(pls) != n-1 {
		t.Errorf("listed with one deleted since: %d placements, %v; want %d and no error", len(pls), err, n-1)
	}

	// A write over a spilled entry is compared with it (Prefer reads it).
	key := "placements/InferenceService/s-3"
	if _, err := b.Put(key, json.RawMessage(`{"key":"InferenceService/s-3","epoch":0}`)); err == nil {
		t.Errorf("a write of an older epoch over a spilled placement was made")
	}
	if _, err := b.Put(key, json.RawMessage(`{"key":"InferenceService/s-3","epoch":2}`)); err != nil {
		t.Fatal(err)
	}
	if e, err := b.Get(key); err != nil || num(e) != 2 || e.Spilled() {
		t.Errorf("after a newer write: %s, %v", e.Value, err)
	}
	if !slices.ContainsFunc(b.ListMeta("placements/"), func(e mesh.Entry) bool { return e.Key == key && !e.Spilled() }) {
		t.Errorf("the rewritten %s is listed spilled", key)
	}
}

// staleMeta is a mesh whose ListMeta of the placements is one made
// earlier: a reader that listed them just before a change.
type staleMeta struct {
	*mesh.Mesh
	placements []mesh.Entry
}

func (s staleMeta) ListMeta(prefix string) []mesh.Entry {
	if prefix == "placements/" {
		return s.placements
	}
	return s.Mesh.ListMeta(prefix)
}
