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
)

// Entry is one key of the site's replicated catalog: policies, placements
// and other state that belongs to the mesh rather than to one node. The
// write with the higher Version wins (ties go to the higher Origin), so
// merging is idempotent and commutative. In a mesh with Trust an entry is
// signed by Origin and merged only if Trust.Authorize lets Origin write
// its key; without Trust any member may write any key.
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
	// spilled: the value, signature and raw bytes are in the store alone
	// (see spill.go, ListMeta); size is its length as CatalogStats
	// counts it. bucket is its key's bucket (stamp).
	spilled bool
	bucket  uint16
	size    int32
	// Written is when Origin wrote it (Origin's clock). A tombstone is
	// collected TombstoneTTL after Written.
	Written time.Time `json:"written"`
	// Scope says how far the entry travels: ScopeSite entries stay in the
	// site's pool, ScopeGlobal ones are carried to every site. Empty means
	// ScopeSite. Federation carries only global entries between sites;
	// without it one pool carries both.
	Scope Scope `json:"scope,omitempty"`
	// Deps are the entries this one was derived from, each at the version
	// its writer read. A reader that holds an older version of a dependency
	// (replication lag) treats this entry as pending; see Missing.
	Deps []Dep `json:"deps,omitempty"`
	// Schema is the writer's schema ("MAJOR.MINOR"; empty for 1.0). An
	// entry of a major this agent does not read is kept and passed on,
	// but not decoded (see CheckSchema).
	Schema string `json:"schema,omitempty"`
	// Sig is Origin's signature of the entry, in a mesh with Trust. Cert
	// is Origin's certificate (DER), carried where readers may not hold
	// Origin's document: across sites. Both stay the last members (see
	// sigKey).
	Sig  []byte `json:"sig,omitempty"`
	Cert []byte `json:"cert,omitempty"`

	// seen is when this node got the entry (see setSeen) and hash its
	// digest term (stamp).
	seen int64
	hash uint64
	// raw is the entry as received or signed, sent on unchanged.
	raw []byte
}

// held is what the catalog keeps of an entry (Mesh.kv): what gossip, the
// digests and listings without values need, and the entry itself (full)
// until it is spilled (see spill.go). A spilled entry was an Entry with
// its value, signature and bytes cleared, 240 bytes: at 10,000 policies
// those were a quarter of an idle agent's heap. A held entry is replaced,
// never changed: readers may hold it.
type held struct {
	Key     string
	Version uint64
	Origin  string
	Deleted bool
	spilled bool
	bucket  uint16
	size    int32
	// written is Entry.Written in Unix nanoseconds (0 outside their
	// range): 8 bytes where a time.Time takes 24, and held then fits 144.
	written int64
	Scope   Scope
	Deps    []Dep
	Schema  string
	seen    int64
	hash    uint64
	full    *Entry // nil when spilled
}

// holding is what the catalog keeps of e, not spilled.
func holding(e *Entry) *held {
	return &held{Key: e.Key, Version: e.Version, Origin: e.Origin, Deleted: e.Deleted, bucket: e.bucket, written: unixNanos(e.Written), Scope: e.Scope, Deps: e.Deps, Schema: e.Schema, seen: e.seen, hash: e.hash, full: e}
}

// entry is h as an Entry: the entry itself, or, spilled, without its
// value and signature (Entry.Spilled says so).
func (h *held) entry() Entry {
	if h.full != nil {
		return *h.full
	}
	return Entry{Key: h.Key, Version: h.Version, Origin: h.Origin, Deleted: h.Deleted, spilled: true, bucket: h.bucket, size: h.size, Written: h.writtenAt(), Scope: h.Scope, Deps: h.Deps, Schema: h.Schema, seen: h.seen, hash: h.hash}
}

