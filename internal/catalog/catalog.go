package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/storage"
)

// Store is the replicated key-value catalog the tables sit on; *mesh.Mesh
// implements it.
type Store interface {
	Put(key string, value json.RawMessage, opts ...mesh.PutOptions) (mesh.Entry, error)
	Delete(key string) error
	Lookup(key string) (mesh.Entry, bool)
	List(prefix string) []mesh.Entry
	Missing(deps []mesh.Dep) []mesh.Dep
	Changed() <-chan struct{}
}

var _ Store = (*mesh.Mesh)(nil)

// Cached names the tables that keep what they decode (policies and
// placements, see New): a store may keep their values on disk alone
// (mesh.Config.Spill), as these tables read a value only for a version
// they have not decoded.
var Cached = []string{"policies", "placements"}

// metaStore is a Store that may hand out entries without their values
// (the mesh, for the tables it spills to its store: mesh.Config.Spill). A
// table that keeps what it decoded (see cached) lists and looks up
// entries so, and reads a value only for a version it has not decoded.
type metaStore interface {
	ListMeta(prefix string) []mesh.Entry
	LookupMeta(key string) (mesh.Entry, bool)
	Load(e mesh.Entry) (mesh.Entry, error)
	LoadEach(prefix string, es []mesh.Entry) []mesh.Entry
}

var _ metaStore = (*mesh.Mesh)(nil)

// ErrNotFound is returned for a key that is absent or deleted. It wraps
// mesh.ErrNotFound, so either matches with errors.Is.
var ErrNotFound = fmt.Errorf("catalog: %w", mesh.ErrNotFound)

// DecodeError is a stored value that does not decode as its table's type.
type DecodeError struct {
	Table   string
	Key     string
	Version uint64
	Err     error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("catalog: %s %q (version %d) does not decode: %v", e.Table, e.Key, e.Version, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// PendingError says a record's dependencies have not replicated here yet.
type PendingError struct {
	Key     string
	Missing []mesh.Dep
}

func (e *PendingError) Error() string {
	keys := make([]string, len(e.Missing))
	for i, d := range e.Missing {
		keys[i] = d.Key
	}
	return fmt.Sprintf("catalog: %s is pending: waiting for %s to replicate", e.Key, strings.Join(keys, ", "))
}

// Record is one decoded catalog record.
type Record[T any] struct {
	// Key is the record's key within its table.
	Key   string
	Value T
	// Version orders writes of the key (higher wins); Writer is the node ID
	// that wrote it, Written when (the writer's clock).
	Version uint64
	Writer  string
	Written time.Time
	// Deps are the records this one was derived from, at the versions read.
	Deps []mesh.Dep
	// fullKey is the key in the store.
	fullKey string
}

// Ref names this record at its version, for a record derived from it.
func (r Record[T]) Ref() mesh.Dep { return mesh.Dep{Key: r.fullKey, Version: r.Version} }

// Catalog holds the tables.
type Catalog struct {
	store   Store
	decodes *prometheus.CounterVec

	Policies   *Table[Policy]
	Placements *Table[Placement]
	Jobs       *Table[Job]
	Rollouts   *Table[Rollout]
	Drift      *Table[Drift]
	Manifests  *Table[storage.Manifest]
	// DriftLogs are each node's drift monitor transitions, per policy.
	DriftLogs *Table[DriftLog]
	// Gangs and GangMembers coordinate exec training gangs that span
	// several nodes.
	Gangs       *Table[Gang]
	GangMembers *Table[GangMember]
	// Experiments are hyperparameter searches (TrainingJobs with a sweep).
	Experiments *Table[Experiment]
}

// New builds the tables over store and registers the catalog's collectors
// with reg (nil registers none).
func New(store Store, reg prometheus.Registerer) *Catalog {
	c := &Catalog{store: store, decodes: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "strata_catalog_decode_errors_total",
		Help: "Catalog records (each key and version once) that did not decode as their table's type, by table.",
	}, []string{"table"})}
	if reg != nil {
		reg.MustRegister(c.decodes)
	}
	// Policies and placements are the tables with a record per policy,
	// read by every controller pass: their decoded values are kept. A
	// controller reads the policies it owns, an agent those it serves:
	// the others are decoded as they change or are listed, and kept
	// while read (keeping).
	c.Policies = newTable(c, "policies", mesh.ScopeGlobal, Policy.Key).cached(func(p Policy) Policy { return p }, (*Policy).intern).keeping(nil)
	// A placement is its owner's decision, made again from the policy
	// and the mesh after a crash; peers hold what was sent. Stored
	// without a sync each: a pass writes hundreds, and the syncs were
	// half of each write's time at 10,000 policies.
	c.Placements = newTable(c, "placements", mesh.ScopeGlobal, func(p Placement) string { return p.Key }).cached(Placement.clone, (*Placement).intern).rederived()
	// The placements this node wrote are those its controller reads
	// each pass; the others are read as they change (events, admission)
	// and then rarely. Kept decoded in every agent, they were a sixth of
	// an agent's heap at 10,000 policies.
	if s, ok := store.(interface{ ID() string }); ok {
		self := s.ID()
		c.Placements.keeping(func(r *Record[Placement]) bool { return r.Writer == self })
	}
	c.Jobs = newTable(c, "jobs", mesh.ScopeGlobal, func(j Job) string { return j.Name })
	c.Rollouts = newTable(c, "rollouts", mesh.ScopeGlobal, func(r Rollout) string { return r.Policy })
	c.Drift = newTable(c, "drift", mesh.ScopeSite, func(d Drift) string { return d.Policy + "/" + d.Node })
	c.DriftLogs = newTable(c, "drift-log", mesh.ScopeSite, DriftLog.Key)
	c.Gangs = newTable(c, "gangs", mesh.ScopeGlobal, func(g Gang) string { return g.Job })
	c.GangMembers = newTable(c, "gang-members", mesh.ScopeGlobal, GangMember.Key)
	c.Experiments = newTable(c, "experiments", mesh.ScopeGlobal, func(e Experiment) string { return e.Name })
	c.Manifests = newTable(c, "artifacts", mesh.ScopeGlobal, func(m storage.Manifest) string {
		return string(m.Kind) + "/" + m.Name + "/" + m.Version
	})
	return c
}

