package mesh

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/coordinate"
)

// delegate implements memberlist's Delegate, EventDelegate and PingDelegate
// for a Mesh. memberlist calls these from its network goroutines, possibly
// concurrently: none of them blocks on the network (TCP sends go to the
// worker), and each holds the mesh lock only briefly.
type delegate struct{ m *Mesh }

var (
	_ memberlist.Delegate      = (*delegate)(nil)
	_ memberlist.EventDelegate = (*delegate)(nil)
	_ memberlist.PingDelegate  = (*delegate)(nil)
)

// NodeMeta carries only the node ID and document version.
func (d *delegate) NodeMeta(limit int) []byte {
	d.m.mu.Lock()
	b := encodeMeta(metaDigest{ID: d.m.id, Version: d.m.local.Version, Started: d.m.started.UnixNano()})
	d.m.mu.Unlock()
	if len(b) > limit {
		return nil
	}
	return b
}

// NotifyMsg handles a user message: a document (broadcast or answer to an
// ask) or an ask for ours. Malformed messages are dropped and counted.
func (d *delegate) NotifyMsg(b []byte) {
	if len(b) == 0 {
		d.m.metrics.malformed.WithLabelValues("empty").Inc()
		return
	}
	switch b[0] {
	case msgState:
		if d.m.heldAlready(b[1:]) {
			d.m.metrics.stateDuplicates.Inc()
			return
		}
		// memberlist may reuse b after this returns; the document keeps
		// its bytes to relay them as signed.
		s, err := decodeState(slices.Clone(b[1:]))
		if err != nil {
			d.m.metrics.malformed.WithLabelValues("state").Inc()
			return
		}
		d.m.merge(s, true)
	case msgStateReq:
		d.m.enqueue(job{kind: msgState, to: string(b[1:])})
	case msgBuckets:
		d.m.onBuckets(b[1:])
	case msgBucketEntries:
		// Not copied: decoding copies each entry out of b (json.RawMessage)
		// before onBucketEntries returns. A repair carries a 16th of the
		// catalog at most, and while thousands of policies were placed the
		// repairs under way were most of the agents' peak heap.
		d.m.onBucketEntries(b[1:])
	case msgEntry:
		e, err := decodeEntry(slices.Clone(b[1:]))
		if err != nil {
			d.m.metrics.malformed.WithLabelValues("entry").Inc()
			return
		}
		d.m.mergeEntry(e, true)
	default:
		d.m.metrics.malformed.WithLabelValues("type").Inc()
	}
}

// GetBroadcasts hands memberlist the queued document broadcasts.
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.m.bq.GetBroadcasts(overhead, limit)
}

// recentEntries is how recently this node must have got a catalog entry
// for memberlist's periodic push/pull to carry it (see LocalState): two of
// its 30 s rounds.
const recentEntries = time.Minute

// pushPull is what a push/pull exchanges: every node document, catalog
// entries (tombstones included; all of them or the recent ones, see
// LocalState), each as signed, and the certificates (DER) of the writers
// the sender knows, so that entries whose writer's document is gone
// (reaped, or in another site) still verify.
type pushPull struct {
	Nodes   []json.RawMessage `json:"nodes"`
	Entries []json.RawMessage `json:"entries"`
	Certs   [][]byte          `json:"certs,omitempty"`
}

// LocalState sends the documents this node holds and catalog entries:
// all of them in a join (a catalog sync is one), else those it got within
// recentEntries. A document is otherwise repaired by its own node: every
// probe's ack and every meta update says its version, and a node that
// holds an older one asks for it; at 10,000 policies the documents of
// nodes that serve thousands of replicas made every periodic exchange
// megabytes to send, decrypt and read though they had not changed.
// memberlist's periodic push/pull (every 30 s, with each member in
// turn) carried the whole catalog, though the digest in every ack
// already starts a sync with a member whose catalog differs: with 10,000
// policies each was tens of MB to encode, send and decode, most of the
// agents' heap at any moment (BenchmarkManyPolicies). What a member misses
// is a recent write whose broadcasts were lost; the periodic exchange
// still repairs those as fast as before. It carries the whole catalog
// while digest syncs are off, or while a member has not shown that it
// sends digests (an agent from before them, in an upgrade).
func (d *delegate) LocalState(join bool) []byte {
	d.m.mu.Lock()
	all := join || !d.m.digestSyncLocked()
	now := time.Now()
	nodes := make([][]byte, 0, len(d.m.docs))
	for _, s := range d.m.docs {
		if !all && now.Sub(s.got) >= recentEntries {
			continue
		}
		if b, err := encodeState(s); err == nil {
			nodes = append(nodes, b)
		}
	}
	var entries [][]byte
	var spilled []*held // read from the store, outside d.m.mu
	for _, e := range d.m.kv {
		if !all && e.sinceSeen(now) >= recentEntries {
			continue
		}
		if e.spilled {
			spilled = append(spilled, e)
		} else if b, err := encodeEntry(e.full); err == nil {
			entries = append(entries, b)
		}
	}
	d.m.mu.Unlock()
	for _, e := range d.m.fullEach(spilled) {
		if b, err := encodeEntry(e); err == nil {
			entries = append(entries, b)
		}
	}
	var certs [][]byte
	if d.m.trust != nil {
		certs = d.m.trust.knownCerts()
	}
	b, err := encodePushPull(nodes, entries, certs)
	if err != nil {
		return nil
	}
	return b
}