// writtenAt is when h's writer wrote it (Entry.Written), in UTC.
func (h *held) writtenAt() time.Time {
	if h.full != nil {
		return h.full.Written
	}
	if h.written == 0 {
		return time.Time{}
	}
	return time.Unix(0, h.written).UTC()
}

// unixNanos is t in Unix nanoseconds, or 0 where they cannot say it.
func unixNanos(t time.Time) int64 {
	if t.Year() < 1678 || t.Year() > 2261 {
		return 0
	}
	return t.UnixNano()
}

// sinceSeen is how long before now this node got h.
func (h *held) sinceSeen(now time.Time) time.Duration {
	return now.Sub(monoBase) - time.Duration(h.seen)
}

// monoBase is the time Entry.seen counts from: an offset from it keeps
// the clock's monotonic reading in 8 bytes, where a time.Time takes 24.
var monoBase = time.Now()

// setSeen notes t as when this node got e.
func (e *Entry) setSeen(t time.Time) { e.seen = int64(t.Sub(monoBase)) }

// seenAt is when this node got e.
func (e *Entry) seenAt() time.Time { return monoBase.Add(time.Duration(e.seen)) }

// encodeEntry returns the entry as received or signed, else encodes it.
func encodeEntry(e *Entry) ([]byte, error) {
	if e.spilled {
		return nil, fmt.Errorf("mesh: %s is in the store alone", e.Key)
	}
	if e.raw != nil {
		return e.raw, nil
	}
	return json.Marshal(e)
}

// decodeEntry decodes an entry and keeps its bytes (b is not copied). Its
// Value shares them where b holds it verbatim after "value": (as encoded
// here): held once, not twice, for every entry of the catalog.
func decodeEntry(b []byte) (*Entry, error) {
	var e Entry
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, err
	}
	e.raw = b
	if len(e.Value) > 0 {
		field := append([]byte(`"value":`), e.Value...)
		if i := bytes.Index(b, field); i >= 0 {
			start := i + len(`"value":`)
			e.Value = json.RawMessage(b[start : start+len(e.Value) : start+len(e.Value)])
		}
	}
	return &e, nil
}

// Scope is how far a catalog entry is replicated.
type Scope string

// Scopes. Node-scoped state is not a catalog entry: it travels in the
// node's own document (NodeState), written only by that node.
const (
	ScopeSite   Scope = "site"
	ScopeGlobal Scope = "global"
)

// Dep names a catalog entry that another depends on, at the version the
// dependent's writer read.
type Dep struct {
	Key     string `json:"key"`
	Version uint64 `json:"version"`
}

// PutOptions are a write's metadata.
type PutOptions struct {
	Scope Scope
	Deps  []Dep
	// Notify names members that act on the write next (the nodes a
	// placement names, the owner waiting for a job's end): the entry is
	// sent to each at once, one packet, besides the gossip that reaches
	// every member within a few gossip rounds. Best effort: a lost packet
	// costs only the gossip's delay. Not part of the entry.
	Notify []string
	// Unsynced stores the write without waiting for the store's log to
	// reach the disk: a crash (of the process or the host) may lose the
	// latest such writes. For records their writer derives again
	// (placements: the owner places again, and peers hold what it sent),
	// never for what a client is told is stored.
	Unsynced bool
}

// ErrNotFound is returned by Get for a key that is absent or deleted.
var ErrNotFound = errors.New("mesh: not found")

// ErrSuperseded is a write that Config.Prefer ranks below the value held
// for its key (a placement of an older epoch than the one held): it would
// be undone wherever the newer value is, so it is not made.
var ErrSuperseded = errors.New("mesh: superseded by the value held")

// keyKVPrefix is where catalog entries are persisted.
const keyKVPrefix = "mesh/kv/"

// maxEntryBroadcast is the largest catalog entry sent by gossip broadcast;
// larger ones are sent to every live member over TCP.
const maxEntryBroadcast = 1100

// msgEntry carries one catalog entry (JSON).
const msgEntry byte = 3