// Changed returns a channel closed at the next change of any table (then
// call it again). Tables share it: a watcher re-reads what it needs.
func (c *Catalog) Changed() <-chan struct{} { return c.store.Changed() }

// WaitFor waits until every dep has replicated here at its version or
// newer, ctx ends, or timeout passes; then it returns a *PendingError
// naming what is still missing (key names the record that waits).
func (c *Catalog) WaitFor(ctx context.Context, key string, deps []mesh.Dep, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		changed := c.store.Changed()
		missing := c.store.Missing(deps)
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return errors.Join(&PendingError{Key: key, Missing: missing}, ctx.Err())
		case <-deadline.C:
			return &PendingError{Key: key, Missing: missing}
		}
	}
}

// Table is one record kind: its values are T, stored under the table's
// name as key prefix. Safe for concurrent use.
type Table[T any] struct {
	c     *Catalog
	name  string
	scope mesh.Scope
	key   func(T) string
	// derived marks records their writer derives again (see
	// mesh.PutOptions.Unsynced): stored without waiting for the disk.
	derived bool

	mu  sync.Mutex
	bad map[string]uint64 // key → version already counted as undecodable
	// decoded keeps each key's last decoded write, where the table has a
	// clone (see cached): a controller pass lists whole tables, and with
	// thousands of policies decoding them again was most of its time.
	// The listing shares its records.
	decoded map[string]*Record[T]
	clone   func(T) T
	// aging tables keep for good only the decoded records retain (where
	// set) says, and the others while they are read (see keeping): old
	// holds those not read since the last aging, which was at aged.
	aging  bool
	retain func(*Record[T]) bool
	old    map[string]*Record[T]
	aged   time.Time
	// intern, where set, shares what a kept record repeats of others
	// (see interner) once it is decoded.
	intern   func(*T, *interner)
	interned interner
	// listed is the last List of a table with a clone, kept while the
	// store's count of the table's changes stays the same: a controller
	// pass lists the policies in each of its steps.
	listed listing[T]
}

// listing is one List's records and errors, at the table's version. Its
// records are the decoded ones the table keeps, shared (a pointer each,
// not a copy: at 10,000 policies the copies were a twentieth of an
// agent's heap): List hands out copies.
type listing[T any] struct {
	valid   bool
	version uint64
	recs    []*Record[T]
	err     error
}

func newTable[T any](c *Catalog, name string, scope mesh.Scope, key func(T) string) *Table[T] {
	return &Table[T]{c: c, name: name, scope: scope, key: key, bad: map[string]uint64{}}
}

