package federation

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/fnv"
	"io"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/strata-mesh/strata/mesh"
)

// maxFrame bounds one sync message: a whole global catalog.
const maxFrame = 64 << 20

// Two gateways exchange their global catalogs by version (sync). With
// protoSync2 they send only what differs: the dialer sends a digest of
// each of syncBuckets buckets of keys; the other side answers with the
// versions of its keys in the buckets that differ; the dialer sends its
// records that differ there and asks for the ones it lacks or holds
// another version of; the other side sends those. A one-record difference
// in a catalog of thousands costs the digests, one bucket's versions and
// the record, not both catalogs (BenchmarkSync). protoSync, both whole
// catalogs when their digests differ, is kept for agents from before.
const syncBuckets = 64

// syncMsg is one message of either exchange.
type syncMsg struct {
	// Digest (protoSync) hashes the whole catalog.
	Digest string `json:"digest,omitempty"`
	// Buckets (protoSync2, dialer) hash each bucket of keys.
	Buckets []string `json:"buckets,omitempty"`
	// Differ and Versions (protoSync2, answer) are the buckets that
	// differ and the answering side's versions of its keys in them.
	Differ   []int                `json:"differ,omitempty"`
	Versions map[string]versionOf `json:"versions,omitempty"`
	// Want (protoSync2, dialer) are the keys the dialer asks for.
	Want    []string     `json:"want,omitempty"`
	Entries []mesh.Entry `json:"entries,omitempty"`
}

// versionOf is the version of a record that sync compares.
type versionOf struct {
	Version uint64 `json:"v"`
	Origin  string `json:"o"`
}

func versionOfEntry(e mesh.Entry) versionOf { return versionOf{e.Version, e.Origin} }

// digest is a hash of every global record's key, version and origin.
func digest(es []mesh.Entry) string {
	h := sha256.New()
	for _, e := range es {
		hashVersion(h, e)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// hashVersion adds a record's key, version and origin to a digest.
func hashVersion(h hash.Hash, e mesh.Entry) {
	fmt.Fprintf(h, "%s\x00%d\x00%s\n", e.Key, e.Version, e.Origin)
}

// bucketOf is the bucket of a key.
func bucketOf(key string) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % syncBuckets)
}

// buckets returns the digest of each bucket of es (sorted by key): 16 hex
// digits, "" for an empty bucket.
func buckets(es []mesh.Entry) []string {
	var hs [syncBuckets]hash.Hash
	for _, e := range es {
		b := bucketOf(e.Key)
		if hs[b] == nil {
			hs[b] = sha256.New()
		}
		hashVersion(hs[b], e)
	}
	out := make([]string, syncBuckets)
	for i, h := range hs {
		if h != nil {
			out[i] = fmt.Sprintf("%x", h.Sum(nil)[:8])
		}
	}
	return out
}

// catalog is what sync reads and writes of the site's catalog.
type catalog interface {
	GlobalEntries() []mesh.Entry
}

// lazyCatalog is a catalog that can list its entries without the values
// it keeps on disk alone (the mesh: mesh.Config.Spill). A sync compares
// versions, and reads only the entries it sends: with 10,000 policies,
// reading every one back on each sync and each publish was most of what
// a gateway did.
type lazyCatalog interface {
	GlobalEntriesMeta() []mesh.Entry
	LoadGlobal(e mesh.Entry) (mesh.Entry, error)
}

// listed is c's global entries, without the values it keeps on disk
// where it can list them so (see lazyCatalog).
func listed(c catalog) []mesh.Entry {
	if l, ok := c.(lazyCatalog); ok {
		return l.GlobalEntriesMeta()
	}
	return c.GlobalEntries()
}

// loaded is es, listed by listed, with their values: an entry that can no
// longer be read (collected meanwhile) is left out.
func loaded(c catalog, es []mesh.Entry) []mesh.Entry {
	l, ok := c.(lazyCatalog)
	if !ok {
		return es
	}
	out := make([]mesh.Entry, 0, len(es))
	for _, e := range es {
		if f, err := l.LoadGlobal(e); err == nil {
			out = append(out, f)
		}
	}
	return out
}

