package mesh

import (
	"fmt"
	"slices"
	"strings"
)

// GlobalEntries returns every catalog entry of scope global held here,
// tombstones included, sorted by key: what federation carries to the other
// sites. As List's, their Value and Deps are the store's own: read them,
// do not modify them.
func (m *Mesh) GlobalEntries() []Entry {
	es := m.GlobalEntriesMeta()
	out := es[:0]
	for _, e := range es {
		if f, err := m.LoadGlobal(e); err == nil {
			out = append(out, f)
		}
	}
	return out
}

// GlobalEntriesMeta is GlobalEntries, but an entry of a table of
// Config.Spill may come without its value and signature (Entry.Spilled
// says so; LoadGlobal reads them): a federation sync compares versions,
// and reads only what it sends.
func (m *Mesh) GlobalEntriesMeta() []Entry {
	m.mu.Lock()
	var out []Entry
	for _, e := range m.kv {
		if e.Scope == ScopeGlobal {
			out = append(out, e.entry())
		}
	}
	m.mu.Unlock()
	for i, e := range out {
		if !e.spilled {
			out[i] = m.withCert(e)
		}
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// LoadGlobal returns e, listed by GlobalEntriesMeta, as federation
// carries it: read from the store where it was listed without its value,
// and with its writer's certificate.
func (m *Mesh) LoadGlobal(e Entry) (Entry, error) {
	if !e.spilled {
		return e, nil // as GlobalEntriesMeta made it
	}
	f, err := m.Load(e)
	if err != nil {
		return Entry{}, err
	}
	if f.Scope != ScopeGlobal || f.Version != e.Version || f.Origin != e.Origin {
		// Rewritten since it was listed: the next listing has it.
		return Entry{}, fmt.Errorf("mesh: %s changed since it was listed", e.Key)
	}
	return m.withCert(f), nil
}

// withCert is c carrying its writer's certificate: other sites hold no
// document of the writer.
func (m *Mesh) withCert(c Entry) Entry {
	if m.trust != nil && len(c.Sig) > 0 && len(c.Cert) == 0 {
		if _, der := m.trust.writer(c.Origin); der != nil {
			c.Cert, c.raw = der, nil
		}
	}
	return c
}

// MergeRemote folds a global entry that federation carried from another
// site into the catalog and spreads it in this site; it reports whether the
// entry was newer than what was held. An entry that is not global, or has
// no key or origin, is dropped and counted as malformed: another site may
// only write what every site shares.
func (m *Mesh) MergeRemote(e Entry) bool {
	if e.Scope != ScopeGlobal {
		m.metrics.malformed.WithLabelValues("entry").Inc()
		return false
	}
	c := cloneEntry(&e)
	if !m.mergeEntry(&c, false) {
		return false
	}
	m.spreadEntry(&c)
	return true
}

// Site is the site this node belongs to.
func (m *Mesh) Site() string { return m.cfg.Local.Site }