// cached makes t keep decoded values, handing each caller its own copy
// made by clone (which must copy whatever a caller could change in
// place: slices and maps). It returns t.
func (t *Table[T]) cached(clone func(T) T, intern func(*T, *interner)) *Table[T] {
	t.clone, t.decoded, t.intern = clone, map[string]*Record[T]{}, intern
	return t
}

// keeping makes a table with a cache keep for good only the decoded
// records retain keeps (none where nil), and the others while they are
// read: a record no reader asked for in a whole agingGap (listed, looked
// up or read as changed) is decoded again when one does. It returns t.
func (t *Table[T]) keeping(retain func(*Record[T]) bool) *Table[T] {
	t.aging, t.retain, t.old = true, retain, map[string]*Record[T]{}
	return t
}

// agingGap is how long a table that retains some records (see keeping)
// keeps the others once no reader asks for them: between one and two
// gaps.
const agingGap = 30 * time.Second

// ageLocked drops, once every agingGap, the decoded records that no
// reader asked for since the last time and that retain does not keep,
// and the listing, which holds them. The caller holds t.mu.
func (t *Table[T]) ageLocked(now time.Time) {
	if !t.aging || now.Sub(t.aged) < agingGap {
		return
	}
	t.aged = now
	for k, r := range t.old {
		if t.retain != nil && t.retain(r) {
			t.decoded[k] = r
		}
	}
	t.old, t.decoded = t.decoded, make(map[string]*Record[T], len(t.decoded)/2)
	t.listed = listing[T]{}
}

// age is ageLocked for a caller that does not hold t.mu: the readers
// that look often whether anything changed (Next, Version) age the
// table also when no record is read.
func (t *Table[T]) age() {
	if !t.aging {
		return
	}
	t.mu.Lock()
	t.ageLocked(time.Now())
	t.mu.Unlock()
}

// cachedLocked returns the decoded record kept for key, if any, and notes
// that it was asked for (see age). The caller holds t.mu.
func (t *Table[T]) cachedLocked(key string) (*Record[T], bool) {
	t.ageLocked(time.Now())
	d, ok := t.decoded[key]
	if !ok && t.old != nil {
		if d, ok = t.old[key]; ok {
			delete(t.old, key)
			t.decoded[key] = d
		}
	}
	return d, ok
}

// rederived marks t's records as derived (see Table.derived). It returns
// t.
func (t *Table[T]) rederived() *Table[T] {
	t.derived = true
	return t
}

// Name is the table's name, also its key prefix without the slash.
func (t *Table[T]) Name() string { return t.name }

// Scope is how far the table's records travel.
func (t *Table[T]) Scope() mesh.Scope { return t.scope }

// Key is the key of value v in this table.
func (t *Table[T]) Key(v T) string { return t.key(v) }

func (t *Table[T]) prefix() string { return t.name + "/" }

// list lists the store's live entries under prefix; for a table with a
// cache, without the values the store keeps alone (see metaStore).
func (t *Table[T]) list(prefix string) []mesh.Entry {
	if s, ok := t.c.store.(metaStore); ok && t.clone != nil {
		return s.ListMeta(prefix)
	}
	return t.c.store.List(prefix)
}

// loaded returns entries, listed by list, with the values of those the
// store keeps alone and t has not decoded at their version read in one
// go, where the store can (mesh.Mesh.LoadEach): a listing of a table
// whose records are mostly spilled and not decoded here (see keeping)
// read each from the store otherwise.
func (t *Table[T]) loaded(entries []mesh.Entry) []mesh.Entry {
	s, ok := t.c.store.(metaStore)
	if !ok || t.clone == nil {
		return entries
	}
	var need []int
	t.mu.Lock()
	for i, e := range entries {
		if !e.Spilled() {
			continue
		}
		key := strings.TrimPrefix(e.Key, t.prefix())
		d, ok := t.decoded[key]
		if !ok {
			d, ok = t.old[key]
		}
		if !ok || d.Version != e.Version || d.Writer != e.Origin {
			need = append(need, i)
		}
	}
	t.mu.Unlock()
	if len(need) == 0 {
		return entries
	}
	es := make([]mesh.Entry, len(need))
	for j, i := range need {
		es[j] = entries[i]
	}
	for j, e := range s.LoadEach(t.prefix(), es) {
		entries[need[j]] = e
	}
	return entries
}

// lookup is list for one key.
func (t *Table[T]) lookup(key string) (mesh.Entry, bool) {
	if s, ok := t.c.store.(metaStore); ok && t.clone != nil {
		return s.LookupMeta(key)
	}
	return t.c.store.Lookup(key)
}