func (f *Federation) goSync(ctx context.Context, p peer.ID) {
	f.wg.Go(func() {
		if err := f.sync(ctx, p); err != nil && ctx.Err() == nil {
			f.metrics.errors.WithLabelValues("sync").Inc()
			f.cfg.Logger.Debug("federation sync failed", "peer", p, "err", err)
		}
	})
}

// sync exchanges global catalogs with p (the dialer's side).
func (f *Federation) sync(ctx context.Context, p peer.ID) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	h := f.Host()
	if h == nil {
		return nil
	}
	s, err := h.NewStream(ctx, p, protoSync2, protoSync)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	}
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(time.Minute))
	var got []mesh.Entry
	if s.Protocol() == protoSync {
		got, err = syncWhole(s, f.cfg.Mesh)
	} else {
		got, err = syncDelta(s, f.cfg.Mesh)
	}
	f.merge(got)
	if err == nil {
		f.metrics.syncs.Inc()
	}
	return err
}

// serveSync is the other side of sync, either protocol.
func (f *Federation) serveSync(s network.Stream) {
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(time.Minute))
	var got []mesh.Entry
	var err error
	if s.Protocol() == protoSync {
		got, err = serveWhole(s, f.cfg.Mesh)
	} else {
		got, err = serveDelta(s, f.cfg.Mesh)
	}
	f.merge(got)
	switch {
	case errors.Is(err, errMalformed):
		f.metrics.malformed.Inc()
		_ = s.Reset()
	case err != nil && !errors.Is(err, io.EOF):
		f.metrics.errors.WithLabelValues("sync").Inc()
		_ = s.Reset()
	}
}

// errMalformed wraps a sync message that does not decode, or says what
// the protocol does not allow.
var errMalformed = errors.New("malformed sync message")

// syncWhole is the dialer's side of protoSync: it returns the records
// received.
func syncWhole(rw io.ReadWriter, c catalog) ([]mesh.Entry, error) {
	mine := listed(c)
	d := digest(mine)
	if err := writeMsg(rw, syncMsg{Digest: d}); err != nil {
		return nil, err
	}
	var theirs syncMsg
	if err := readMsg(rw, &theirs); err != nil {
		return nil, err
	}
	if theirs.Digest == d {
		return nil, nil
	}
	return theirs.Entries, writeMsg(rw, syncMsg{Digest: d, Entries: loaded(c, mine)})
}

// serveWhole is the answering side of protoSync.
func serveWhole(rw io.ReadWriter, c catalog) ([]mesh.Entry, error) {
	var theirs syncMsg
	if err := readMsg(rw, &theirs); err != nil {
		return nil, err
	}
	mine := listed(c)
	d := digest(mine)
	if theirs.Digest == d {
		return nil, writeMsg(rw, syncMsg{Digest: d})
	}
	if err := writeMsg(rw, syncMsg{Digest: d, Entries: loaded(c, mine)}); err != nil {
		return nil, err
	}
	var back syncMsg
	if err := readMsg(rw, &back); err != nil {
		return nil, err
	}
	return back.Entries, nil
}

// syncDelta is the dialer's side of protoSync2: it returns the records
// received.
func syncDelta(rw io.ReadWriter, c catalog) ([]mesh.Entry, error) {
	mine := listed(c)
	if err := writeMsg(rw, syncMsg{Buckets: buckets(mine)}); err != nil {
		return nil, err
	}
	var theirs syncMsg
	if err := readMsg(rw, &theirs); err != nil {
		return nil, err
	}
	if len(theirs.Differ) == 0 {
		return nil, nil
	}
	differ := map[int]bool{}
	for _, b := range theirs.Differ {
		differ[b] = true
	}
	var back syncMsg
	held := map[string]bool{}
	for _, e := range mine {
		if !differ[bucketOf(e.Key)] {
			continue
		}
		held[e.Key] = true
		v, theyHold := theirs.Versions[e.Key]
		if v == versionOfEntry(e) {
			continue
		}
		// Each side sends its version of a record both hold differently;
		// each keeps the newer.
		back.Entries = append(back.Entries, e)
		if theyHold {
			back.Want = append(back.Want, e.Key)
		}
	}
	for k := range theirs.Versions {
		if !held[k] && differ[bucketOf(k)] {
			back.Want = append(back.Want, k)
		}
	}
	slices.Sort(back.Want)
	back.Entries = loaded(c, back.Entries)
	if err := writeMsg(rw, back); err != nil {
		return nil, err
	}
	if len(back.Want) == 0 {
		return nil, nil
	}
	var got syncMsg
	if err := readMsg(rw, &got); err != nil {
		return nil, err
	}
	return got.Entries, nil
}

