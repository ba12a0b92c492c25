package mesh

import "testing"

func TestParseSchema(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Schema{"": SchemaBase, "1.0": {1, 0}, "1.1": {1, 1}, "2.13": {2, 13}} {
		if got, err := ParseSchema(in); err != nil || got != want {
			t.Errorf("ParseSchema(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"1", "1.", ".1", "a.b", "1.-1", "1.1.1"} {
		if _, err := ParseSchema(in); err == nil {
			t.Errorf("ParseSchema(%q): no error", in)
		}
	}
	if err := CheckSchema("k", CurrentSchema.String()); err != nil {
		t.Errorf("CheckSchema(current) = %v", err)
	}
}

// TestOldestSchema: the oldest schema of the live nodes, and who runs it;
// failed and left nodes are not counted.
func TestOldestSchema(t *testing.T) {
	t.Parallel()
	node := func(name, schema string, st Status) Node {
		n := Node{Status: st}
		n.Name, n.Schema = name, schema
		return n
	}
	oldest, who := OldestSchema([]Node{node("a", "1.1", StatusAlive), node("b", "", StatusSuspect), node("c", "1.0", StatusAlive), node("d", "", StatusFailed), node("e", "", StatusLeft)})
	if oldest != SchemaBase || len(who) != 2 || who[0] != "b" || who[1] != "c" {
		t.Errorf("OldestSchema = %v %v, want 1.0 [b c]", oldest, who)
	}
	if oldest, who := OldestSchema([]Node{node("a", CurrentSchema.String(), StatusAlive)}); oldest != CurrentSchema || len(who) != 1 {
		t.Errorf("OldestSchema of an upgraded mesh = %v %v", oldest, who)
	}
}

// TestSchemaSurvivesOldRelays: a document or entry relayed by an agent
// from before schemas arrives without its schema (that agent decoded and
// re-encoded it); the writer's copy of the same version then replaces it,
// and a stripped copy never replaces a full one.
func TestSchemaSurvivesOldRelays(t *testing.T) {
	t.Parallel()
	full := &NodeState{ID: "a", Version: 7, Schema: "1.1"}
	stripped := &NodeState{ID: "a", Version: 7}
	if !newer(full, stripped) || newer(stripped, full) || newer(full, full) {
		t.Error("documents: the full copy of a version must replace the stripped one, and only that")
	}
	fe := &Entry{Key: "k", Version: 7, Origin: "a", Schema: "1.1"}
	se := &Entry{Key: "k", Version: 7, Origin: "a"}
	if !newerEntry(fe, holding(se)) || newerEntry(se, holding(fe)) || newerEntry(fe, holding(fe)) {
		t.Error("entries: the full copy of a write must replace the stripped one, and only that")
	}
}
