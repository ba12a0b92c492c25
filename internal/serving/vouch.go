package serving

import (
	"sync"
	"time"

	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/storage"
)

// How Vouchers reads the catalog: the policies and placements that
// changed, once their tables moved (or, on a store that keeps no table
// versions, at most every vouchRefresh, and after vouchRetry when asked
// about a node it does not vouch for, which may have been placed a
// moment ago).
const (
	vouchRefresh = time.Second
	vouchRetry   = 100 * time.Millisecond
)

// anyModel stands for every model, for a service that names its model by
// a digest not published here (yet).
const anyModel = "*"

// Vouchers knows which nodes a controller placed for each model: those a
// placement record of an InferenceService that serves it names, or has
// named while the service exists, as a replica or as a replica's standby.
// The forwarder sends requests only to them (ForwarderConfig.Vouch). A
// node's own document says what it serves, and every node writes its
// own: without this, a compromised edge that claimed to serve every
// model, and to be idle, would be sent every request of its site, inputs
// included. Placement records are written by controllers alone (and
// signed, where agents sign gossip). A node placed once stays vouched
// for the service's model until the service is deleted: a replica that
// was moved serves until its replacements all do (make before break),
// however long they take. Safe for concurrent use.
type Vouchers struct {
	cat *catalog.Catalog
	now func() time.Time

	mu       sync.Mutex
	read     time.Time
	versions [2]uint64          // the policies' and placements' table versions read
	pols     catalog.Cursor     // the policies read
	pls      catalog.Cursor     // the placements read
	models   map[string]string  // policy key → the model it serves (anyModel: unknown)
	unnamed  map[string]string  // policy key → the digest it names, while its model is unknown
	named    map[string]vouches // policy key → what its placements have named
	count    map[vouch]int      // how many services' placements have named each
	// versioned: the store counts its tables' changes.
	versioned bool
}

// vouch is one node placed for a model, as a replica or as a standby.
type vouch struct {
	model, node string
	standby     bool
}

type vouches map[vouch]bool

// NewVouchers returns an index over cat's policies and placements.
func NewVouchers(cat *catalog.Catalog) *Vouchers {
	_, versioned := cat.Placements.Version()
	return &Vouchers{cat: cat, now: time.Now,
		models: map[string]string{}, unnamed: map[string]string{}, named: map[string]vouches{}, count: map[vouch]int{}, versioned: versioned}
}

// Vouch says whether a placement of a service that serves model (by
// name) names node, or has named it while the service exists, as a
// replica (or, standby set, as a replica's standby).
func (v *Vouchers) Vouch(node, model string, standby bool) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	now := v.now()
	if v.moved() || now.Sub(v.read) >= vouchRefresh {
		v.refresh(now)
	}
	if v.vouched(node, model, standby) {
		return true
	}
	if v.versioned || now.Sub(v.read) < vouchRetry {
		return false
	}
	v.refresh(now)
	return v.vouched(node, model, standby)
}

// Declared returns the key of a service that serves model (by name), the
// least such key, or empty when none does.
func (v *Vouchers) Declared(model string) string {
	if model == anyModel {
		return ""
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if now := v.now(); v.moved() || now.Sub(v.read) >= vouchRetry {
		v.refresh(now)
	}
	least := ""
	for key, m := range v.models {
		if m == model && (least == "" || key < least) {
			least = key
		}
	}
	// A service that names its model by a digest whose manifest came
	// after it: named now.
	for key, d := range v.unnamed {
		if least == "" || key < least {
			if v.nameOf(d) == model {
				least = key
			}
		}
	}
	return least
}

// moved says whether the policies or placements changed since they were
// read, where the store counts its tables' changes; v.mu is held.
func (v *Vouchers) moved() bool {
	if !v.versioned {
		return false
	}
	a, _ := v.cat.Policies.Version()
	b, _ := v.cat.Placements.Version()
	return [2]uint64{a, b} != v.versions
}

// vouched answers Vouch from what was read; v.mu is held.
func (v *Vouchers) vouched(node, model string, standby bool) bool {
	return v.count[vouch{model, node, standby}] > 0 || v.count[vouch{anyModel, node, standby}] > 0
}

// refresh reads the policies and placements that changed; v.mu is held.
func (v *Vouchers) refresh(now time.Time) {
	v.read = now
	if v.versioned {
		a, _ := v.cat.Policies.Version()
		b, _ := v.cat.Placements.Version()
		v.versions = [2]uint64{a, b}
	}
	pols, gone := v.cat.Policies.Next(&v.pols)
	pls, _ := v.cat.Placements.Next(&v.pls)
	for _, key := range gone {
		v.forget(key) // deleted: its replicas unload
	}
	if v.pols.Relisted() {
		live := make(map[string]bool, len(pols))
		for _, r := range pols {
			live[r.Key] = true
		}
		for key := range v.models {
			if !live[key] {
				v.forget(key)
			}
		}
	}
	for _, r := range pols {
		doc, err := r.Value.Document()
		if err != nil || doc.InferenceService == nil {
			v.forget(r.Key)
			continue
		}
		ref := doc.InferenceService.Model
		m := ref.Name
		if m == "" {
			m = v.nameOf(ref.Digest)
		}
		if old, ok := v.models[r.Key]; !ok || old != m {
			// New, or serving another model: what was placed for the
			// old one no longer counts; the current placement does.
			v.forget(r.Key)
			v.models[r.Key] = m
			if pl, err := v.cat.Placements.Value(r.Key); err == nil {
				v.place(r.Key, pl)
			}
		}
		if m == anyModel {
			v.unnamed[r.Key] = ref.Digest
		} else {
			delete(v.unnamed, r.Key)
		}
	}
	for _, r := range pls {
		if _, ok := v.models[r.Key]; ok {
			v.place(r.Key, r.Value)
		}
	}
}

// place records what pl, the placement of the service keyed key, names.
func (v *Vouchers) place(key string, pl catalog.Placement) {
	m := v.models[key]
	for _, pn := range pl.Nodes {
		v.add(key, vouch{m, pn.Name, false})
		if pn.Standby != "" {
			v.add(key, vouch{m, pn.Standby, true})
		}
	}
}

// add records that the placement of the service keyed key named k.
func (v *Vouchers) add(key string, k vouch) {
	if v.named[key] == nil {
		v.named[key] = vouches{}
	}
	if !v.named[key][k] {
		v.named[key][k] = true
		v.count[k]++
	}
}

// forget drops what the placements of the service keyed key named.
func (v *Vouchers) forget(key string) {
	for k := range v.named[key] {
		if v.count[k]--; v.count[k] <= 0 {
			delete(v.count, k)
		}
	}
	delete(v.named, key)
	delete(v.models, key)
	delete(v.unnamed, key)
}

// nameOf is the name of the model published with digest, anyModel when
// none is known here.
func (v *Vouchers) nameOf(digest string) string {
	recs, _ := v.cat.Manifests.Select(func(_ string, m storage.Manifest) bool { return m.Digest == digest && m.Kind == storage.KindModel })
	if len(recs) == 0 || digest == "" {
		return anyModel
	}
	return recs[0].Value.Name
}
