package mesh

import (
	"slices"
	"strings"
)

// GlobalEntries returns every catalog entry of scope global held here,
// tombstones included, sorted by key: what federation carries to the other
// sites.
func (m *Mesh) GlobalEntries() []Entry {
	m.mu.Lock()
	var held []*Entry
	for _, e := range m.kv {
		if e.Scope == ScopeGlobal {
			held = append(held, e)
		}
	}
	m.mu.Unlock()
	var out []Entry
	for _, e := range m.fullEach(held) {
		c := cloneEntry(e)
		// Other sites hold no document of the writer: the entry carries
		// its certificate there.
		if m.trust != nil && len(c.Sig) > 0 && len(c.Cert) == 0 {
			if _, der := m.trust.writer(c.Origin); der != nil {
				c.Cert, c.raw = der, nil
			}
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Key, b.Key) })
	return out
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
