package mesh

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/strata-mesh/strata/storage"
)

// Spilled entries. At 10,000 policies the catalog's own bytes (each
// policy and its placement as received) were a quarter of an agent's
// heap, though every one of them is also in the store and the catalog
// package keeps each decoded. The tables named in Config.Spill keep in
// memory, for an entry settled spillAfter ago and found in the store at
// its version, only what gossip and the digests need (key, version,
// writer, scope, dependencies, hash); its value and signature are read
// from the store when asked for: by Get, List and Lookup, a repair, a
// join's push/pull or a write that Config.Prefer compares.

// spillAfter is how long an entry is held before it may be spilled: past
// recentEntries, so a periodic push/pull and a write's Notify (which
// carry recent entries) never read the store, and far past
// catalogSettle (what the settled digest counts as recent).
const spillAfter = 2 * recentEntries

// spillBatch bounds the entries spilled in one round (each is read back
// from the store first): at 10,000 policies the first round after a
// burst of applies is spread over several.
const spillBatch = 4096

// errSpillMoved is a spilled entry whose key the store holds at another
// version: the entry was replaced since it was read.
var errSpillMoved = errors.New("mesh: spilled entry replaced")

// Spilled says whether e came without its value and signature (see
// ListMeta): Load reads them.
func (e Entry) Spilled() bool { return e.spilled }

// Load returns e with its value and signature, read from the store where
// e was listed without them (see ListMeta); else e as it is. An entry
// replaced since it was listed is read as held now.
func (m *Mesh) Load(e Entry) (Entry, error) {
	if !e.spilled {
		return e, nil
	}
	f, err := m.full(&held{Key: e.Key, Version: e.Version, Origin: e.Origin, Deleted: e.Deleted, spilled: true, bucket: e.bucket, seen: e.seen, hash: e.hash})
	if err != nil {
		return Entry{}, err
	}
	return *f, nil
}

// loadScanMin is the least number of spilled entries LoadEach reads in
// one scan of the store rather than one read each.
const loadScanMin = 64

// LoadEach reads the values of entries under prefix (a table's,
// "policies/") that are spilled, in one scan of the store where there
// are many: a read each took most of the time of listing a table of
// thousands once it was spilled. An entry not read so (few, or replaced
// or collected since) is returned as it came, for Load.
func (m *Mesh) LoadEach(prefix string, es []Entry) []Entry {
	out := slices.Clone(es)
	want := map[string]int{}
	for i, e := range es {
		if e.spilled && strings.HasPrefix(e.Key, prefix) {
			want[e.Key] = i
		}
	}
	if len(want) >= loadScanMin && m.cfg.DB != nil {
		_ = m.cfg.DB.Scan([]byte(keyKVPrefix+prefix), func(k, v []byte) error {
			key := string(k[len(keyKVPrefix):])
			i, ok := want[key]
			if !ok {
				return nil
			}
			s, err := decodeEntry(bytes.Clone(v)) // v is the scan's
			e := es[i]
			if err != nil || s.Version != e.Version || s.Origin != e.Origin || s.Deleted != e.Deleted {
				return nil // left as it came, for Load
			}
			s.seen, s.hash, s.bucket = e.seen, e.hash, e.bucket
			out[i] = *s
			delete(want, key)
			return nil
		})
	}
	return out
}

// full returns the entry e holds, read from the store when e is spilled,
// or, when the store has moved past e, the entry held now for its key
// (also read, when spilled). Callers do not hold m.mu.
func (m *Mesh) full(e *held) (*Entry, error) {
	for range 8 {
		f, err := m.loadSpilled(e)
		if !errors.Is(err, errSpillMoved) {
			return f, err
		}
		m.mu.RLock()
		cur := m.kv[e.Key]
		m.mu.RUnlock()
		if cur == nil || cur == e {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, e.Key)
		}
		e = cur
	}
	return nil, fmt.Errorf("mesh: %s changed while it was read", e.Key)
}

// loadSpilled reads a spilled entry back from the store; an entry that is
// not spilled is returned as it is.
func (m *Mesh) loadSpilled(e *held) (*Entry, error) {
	if !e.spilled {
		return e.full, nil
	}
	b, err := m.cfg.DB.Get([]byte(keyKVPrefix + e.Key))
	if errors.Is(err, storage.ErrNotFound) {
		return nil, errSpillMoved // deleted and collected since: see what is held
	}
	if err != nil {
		return nil, fmt.Errorf("mesh: read %s from the store: %w", e.Key, err)
	}
	s, err := decodeEntry(b)
	if err != nil {
		return nil, fmt.Errorf("mesh: stored %s does not decode: %w", e.Key, err)
	}
	if s.Version != e.Version || s.Origin != e.Origin || s.Deleted != e.Deleted {
		return nil, errSpillMoved
	}
	s.seen, s.hash, s.bucket = e.seen, e.hash, e.bucket
	return s, nil
}

// fullEach returns the entries es hold, each spilled one read from the
// store; one that cannot be read (collected meanwhile) is left out.
func (m *Mesh) fullEach(es []*held) []*Entry {
	out := make([]*Entry, 0, len(es))
	for _, e := range es {
		if f, err := m.full(e); err == nil {
			out = append(out, f)
		} else if !errors.Is(err, ErrNotFound) {
			m.log.Warn("reading a catalog entry back from the store", "key", e.Key, "err", err)
		}
	}
	return out
}

// spillSettled spills, in the tables of Config.Spill, up to spillBatch
// entries held since spillAfter and written to the store since: each is
// read back first, and spilled only if the store holds its very bytes (a
// write whose store write failed stays in memory).
func (m *Mesh) spillSettled(now time.Time) int {
	if m.cfg.DB == nil || len(m.cfg.Spill) == 0 {
		return 0
	}
	var cands []*held
	m.mu.RLock()
	for _, t := range m.cfg.Spill {
		tab := m.kvTables[t]
		if tab == nil {
			continue
		}
		for _, k := range tab.keys {
			if len(cands) == spillBatch {
				break
			}
			e := m.kv[k]
			if !e.spilled && !e.Deleted && e.sinceSeen(now) >= spillAfter && !m.dirtyKV[e.Key] {
				cands = append(cands, e)
			}
		}
	}
	m.mu.RUnlock()
	// The bytes compared, not only the version: a copy of the same write
	// relayed with other bytes (a schema added) whose store write failed
	// stays in memory. The spilled copies are made outside m.mu, which
	// gossip waits on.
	type swap struct{ held, spilled *held }
	var swaps []swap
	for _, e := range cands {
		b, err := m.cfg.DB.Get([]byte(keyKVPrefix + e.Key))
		if err != nil {
			continue
		}
		if enc, err := encodeEntry(e.full); err == nil && bytes.Equal(b, enc) {
			swaps = append(swaps, swap{e, e.spill()})
		}
	}
	n := 0
	m.mu.Lock()
	for _, sw := range swaps {
		if m.kv[sw.held.Key] != sw.held {
			continue // replaced meanwhile
		}
		m.kv[sw.held.Key] = sw.spilled
		n++
	}
	m.mu.Unlock()
	m.metrics.spilled.Add(float64(n))
	return n
}

// spill is e without what the store holds: the entry itself, with its
// value and signature. The held entry is replaced, never changed:
// readers may hold it.
func (e *held) spill() *held {
	s := *e
	if b, err := json.Marshal(e.full); err == nil {
		s.size = int32(min(len(b), math.MaxInt32)) // as CatalogStats counts it
	}
	s.full, s.spilled = nil, true
	return &s
}
