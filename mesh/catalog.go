package mesh

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Entry is one key of the site's replicated catalog: policies, placements
// and other state that belongs to the mesh rather than to one node. Any
// node may write any key; the write with the higher Version wins (ties go to
// the higher Origin), so merging is idempotent and commutative.
type Entry struct {
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value,omitempty"`
	// Version is a hybrid timestamp (microseconds, bumped past the previous
	// version of the key).
	Version uint64 `json:"version"`
	// Origin is the ID of the node that wrote this version.
	Origin string `json:"origin"`
	// Deleted marks a tombstone: the key was deleted at Version.
	Deleted bool `json:"deleted,omitempty"`
	// Written is when Origin wrote it.
	Written time.Time `json:"written"`
}

// ErrNotFound is returned by Get for a key that is absent or deleted.
var ErrNotFound = errors.New("mesh: not found")

// keyKVPrefix is where catalog entries are persisted.
const keyKVPrefix = "mesh/kv/"

// maxEntryBroadcast is the largest catalog entry sent by gossip broadcast;
// larger ones are sent to every live member over TCP.
const maxEntryBroadcast = 1100

// msgEntry carries one catalog entry (JSON).
const msgEntry byte = 3

func newerEntry(a, b *Entry) bool {
	return b == nil || a.Version > b.Version || (a.Version == b.Version && a.Origin > b.Origin)
}

// Put writes key=value (JSON) to the catalog: persisted (synced) before it
// returns, then replicated to the site.
func (m *Mesh) Put(key string, value json.RawMessage) (Entry, error) {
	return m.write(key, value, false)
}

// Delete writes a tombstone for key. Deleting an absent key is not an error.
func (m *Mesh) Delete(key string) error {
	_, err := m.write(key, nil, true)
	return err
}

func (m *Mesh) write(key string, value json.RawMessage, deleted bool) (Entry, error) {
	if key == "" || strings.ContainsAny(key, "\x00") {
		return Entry{}, fmt.Errorf("mesh: bad catalog key %q", key)
	}
	m.mu.Lock()
	e := &Entry{Key: key, Value: value, Origin: m.id, Deleted: deleted, Written: time.Now().UTC()}
	e.Version = uint64(time.Now().UnixMicro())
	if old := m.kv[key]; old != nil && old.Version >= e.Version {
		e.Version = old.Version + 1
	}
	m.kv[key] = e
	err := m.persistEntry(e)
	m.notifyLocked()
	m.mu.Unlock()
	m.spreadEntry(e)
	return *e, err
}

// Get returns the live entry of key, or ErrNotFound.
func (m *Mesh) Get(key string) (Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.kv[key]
	if e == nil || e.Deleted {
		return Entry{}, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return cloneEntry(e), nil
}

// List returns the live entries whose key has the prefix, sorted by key.
func (m *Mesh) List(prefix string) []Entry {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Entry
	for k, e := range m.kv {
		if strings.HasPrefix(k, prefix) && !e.Deleted {
			out = append(out, cloneEntry(e))
		}
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Key, b.Key) })
	return out
}

func cloneEntry(e *Entry) Entry {
	c := *e
	c.Value = slices.Clone(e.Value)
	return c
}

// mergeEntry folds a peer's entry into the catalog; it reports whether the
// entry was newer than what was held.
func (m *Mesh) mergeEntry(e *Entry, rebroadcast bool) bool {
	if e.Key == "" || e.Origin == "" {
		m.metrics.malformed.WithLabelValues("entry").Inc()
		return false
	}
	m.mu.Lock()
	if !newerEntry(e, m.kv[e.Key]) {
		m.mu.Unlock()
		return false
	}
	m.kv[e.Key] = e
	m.dirtyKV[e.Key] = true
	m.notifyLocked()
	m.mu.Unlock()
	if rebroadcast {
		m.queueEntryBroadcast(e)
	}
	return true
}

// spreadEntry replicates a local write: by gossip when it fits a packet,
// else straight to every live member over TCP. Push/pull repairs misses.
func (m *Mesh) spreadEntry(e *Entry) {
	if m.queueEntryBroadcast(e) {
		return
	}
	b, err := json.Marshal(e)
	if err != nil {
		return
	}
	msg := append([]byte{msgEntry}, b...)
	var to []string
	m.mu.Lock()
	for name, mi := range m.members {
		if mi.status == StatusAlive {
			to = append(to, name)
		}
	}
	m.mu.Unlock()
	for _, name := range to {
		m.enqueue(job{kind: msgEntry, to: name, payload: msg})
	}
}

func (m *Mesh) queueEntryBroadcast(e *Entry) bool {
	if m.bq == nil {
		return false
	}
	b, err := json.Marshal(e)
	if err != nil || len(b)+1 > maxEntryBroadcast {
		return false
	}
	m.bq.QueueBroadcast(&stateBroadcast{id: "kv/" + e.Key, msg: append([]byte{msgEntry}, b...)})
	return true
}

func (m *Mesh) persistEntry(e *Entry) error {
	if m.cfg.DB == nil {
		return nil
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return m.cfg.DB.Put([]byte(keyKVPrefix+e.Key), b)
}
