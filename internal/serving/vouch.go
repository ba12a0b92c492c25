package serving

import (
	"sync"
	"time"

	"github.com/strata-mesh/strata/internal/catalog"
)

// How Vouchers reads the catalog: the policies and placements that
// changed, at most every vouchRefresh, and sooner (after vouchRetry) when
// asked about a node it does not vouch for, which may have been placed a
// moment ago.
const (
	vouchRefresh = time.Second
	vouchRetry   = 100 * time.Millisecond
)

// vouchFor is how long a node stays vouched for a model after the last
// placement that named it stopped naming it: a replica that was moved
// keeps answering until its replacements serve (make before break), and
// a node's document saying it stopped serving takes a gossip round.
const vouchFor = 10 * time.Minute

// anyModel stands for every model, for a service that names its model by
// digest only (its name is the manifest's, which this index does not
// read).
const anyModel = "*"

// Vouchers knows which nodes a controller placed for each model: those a
// placement record names as a replica, or as a replica's standby, of an
// InferenceService that serves it. The forwarder sends requests only to
// them (ForwarderConfig.Vouch). A node's own document says what it
// serves, and every node writes its own: without this, a compromised edge
// that claimed to serve every model, and to be idle, would be sent every
// request of its site, inputs included. Placement records are written by
// controllers alone (and signed, where agents sign gossip). Safe for
// concurrent use.
type Vouchers struct {
	cat *catalog.Catalog
	now func() time.Time

	mu      sync.Mutex
	read    time.Time
	seenPol map[string]uint64   // policy key → version read
	seenPl  map[string]uint64   // placement key → version read
	models  map[string]string   // policy key → the model it serves (anyModel: by digest)
	nodes   map[string][]string // placement key → its replicas' nodes
	spares  map[string][]string // placement key → its replicas' standbys
	named   map[vouch]bool      // what the placements read last name
	dropped map[vouch]time.Time // no longer named: since when
}

// vouch is one node placed for a model, as a replica or as a standby.
type vouch struct {
	model, node string
	standby     bool
}

// NewVouchers returns an index over cat's policies and placements.
func NewVouchers(cat *catalog.Catalog) *Vouchers {
	return &Vouchers{cat: cat, now: time.Now, seenPol: map[string]uint64{}, seenPl: map[string]uint64{},
		models: map[string]string{}, nodes: map[string][]string{}, spares: map[string][]string{},
		named: map[vouch]bool{}, dropped: map[vouch]time.Time{}}
}

// Vouch says whether a placement names node as a replica (or, standby
// set, as a standby) of a service that serves model (by name), or did
// less than vouchFor ago.
func (v *Vouchers) Vouch(node, model string, standby bool) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	now := v.now()
	if now.Sub(v.read) >= vouchRefresh {
		v.refresh(now)
	}
	if v.vouched(node, model, standby, now) {
		return true
	}
	if now.Sub(v.read) < vouchRetry {
		return false
	}
	v.refresh(now)
	return v.vouched(node, model, standby, now)
}

// vouched answers Vouch from what was read; v.mu is held.
func (v *Vouchers) vouched(node, model string, standby bool, now time.Time) bool {
	for _, m := range []string{model, anyModel} {
		k := vouch{m, node, standby}
		if v.named[k] {
			return true
		}
		if at, ok := v.dropped[k]; ok && now.Sub(at) < vouchFor {
			return true
		}
	}
	return false
}

// refresh reads the policies and placements that changed and what the
// placements name now; v.mu is held.
func (v *Vouchers) refresh(now time.Time) {
	v.read = now
	pols, polNow := v.cat.Policies.Changed(v.seenPol)
	pls, plNow := v.cat.Placements.Changed(v.seenPl)
	dirty := len(pols) > 0 || len(pls) > 0 || len(polNow) != len(v.seenPol) || len(plNow) != len(v.seenPl)
	v.seenPol, v.seenPl = polNow, plNow
	if !dirty {
		return
	}
	for key := range v.models {
		if _, ok := polNow[key]; !ok {
			delete(v.models, key)
		}
	}
	for _, r := range pols {
		delete(v.models, r.Key)
		doc, err := r.Value.Document()
		if err != nil || doc.InferenceService == nil {
			continue
		}
		m := doc.InferenceService.Model.Name
		if m == "" {
			m = anyModel
		}
		v.models[r.Key] = m
	}
	for key := range v.nodes {
		if _, ok := plNow[key]; !ok {
			delete(v.nodes, key)
			delete(v.spares, key)
		}
	}
	for _, r := range pls {
		var nodes, spares []string
		for _, pn := range r.Value.Nodes {
			nodes = append(nodes, pn.Name)
			if pn.Standby != "" {
				spares = append(spares, pn.Standby)
			}
		}
		v.nodes[r.Key], v.spares[r.Key] = nodes, spares
	}
	named := make(map[vouch]bool, len(v.named))
	for key, m := range v.models {
		for _, n := range v.nodes[key] {
			named[vouch{m, n, false}] = true
		}
		for _, n := range v.spares[key] {
			named[vouch{m, n, true}] = true
		}
	}
	for k := range v.named {
		if !named[k] {
			v.dropped[k] = now
		}
	}
	for k, at := range v.dropped {
		if named[k] || now.Sub(at) >= vouchFor {
			delete(v.dropped, k)
		}
	}
	v.named = named
}