// encodePushPull writes a pushPull of documents and entries already
// encoded (valid JSON each: this node's own encoding, or a peer's that
// decoded) into one buffer of the right size. json.Marshal of the struct
// validated and copied every entry again into a growing buffer: with
// 10,000 policies a catalog sync's encoding took tens of MB, and checking
// JSON it had written was a twentieth of the agents' CPU.
func encodePushPull(nodes, entries, certs [][]byte) ([]byte, error) {
	tail := []byte("}")
	if len(certs) > 0 {
		c, err := json.Marshal(certs)
		if err != nil {
			return nil, err
		}
		tail = append(append([]byte(`,"certs":`), c...), '}')
	}
	size := len(`{"nodes":[],"entries":[]`) + len(nodes) + len(entries) + len(tail)
	for _, b := range nodes {
		size += len(b)
	}
	for _, b := range entries {
		size += len(b)
	}
	out := make([]byte, 0, size)
	out = append(out, `{"nodes":`...)
	out = appendArray(out, nodes)
	out = append(out, `,"entries":`...)
	out = appendArray(out, entries)
	return append(out, tail...), nil
}

// appendArray appends a JSON array of items, each valid JSON, to out.
func appendArray(out []byte, items [][]byte) []byte {
	out = append(out, '[')
	for i, b := range items {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, b...)
	}
	return append(out, ']')
}

// MergeRemoteState folds a peer's documents and entries into ours
// (anti-entropy): certificates first, then documents, then entries with
// the ones others derive from (policies, placements) first, so that an
// entry whose writer or whose authorization depends on another arrives
// after it.
func (d *delegate) MergeRemoteState(buf []byte, join bool) {
	var pp pushPull
	if err := json.Unmarshal(buf, &pp); err != nil {
		d.m.metrics.malformed.WithLabelValues("pushpull").Inc()
		return
	}
	if d.m.trust != nil {
		d.m.trust.learnCerts(pp.Certs, time.Now())
	}
	for _, raw := range pp.Nodes {
		// A join carries every document and an exchange those of the
		// last minute, most of them held already at that version: at
		// 10,000 policies decoding them was a third of what an idle agent
		// allocated.
		if d.m.heldAlready(raw) {
			d.m.metrics.stateDuplicates.Inc()
			continue
		}
		s, err := decodeState(raw)
		if err != nil || s == nil {
			d.m.metrics.malformed.WithLabelValues("state").Inc()
			continue
		}
		d.m.merge(s, false)
	}
	entries := make([]*Entry, 0, len(pp.Entries))
	for _, raw := range pp.Entries {
		e, err := decodeEntry(raw)
		if err != nil || e == nil {
			d.m.metrics.malformed.WithLabelValues("entry").Inc()
			continue
		}
		entries = append(entries, e)
	}
	slices.SortStableFunc(entries, func(a, b *Entry) int { return mergeRank(a.Key) - mergeRank(b.Key) })
	for _, e := range entries {
		d.m.mergeEntry(e, false)
	}
}

// mergeRank orders a push/pull's entries: policies, then placements, then
// the rest, which are derived from them.
func mergeRank(key string) int {
	switch {
	case strings.HasPrefix(key, "policies/"):
		return 0
	case strings.HasPrefix(key, "placements/"):
		return 1
	}
	return 2
}

// NotifyJoin records a node as alive and fetches its document if newer.
func (d *delegate) NotifyJoin(n *memberlist.Node) { d.m.observe(n, StatusAlive) }

// NotifyUpdate sees a node's new meta digest.
func (d *delegate) NotifyUpdate(n *memberlist.Node) { d.m.observe(n, StatusAlive) }

// NotifyLeave records a node as gone. Whether it failed or left is told by
// its last document (NodeState.Leaving): memberlist's event does not say.
func (d *delegate) NotifyLeave(n *memberlist.Node) { d.m.observe(n, StatusFailed) }

