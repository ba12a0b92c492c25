package mesh

import (
	"encoding/json"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"time"
)

// Bucketed repair. A full catalog sync exchanges the whole catalog, so it
// is spaced by its cost (syncCostShare): with 10,000 policies held, a
// member that lost the broadcasts of one placement waited over 100 s for
// the next (BenchmarkManyPolicies). Before that, a member whose digest
// differs from a peer's sends it the digest of each of syncBuckets
// buckets of keys (msgBuckets); the peer answers with its entries of the
// buckets that differ, asking for the member's in return
// (msgBucketEntries): one lost entry costs the entries of its bucket, a
// 256th of the catalog, each way. The full sync stays, spaced as before,
// for what the buckets do not repair (an agent before them answers
// nothing).

// syncBuckets is the number of key buckets compared, and
// maxRepairBuckets the most one repair carries.
const (
	syncBuckets      = 256
	maxRepairBuckets = 16
)

// Message types of the bucketed repair.
const (
	msgBuckets       byte = 4 // bucketsMsg (JSON)
	msgBucketEntries byte = 5 // bucketEntries (JSON)
)

// bucketsMsg is a member's settled digest of each bucket of keys.
type bucketsMsg struct {
	From    string   `json:"from"`
	Digests []uint64 `json:"digests"`
}

// bucketEntries are the sender's entries of the buckets that differed;
// Reply asks the receiver for its own.
type bucketEntries struct {
	From    string            `json:"from"`
	Buckets []int             `json:"buckets"`
	Entries []json.RawMessage `json:"entries,omitempty"` // see entriesPayload
	Reply   bool              `json:"reply,omitempty"`
}

// bucketOf is the bucket of a key.
func bucketOf(key string) uint16 {
	h := fnv.New32a()
	h.Write([]byte(key))
	return uint16(h.Sum32() % syncBuckets)
}

// bucketDigestsLocked is settledDigestLocked per bucket; m.mu is held.
func (m *Mesh) bucketDigestsLocked(now time.Time) []uint64 {
	d := make([]uint64, syncBuckets)
	for _, e := range m.kv {
		if e.sinceSeen(now) >= catalogSettle {
			d[e.bucket] ^= e.hash
		}
	}
	return d
}

// bucketsPayload is this member's msgBuckets.
func (m *Mesh) bucketsPayload() []byte {
	m.mu.Lock()
	d := m.bucketDigestsLocked(time.Now())
	m.mu.Unlock()
	b, err := json.Marshal(bucketsMsg{From: m.cfg.Name, Digests: d})
	if err != nil {
		return nil
	}
	return append([]byte{msgBuckets}, b...)
}

// entriesPayload is this member's msgBucketEntries for buckets.
func (m *Mesh) entriesPayload(buckets []int, reply bool) []byte {
	want := make([]bool, syncBuckets)
	for _, i := range buckets {
		want[i] = true
	}
	now := time.Now()
	var entries [][]byte
	var spilled []*held // read from the store, outside m.mu
	m.mu.Lock()
	for _, e := range m.kv {
		// Settled entries only, as the digests count: the others are
		// still on their way by gossip.
		if e.sinceSeen(now) < catalogSettle || !want[e.bucket] {
			continue
		}
		if e.spilled {
			spilled = append(spilled, e)
		} else if b, err := encodeEntry(e.full); err == nil {
			entries = append(entries, b)
		}
	}
	m.mu.Unlock()
	for _, e := range m.fullEach(spilled) {
		if b, err := encodeEntry(e); err == nil {
			entries = append(entries, b)
		}
	}
	// The entries are written as they are held (see encodePushPull).
	head, err := json.Marshal(bucketEntries{From: m.cfg.Name, Buckets: buckets, Reply: reply})
	if err != nil {
		return nil
	}
	size := 1 + len(head) + len(`,"entries":[]`) + len(entries)
	for _, b := range entries {
		size += len(b)
	}
	out := make([]byte, 0, size)
	out = append(out, msgBucketEntries)
	out = append(out, head[:len(head)-1]...) // all but its closing brace
	out = append(out, `,"entries":`...)
	out = appendArray(out, entries)
	return append(out, '}')
}

// onBuckets answers a peer's bucket digests with this member's entries of
// the buckets that differ, asking for the peer's. Malformed digests are
// dropped and counted.
func (m *Mesh) onBuckets(b []byte) {
	var in bucketsMsg
	if err := json.Unmarshal(b, &in); err != nil || len(in.Digests) != syncBuckets || in.From == "" {
		m.metrics.malformed.WithLabelValues("buckets").Inc()
		return
	}
	m.mu.Lock()
	if mi := m.members[in.From]; mi == nil || mi.status != StatusAlive || time.Since(m.bucketsAnswered[in.From]) < bucketRepairEvery/2 {
		// Live members only, one comparison per peer per round: no one
		// can make this node go through its catalog, nor send it, over
		// and over.
		m.mu.Unlock()
		return
	}
	m.bucketsAnswered[in.From] = time.Now()
	ours := m.bucketDigestsLocked(time.Now())
	m.mu.Unlock()
	var differ []int
	for i, d := range ours {
		if d != in.Digests[i] {
			differ = append(differ, i)
		}
	}
	if len(differ) == 0 {
		return
	}
	if len(differ) > maxRepairBuckets {
		// Many differ while the catalog changes fast (entries still in
		// flight): a sample of them, so that a repair stays small; the
		// next repairs take others.
		rand.Shuffle(len(differ), func(i, j int) { differ[i], differ[j] = differ[j], differ[i] })
		differ = differ[:maxRepairBuckets]
		slices.Sort(differ)
	}
	m.metrics.bucketRepairs.Inc()
	m.enqueue(job{kind: msgBucketEntries, to: in.From, buckets: differ, reply: true})
}

// onBucketEntries merges a peer's entries of the buckets that differed
// (policies and placements first, as a push/pull does) and, when asked,
// sends this member's own. Malformed messages and entries are dropped
// and counted; every entry is checked as a push/pull's are. It keeps
// nothing of b, which the caller may reuse once it returns.
func (m *Mesh) onBucketEntries(b []byte) {
	var in bucketEntries
	if err := json.Unmarshal(b, &in); err != nil || in.From == "" || len(in.Buckets) > syncBuckets ||
		slices.ContainsFunc(in.Buckets, func(i int) bool { return i < 0 || i >= syncBuckets }) {
		m.metrics.malformed.WithLabelValues("buckets").Inc()
		return
	}
	entries := make([]*Entry, 0, len(in.Entries))
	for _, raw := range in.Entries {
		e, err := decodeEntry(raw)
		if err != nil || e == nil {
			m.metrics.malformed.WithLabelValues("entry").Inc()
			continue
		}
		entries = append(entries, e)
	}
	slices.SortStableFunc(entries, func(a, b *Entry) int { return mergeRank(a.Key) - mergeRank(b.Key) })
	for _, e := range entries {
		m.mergeEntry(e, false)
	}
	if in.Reply && len(in.Buckets) > 0 {
		m.enqueue(job{kind: msgBucketEntries, to: in.From, buckets: slices.Clone(in.Buckets)})
	}
}
