package catalog

import (
	"reflect"
	"testing"

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

// TestChangedDecodesWhatChanged: Changed hands back only the records whose
// version moved since the versions it was given, and every live version.
func TestChangedDecodesWhatChanged(t *testing.T) {
	t.Parallel()
	c := New(catalogtest.NewStore(), nil)
	for _, name := range []string{"a", "b"} {
		if _, err := c.Jobs.Put(Job{Name: name, State: JobRunning}); err != nil {
			t.Fatal(err)
		}
	}
	changed, now := c.Jobs.Changed(nil)
	if len(changed) != 2 || len(now) != 2 {
		t.Fatalf("first look: %d changed, %d versions; want 2 and 2", len(changed), len(now))
	}
	if changed, _ := c.Jobs.Changed(now); len(changed) != 0 {
		t.Errorf("nothing written: %d changed", len(changed))
	}
	if _, err := c.Jobs.Put(Job{Name: "b", State: JobSucceeded}); err != nil {
		t.Fatal(err)
	}
	if err := c.Jobs.Delete("a"); err != nil {
		t.Fatal(err)
	}
	changed, now = c.Jobs.Changed(now)
	if len(changed) != 1 || changed[0].Value.State != JobSucceeded || len(now) != 1 {
		t.Errorf("b rewritten, a deleted: changed %+v, versions %v; want b alone", changed, now)
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
