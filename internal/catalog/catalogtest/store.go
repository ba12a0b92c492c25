// Package catalogtest is an in-memory catalog store for tests of the
// components that read and write the catalog: one Store per simulated node,
// whose entries reach another Store only when the test delivers them, in
// any order, as gossip may.
//
//	w, r := catalogtest.NewStore(), catalogtest.NewStore()
//	writer, reader := catalog.New(w, nil), catalog.New(r, nil)
//	... writer.Placements.Put(...)
//	w.Deliver(r, "placements/InferenceService/s")
package catalogtest

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/strata-mesh/strata/mesh"
)

// Store is an in-memory catalog.Store. Safe for concurrent use.
type Store struct {
	mu      sync.Mutex
	kv      map[string]mesh.Entry
	ver     uint64
	changes uint64   // writes of any kind (TableVersion)
	log     []string // the key of each write, in order (ChangedKeys)
	changed chan struct{}
}

// NewStore returns an empty store.
func NewStore() *Store {
	return &Store{kv: map[string]mesh.Entry{}, changed: make(chan struct{})}
}

func (s *Store) notifyLocked(key string) {
	s.countLocked(key)
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Store) countLocked(key string) {
	s.changes++
	s.log = append(s.log, key)
}

// ChangedKeys returns the keys of table written since the store's count
// of writes was since, as the mesh's does (it remembers every write).
func (s *Store) ChangedKeys(table string, since uint64) (keys []string, now uint64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if since > s.changes {
		return nil, s.changes, false
	}
	for _, k := range s.log[since:] {
		if strings.HasPrefix(k, table+"/") && !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys, s.changes, true
}

// TableVersion counts the store's writes: it changes whenever any table
// does (the mesh counts each table's own), which is all a reader that
// keeps what it derived from a table needs.
func (s *Store) TableVersion(table string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changes
}

// Put writes key=v at the next version.
func (s *Store) Put(key string, v json.RawMessage, opts ...mesh.PutOptions) (mesh.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ver++
	e := mesh.Entry{Key: key, Value: v, Version: s.ver, Origin: "test", Written: time.Now(), Schema: mesh.CurrentSchema.String()}
	if len(opts) > 0 {
		e.Scope, e.Deps = opts[0].Scope, slices.Clone(opts[0].Deps)
	}
	s.kv[key] = e
	s.notifyLocked(key)
	return e, nil
}

// PutAt writes key=v as an agent of another schema would ("" for 1.0).
func (s *Store) PutAt(key string, v json.RawMessage, schema string) mesh.Entry {
	e, _ := s.Put(key, v)
	s.mu.Lock()
	defer s.mu.Unlock()
	e.Schema = schema
	s.kv[key] = e
	s.countLocked(key)
	return e
}

// Delete writes a tombstone for key.
func (s *Store) Delete(key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ver++
	s.kv[key] = mesh.Entry{Key: key, Version: s.ver, Origin: "test", Deleted: true, Written: time.Now()}
	s.notifyLocked(key)
	return nil
}

// Lookup returns key's entry, tombstone included.
func (s *Store) Lookup(key string) (mesh.Entry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.kv[key]
	return e, ok
}

// List returns the live entries under prefix, sorted by key.
func (s *Store) List(prefix string) []mesh.Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []mesh.Entry
	for k, e := range s.kv {
		if strings.HasPrefix(k, prefix) && !e.Deleted {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b mesh.Entry) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// Missing returns the deps not held at their version or newer.
func (s *Store) Missing(deps []mesh.Dep) []mesh.Dep {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []mesh.Dep
	for _, d := range deps {
		if e, ok := s.kv[d.Key]; !ok || e.Version < d.Version {
			out = append(out, d)
		}
	}
	return out
}

// Changed returns a channel closed at the next change.
func (s *Store) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// Deliver copies key's entry to dst, as replication would. It panics when
// s does not hold key (a mistake in the test).
func (s *Store) Deliver(dst *Store, key string) {
	e, ok := s.Lookup(key)
	if !ok {
		panic("catalogtest: Deliver: no " + key)
	}
	dst.mu.Lock()
	dst.kv[key] = e
	dst.ver = max(dst.ver, e.Version)
	dst.notifyLocked(key)
	dst.mu.Unlock()
}

// Relisting is S as a store that does not remember its changes (no
// ChangedKeys): every read of a table that moved lists it afresh
// (catalog.Cursor.Relisted), as a reader that fell behind the mesh's
// change log does.
type Relisting struct{ S *Store }

// Put writes through to S.
func (r Relisting) Put(key string, v json.RawMessage, opts ...mesh.PutOptions) (mesh.Entry, error) {
	return r.S.Put(key, v, opts...)
}

// Delete deletes from S.
func (r Relisting) Delete(key string) error { return r.S.Delete(key) }

// Lookup looks up in S.
func (r Relisting) Lookup(key string) (mesh.Entry, bool) { return r.S.Lookup(key) }

// List lists S.
func (r Relisting) List(prefix string) []mesh.Entry { return r.S.List(prefix) }

// Missing is S's.
func (r Relisting) Missing(deps []mesh.Dep) []mesh.Dep { return r.S.Missing(deps) }

// Changed is S's.
func (r Relisting) Changed() <-chan struct{} { return r.S.Changed() }

// TableVersion is S's.
func (r Relisting) TableVersion(table string) uint64 { return r.S.TableVersion(table) }
