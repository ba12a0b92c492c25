package mesh

import (
	"encoding/binary"
	"hash/fnv"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/serf/coordinate"
)

// Catalog anti-entropy between push/pulls. A catalog entry travels by
// gossip broadcast, sent a bounded number of times; when every copy to a
// member is lost (a full socket buffer on a loaded host), memberlist's
// periodic push/pull (every 30s) was the only repair, and a placement
// waited that long for a node to learn it. So every probe's ack also
// carries a digest of the entries its sender has held for catalogSettle;
// a node whose own digest differs from a peer's, twice at least
// catalogSyncAfter apart, exchanges full state with that peer at once
// (a push/pull both ways), at most once per Config.CatalogSyncInterval.

// catalogSettle is how long an entry is held here before the digest
// counts it, so entries still in flight do not make two members differ.
const catalogSettle = 2 * time.Second

// catalogSyncAfter is how long two digests must keep differing before a
// sync: a difference seen once may be an entry just settling.
const catalogSyncAfter = time.Second

// syncCostShare bounds the time this node spends in the syncs it starts:
// after one that took d, the next waits at least d*syncCostShare (and
// Config.CatalogSyncInterval). A sync exchanges the whole catalog, so its
// cost grows with it: with 10,000 policies held, syncs every 5s were the
// largest share of the agents' CPU (BenchmarkManyPolicies), while the
// broadcasts they repair were still arriving.
const syncCostShare = 20

// bucketRepairEvery is the least time between two bucket repairs asked of
// one peer, and bucketRepairGrace how long a difference must outlast the
// first before a full sync: time for the two messages each way.
const (
	bucketRepairEvery = time.Second
	bucketRepairGrace = 3 * time.Second
)

// ackPayload is what every probe ack carries: the Vivaldi coordinate
// (its fields at the top level, as agents before the digest sent it,
// and read it) and the catalog digest.
type ackPayload struct {
	*coordinate.Coordinate
	// Catalog is the digest of the settled entries; nil from an agent that
	// sends none.
	Catalog *uint64 `json:"catalog,omitempty"`
	// Doc is the version of the sender's own document: a prober whose copy
	// is older (the broadcast of the change did not reach it) fetches it.
	Doc uint64 `json:"doc,omitempty"`
}

// stamp records when this node got e and caches its hash.
func (e *Entry) stamp(now time.Time) {
	h := fnv.New64a()
	h.Write([]byte(e.Key))
	var b [9]byte
	binary.BigEndian.PutUint64(b[:8], e.Version)
	if e.Deleted {
		b[8] = 1
	}
	h.Write(b[:])
	h.Write([]byte(e.Origin))
	e.hash, e.bucket = h.Sum64(), bucketOf(e.Key)
	e.setSeen(now)
}

// settledDigestLocked is an order-free hash of the entries held here for
// at least catalogSettle; m.mu is held for writing (it trims
// m.unsettled). It is the hash of every entry held but those set within
// catalogSettle, which are among the last set (m.unsettled): every probe
// ack carries it, and hashing the whole catalog for each was a
// sixteenth of an idle agent's CPU at 10,000 policies.
func (m *Mesh) settledDigestLocked(now time.Time) uint64 {
	m.trimUnsettledLocked(now)
	d := m.kvDigest
	var counted map[*held]bool
	for _, e := range m.unsettled {
		if m.kv[e.Key] != e || e.sinceSeen(now) >= catalogSettle || counted[e] {
			continue // replaced, deleted, or settled (set out of order)
		}
		if counted == nil {
			counted = map[*held]bool{}
		}
		counted[e] = true
		d ^= e.hash
	}
	return d
}

// trimUnsettledLocked drops from m.unsettled the entries at its front
// held for catalogSettle at now. Setting an entry trims too: an agent
// that no peer probes (alone, or cut off) is asked no digest, and its
// list must not grow with every write. m.mu is held for writing.
func (m *Mesh) trimUnsettledLocked(now time.Time) {
	settled := 0
	for settled < len(m.unsettled) && m.unsettled[settled].sinceSeen(now) >= catalogSettle {
		m.unsettled[settled] = nil // not kept for a digest
		settled++
	}
	m.unsettled = m.unsettled[settled:]
}

// digestSyncLocked says whether catalog anti-entropy rests on the digests
// alone: syncs are on and every live member's acks carry a digest. m.mu is
// held.
func (m *Mesh) digestSyncLocked() bool {
	if m.cfg.CatalogSyncInterval < 0 {
		return false
	}
	for _, mi := range m.members {
		if (mi.status == StatusAlive || mi.status == StatusSuspect) && !mi.digests {
			return false
		}
	}
	return true
}

// compareCatalog compares a peer's digest, from its ack, with ours and
// asks for a sync when they have differed long enough.
func (m *Mesh) compareCatalog(peer string, theirs uint64) {
	if m.cfg.CatalogSyncInterval < 0 {
		return
	}
	now := time.Now()
	m.mu.Lock()
	mi := m.members[peer]
	if mi == nil || mi.status != StatusAlive || mi.ip == nil {
		m.mu.Unlock()
		return
	}
	if m.settledDigestLocked(now) == theirs {
		mi.catalogDiffers = time.Time{}
		m.mu.Unlock()
		return
	}
	if mi.catalogDiffers.IsZero() {
		mi.catalogDiffers = now
	}
	if now.Sub(mi.catalogDiffers) < catalogSyncAfter {
		m.mu.Unlock()
		return
	}
	// First the buckets (buckets.go): they cost a 256th of a full sync
	// for a lost entry, so they go at once, at most every
	// bucketRepairEvery with a peer.
	if now.Sub(mi.bucketsAsked) >= bucketRepairEvery {
		mi.bucketsAsked = now
		m.mu.Unlock()
		m.enqueue(job{kind: msgBuckets, to: peer})
		return
	}
	// A difference the buckets did not repair (an agent before them, a
	// catalog changing faster than they go) gets the full sync, spaced by
	// its cost.
	gap := max(m.cfg.CatalogSyncInterval, m.lastSyncTook*syncCostShare)
	if now.Sub(mi.catalogDiffers) < catalogSyncAfter+bucketRepairGrace || now.Sub(m.lastCatalogSync) < gap {
		m.mu.Unlock()
		return
	}
	mi.catalogDiffers = time.Time{}
	m.lastCatalogSync = now
	addr := net.JoinHostPort(mi.ip.String(), strconv.Itoa(int(mi.port)))
	m.mu.Unlock()
	select {
	case m.syncs <- addr:
	default: // a sync is under way
	}
}

// syncCatalogs runs the push/pulls compareCatalog asks for, one at a time.
func (m *Mesh) syncCatalogs() {
	for {
		select {
		case <-m.stop:
			return
		case addr := <-m.syncs:
			// Join with a member is a push/pull with it: both sides merge
			// what the other holds.
			start := time.Now()
			if _, err := m.ml.Join([]string{addr}); err != nil {
				// A failed sync's time is a timeout, not the catalog's
				// cost: it does not space the next one.
				m.log.Debug("catalog sync failed", "peer", addr, "err", err)
				continue
			}
			took := time.Since(start)
			m.mu.Lock()
			m.lastSyncTook = took
			m.mu.Unlock()
			m.metrics.catalogSyncSeconds.Observe(took.Seconds())
			m.metrics.catalogSyncs.Inc()
		}
	}
}
