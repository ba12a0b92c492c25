package catalog

import (
	"errors"
	"reflect"
	"testing"
	"time"
	"unsafe"

	"github.com/strata-mesh/strata/internal/catalog/catalogtest"
)

// TestCachedValuesAreCopies: the tables that keep decoded values hand each
// caller a copy it may change: every slice and map of a Placement is
// cloned (its Scale too), and a Policy has none to share. A field added to either that a
// caller could change in place fails here until clone copies it.
func TestCachedValuesAreCopies(t *testing.T) {
	t.Parallel()
	for _, typ := range []reflect.Type{reflect.TypeFor[Policy](), reflect.TypeFor[Placement]()} {
		for f := range typ.Fields() {
			switch f.Type.Kind() {
			case reflect.Slice, reflect.Map, reflect.Pointer, reflect.Interface:
				if typ == reflect.TypeFor[Policy]() {
					t.Errorf("Policy.%s is a %s: give Policy a clone that copies it", f.Name, f.Type.Kind())
				}
			}
		}
	}
	p := Placement{Nodes: []PlacedNode{{Name: "a"}}, Fallbacks: make([]Fallback, 1), Rejected: map[Reason]int{"x": 1}, Refused: map[string]string{"a": "b"},
		Scale: &Scale{Replicas: 2}}
	c := p.clone()
	v, w := reflect.ValueOf(p), reflect.ValueOf(c)
	for i := range v.NumField() {
		switch f := v.Field(i); f.Kind() {
		case reflect.Slice, reflect.Map, reflect.Pointer:
			if f.IsNil() {
				t.Fatalf("the test's Placement leaves %s nil: fill it in", v.Type().Field(i).Name)
			}
			if f.Pointer() == w.Field(i).Pointer() {
				t.Errorf("Placement.clone shares %s", v.Type().Field(i).Name)
			}
		case reflect.Interface:
			t.Errorf("Placement.%s is a %s: clone must copy it", v.Type().Field(i).Name, f.Kind())
		}
	}

	// Read twice, changed in place by the first reader: the second reads
	// what was written.
	cat := New(catalogtest.NewStore(), nil)
	if _, err := cat.Placements.Put(Placement{Key: "K/x", Nodes: []PlacedNode{{Name: "a"}}}); err != nil {
		t.Fatal(err)
	}
	first, _ := cat.Placements.Value("K/x")
	first.Nodes[0].Name = "changed"
	if again, _ := cat.Placements.Value("K/x"); again.Nodes[0].Name != "a" {
		t.Errorf("second read sees %q: the first reader's change reached the cache", again.Nodes[0].Name)
	}
}

// TestNextDecodesWhatChanged: Next hands back only the records written
// since the cursor last read, and the keys gone since, over a store that
// remembers its changes (read by key); over one that does not, every live
// record each time the table changed, and says it listed the table
// afresh.
func TestNextDecodesWhatChanged(t *testing.T) {
	t.Parallel()
	names := func(recs []Record[Job]) []string {
		var out []string
		for _, r := range recs {
			out = append(out, r.Key+"="+r.Value.State)
		}
		return out
	}
	for name, store := range map[string]Store{"by key": catalogtest.NewStore(), "listed": catalogtest.Relisting{S: catalogtest.NewStore()}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			byKey := name == "by key"
			c := New(store, nil)
			for _, name := range []string{"a", "b", "c"} {
				if _, err := c.Jobs.Put(Job{Name: name, State: JobRunning}); err != nil {
					t.Fatal(err)
				}
			}
			var cur Cursor
			changed, gone := c.Jobs.Next(&cur)
			if len(changed) != 3 || len(gone) != 0 || !cur.Relisted() {
				t.Fatalf("first look: %d changed, %d gone, relisted %v; want 3, 0, true", len(changed), len(gone), cur.Relisted())
			}
			if changed, gone := c.Jobs.Next(&cur); len(changed)+len(gone) != 0 || cur.Relisted() {
				t.Errorf("nothing written: %d changed, %d gone, relisted %v", len(changed), len(gone), cur.Relisted())
			}
			for _, j := range []Job{{Name: "b", State: JobSucceeded}, {Name: "b", State: JobFailed}} {
				if _, err := c.Jobs.Put(j); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Jobs.Delete("a"); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Rollouts.Put(Rollout{Policy: "K/x"}); err != nil { // another table
				t.Fatal(err)
			}
			changed, gone = c.Jobs.Next(&cur)
			want, wantGone := []string{"b=failed"}, []string{"a"}
			if !byKey {
				want, wantGone = []string{"b=failed", "c=running"}, nil
			}
			if !reflect.DeepEqual(names(changed), want) || !reflect.DeepEqual(gone, wantGone) || cur.Relisted() == byKey {
				t.Errorf("b written twice, a deleted: changed %v, gone %v, relisted %v; want %v, %v", names(changed), gone, cur.Relisted(), want, wantGone)
			}
			// c rewritten by an agent of a major this one does not read:
			// what was read of it no longer holds.
			putAt := func(key string, v []byte, schema string) {
				switch s := store.(type) {
				case *catalogtest.Store:
					s.PutAt(key, v, schema)
				case catalogtest.Relisting:
					s.S.PutAt(key, v, schema)
				}
			}
			putAt("jobs/c", []byte(`{"name":"c","state":"running"}`), "9.0")
			changed, gone = c.Jobs.Next(&cur)
			want = nil
			if !byKey {
				want = []string{"b=failed"}
			}
			if !reflect.DeepEqual(names(changed), want) || !reflect.DeepEqual(gone, []string{"c"}) {
				t.Errorf("c no longer decodes: changed %v, gone %v; want %v and c gone", names(changed), gone, want)
			}
			if changed, gone := c.Jobs.Next(&cur); len(changed)+len(gone) != 0 {
				t.Errorf("nothing written since: %d changed, %d gone", len(changed), len(gone))
			}
		})
	}
}