func (t *Table[T]) decode(e mesh.Entry) (Record[T], error) {
	r, err := t.decodeShared(e)
	if err != nil {
		return Record[T]{}, err
	}
	out := *r
	if t.clone != nil {
		out.Value = t.clone(out.Value)
	}
	return out, nil
}

// decodeShared decodes e; for a table with a clone (see cached) the
// record is the one the table keeps, shared: the caller must not change
// it.
func (t *Table[T]) decodeShared(e mesh.Entry) (*Record[T], error) {
	key := strings.TrimPrefix(e.Key, t.prefix())
	if t.clone != nil {
		t.mu.Lock()
		d, ok := t.cachedLocked(key)
		t.mu.Unlock()
		if ok && d.Version == e.Version && d.Writer == e.Origin {
			return d, nil
		}
	}
	var err error
	if e.Spilled() {
		// Listed without its value (see list): read it. It may have
		// been deleted since: then it is not found, not undecodable.
		if s, ok := t.c.store.(metaStore); ok {
			e, err = s.Load(e)
		}
		if err == nil && e.Deleted {
			err = ErrNotFound
		}
		if err != nil {
			return nil, fmt.Errorf("catalog: %s/%s: %w", t.name, key, err)
		}
	}
	r := &Record[T]{Key: key, Version: e.Version, Writer: e.Origin, Written: e.Written, Deps: e.Deps, fullKey: e.Key}
	err = mesh.CheckSchema(e.Key, e.Schema)
	if err == nil {
		err = json.Unmarshal(e.Value, &r.Value)
	}
	if err != nil {
		t.mu.Lock()
		if t.bad[key] != e.Version {
			t.bad[key] = e.Version
			t.c.decodes.WithLabelValues(t.name).Inc()
		}
		t.mu.Unlock()
		return nil, &DecodeError{Table: t.name, Key: key, Version: e.Version, Err: err}
	}
	if t.clone != nil {
		if t.intern != nil {
			t.intern(&r.Value, &t.interned)
		}
		t.mu.Lock()
		t.decoded[key] = r
		delete(t.old, key)
		t.mu.Unlock()
	}
	return r, nil
}

// Get returns the live record of key: ErrNotFound when absent or deleted,
// a *DecodeError when it does not decode.
func (t *Table[T]) Get(key string) (Record[T], error) {
	e, ok := t.lookup(t.prefix() + key)
	if !ok || e.Deleted {
		return Record[T]{}, fmt.Errorf("%w: %s/%s", ErrNotFound, t.name, key)
	}
	return t.decode(e)
}

// SharedValue is Value without the copy: for a table with a cache (see
// cached) the value is the one it keeps; read it, never change it or
// what it holds.
func (t *Table[T]) SharedValue(key string) (*T, error) {
	e, ok := t.lookup(t.prefix() + key)
	if !ok || e.Deleted {
		return nil, fmt.Errorf("%w: %s/%s", ErrNotFound, t.name, key)
	}
	r, err := t.decodeShared(e)
	if err != nil {
		return nil, err
	}
	if t.clone == nil {
		v := r.Value
		return &v, nil
	}
	return &r.Value, nil
}

// Value returns the live value of key (Get without the metadata).
func (t *Table[T]) Value(key string) (T, error) {
	r, err := t.Get(key)
	return r.Value, err
}

// List returns every live record that decodes, sorted by key, and the
// decode errors of those that do not (joined).
func (t *Table[T]) List() ([]Record[T], error) {
	recs, err := t.sharedList()
	out := make([]Record[T], len(recs))
	for i, r := range recs {
		out[i] = *r
		if t.clone != nil {
			out[i].Value = t.clone(r.Value)
		}
	}
	return out, err
}

// sharedList is List before the copies: for a table with a clone, the
// values are the ones it keeps, and the caller must not change them. The
// list is kept while the store's count of the table's changes stays the
// same (see TableVersion), so that the steps of a controller pass that
// each list the policies sort and decode them once.
func (t *Table[T]) sharedList() ([]*Record[T], error) {
	v, versioned := t.version()
	versioned = versioned && t.clone != nil
	if versioned {
		t.mu.Lock()
		l := t.listed
		t.mu.Unlock()
		if l.valid && l.version == v {
			return l.recs, l.err
		}
	}
	recs, err := decodeEach(t.loaded(t.list(t.prefix())), t.decodeShared)
	if t.clone != nil {
		t.forget(recs)
	}
	if versioned {
		t.mu.Lock()
		t.listed = listing[T]{valid: true, version: v, recs: recs, err: err}
		t.mu.Unlock()
	}
	return recs, err
}