func newerEntry(a *Entry, b *held) bool {
	if b == nil || a.Version > b.Version || (a.Version == b.Version && a.Origin > b.Origin) {
		return true
	}
	// The same write relayed by an agent from before schemas lost its
	// schema (see newer).
	return a.Version == b.Version && a.Origin == b.Origin && b.Schema == "" && a.Schema != ""
}

// Put writes key=value (JSON) to the catalog: persisted (synced) before it
// returns, then replicated to the site. Options (at most one) carry the
// entry's scope and dependencies.
func (m *Mesh) Put(key string, value json.RawMessage, opts ...PutOptions) (Entry, error) {
	var o PutOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	return m.write(key, value, false, o)
}

// Delete writes a tombstone for key. Deleting an absent key is not an error.
func (m *Mesh) Delete(key string) error {
	m.mu.Lock()
	var o PutOptions
	if old := m.kv[key]; old != nil {
		o.Scope = old.Scope
	}
	m.mu.Unlock()
	_, err := m.write(key, nil, true, o)
	return err
}

func (m *Mesh) write(key string, value json.RawMessage, deleted bool, o PutOptions) (Entry, error) {
	if key == "" || strings.ContainsAny(key, "\x00") || len(key) > maxKeyLen {
		return Entry{}, fmt.Errorf("mesh: bad catalog key %q", key)
	}
	e := &Entry{Key: key, Value: value, Origin: m.id, Deleted: deleted, Written: time.Now().UTC(), Scope: o.Scope, Deps: slices.Clone(o.Deps), Schema: CurrentSchema.String()}
	if m.trust != nil && m.trust.cfg.Authorize != nil {
		if err := m.trust.cfg.Authorize(m, m.trust.me(), *e); err != nil {
			return Entry{}, fmt.Errorf("%w: %s: %w", ErrForbidden, key, err)
		}
	}
	// Prefer decodes records: it runs outside m.mu, which gossip waits
	// on, and is asked again if the held entry changed meanwhile.
	m.mu.Lock()
	old := m.kv[key]
	for {
		m.mu.Unlock()
		if old != nil && !deleted && !old.Deleted && m.cfg.Prefer != nil {
			held, err := m.full(old)
			switch {
			case errors.Is(err, ErrNotFound): // collected meanwhile: nothing to rank against
			case err != nil:
				return Entry{}, err // not ranked against what is held: not made
			case m.cfg.Prefer(*e, *held) < 0:
				return Entry{}, fmt.Errorf("%w: %s", ErrSuperseded, key)
			}
		}
		m.mu.Lock()
		if now := m.kv[key]; now != old {
			old = now
			continue
		}
		break
	}
	e.Version = uint64(time.Now().UnixMicro())
	if old != nil && old.Version >= e.Version {
		if old.Version == math.MaxUint64 {
			m.mu.Unlock()
			return Entry{}, fmt.Errorf("mesh: catalog key %s is at the highest version", key)
		}
		e.Version = old.Version + 1
	}
	if m.trust != nil {
		body, err := json.Marshal(e)
		if err != nil {
			m.mu.Unlock()
			return Entry{}, fmt.Errorf("mesh: encode entry %s: %w", key, err)
		}
		e.raw, e.Sig, _ = m.trust.sign(body, false)
	}
	e.stamp(time.Now())
	m.setEntryLocked(e)
	m.notifyLocked()
	m.mu.Unlock()
	// Stored (synced unless o.Unsynced) before it is acknowledged or
	// sent, but outside m.mu: a controller pass writes hundreds of
	// placements, and gossip waited on each write's sync (a third of the
	// waits on m.mu at 5,000 policies).
	err := m.persistKey(key, !o.Unsynced)
	if m.spreadEntry(e) {
		m.sendEntry(e, o.Notify)
	}
	return *e, err
}