// TestSelectCopiesWhatItKeeps: Select hands back the records keep chose,
// as copies a caller may change, and Keys lists every live key.
func TestSelectCopiesWhatItKeeps(t *testing.T) {
	t.Parallel()
	cat := New(catalogtest.NewStore(), nil)
	for _, k := range []string{"K/a", "K/b", "J/c"} {
		if _, err := cat.Placements.Put(Placement{Key: k, Nodes: []PlacedNode{{Name: "n"}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cat.Placements.Delete("K/b"); err != nil {
		t.Fatal(err)
	}
	var shown []string
	got, err := cat.Placements.Select(func(key string, p Placement) bool {
		shown = append(shown, key)
		return key[0] == 'K'
	})
	if err != nil || len(got) != 1 || got[0].Key != "K/a" || !reflect.DeepEqual(shown, []string{"J/c", "K/a"}) {
		t.Fatalf("Select: %v %v after showing %v; want K/a alone, after showing the live J/c and K/a", got, err, shown)
	}
	got[0].Value.Nodes[0].Name = "changed"
	if again, _ := cat.Placements.Value("K/a"); again.Nodes[0].Name != "n" {
		t.Errorf("a change to Select's copy reached the table: %q", again.Nodes[0].Name)
	}
	if keys := cat.Placements.Keys(); !reflect.DeepEqual(keys, []string{"J/c", "K/a"}) {
		t.Errorf("Keys = %v, want [J/c K/a]", keys)
	}
}

// TestSharedHandsOutWhatItKeeps: SharedValue hands out the value a cached
// table keeps (the same one on each call while nothing changed), and a
// table without a cache's as a copy.
func TestSharedHandsOutWhatItKeeps(t *testing.T) {
	t.Parallel()
	cat := New(catalogtest.NewStore(), nil)
	for _, name := range []string{"b", "a", "c"} {
		if _, err := cat.Policies.Put(Policy{Kind: "K", Name: name, Source: "s"}); err != nil {
			t.Fatal(err)
		}
		if _, err := cat.Jobs.Put(Job{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cat.Policies.Delete("K/c"); err != nil {
		t.Fatal(err)
	}
	one, err := cat.Policies.SharedValue("K/a")
	two, _ := cat.Policies.SharedValue("K/a")
	if err != nil || one.Name != "a" {
		t.Fatalf("SharedValue(K/a) = %v, %v", one, err)
	}
	if one != two {
		t.Error("two reads of an unchanged record hand out different values")
	}
	if _, err := cat.Policies.SharedValue("K/c"); !errors.Is(err, ErrNotFound) {
		t.Errorf("SharedValue of a deleted record: %v, want ErrNotFound", err)
	}
	job, err := cat.Jobs.SharedValue("a")
	if err != nil || job.Name != "a" {
		t.Fatalf("Jobs.SharedValue(a) = %v, %v", job, err)
	}
	job.Name = "changed"
	if j, _ := cat.Jobs.Value("a"); j.Name != "a" {
		t.Errorf("a change to an uncached table's value reached it: %q", j.Name)
	}
}

// TestPrefixReadsOneKind: Prefix hands back the live records under a key
// prefix, sorted, as copies a caller may change.
func TestPrefixReadsOneKind(t *testing.T) {
	t.Parallel()
	cat := New(catalogtest.NewStore(), nil)
	for _, k := range []string{"K/b", "K/a", "KK/c", "J/d", "K/e"} {
		if _, err := cat.Placements.Put(Placement{Key: k, Nodes: []PlacedNode{{Name: "n"}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cat.Placements.Delete("K/e"); err != nil {
		t.Fatal(err)
	}
	got, err := cat.Placements.Prefix("K/")
	var keys []string
	for _, r := range got {
		keys = append(keys, r.Key)
	}
	if err != nil || !reflect.DeepEqual(keys, []string{"K/a", "K/b"}) {
		t.Fatalf("Prefix(K/) = %v, %v; want K/a and K/b", keys, err)
	}
	got[0].Value.Nodes[0].Name = "changed"
	if again, _ := cat.Placements.Value("K/a"); again.Nodes[0].Name != "n" {
		t.Errorf("a change to Prefix's copy reached the table: %q", again.Nodes[0].Name)
	}
}

// TestListKeptUntilTheTableChanges: a table with a clone keeps its last
// list while the store's count of its changes stands, and lists afresh
// after any write to it, over the mesh's own store as over the test's.
func TestListKeptUntilTheTableChanges(t *testing.T) {
	t.Parallel()
	store := catalogtest.NewStore()
	cat := New(store, nil)
	put := func(name string) {
		t.Helper()
		if _, err := cat.Policies.Put(Policy{Kind: "K", Name: name, Generation: 1}); err != nil {
			t.Fatal(err)
		}
	}
	names := func() []string {
		t.Helper()
		ps, err := cat.Policies.Values()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range ps {
			out = append(out, p.Name)
		}
		return out
	}
	put("a")
	if got := names(); !reflect.DeepEqual(got, []string{"a"}) {
		t.Fatalf("listed %v, want [a]", got)
	}
	kept := cat.Policies.listed.recs
	if got := names(); !reflect.DeepEqual(got, []string{"a"}) || &cat.Policies.listed.recs[0] != &kept[0] {
		t.Fatalf("listed %v again, or listed afresh with nothing changed", got)
	}
	put("b")
	if got := names(); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("after a write: listed %v, want [a b]", got)
	}
	if err := cat.Policies.Delete("K/a"); err != nil {
		t.Fatal(err)
	}
	if got := names(); !reflect.DeepEqual(got, []string{"b"}) {
		t.Errorf("after a delete: listed %v, want [b]", got)
	}
	store.PutAt("policies/K/c", []byte(`{"kind":"K","name":"c","generation":1}`), "9.0")
	if got, err := cat.Policies.List(); len(got) != 1 || err == nil {
		t.Errorf("after a write of another major: %d records, error %v; want b alone and a decode error", len(got), err)
	}
}

// cachedName is t's name, and whether it keeps what it decodes.
func (t *Table[T]) cachedName() (string, bool) { return t.name, t.clone != nil }

// TestCachedNamesTheCachedTables: Cached, which a store may keep on disk
// alone, names exactly the tables that keep what they decode.
func TestCachedNamesTheCachedTables(t *testing.T) {
	t.Parallel()
	c := New(catalogtest.NewStore(), nil)
	var got []string
	v := reflect.ValueOf(c).Elem()
	for i := range v.NumField() {
		if !v.Type().Field(i).IsExported() {
			continue
		}
		tab, ok := v.Field(i).Interface().(interface{ cachedName() (string, bool) })
		if !ok {
			continue
		}
		if name, ok := tab.cachedName(); ok {
			got = append(got, name)
		}
	}
	if !reflect.DeepEqual(got, Cached) {
		t.Errorf("tables that keep what they decode: %v; Cached says %v", got, Cached)
	}
}

// TestKeptPlacementsShareWhatRepeats: placements kept decoded share
// their equal strings and rejection counts, and a reader that changes
// its copy changes neither the kept records nor another reader's.
func TestKeptPlacementsShareWhatRepeats(t *testing.T) {
	t.Parallel()
	cat := New(catalogtest.NewStore(), nil)
	for _, key := range []string{"K/a", "K/b"} {
		p := Placement{Key: key, Kind: "K", Owner: "edge-1", State: "placed", Message: "every node admitted the work",
			Nodes: []PlacedNode{{Name: "edge-2", ID: "id-2", Tier: "edge", Site: "s", Replica: "serving"}}, Rejected: map[Reason]int{"not_selected": 2}}
		if _, err := cat.Placements.Put(p); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := cat.Placements.sharedList()
	if err != nil || len(recs) != 2 {
		t.Fatalf("listed %d, %v", len(recs), err)
	}
	a, b := recs[0].Value, recs[1].Value
	if unsafe.StringData(a.Message) != unsafe.StringData(b.Message) || unsafe.StringData(a.Nodes[0].ID) != unsafe.StringData(b.Nodes[0].ID) {
		t.Errorf("equal strings of two kept placements are held twice")
	}
	if reflect.ValueOf(a.Rejected).Pointer() != reflect.ValueOf(b.Rejected).Pointer() {
		t.Errorf("equal rejection counts of two kept placements are held twice")
	}
	got, _ := cat.Placements.Value("K/a")
	got.Rejected["not_selected"] = 99
	if other, _ := cat.Placements.Value("K/b"); other.Rejected["not_selected"] != 2 {
		t.Errorf("a reader's change to its copy reached another placement: %v", other.Rejected)
	}
}

// withID is a store that names the node it belongs to, as the mesh does.
type withID struct {
	*catalogtest.Store
	id string
}

func (s withID) ID() string { return s.id }

// TestPlacementsKeepWhatThisNodeWrote: a node keeps decoded for good the
// placements it wrote (its controller reads them every pass), and the
// others only while they are read: two agings without a read drop one,
// and a read after that decodes it again.
func TestPlacementsKeepWhatThisNodeWrote(t *testing.T) {
	t.Parallel()
	held := func(tab *Table[Placement]) int {
		tab.mu.Lock()
		defer tab.mu.Unlock()
		return len(tab.decoded) + len(tab.old)
	}
	age := func(tab *Table[Placement], by time.Duration) {
		tab.mu.Lock()
		defer tab.mu.Unlock()
		tab.ageLocked(tab.aged.Add(by))
	}
	for _, tc := range []struct {
		id   string // the node's ID; the store writes as "test"
		kept bool
	}{{"test", true}, {"elsewhere", false}} {
		t.Run(tc.id, func(t *testing.T) {
			t.Parallel()
			cat := New(withID{catalogtest.NewStore(), tc.id}, nil)
			tab := cat.Placements
			for _, k := range []string{"K/a", "K/b"} {
				if _, err := tab.Put(Placement{Key: k, State: StatePlaced}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := tab.List(); err != nil || held(tab) != 2 {
				t.Fatalf("listed: %d held, err %v; want 2", held(tab), err)
			}
			age(tab, agingGap)
			if _, err := tab.Value("K/a"); err != nil { // read: kept another gap
				t.Fatal(err)
			}
			age(tab, agingGap)
			want := 1
			if tc.kept {
				want = 2
			}
			if n := held(tab); n != want {
				t.Errorf("after two agings, K/a read between: %d held, want %d", n, want)
			}
			age(tab, agingGap)
			want = 0
			if tc.kept {
				want = 2
			}
			if n := held(tab); n != want {
				t.Errorf("after three agings: %d held, want %d", n, want)
			}
			age(tab, agingGap/2) // not yet a gap: nothing moves
			if p, err := tab.Value("K/b"); err != nil || p.State != StatePlaced {
				t.Fatalf("K/b read again: %+v, %v", p, err)
			}
			want = 1 // K/b, decoded again
			if tc.kept {
				want = 2
			}
			if n := held(tab); n != want {
				t.Errorf("K/b read again: %d held, want %d", n, want)
			}
		})
	}
}