// Version is the store's count of this table's changes, where the store
// keeps one (TableVersion): a reader that derives something from the
// table reads it again only when it moved.
func (t *Table[T]) Version() (uint64, bool) {
	t.age()
	return t.version()
}

// version is the store's count of this table's changes, where the store
// keeps one (TableVersion).
func (t *Table[T]) version() (uint64, bool) {
	s, ok := t.c.store.(interface{ TableVersion(table string) uint64 })
	if !ok {
		return 0, false
	}
	return s.TableVersion(t.name), true
}

// Select returns the live records that decode and that keep keeps, sorted
// by key, and the decode errors of those that do not decode (joined).
// keep sees each value before it is copied for the caller, so a pass that
// wants a few records of thousands copies only those; it must not change
// the value it is shown.
func (t *Table[T]) Select(keep func(key string, v T) bool) ([]Record[T], error) {
	recs, err := t.sharedList()
	var out []Record[T]
	for _, r := range recs {
		if !keep(r.Key, r.Value) {
			continue
		}
		c := *r
		if t.clone != nil {
			c.Value = t.clone(r.Value)
		}
		out = append(out, c)
	}
	return out, err
}

// Prefix returns the live records whose key starts with prefix that
// decode, sorted by key, and the decode errors of those that do not
// (joined). Unlike Select it reads only those records: a reader of a few
// of thousands (one kind's placements) does not list the table.
func (t *Table[T]) Prefix(prefix string) ([]Record[T], error) {
	return decodeEach(t.list(t.prefix()+prefix), t.decode)
}

// decodeEach decodes entries in order: the records that decode, and the
// errors of those that do not (joined).
func decodeEach[R any](entries []mesh.Entry, decode func(mesh.Entry) (R, error)) ([]R, error) {
	recs := make([]R, 0, len(entries))
	var errs []error
	for _, e := range entries {
		r, err := decode(e)
		if errors.Is(err, mesh.ErrNotFound) {
			continue // deleted since it was listed
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		recs = append(recs, r)
	}
	return recs, errors.Join(errs...)
}

// Keys returns the keys of every live record held, sorted, whether it
// decodes or not (Get says). It decodes nothing: a pass that looks for
// the few records missing from another table reads only those.
func (t *Table[T]) Keys() []string {
	p := t.prefix()
	if s, ok := t.c.store.(interface{ Keys(prefix string) []string }); ok {
		keys := s.Keys(p)
		for i, k := range keys {
			keys[i] = strings.TrimPrefix(k, p)
		}
		return keys
	}
	entries := t.c.store.List(p)
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = strings.TrimPrefix(e.Key, p)
	}
	return out
}

// Cursor is a reader's place in a table (see Table.Next): the table's
// version when it last read. It holds nothing per record: a reader that
// follows a table of thousands of records keeps what it derived, and a
// cursor that also kept the version of each record it read cost as much
// again for each of the readers. The zero Cursor has read nothing.
type Cursor struct {
	at       uint64
	started  bool
	relisted bool
}

// Relisted says whether the last Next listed the table afresh (the first
// read, or the store no longer remembered every change since, or does
// not remember changes): then what it returned as changed is every live
// record that decodes, and the reader drops whatever it holds of the
// table that those do not name.
func (c *Cursor) Relisted() bool { return c.relisted }