// sendEntry sends a gossiped entry to the named members at once (see
// PutOptions.Notify), with the entries it depends on that this node got
// within recentEntries (a receiver acts on an entry only once it holds
// them; older ones gossip and push/pull have delivered, and a placement
// rewritten for a policy applied long ago need not carry it again, while
// a pass that takes seconds on a busy host still sends the policy it just
// placed): one UDP packet an entry, to those alive but this node.
func (m *Mesh) sendEntry(e *Entry, to []string) {
	if len(to) == 0 {
		return
	}
	m.mu.Lock()
	var names []string
	for _, name := range to {
		if mi := m.members[name]; name != m.cfg.Name && mi != nil && mi.status == StatusAlive && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	entries := []*Entry{e}
	now := time.Now()
	for _, d := range e.Deps {
		if dep := m.kv[d.Key]; dep != nil && !dep.Deleted && !dep.spilled && dep.Version == d.Version && dep.sinceSeen(now) < recentEntries {
			entries = append(entries, dep.full)
		}
	}
	var msgs [][]byte
	for _, x := range slices.Backward(entries) { // what it depends on first
		if b, err := encodeEntry(x); err == nil && len(b)+1 <= maxEntryBroadcast {
			msgs = append(msgs, append([]byte{msgEntry}, b...))
		}
	}
	m.mu.Unlock()
	for _, name := range names {
		for _, msg := range msgs {
			m.enqueue(job{kind: msgEntry, to: name, payload: msg, packet: true})
		}
	}
}

// Get returns the live entry of key, or ErrNotFound.
func (m *Mesh) Get(key string) (Entry, error) {
	m.mu.RLock()
	e := m.kv[key]
	m.mu.RUnlock()
	if e == nil || e.Deleted {
		return Entry{}, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	f, err := m.full(e)
	if err != nil {
		return Entry{}, err
	}
	if f.Deleted {
		return Entry{}, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return cloneEntry(f), nil
}

// List returns the live entries whose key has the prefix, sorted by key.
// Their Value and Deps are the store's own, shared and never changed in
// place (a new version is a new entry): read them, do not modify them.
// Copying every value on every listing was a twelfth of the agents' CPU
// with a thousand sweep trials held, though most readers decode nothing
// (their tables keep decoded values by version).
func (m *Mesh) List(prefix string) []Entry {
	m.mu.RLock()
	live := m.liveLocked(prefix)
	m.mu.RUnlock()
	// One read from the store may have been deleted since it was listed.
	full := slices.DeleteFunc(m.fullEach(live), func(e *Entry) bool { return e.Deleted })
	out := make([]Entry, len(full))
	for i, e := range full {
		out[i] = *e
	}
	return out
}

// ListMeta is List, but an entry of a table of Config.Spill may come
// without its value and signature (Entry.Spilled says so; Load reads
// them): for readers that keep what they decoded by version and read few
// values.
func (m *Mesh) ListMeta(prefix string) []Entry {
	m.mu.RLock()
	defer m.mu.RUnlock()
	live := m.liveLocked(prefix)
	out := make([]Entry, len(live))
	for i, e := range live {
		out[i] = e.entry()
	}
	return out
}

// Keys returns the keys of the live entries under prefix, sorted: List
// without the entries.
func (m *Mesh) Keys(prefix string) []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	live := m.liveLocked(prefix)
	out := make([]string, len(live))
	for i, e := range live {
		out[i] = e.Key
	}
	return out
}

// liveLocked returns the live entries under prefix, sorted by key, as
// held. A table keeps its keys sorted: with thousands of entries, sorting
// them on every listing was most of a controller pass's listing, and done
// under m.mu, which gossip waits on.
// The caller holds m.mu.
func (m *Mesh) liveLocked(prefix string) []*held {
	var live []*held
	t, _, ok := strings.Cut(prefix, "/")
	if !ok { // across tables (rare): sorted here
		for k, e := range m.kv {
			if strings.HasPrefix(k, prefix) && !e.Deleted {
				live = append(live, e)
			}
		}
		slices.SortFunc(live, func(a, b *held) int { return strings.Compare(a.Key, b.Key) })
		return live
	}
	tab := m.kvTables[t]
	if tab == nil {
		return nil
	}
	i, _ := slices.BinarySearch(tab.keys, prefix)
	for _, k := range tab.keys[i:] {
		if !strings.HasPrefix(k, prefix) {
			break
		}
		if e := m.kv[k]; !e.Deleted {
			live = append(live, e)
		}
	}
	return live
}

// kvTable is one table of the catalog: the keys of its entries (held in
// Mesh.kv), in order. A map of its own beside kv was a tenth of the
// mesh's memory per entry at 10,000 policies.
type kvTable struct {
	keys []string
}

// setEntryLocked holds e as its key's entry, in kv and in its table of
// kvTables. The caller holds m.mu.
func (m *Mesh) setEntryLocked(e *Entry) {
	old := m.kv[e.Key]
	if old != nil {
		m.kvDigest ^= old.hash
	}
	m.kvDigest ^= e.hash
	m.trimUnsettledLocked(e.seenAt())
	h := holding(e)
	m.unsettled = append(m.unsettled, h)
	m.kv[e.Key] = h
	t := tableOf(e.Key)
	m.tableVersions[t]++
	m.logChangeLocked(t, e.Key)
	tab := m.kvTables[t]
	if tab == nil {
		tab = &kvTable{}
		m.kvTables[t] = tab
	}
	if old == nil {
		i, _ := slices.BinarySearch(tab.keys, e.Key)
		tab.keys = slices.Insert(tab.keys, i, e.Key)
	}
}

// deleteEntryLocked forgets key's entry. The caller holds m.mu.
func (m *Mesh) deleteEntryLocked(key string) {
	old := m.kv[key]
	if old != nil {
		m.kvDigest ^= old.hash
	}
	delete(m.kv, key)
	t := tableOf(key)
	m.tableVersions[t]++
	m.logChangeLocked(t, key)
	tab := m.kvTables[t]
	if tab == nil {
		return
	}
	if old != nil {
		if i, found := slices.BinarySearch(tab.keys, key); found {
			tab.keys = slices.Delete(tab.keys, i, i+1)
		}
	}
	if len(tab.keys) == 0 {
		delete(m.kvTables, t)
	}
}

// TableVersion counts the changes to the entries of table (the keys up to
// their first "/") held here: equal counts mean the table is as it was,
// so a reader may keep what it derived from it.
func (m *Mesh) TableVersion(table string) uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.tableVersions[table]
}

// changeLog is a table's latest changes: the key of each, in the order of
// the table's versions, the first at version first.
type changeLog struct {
	first uint64
	keys  []string
}

// minChangeLog is how many changes a table's log keeps at least; it
// keeps as many as the table has entries when that is more, so a reader
// that lists the table once per round of changes to all of it still
// reads only what changed. A full log is cut back to that a quarter
// past it: at twice, the logs of the policies and placements tables were
// a twentieth of an idle agent's heap at 10,000 policies.
const minChangeLog = 4096

// logChangeLocked notes that key of table t changed, at the version
// just counted. The caller holds m.mu.
func (m *Mesh) logChangeLocked(t, key string) {
	l := m.tableLogs[t]
	if l == nil {
		if m.tableLogs == nil {
			m.tableLogs = map[string]*changeLog{}
		}
		l = &changeLog{first: m.tableVersions[t]}
		m.tableLogs[t] = l
	}
	l.keys = append(l.keys, key)
	held := 0
	if tab := m.kvTables[t]; tab != nil {
		held = len(tab.keys)
	}
	if limit := max(minChangeLog, held); len(l.keys) > limit+limit/4 {
		drop := len(l.keys) - limit
		l.keys = slices.Clone(l.keys[drop:]) // the dropped keys' strings go too
		l.first += uint64(drop)
	}
}

// ChangedKeys returns the keys of table whose entries changed (written,
// deleted or collected) after its version since (see TableVersion),
// each once, and the table's version now. ok is false when this node no
// longer remembers every change since then, or since is not a version it
// counted: the reader lists the table afresh. A reader that derives
// something from a table of thousands of entries reads only what changed.
func (m *Mesh) ChangedKeys(table string, since uint64) (keys []string, now uint64, ok bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	now = m.tableVersions[table]
	if since == now {
		return nil, now, true
	}
	l := m.tableLogs[table]
	if since > now || l == nil || since+1 < l.first {
		return nil, now, false
	}
	seen := map[string]bool{}
	for _, k := range l.keys[since+1-l.first:] {
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	return keys, now, true
}

// tableOf is the table of a catalog key: up to its first "/", or the
// whole key.
func tableOf(key string) string {
	t, _, _ := strings.Cut(key, "/")
	return t
}

// Lookup returns the entry of key as held here, tombstone included, and
// whether one is held. Readers use it to tell "not yet replicated" from
// "deleted". As List's, its Value and Deps are the store's own: read
// them, do not modify them.
func (m *Mesh) Lookup(key string) (Entry, bool) {
	m.mu.RLock()
	e := m.kv[key]
	m.mu.RUnlock()
	if e == nil {
		return Entry{}, false
	}
	f, err := m.full(e)
	if err != nil {
		if !errors.Is(err, ErrNotFound) {
			m.log.Warn("reading a catalog entry back from the store", "key", key, "err", err)
		}
		return Entry{}, false
	}
	return *f, true
}

// LookupMeta is Lookup, but an entry of a table of Config.Spill may come
// without its value and signature (see ListMeta).
func (m *Mesh) LookupMeta(key string) (Entry, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	e := m.kv[key]
	if e == nil {
		return Entry{}, false
	}
	return e.entry(), true
}

// Missing returns the dependencies of deps that this node does not hold
// at their version or newer (a tombstone at a newer version counts as held:
// the dependency was deleted after, which the reader sees on Get).
func (m *Mesh) Missing(deps []Dep) []Dep {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []Dep
	for _, d := range deps {
		if e := m.kv[d.Key]; e == nil || e.Version < d.Version {
			out = append(out, d)
		}
	}
	return out
}

// CatalogStats says how large the replicated catalog held here is.
type CatalogStats struct {
	// Live and Tombstones count entries; Spilled those whose value is in
	// the store alone (see Config.Spill).
	Live, Tombstones, Spilled int
	// Bytes is the JSON size of every entry held: what one push/pull
	// exchange carries of the catalog.
	Bytes int
}

// CatalogStats measures the catalog held here.
func (m *Mesh) CatalogStats() CatalogStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	var st CatalogStats
	for _, e := range m.kv {
		if e.Deleted {
			st.Tombstones++
		} else {
			st.Live++
		}
		if e.spilled {
			st.Spilled++
			st.Bytes += int(e.size)
		} else if b, err := json.Marshal(e.full); err == nil {
			st.Bytes += len(b)
		}
	}
	return st
}

// collectTombstones forgets tombstones written more than TombstoneTTL ago,
// here and in the store, so deleted records do not accumulate. A member
// partitioned away for longer than the TTL may bring a deleted key back when
// it returns: the TTL is the longest partition the catalog tolerates.
func (m *Mesh) collectTombstones(now time.Time) int {
	m.mu.Lock()
	var gone []string
	for k, e := range m.kv {
		if e.Deleted && now.Sub(e.writtenAt()) > m.cfg.TombstoneTTL {
			m.deleteEntryLocked(k)
			delete(m.dirtyKV, k)
			gone = append(gone, k)
		}
	}
	m.mu.Unlock()
	if len(gone) == 0 {
		return 0
	}
	m.metrics.tombstonesCollected.Add(float64(len(gone)))
	if m.cfg.DB != nil {
		b := m.cfg.DB.NewBatch()
		for _, k := range gone {
			b.Delete([]byte(keyKVPrefix + k))
		}
		if err := b.Commit(false); err != nil {
			m.log.Warn("collecting catalog tombstones", "err", err)
		}
	}
	return len(gone)
}

func cloneEntry(e *Entry) Entry {
	c := *e
	c.Value = slices.Clone(e.Value)
	c.Deps = slices.Clone(e.Deps)
	return c
}

// mergeEntry folds a peer's entry into the catalog; it reports whether the
// entry was newer than what was held.
func (m *Mesh) mergeEntry(e *Entry, rebroadcast bool) bool {
	if e.Key == "" || e.Origin == "" {
		m.metrics.malformed.WithLabelValues("entry").Inc()
		return false
	}
	// Most entries that arrive are copies of what is held (gossip hands
	// each to a node several times): those are dropped before the costly
	// part, verification.
	m.mu.RLock()
	held := m.kv[e.Key]
	m.mu.RUnlock()
	if !m.takes(e, held) {
		return false
	}
	if r := m.checkEntry(e); r != nil {
		m.refused("entry", r)
		return false
	}
	// takes may decode (Prefer): outside m.mu, again if the held entry
	// changed meanwhile.
	m.mu.Lock()
	for m.kv[e.Key] != held {
		held = m.kv[e.Key]
		m.mu.Unlock()
		if !m.takes(e, held) {
			return false
		}
		m.mu.Lock()
	}
	e.stamp(time.Now())
	m.shareLocked(e)
	m.setEntryLocked(e)
	m.dirtyKV[e.Key] = true
	m.notifyLocked()
	m.mu.Unlock()
	if rebroadcast {
		m.queueEntryBroadcast(e)
	}
	return true
}

// shareLocked makes e, decoded from a peer's bytes, share the strings it
// repeats of what is held: its key (the held entry's), its writer's ID,
// schema and scope, and its dependencies' keys (the held entries'). Each
// entry held its own copies: at 10,000 policies, a tenth of what the
// catalog's entries held in memory once their values were spilled. The
// caller holds m.mu and e is not yet shared.
func (m *Mesh) shareLocked(e *Entry) {
	if held := m.kv[e.Key]; held != nil {
		e.Key = held.Key
	}
	e.Origin, e.Schema = m.entryStrings.Get(e.Origin), m.entryStrings.Get(e.Schema)
	switch e.Scope { // the constants' bytes, not one copy per entry
	case ScopeSite:
		e.Scope = ScopeSite
	case ScopeGlobal:
		e.Scope = ScopeGlobal
	}
	for i, d := range e.Deps {
		if held := m.kv[d.Key]; held != nil {
			e.Deps[i].Key = held.Key
		}
	}
}

// spreadEntry replicates a local write: by gossip when it fits a packet
// (it says so), else straight to every live member over TCP. Push/pull
// repairs misses.
func (m *Mesh) spreadEntry(e *Entry) bool {
	if m.queueEntryBroadcast(e) {
		return true
	}
	b, err := encodeEntry(e)
	if err != nil {
		return false
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
	return false
}

func (m *Mesh) queueEntryBroadcast(e *Entry) bool {
	if m.bq == nil {
		return false
	}
	b, err := encodeEntry(e)
	if err != nil || len(b)+1 > maxEntryBroadcast {
		return false
	}
	m.bq.QueueBroadcast(&stateBroadcast{id: "kv/" + e.Key, msg: append([]byte{msgEntry}, b...)})
	m.pruneBroadcasts()
	return true
}

// maxQueuedBroadcasts bounds the broadcast queue. Gossip sends a few
// entries a round, each several times; a burst of writes (thousands of
// applies and their placements) is queued far faster, and at 10,000
// policies the agents still held 5 MB each of queued copies once every
// policy was placed (BenchmarkManyPolicies' heap profile). The bucket
// repair (buckets.go) carries what a pruned broadcast would have; and a
// write's Notify reaches the members that act on it at once. An entry
// near maxEntryBroadcast takes a packet of its own, so gossip sends a few
// a second, each several times: 1,024 queued took minutes to drain after
// a burst, and were an agent's largest buffer once it was idle (1.2 MB at
// 10,000 policies), while a bucket repair carries a difference within
// seconds (bucketRepairGrace). 256 drain within about a minute.
const maxQueuedBroadcasts = 256

// pruneBroadcasts drops the broadcasts sent most, then the oldest, from a
// queue longer than maxQueuedBroadcasts (memberlist's order; the anchor,
// never sent, stays).
func (m *Mesh) pruneBroadcasts() {
	if n := m.bq.NumQueued(); n > maxQueuedBroadcasts {
		m.bq.Prune(maxQueuedBroadcasts)
		m.metrics.broadcastsPruned.Add(float64(n - maxQueuedBroadcasts))
	}
}

// persistKey writes the entry held for key to the store, synced unless
// not sync. Writes of the store are one at a time (persistMu), each of
// what is held when it starts, so a slower write never replaces a newer
// version.
func (m *Mesh) persistKey(key string, sync bool) error {
	if m.cfg.DB == nil {
		return nil
	}
	m.persistMu.Lock()
	defer m.persistMu.Unlock()
	m.mu.RLock()
	e := m.kv[key]
	m.mu.RUnlock()
	if e == nil || e.spilled {
		return nil // collected meanwhile, or stored long since
	}
	b, err := encodeEntry(e.full)
	if err != nil {
		return err
	}
	if sync {
		return m.cfg.DB.Put([]byte(keyKVPrefix+key), b)
	}
	batch := m.cfg.DB.NewBatch()
	batch.Put([]byte(keyKVPrefix+key), b)
	return batch.Commit(false)
}

// checkEntry validates a peer's entry, verifies its signature and asks
// Trust.Authorize whether its writer may write it; nil means merge it.
func (m *Mesh) checkEntry(e *Entry) *refusal {
	now := time.Now()
	if r := m.validateEntry(e, now); r != nil {
		return r
	}
	if m.trust == nil {
		return nil
	}
	w, r := m.trust.verifyEntry(e, e.raw, now)
	if r != nil || w == nil || m.trust.cfg.Authorize == nil {
		return r
	}
	if err := m.trust.cfg.Authorize(m, *w, *e); err != nil {
		return &refusal{reason: refuseForbidden, err: fmt.Errorf("%s may not write %s: %w", w.Name, e.Key, err)}
	}
	return nil
}

// takes reports whether e is newer than held, the entry held for its
// key (nil: none). Held entries are never changed in place, so it needs
// no lock.
func (m *Mesh) takes(e *Entry, held *held) bool {
	// A tombstone past its TTL that we do not hold was collected here
	// already (or never mattered): taking it back would undo collection.
	if e.Deleted && held == nil && time.Since(e.Written) > m.cfg.TombstoneTTL {
		return false
	}
	if held != nil && held.Version == e.Version && held.Origin == e.Origin && held.Deleted == e.Deleted {
		// The same write again (gossip hands each to a node several
		// times; a repair sends a bucket's entries, most of them held):
		// nothing to take, and no need to ask Prefer, which decodes both.
		return false
	}
	if held != nil && !e.Deleted && !held.Deleted && m.cfg.Prefer != nil {
		f, err := m.full(held)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return false // not ranked against what is held: a repair brings it again
		}
		if err == nil {
			if p := m.cfg.Prefer(*e, *f); p != 0 {
				return p > 0
			}
		}
	}
	return newerEntry(e, held)
}
