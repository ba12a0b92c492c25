package mesh

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-mesh/strata/internal/intern"
)

// TestTakenEntriesShareStrings decodes entries as a peer sends them and
// checks that shareLocked points their key, writer and dependencies at
// what is held, and leaves what is not held as it came.
func TestTakenEntriesShareStrings(t *testing.T) {
	t.Parallel()
	m := &Mesh{kv: map[string]*held{}, kvTables: map[string]*kvTable{}, tableVersions: map[string]uint64{}}
	decoded := func(e Entry) *Entry {
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		d, err := decodeEntry(b)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	same := func(a, b string) bool { return a == b && unsafe.StringData(a) == unsafe.StringData(b) }

	pol := decoded(Entry{Key: "policies/svc", Version: 1, Origin: "node-a", Value: json.RawMessage(`{}`)})
	m.shareLocked(pol)
	m.setEntryLocked(pol)
	pl := decoded(Entry{Key: "placements/svc", Version: 2, Origin: "node-a", Value: json.RawMessage(`{}`),
		Deps: []Dep{{Key: "policies/svc", Version: 1}, {Key: "policies/other", Version: 1}}})
	m.shareLocked(pl)
	m.setEntryLocked(pl)
	if !same(pl.Origin, pol.Origin) || !same(pl.Deps[0].Key, pol.Key) {
		t.Errorf("placement: origin %q, dep %q: not the held strings", pl.Origin, pl.Deps[0].Key)
	}
	if pl.Deps[1].Key != "policies/other" {
		t.Errorf("a dependency not held: %q, want it as sent", pl.Deps[1].Key)
	}
	again := decoded(Entry{Key: "placements/svc", Version: 3, Origin: "node-b", Value: json.RawMessage(`{}`)})
	m.shareLocked(again)
	if !same(again.Key, pl.Key) || again.Origin != "node-b" {
		t.Errorf("a newer write: key %q shared %v, origin %q", again.Key, same(again.Key, pl.Key), again.Origin)
	}
}

// TestDocumentsShareStrings decodes a peer's document and checks that
// shareStrings points each replica's policy at its assignment's key and
// its state and reason at one copy, in this document and the next.
func TestDocumentsShareStrings(t *testing.T) {
	t.Parallel()
	same := func(a, b string) bool { return a == b && unsafe.StringData(a) == unsafe.StringData(b) }
	var set intern.Strings
	doc := func() *NodeState {
		s := NodeState{ID: "n1", Name: "n1"}
		for _, k := range []string{"InferenceService/a", "InferenceService/b"} {
			s.Assignments = append(s.Assignments, Assignment{Key: k, Epoch: 1, Accepted: true})
			s.Replicas = append(s.Replicas, Replica{Policy: k, Model: "m@1", State: "failed", Reason: "cannot pull models"})
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		d, err := decodeState(b)
		if err != nil {
			t.Fatal(err)
		}
		d.shareStrings(&set)
		return d
	}
	a, b := doc(), doc()
	for i, r := range a.Replicas {
		if !same(r.Policy, a.Assignments[i].Key) {
			t.Errorf("replica %d: policy %q is not its assignment's key", i, r.Policy)
		}
		for _, other := range []Replica{a.Replicas[0], b.Replicas[i]} {
			if !same(r.State, other.State) || !same(r.Reason, other.Reason) || !same(r.Model, other.Model) {
				t.Errorf("replica %d: %+v and %+v do not share their strings", i, r, other)
			}
		}
	}
}

// TestDocumentsKeepBytesOnlyWhenNeeded: a peer's signed document that
// encodes back to its bytes is held without them and relayed as the very
// bytes it came as (a third node verifies them); one with a field of a
// later schema keeps its bytes, and relays them unchanged.
func TestDocumentsKeepBytesOnlyWhenNeeded(t *testing.T) {
	t.Parallel()
	ca := newForgeCA(t)
	a := ca.node(t, "a", "s", TierEdge, false, rules)
	b := ca.node(t, "b", "s", TierOnprem, true, rules)
	c := ca.node(t, "c", "s", TierOnprem, true, rules)
	if err := a.m.Update(func(s *NodeState) {
		s.Replicas = []Replica{{Policy: "InferenceService/x", Model: "m@1", State: "serving", Since: time.Now().UTC()}}
		s.Assignments = []Assignment{{Key: "InferenceService/x", Epoch: 1, Accepted: true}}
	}); err != nil {
		t.Fatal(err)
	}
	sent := a.ownDoc(t)
	s, err := decodeState(slices.Clone(sent))
	if err != nil {
		t.Fatal(err)
	}
	if !b.m.merge(s, false) {
		t.Fatal("b refused a's document")
	}
	b.m.mu.Lock()
	held := b.m.docs[a.m.ID()]
	kept := held.raw != nil
	relayed, err := encodeState(held)
	b.m.mu.Unlock()
	if err != nil || kept || !bytes.Equal(relayed, sent) {
		t.Fatalf("held with its bytes: %v; relayed %d bytes (err %v), the same as sent: %v", kept, len(relayed), err, bytes.Equal(relayed, sent))
	}
	again, err := decodeState(relayed)
	if err != nil || !c.m.merge(again, false) {
		t.Fatalf("c refused the relayed document (%v)", err)
	}

	// A later schema's field: the bytes are what is relayed.
	later := append(slices.Clone(sent[:len(sent)-1]), []byte(`,"later":1}`)...)
	d, err := decodeState(slices.Clone(later))
	if err != nil {
		t.Fatal(err)
	}
	d.dropRaw()
	if out, _ := encodeState(d); !bytes.Equal(out, later) {
		t.Errorf("a document with an unknown field relayed as %d bytes, not the %d it came as", len(out), len(later))
	}
}

// TestBucketEntriesKeepNothingOfTheMessage: the entries a repair carries
// are held as they were sent after memberlist reuses the buffer it
// handed NotifyMsg.
func TestBucketEntriesKeepNothingOfTheMessage(t *testing.T) {
	t.Parallel()
	id, err := NewIdentity()
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Name: "a", Identity: id, BindAddr: "127.0.0.1:0", Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	e := Entry{Key: "policies/x", Value: json.RawMessage(`{"name":"x"}`), Version: 7, Origin: "peer", Written: time.Now().UTC()}
	raw, err := json.Marshal(&e)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := json.Marshal(bucketEntries{From: "b", Buckets: []int{int(bucketOf(e.Key))}, Entries: []json.RawMessage{raw}})
	if err != nil {
		t.Fatal(err)
	}
	buf := append([]byte{msgBucketEntries}, msg...)
	(&delegate{m: m}).NotifyMsg(buf)
	for i := range buf {
		buf[i] = 'X' // memberlist reuses its buffers
	}
	got, err := m.Get(e.Key)
	if err != nil || got.Version != 7 || string(got.Value) != `{"name":"x"}` {
		t.Fatalf("held %+v (%v), want version 7, value as sent", got, err)
	}
	if out, err := encodeEntry(&got); err != nil || !bytes.Equal(out, raw) {
		t.Errorf("relayed as %q (%v), want %q", out, err, raw)
	}
}

// TestEntryStaysSmall: an Entry is held per catalog record (tens of
// thousands at 10,000 policies), spilled or not: a field added to it
// that takes it past the 240-byte size class fails here until it earns
// its place.
func TestEntryStaysSmall(t *testing.T) {
	t.Parallel()
	if n := unsafe.Sizeof(Entry{}); n > 240 {
		t.Errorf("an Entry takes %d bytes, over 240", n)
	}
}