// AckPayload attaches our coordinate, catalog digest and document version
// to every ack we send.
func (d *delegate) AckPayload() []byte {
	d.m.mu.Lock()
	digest := d.m.settledDigestLocked(time.Now())
	doc := d.m.local.Version
	d.m.mu.Unlock()
	b, err := json.Marshal(ackPayload{Coordinate: d.m.coord.GetCoordinate(), Catalog: &digest, Doc: doc})
	if err != nil {
		return nil
	}
	return b
}

// NotifyPingComplete feeds a measured RTT, filtered (see rttFilter), and
// the peer's coordinate to Vivaldi.
func (d *delegate) NotifyPingComplete(other *memberlist.Node, rtt time.Duration, payload []byte) {
	if len(payload) == 0 {
		return
	}
	c := &coordinate.Coordinate{}
	ack := ackPayload{Coordinate: c}
	if err := json.Unmarshal(payload, &ack); err != nil {
		d.m.metrics.malformed.WithLabelValues("coordinate").Inc()
		return
	}
	if ack.Catalog != nil {
		d.m.mu.Lock()
		if mi := d.m.members[other.Name]; mi != nil {
			mi.digests = true
		}
		d.m.mu.Unlock()
		d.m.compareCatalog(other.Name, *ack.Catalog)
	}
	if ack.Doc != 0 {
		d.m.compareDoc(other.Name, ack.Doc)
	}
	if ValidCoordinate(c) != nil {
		d.m.metrics.malformed.WithLabelValues("coordinate").Inc()
		return
	}
	// An absurd RTT teaches Vivaldi nothing; the peer still answered.
	if sample, ok := d.m.rtt.add(other.Name, rtt); ok {
		if _, err := d.m.coord.Update(other.Name, c, sample); err != nil {
			d.m.metrics.malformed.WithLabelValues("coordinate").Inc()
			return
		}
	}
	d.m.mu.Lock()
	d.m.peerCoords[other.Name] = c
	if mi := d.m.members[other.Name]; mi != nil && mi.suspect {
		mi.suspect = false // it answered
		d.m.notifyLocked()
	}
	d.m.mu.Unlock()
}

// observe records a membership event and, when the node's meta names a
// version newer than the document held, asks the node for it.
func (m *Mesh) observe(n *memberlist.Node, st Status) {
	var meta metaDigest
	if len(n.Meta) > 0 {
		if err := json.NewDecoder(bytes.NewReader(n.Meta)).Decode(&meta); err != nil {
			m.metrics.malformed.WithLabelValues("meta").Inc()
		}
	}
	if n.Name == m.cfg.Name {
		return
	}
	m.mu.Lock()
	mi := m.members[n.Name]
	if mi == nil {
		mi = &memberInfo{}
		m.members[n.Name] = mi
	}
	changed := mi.status != st
	if changed {
		mi.changed = time.Now()
		mi.digests = false // until its acks show it again
		m.log.Info("member status", "node", n.Name, "status", st)
	}
	if meta.ID != "" && meta.ID != mi.id {
		mi.digests = false // restarted, maybe as another build
	}
	mi.status, mi.ip, mi.port = st, slices.Clone(n.Addr), n.Port
	mi.suspect = false
	if meta.ID != "" {
		mi.id, mi.meta = meta.ID, meta
	}
	fetch := false
	if st == StatusAlive && meta.ID != "" {
		held := m.docs[meta.ID]
		if _, asked := m.fetching[n.Name]; (held == nil || held.Version < meta.Version) && !asked {
			m.fetching[n.Name] = time.Now()
			fetch = true
		}
	}
	if changed {
		m.metrics.setMembers(m.members)
	}
	m.notifyLocked()
	m.mu.Unlock()
	if fetch {
		m.enqueue(job{kind: msgStateReq, to: n.Name})
	}
}

// compareDoc fetches a peer's document when its probe answer says it is
// newer than the copy held (the broadcast of the change was lost).
func (m *Mesh) compareDoc(name string, version uint64) {
	m.mu.Lock()
	mi := m.members[name]
	fetch := false
	if mi != nil && mi.status == StatusAlive && mi.meta.ID != "" {
		mi.meta.Version = max(mi.meta.Version, version)
		held := m.docs[mi.meta.ID]
		if _, asked := m.fetching[name]; (held == nil || held.Version < version) && !asked {
			m.fetching[name] = time.Now()
			fetch = true
		}
	}
	m.mu.Unlock()
	if fetch {
		m.enqueue(job{kind: msgStateReq, to: name})
	}
}