// Next returns the live records written since c last read the table,
// decoded and sorted by key, and the keys of those deleted or collected
// since (which the reader may never have read), and moves c past them.
// Over a store that remembers its changes (the mesh: ChangedKeys) it
// reads only the keys that changed: a reader that follows a table of
// thousands of records does not list it every time. A record written
// since that does not decode is counted, as List does, and its key is
// among the removed: what the reader derived from its earlier write no
// longer holds. Where it lists the table afresh, see Cursor.Relisted. A
// record may come back unchanged (a copy of the same write set again):
// a reader applies what it reads as it is.
func (t *Table[T]) Next(c *Cursor) (changed []Record[T], removed []string) {
	t.age()
	v, versioned := t.version()
	if c.started && versioned && v == c.at {
		c.relisted = false
		return nil, nil
	}
	read := func(key string, e mesh.Entry) {
		if r, err := t.decode(e); err == nil {
			changed = append(changed, r)
		} else {
			removed = append(removed, key)
		}
	}
	if s, ok := t.c.store.(interface {
		ChangedKeys(table string, since uint64) ([]string, uint64, bool)
	}); ok && c.started {
		if keys, now, ok := s.ChangedKeys(t.name, c.at); ok {
			for _, full := range keys {
				key := strings.TrimPrefix(full, t.prefix())
				if e, held := t.lookup(full); held && !e.Deleted {
					read(key, e)
				} else {
					removed = append(removed, key)
				}
			}
			slices.SortFunc(changed, func(a, b Record[T]) int { return strings.Compare(a.Key, b.Key) })
			slices.Sort(removed)
			c.at, c.relisted = now, false
			return changed, removed
		}
	}
	// Listed afresh: the first read, or the store forgot that far back.
	for _, e := range t.loaded(t.list(t.prefix())) {
		read(strings.TrimPrefix(e.Key, t.prefix()), e)
	}
	c.at, c.started, c.relisted = v, true, true
	return changed, removed
}

// forget drops the decoded values of keys no longer live, now that recs
// lists every live one that decodes.
func (t *Table[T]) forget(recs []*Record[T]) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.decoded)+len(t.old) <= len(recs) {
		return
	}
	live := make(map[string]bool, len(recs))
	for _, r := range recs {
		live[r.Key] = true
	}
	for _, m := range []map[string]*Record[T]{t.decoded, t.old} {
		for k := range m {
			if !live[k] {
				delete(m, k)
			}
		}
	}
}

// Values is List without the metadata.
func (t *Table[T]) Values() ([]T, error) {
	recs, err := t.List()
	out := make([]T, len(recs))
	for i, r := range recs {
		out[i] = r.Value
	}
	return out, err
}

// Put writes v under its key, derived from deps. The write is persisted
// here before Put returns and then replicated.
func (t *Table[T]) Put(v T, deps ...mesh.Dep) (Record[T], error) {
	return t.PutNotify(v, nil, deps...)
}

// PutNotify is Put that also sends the write at once to the named nodes,
// those that act on it next (see mesh.PutOptions.Notify).
func (t *Table[T]) PutNotify(v T, notify []string, deps ...mesh.Dep) (Record[T], error) {
	key := t.key(v)
	b, err := json.Marshal(v)
	if err != nil {
		return Record[T]{}, fmt.Errorf("catalog: encode %s %q: %w", t.name, key, err)
	}
	e, err := t.c.store.Put(t.prefix()+key, b, mesh.PutOptions{Scope: t.scope, Deps: slices.Clone(deps), Notify: notify, Unsynced: t.derived})
	if err != nil {
		return Record[T]{}, err
	}
	return Record[T]{Key: key, Value: v, Version: e.Version, Writer: e.Origin, Written: e.Written, Deps: e.Deps, fullKey: e.Key}, nil
}

// Delete deletes key (a tombstone). Deleting an absent key is not an error.
func (t *Table[T]) Delete(key string) error { return t.c.store.Delete(t.prefix() + key) }

// Deleted says key was deleted: its tombstone is held here (until it is
// collected).
func (t *Table[T]) Deleted(key string) bool {
	e, ok := t.lookup(t.prefix() + key)
	return ok && e.Deleted
}

// Ref names the live record of key at the version held here.
func (t *Table[T]) Ref(key string) (mesh.Dep, bool) {
	e, ok := t.lookup(t.prefix() + key)
	if !ok || e.Deleted {
		return mesh.Dep{}, false
	}
	return mesh.Dep{Key: e.Key, Version: e.Version}, true
}

// Pending returns the dependencies of r not yet replicated here; empty
// means r can be acted on.
func (t *Table[T]) Pending(r Record[T]) []mesh.Dep { return t.c.store.Missing(r.Deps) }

// Watch returns a channel closed at the next change of the catalog.
func (t *Table[T]) Watch() <-chan struct{} { return t.c.store.Changed() }

// Ready returns the live records whose dependencies have replicated here,
// sorted by key, and the decode errors of those that do not decode. A
// record still waiting for a dependency is left out until a later call:
// replication lag is not an error.
func (t *Table[T]) Ready() ([]Record[T], error) {
	recs, err := t.List()
	out := recs[:0]
	for _, r := range recs {
		if len(t.c.store.Missing(r.Deps)) == 0 {
			out = append(out, r)
		}
	}
	return out, err
}