// serveDelta is the answering side of protoSync2.
func serveDelta(rw io.ReadWriter, c catalog) ([]mesh.Entry, error) {
	var theirs syncMsg
	if err := readMsg(rw, &theirs); err != nil {
		return nil, err
	}
	if len(theirs.Buckets) != syncBuckets {
		return nil, fmt.Errorf("%w: %d bucket digests, want %d", errMalformed, len(theirs.Buckets), syncBuckets)
	}
	mine := listed(c)
	ours := buckets(mine)
	var answer syncMsg
	differ := map[int]bool{}
	for i, d := range ours {
		if d != theirs.Buckets[i] {
			answer.Differ = append(answer.Differ, i)
			differ[i] = true
		}
	}
	if len(answer.Differ) == 0 {
		return nil, writeMsg(rw, answer)
	}
	byKey := map[string]mesh.Entry{}
	answer.Versions = map[string]versionOf{}
	for _, e := range mine {
		if differ[bucketOf(e.Key)] {
			answer.Versions[e.Key] = versionOfEntry(e)
			byKey[e.Key] = e
		}
	}
	if err := writeMsg(rw, answer); err != nil {
		return nil, err
	}
	var back syncMsg
	if err := readMsg(rw, &back); err != nil {
		return nil, err
	}
	if len(back.Want) == 0 {
		return back.Entries, nil
	}
	var give syncMsg
	for _, k := range back.Want {
		if e, ok := byKey[k]; ok {
			give.Entries = append(give.Entries, e)
		}
	}
	give.Entries = loaded(c, give.Entries)
	return back.Entries, writeMsg(rw, give)
}

// gatewaysMsg answers a gateway lookup: the answering agent's site and
// its gateways, best first.
type gatewaysMsg struct {
	Site     string    `json:"site"`
	Gateways []Gateway `json:"gateways"`
}

// serveGateways tells the dialer where this agent's site's gateways are.
func (f *Federation) serveGateways(s network.Stream) {
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(10 * time.Second))
	m := f.cfg.Mesh
	sum := Summarize(m.Site(), m.Nodes(), Gateways(m.Nodes(), m.Site(), f.cfg.Gateways))
	b := encode(gatewaysMsg{Site: sum.Site, Gateways: sum.Gateways})
	if _, err := s.Write(b); err != nil {
		_ = s.Reset()
	}
}

// askGateways asks peer p where its site's gateways are.
func (f *Federation) askGateways(ctx context.Context, p peer.ID) ([]Gateway, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	h := f.Host()
	if h == nil {
		return nil, "", errors.New("no host")
	}
	s, err := h.NewStream(ctx, p, protoGateways)
	if err != nil {
		return nil, "", err
	}
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(10 * time.Second))
	var msg gatewaysMsg
	if err := json.NewDecoder(io.LimitReader(s, 1<<20)).Decode(&msg); err != nil {
		f.metrics.malformed.Inc()
		return nil, "", err
	}
	return msg.Gateways, msg.Site, nil
}

func writeMsg(w io.Writer, m syncMsg) error {
	b := encode(m)
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(b)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	_, err := w.Write(b)
	return err
}

func readMsg(r io.Reader, m *syncMsg) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxFrame {
		return fmt.Errorf("%w: %d bytes, over %d", errMalformed, size, maxFrame)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	if err := json.Unmarshal(b, m); err != nil {
		return fmt.Errorf("%w: %v", errMalformed, err)
	}
	return nil
}
