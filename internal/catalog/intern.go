package catalog

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/strata-mesh/strata/internal/intern"
)

// interner shares equal strings (intern.Strings), and equal small maps,
// among the records a table keeps decoded. Most of a placement's strings
// (its kind, owner, state and message, each node's name, ID, tier, site,
// replica state and reason) and its rejection counts repeat across
// thousands of records: decoded, each was an allocation of its own, about
// a third of a kept placement at 10,000 policies. The maps it keeps are
// bounded as the strings are (intern.Max), and start afresh when full.
type interner struct {
	strs   intern.Strings
	mu     sync.Mutex
	counts map[string]map[Reason]int
}

// str returns s, or an equal string already held.
func (in *interner) str(s string) string { return in.strs.Get(s) }

// reasons returns m, or an equal map already held. A held map is shared
// by records that are never changed in place (Placement.clone copies
// it for a caller).
func (in *interner) reasons(m map[Reason]int) map[Reason]int {
	if len(m) == 0 {
		return m
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		b.WriteString(string(k))
		b.WriteByte('=')
		b.WriteString(strconv.Itoa(m[k]))
		b.WriteByte(';')
	}
	id := b.String()
	in.mu.Lock()
	defer in.mu.Unlock()
	if held, ok := in.counts[id]; ok {
		return held
	}
	if in.counts == nil || len(in.counts) >= intern.Max {
		in.counts = map[string]map[Reason]int{}
	}
	in.counts[id] = m
	return m
}

// intern shares p's repeated strings and counts (see interner).
func (p *Placement) intern(in *interner) {
	p.Kind, p.Owner, p.State, p.Message = in.str(p.Kind), in.str(p.Owner), in.str(p.State), in.str(p.Message)
	for i := range p.Nodes {
		n := &p.Nodes[i]
		n.Name, n.ID, n.Tier, n.Site = in.str(n.Name), in.str(n.ID), in.str(n.Tier), in.str(n.Site)
		n.Client, n.Replica, n.Reason, n.Standby = in.str(n.Client), in.str(n.Replica), in.str(n.Reason), in.str(n.Standby)
	}
	p.Rejected = in.reasons(p.Rejected)
}

// intern shares p's repeated strings (see interner).
func (p *Policy) intern(in *interner) {
	p.Kind, p.File, p.AppliedAt, p.AppliedVia = in.str(p.Kind), in.str(p.File), in.str(p.AppliedAt), in.str(p.AppliedVia)
	p.AppliedBy, p.Site, p.HandedFrom = in.str(p.AppliedBy), in.str(p.Site), in.str(p.HandedFrom)
}
