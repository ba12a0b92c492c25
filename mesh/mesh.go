package mesh

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/coordinate"

	"github.com/strata-mesh/strata/internal/backoff"
	"github.com/strata-mesh/strata/internal/intern"
)

// Status is a member's liveness as this agent sees it.
type Status string

// Member statuses.
const (
	StatusAlive   Status = "alive"   // answering probes
	StatusSuspect Status = "suspect" // missed probes; others are asked to confirm
	StatusFailed  Status = "failed"  // declared dead by the failure detector
	StatusLeft    Status = "left"    // left gracefully
	// StatusUnknown is a peer known from the local store but not yet heard
	// from since this agent started; after Config.RejoinGrace it is failed.
	StatusUnknown Status = "unknown"
	// StatusUnreachable is a failed peer of a site none of whose nodes
	// answers: the site is cut off (or all of it is down), which is told
	// apart from one node's failure (see Sites).
	StatusUnreachable Status = "unreachable"
)

// Errors returned by Mesh.
var (
	ErrUnknownNode  = errors.New("mesh: unknown node")
	ErrNoCoordinate = errors.New("mesh: no coordinate yet for node")
	ErrClosed       = errors.New("mesh: closed")
)

// Member is one node of the site as the membership layer sees it.
type Member struct {
	Name   string `json:"name"`
	ID     string `json:"id"`
	Addr   string `json:"addr"`
	Status Status `json:"status"`
	Tier   string `json:"tier"`
	Site   string `json:"site"`
	// Schema and Build are what the node runs (see NodeState).
	Schema string `json:"schema,omitempty"`
	Build  string `json:"build,omitempty"`
}

// Node is a node's replicated document with its current status.
type Node struct {
	NodeState
	Status Status `json:"status"`
}

// maxBroadcast is the largest document sent as a gossip broadcast; larger
// ones travel only by fetch and push/pull. It leaves room in memberlist's
// 1400-byte UDP packets for headers and piggybacked messages.
const maxBroadcast = 1200

// message types carried in memberlist user messages.
const (
	msgState    byte = 1 // a NodeState document (JSON)
	msgStateReq byte = 2 // "send me your document": payload is the asker's name
)

type memberInfo struct {
	id      string
	ip      net.IP
	port    uint16
	status  Status
	suspect bool // memberlist holds it suspect (see watchSuspects)
	changed time.Time
	meta    metaDigest
	// catalogDiffers is when its catalog digest was first seen to differ
	// from ours (zero: it did not at the last ack).
	catalogDiffers time.Time
	// bucketsAsked is when this node last sent it its bucket digests.
	bucketsAsked time.Time
	// digests: its acks carry a catalog digest (see LocalState); reset
	// when it restarts or stops answering.
	digests bool
}

// metaDigest is what NodeMeta carries: enough to tell that a newer document
// exists, well under memberlist's 512-byte limit.
type metaDigest struct {
	ID      string `json:"i"`
	Version uint64 `json:"v"`
	// Started is when the node started (Unix ns): of two nodes claiming
	// one name, the later gives way.
	Started int64 `json:"s,omitempty"`
}

// Mesh is one agent's view of its site. All methods are safe for concurrent
// use; getters return copies.
type Mesh struct {
	cfg     Config
	log     *slog.Logger
	ml      *memberlist.Memberlist
	coord   *coordinate.Client
	rtt     *rttFilter
	bq      *memberlist.TransmitLimitedQueue
	metrics *metrics
	id      string
	started time.Time
	// trust signs and verifies records; nil in a mesh without a CA.
	trust *trustState
	// refusals limits the log of refused records.
	refusals sourceLimiter
	// keyring holds the gossip keys (nil: unencrypted); keyringMu orders
	// its changes and their persistence.
	keyring   *memberlist.Keyring
	keyringMu sync.Mutex

	mu         sync.RWMutex
	local      NodeState
	docs       map[string]*NodeState  // by node ID
	members    map[string]*memberInfo // by node name
	peerCoords map[string]*coordinate.Coordinate
	dirty      map[string]bool
	kv         map[string]*held // the replicated catalog, by key
	// entryStrings and docStrings are the strings that peers' entries
	// and documents repeat (see shareLocked, NodeState.shareStrings).
	entryStrings, docStrings intern.Strings
	// persistMu orders the writes of the store (see persistKey); taken
	// before mu, never while holding it.
	persistMu sync.Mutex
	// kvTables holds kv's entries again by table, the key up to its
	// first "/" (see setEntry): List scans one table, not the catalog.
	kvTables map[string]*kvTable
	// tableVersions counts each table's changes (TableVersion);
	// tableLogs are each table's latest changes (ChangedKeys).
	tableVersions map[string]uint64
	tableLogs     map[string]*changeLog
	// kvDigest is the XOR of every entry's hash, and unsettled the
	// entries set in the last catalogSettle (and some older, until a
	// digest is asked): see settledDigestLocked.
	kvDigest  uint64
	unsettled []*held
	dirtyKV   map[string]bool
	deleted   map[string]bool
	fetching  map[string]time.Time // name → when its document was asked for
	// coordPublished is when the coordinate was last put in the document.
	coordPublished time.Time
	// bucketsAnswered is when each peer's bucket digests were last
	// compared with ours (see onBuckets).
	bucketsAnswered map[string]time.Time
	// lastCatalogSync is when compareCatalog last asked for a sync; syncs
	// carries the peer's address to syncCatalogs.
	lastCatalogSync time.Time
	// lastSyncTook is how long the last of those syncs took: the next
	// waits longer after a long one (syncCostShare).
	lastSyncTook time.Duration
	syncs        chan string
	changed      chan struct{}

	seeds []string // join addresses, this node's own left out (under mu)
	fatal chan error

	work      chan job
	metaDirty chan struct{}
	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

type job struct {
	kind    byte // msgStateReq: ask node for its doc; msgState: send ours; msgEntry: send payload; msgBuckets, msgBucketEntries: see buckets.go
	to      string
	payload []byte
	packet  bool // one UDP packet, best effort (a payload that fits one)
	// buckets and reply: msgBucketEntries's.
	buckets []int
	reply   bool
}

// New starts a mesh node: it loads the last known state from cfg.DB, creates
// the memberlist pool on cfg.BindAddr and publishes the local document. It
// does not join anyone; call Join.
func New(cfg Config) (*Mesh, error) {
	cfg.ensureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Mesh{
		cfg:             cfg,
		log:             cfg.Logger.With("component", "mesh"),
		id:              cfg.Identity.ID(),
		started:         time.Now(),
		docs:            map[string]*NodeState{},
		members:         map[string]*memberInfo{},
		peerCoords:      map[string]*coordinate.Coordinate{},
		dirty:           map[string]bool{},
		kv:              map[string]*held{},
		kvTables:        map[string]*kvTable{},
		tableVersions:   map[string]uint64{},
		tableLogs:       map[string]*changeLog{},
		dirtyKV:         map[string]bool{},
		deleted:         map[string]bool{},
		fetching:        map[string]time.Time{},
		bucketsAnswered: map[string]time.Time{},
		changed:         make(chan struct{}),
		work:            make(chan job, 1024),
		metaDirty:       make(chan struct{}, 1),
		syncs:           make(chan string, 1),
		stop:            make(chan struct{}),
		fatal:           make(chan error, 1),
		metrics:         newMetrics(cfg.Registerer),
	}
	if err := m.initLocal(); err != nil {
		return nil, err
	}
	mlc, err := m.memberlistConfig()
	if err != nil {
		return nil, err
	}
	if err := m.startMemberlist(mlc); err != nil {
		return nil, err
	}
	// Several senders: a stream send blocks until the peer reads it, and
	// after a change every peer asks the owner for its document at once.
	for range senders {
		m.wg.Go(m.worker)
	}
	m.wg.Go(m.syncCatalogs)
	m.wg.Go(m.maintain)
	m.wg.Go(m.reconnect)
	m.wg.Go(func() { m.watchSuspects(mlc.ProbeInterval / 2) })
	m.wg.Go(m.publishMeta)
	return m, nil
}

// initLocal sets up the RTT estimator and the trust in certificates, and
// the local document: the configured one, with what this process owns
// (ID, name, start, schema) and what the last run left in the database.
func (m *Mesh) initLocal() error {
	cfg := m.cfg
	coord, err := coordinate.NewClient(coordinate.DefaultConfig())
	if err != nil {
		return fmt.Errorf("mesh: coordinate client: %w", err)
	}
	m.coord = coord
	m.rtt = newRTTFilter(cfg.rttWindow)
	if cfg.Trust != nil {
		if m.trust, err = newTrust(*cfg.Trust, cfg.Identity, cfg.Name); err != nil {
			return err
		}
		if w := m.trust.me(); w.Site != cfg.Local.Site || (w.Tier != "" && w.Tier != cfg.Local.Tier) {
			return fmt.Errorf("mesh: node certificate names site %q and tier %q, the node is in site %q, tier %q: issue its certificate again", w.Site, w.Tier, cfg.Local.Site, cfg.Local.Tier)
		}
	}

	local := cfg.Local.Clone()
	local.ID, local.Name = m.id, cfg.Name
	local.Started = m.started
	local.Leaving = false
	local.Schema = CurrentSchema.String()
	if m.trust != nil && local.Controller && !m.trust.me().Controller {
		m.log.Warn("this node's certificate does not give it the controller role: it will not own policies (issue its certificate again with the role)")
		local.Controller = false
	}
	if local.Labels == nil {
		local.Labels = map[string]string{}
	}
	if err := m.load(&local); err != nil {
		return err
	}
	m.local = local.Clone() // the caller's slices are its own
	m.local.index = &docIndex{}

	return nil
}

// memberlistConfig is memberlist's configuration for this node: timings,
// addresses, keyring, delegates and the transport.
func (m *Mesh) memberlistConfig() (*memberlist.Config, error) {
	cfg := m.cfg
	var err error
	mlc := memberlist.DefaultLANConfig()
	mlc.Name = cfg.Name
	// Failure detection within a site's pool, for hosts that are busy by
	// design: probe every 800ms with a 400ms timeout (memberlist's LAN
	// defaults are 1s and 500ms; a peer that answers any time within the
	// interval is alive), Lifeguard on (awareness backs a struggling
	// prober off to 8× the interval; nacks tell a slow prober from a dead
	// target), and SuspicionMult 3 instead of 4: a suspect is failed after
	// 3 × log10(N) × 800ms at the soonest, once one other member confirms
	// it, and 6× that unconfirmed. TCPTimeout stays memberlist's 10s; a
	// TCP ping's ack that misses the probe deadline is a timeout, not bad
	// input (see dropTimeout). On 2 cores, 8 agents among 12 busy loops
	// per core saw no live peer suspect in 60s (probing every 500ms with a
	// 250ms timeout: 9 times in 20s) and a killed agent failed everywhere
	// in 4.3s median (BenchmarkBusyHosts); at 64 agents in 6.0s against
	// memberlist's 10.0s (BenchmarkFailureDetection).
	mlc.ProbeInterval, mlc.ProbeTimeout = 800*time.Millisecond, 400*time.Millisecond
	mlc.SuspicionMult = 3
	mlc.EnableCompression = cfg.Compress
	host, port, _ := splitHostPort(cfg.BindAddr)
	mlc.BindAddr, mlc.BindPort = host, port
	mlc.AdvertisePort = port
	if cfg.AdvertiseAddr != "" {
		ah, ap, _ := splitHostPort(cfg.AdvertiseAddr)
		mlc.AdvertiseAddr, mlc.AdvertisePort = ah, ap
	}
	if m.keyring, err = loadKeyring(cfg.DB, cfg.GossipKey); err != nil {
		return nil, err
	}
	mlc.Keyring = m.keyring
	d := &delegate{m: m}
	mlc.Delegate, mlc.Events, mlc.Ping = d, d, d
	lw := &logWriter{log: m.log, metrics: m.metrics}
	mlc.Logger = log.New(lw, "", 0)
	mlc.Conflict = &conflictDelegate{m: m}
	if cfg.Transport != nil {
		mlc.Transport = cfg.Transport
	} else {
		// A kernel-chosen port is free for TCP but may be taken for UDP:
		// retry, as memberlist does for the transport it makes itself.
		var nt *memberlist.NetTransport
		var err error
		for try := 0; try < 10; try++ {
			nt, err = memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{host}, BindPort: port, Logger: mlc.Logger})
			if err == nil || port != 0 || !strings.Contains(err.Error(), "address already in use") {
				break
			}
		}
		if err != nil {
			return nil, fmt.Errorf("mesh: start gossip on %s: %w", cfg.BindAddr, err)
		}
		mlc.Transport = nt
		if cfg.PacketDelay != nil {
			mlc.Transport = &delayTransport{NetTransport: nt, delay: cfg.PacketDelay}
		}
		if port == 0 {
			mlc.BindPort = nt.GetAutoBindPort()
			if cfg.AdvertiseAddr == "" || mlc.AdvertisePort == 0 {
				mlc.AdvertisePort = mlc.BindPort
			}
		}
	}
	if cfg.Memberlist != nil {
		cfg.Memberlist(mlc)
	}
	// Every packet and stream is validated before memberlist decodes it
	// (see guardTransport): memberlist panics on some crafted input.
	if mlc.Transport != nil {
		mlc.Transport = newGuardTransport(mlc.Transport, mlc, lw.drop)
	}
	return mlc, nil
}

// startMemberlist creates the memberlist pool and publishes this node's
// gossip address.
func (m *Mesh) startMemberlist(mlc *memberlist.Config) error {
	cfg := m.cfg
	// memberlist.Create answers packets before it returns: a ping that
	// came then asked the queue for the member count while m.ml was still
	// nil, and the agent crashed (TestPingWhileStarting).
	var created atomic.Pointer[memberlist.Memberlist]
	m.bq = &memberlist.TransmitLimitedQueue{
		NumNodes: func() int {
			if ml := created.Load(); ml != nil {
				return ml.NumMembers()
			}
			return 1
		},
		RetransmitMult: mlc.RetransmitMult,
	}
	m.bq.QueueBroadcast(anchor{}) // see anchor
	ml, err := memberlist.Create(mlc)
	if err != nil {
		if mlc.Transport != nil {
			_ = mlc.Transport.Shutdown()
		}
		return fmt.Errorf("mesh: start gossip on %s: %w", cfg.BindAddr, err)
	}
	m.ml = ml
	created.Store(ml)
	if !anchorQueue(ml) {
		m.log.Warn("cannot anchor memberlist's broadcast queue; some gossip may be lost (see mesh/queue.go)")
	}
	ln := ml.LocalNode()
	gossip := net.JoinHostPort(ln.Addr.String(), strconv.Itoa(int(ln.Port)))
	if err := m.Update(func(s *NodeState) { s.Addrs.Gossip = gossip }); err != nil {
		ml.Shutdown()
		return err
	}
	return nil
}

// ID returns the local node's ID.
func (m *Mesh) ID() string { return m.id }

// Name returns the local node's name.
func (m *Mesh) Name() string { return m.cfg.Name }

// GossipAddr returns the address peers reach this node's gossip at.
func (m *Mesh) GossipAddr() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.local.Addrs.Gossip
}

// Join contacts the given gossip addresses (host:port) and, when the local
// store knows peers from an earlier run, those too. An address of this node
// itself is skipped with a warning. It retries with exponential backoff
// (1s doubling to 30s, with jitter) until another node answers or ctx
// ends. With no address to try it returns nil at once.
//
// The given addresses stay seeds: whenever one is not the address of an
// alive member, the reconnect loop tries it again every ReconnectInterval
// (as it does failed members), so a node that joined no one, or a side of
// a healed partition, finds the others without a restart.
func (m *Mesh) Join(ctx context.Context, addrs []string) error {
	own := m.dropSelf(ctx, addrs)
	var stored []string
	m.mu.Lock()
	m.seeds = slices.Clone(own)
	for id, s := range m.docs {
		if id != m.id && s.Addrs.Gossip != "" {
			stored = append(stored, s.Addrs.Gossip)
		}
	}
	m.mu.Unlock()
	seeds := append(own, m.dropSelf(ctx, stored)...)
	slices.Sort(seeds)
	seeds = slices.Compact(seeds)
	if len(seeds) == 0 {
		return nil
	}
	for attempt := 1; ; attempt++ {
		n, err := m.ml.Join(seeds)
		if n > 0 {
			m.log.Info("joined mesh", "contacted", n, "attempt", attempt)
			return nil
		}
		wait := backoff.Exp(time.Second, 30*time.Second, attempt)
		m.log.Warn("join failed; retrying", "seeds", seeds, "attempt", attempt, "retry_in", wait, "err", err)
		t := time.NewTimer(wait + rand.N(wait/4+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-m.stop:
			t.Stop()
			return ErrClosed
		case <-t.C:
		}
	}
}

// Update changes the local document: fn edits a copy, the version is bumped
// past every earlier one (also across restarts), the result is written to
// the store (synced) and gossiped.
func (m *Mesh) Update(fn func(*NodeState)) error {
	m.mu.Lock()
	next := m.local.Clone()
	fn(&next)
	next.ID, next.Name = m.id, m.cfg.Name
	next.Version = max(m.local.Version+1, uint64(time.Now().UnixMicro()))
	next.Updated = time.Now().UTC()
	if m.trust != nil && !m.trust.me().Controller {
		next.Controller = false
	}
	next.index = &docIndex{} // of what fn left
	m.local = next
	// The held copy shares next's lists and index: neither changes once
	// set (each Update starts from a clone). A deep copy of its own held
	// every assignment and replica of this node twice.
	cp := next
	if m.trust != nil {
		body, err := json.Marshal(&cp)
		if err != nil {
			m.mu.Unlock()
			return fmt.Errorf("mesh: encode own document: %w", err)
		}
		cp.raw, cp.Sig, cp.Cert = m.trust.sign(body, true)
	}
	cp.got = time.Now()
	m.docs[m.id] = &cp
	m.notifyLocked()
	m.mu.Unlock()
	// Synced outside m.mu (see persistKey): the latest version, whichever
	// Update gets there first.
	err := m.persistOwn()
	// Queue outside m.mu: the queue asks memberlist for the member count,
	// and memberlist calls our delegates (which take m.mu) under its own
	// lock.
	m.queueBroadcast(&cp)
	// Gossip the new meta digest too (coalesced, off this goroutine: it waits
	// for the broadcast); peers that miss the broadcast fetch the document
	// when they see the digest, or their next probe of this node's answer
	// says its version (ackPayload.Doc).
	select {
	case m.metaDirty <- struct{}{}:
	default:
	}
	return err
}

// Local returns the local document. Its slices and maps are shared with
// the mesh (see Nodes): read them, and Clone it for a copy to change.
func (m *Mesh) Local() NodeState {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.local.shared()
}

// Members lists every known node with its membership status, sorted by name.
func (m *Mesh) Members() []Member {
	nodes := m.Nodes()
	out := make([]Member, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, Member{Name: n.Name, ID: n.ID, Addr: n.Addrs.Gossip, Status: n.Status, Tier: n.Tier, Site: n.Site, Schema: n.Schema, Build: n.Build})
	}
	return out
}

// Nodes returns every known node's document with its status, sorted by
// name. The documents' slices and maps are shared with the mesh, which
// never changes a document it holds (a newer one replaces it): read
// them, and Clone a document for a copy to change. Copying them on each
// call was a quarter of all the bytes allocated at 10,000 policies,
// where each document lists a replica and an assignment per policy.
func (m *Mesh) Nodes() []Node {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]Node, 0, len(m.docs))
	reached := map[string]bool{}
	for _, s := range m.docs {
		st := m.statusLocked(s)
		out = append(out, Node{NodeState: s.shared(), Status: st})
		reached[s.Site] = reached[s.Site] || st == StatusAlive || st == StatusSuspect
	}
	for i := range out {
		if out[i].Status == StatusFailed && !reached[out[i].Site] {
			out[i].Status = StatusUnreachable
		}
	}
	slices.SortFunc(out, func(a, b Node) int {
		if c := compareStr(a.Name, b.Name); c != 0 {
			return c
		}
		return compareStr(a.ID, b.ID)
	})
	return out
}

// Node returns one node by name or ID; its document is shared as Nodes'
// are.
func (m *Mesh) Node(nameOrID string) (Node, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s := m.lookupLocked(nameOrID)
	if s == nil {
		return Node{}, fmt.Errorf("%w %q", ErrUnknownNode, nameOrID)
	}
	st := m.statusLocked(s)
	if st == StatusFailed && !m.siteReachedLocked(s.Site) {
		st = StatusUnreachable
	}
	return Node{NodeState: s.shared(), Status: st}, nil
}

// NumAlive counts the nodes this agent sees alive (itself included),
// without copying their documents.
func (m *Mesh) NumAlive() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	n := 0
	for _, s := range m.docs {
		if m.statusLocked(s) == StatusAlive {
			n++
		}
	}
	return n
}

// NodeVersion returns the version of a node's document held here (by name
// or ID), without copying it: cheap enough to poll across hundreds of
// nodes.
func (m *Mesh) NodeVersion(nameOrID string) (uint64, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s := m.lookupLocked(nameOrID)
	if s == nil {
		return 0, false
	}
	return s.Version, true
}

// Changed returns a channel that is closed at the next change of any
// document or status. Take a new channel after each wake-up.
func (m *Mesh) Changed() <-chan struct{} {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.changed
}

// Coordinate returns the local node's current Vivaldi coordinate.
func (m *Mesh) Coordinate() *coordinate.Coordinate { return m.coord.GetCoordinate() }

// RTT estimates the round-trip time between two nodes (names or IDs) from
// their Vivaldi coordinates, without probing either. A node is 0 from
// itself (a coordinate's distance to itself is twice its height).
func (m *Mesh) RTT(a, b string) (time.Duration, error) {
	ca, err := m.coordOf(a)
	if err != nil {
		return 0, err
	}
	cb, err := m.coordOf(b)
	if err != nil {
		return 0, err
	}
	if m.same(a, b) {
		return 0, nil
	}
	return ca.DistanceTo(cb), nil
}

// same reports whether two names or IDs are one known node.
func (m *Mesh) same(a, b string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	sa, sb := m.lookupLocked(a), m.lookupLocked(b)
	return sa != nil && sb != nil && sa.ID == sb.ID
}

func (m *Mesh) coordOf(nameOrID string) (*coordinate.Coordinate, error) {
	m.mu.Lock()
	s := m.lookupLocked(nameOrID)
	if s == nil {
		m.mu.Unlock()
		return nil, fmt.Errorf("%w %q", ErrUnknownNode, nameOrID)
	}
	if s.ID == m.id {
		m.mu.Unlock()
		return m.coord.GetCoordinate(), nil
	}
	c := m.peerCoords[s.Name]
	if c == nil && s.Coord != nil {
		c = s.Coord.Clone()
	}
	m.mu.Unlock()
	if c == nil {
		return nil, fmt.Errorf("%w %q", ErrNoCoordinate, nameOrID)
	}
	return c, nil
}

// Leave tells the site this node is leaving (status left everywhere), waiting
// up to timeout for the message to spread. Call Close afterwards.
func (m *Mesh) Leave(timeout time.Duration) error {
	select {
	case <-m.stop:
		return ErrClosed
	default:
	}
	if err := m.Update(func(s *NodeState) { s.Leaving = true }); err != nil {
		m.log.Warn("could not record leaving in the store", "err", err)
	}
	return m.ml.Leave(timeout)
}

// Close stops gossip without saying goodbye — peers see a failure, as after
// a crash — flushes peers' state to the store and stops the background
// work. It is idempotent. The store is the caller's to close.
func (m *Mesh) Close() error {
	m.closeOnce.Do(func() {
		close(m.stop)
		m.closeErr = m.ml.Shutdown()
		m.wg.Wait()
		if err := m.flush(); err != nil && m.closeErr == nil {
			m.closeErr = err
		}
	})
	return m.closeErr
}

func (m *Mesh) statusLocked(s *NodeState) Status {
	if s.ID == m.id {
		return StatusAlive
	}
	mi := m.members[s.Name]
	if mi == nil || mi.id != s.ID {
		if time.Since(m.started) < m.cfg.RejoinGrace {
			return StatusUnknown
		}
		return StatusFailed
	}
	switch {
	case mi.status == StatusAlive && mi.suspect:
		return StatusSuspect
	case mi.status == StatusFailed && s.Leaving:
		// memberlist does not tell a leave from a death in its events;
		// the node's last document does.
		return StatusLeft
	}
	return mi.status
}

func (m *Mesh) lookupLocked(nameOrID string) *NodeState {
	if s, ok := m.docs[nameOrID]; ok {
		return s
	}
	if mi := m.members[nameOrID]; mi != nil {
		if s, ok := m.docs[mi.id]; ok {
			return s
		}
	}
	var found *NodeState
	for _, s := range m.docs {
		if s.Name == nameOrID && (found == nil || s.Updated.After(found.Updated)) {
			found = s
		}
	}
	return found
}

// siteReachedLocked reports whether some node of site is alive or suspect.
func (m *Mesh) siteReachedLocked(site string) bool {
	for _, s := range m.docs {
		if s.Site == site {
			if st := m.statusLocked(s); st == StatusAlive || st == StatusSuspect {
				return true
			}
		}
	}
	return false
}

// nameHeldLocked reports whether s's name belongs to an alive member of
// another identity.
func (m *Mesh) nameHeldLocked(s *NodeState) bool {
	mi := m.members[s.Name]
	return mi != nil && mi.id != "" && mi.id != s.ID && mi.status == StatusAlive
}

func (m *Mesh) notifyLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// merge folds a peer's document into the table. It reports whether the
// document was newer than what was held.
func (m *Mesh) merge(s *NodeState, rebroadcast bool) bool {
	if s.ID == "" || s.Name == "" {
		m.metrics.malformed.WithLabelValues("state").Inc()
		return false
	}
	m.mu.Lock()
	held := m.docs[s.ID]
	stale := s.ID != m.id && held != nil && !newer(s, held)
	m.mu.Unlock()
	if stale {
		return false // a copy of what is held: not worth verifying
	}
	now := time.Now()
	r := m.validateState(s, now)
	if r == nil && m.trust != nil {
		raw := s.raw
		if raw == nil {
			raw, _ = json.Marshal(s)
		}
		r = m.trust.verifyDoc(s, raw, now)
	}
	if r != nil {
		m.refused("state", r)
		return false
	}
	s.shareStrings(&m.docStrings)
	s.dropRaw()
	m.mu.Lock()
	if s.ID == m.id {
		if s.Version > m.local.Version {
			// Peers hold a newer version of us than we remember (the store
			// was lost): move past it so our next write wins.
			m.local.Version = s.Version
		}
		m.mu.Unlock()
		return false
	}
	if s.Name == m.cfg.Name || m.nameHeldLocked(s) {
		// Another identity's document under a name that this node, or
		// an alive member, holds: the node that sent it lost the name
		// (see NotifyConflict); taking its document would hand it the
		// holder's work, which is looked up by name.
		m.mu.Unlock()
		m.metrics.malformed.WithLabelValues("name_taken").Inc()
		return false
	}
	if !newer(s, m.docs[s.ID]) {
		m.mu.Unlock()
		return false
	}
	s.got = time.Now()
	m.docs[s.ID] = s
	m.dirty[s.ID] = true
	delete(m.deleted, s.ID)
	if mi := m.members[s.Name]; mi != nil && mi.meta.ID == s.ID && mi.meta.Version <= s.Version {
		delete(m.fetching, s.Name)
	}
	m.metrics.stateUpdates.Inc()
	m.notifyLocked()
	m.mu.Unlock()
	if rebroadcast {
		m.queueBroadcast(s) // outside m.mu: see Update
	}
	return true
}

// heldAlready reports whether b, a gossiped node document, is the version
// this node holds or an older one. memberlist hands each broadcast to a
// node several times, and decoding every copy is a large part of what
// gossip costs in CPU: only the ID and version are read here (peekState).
// Anything else, this node's own document and malformed ones included, is
// left to the full decode.
func (m *Mesh) heldAlready(b []byte) bool {
	id, version, ok := peekState(b)
	if !ok {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	held := m.docs[id]
	return id != m.id && held != nil && (held.Version > version || held.Version == version && held.Schema != "")
}

// queueBroadcast queues a document for gossip. It must not be called with
// m.mu held (see Update).
func (m *Mesh) queueBroadcast(s *NodeState) {
	if m.bq == nil {
		return
	}
	b, err := encodeState(s)
	if err != nil || len(b)+1 > maxBroadcast {
		return
	}
	m.bq.QueueBroadcast(&stateBroadcast{id: s.ID, msg: append([]byte{msgState}, b...)})
}

// senders is how many goroutines send document asks and answers.
const senders = 8

// worker sends the messages that delegates and writers may not block on:
// asking a node for its document, answering such asks, and entries sent
// to members directly.
func (m *Mesh) worker() {
	for {
		select {
		case <-m.stop:
			return
		case j := <-m.work:
			node := m.memberNode(j.to)
			if node == nil {
				continue // not a member yet; the asker asks again
			}
			var msg []byte
			switch j.kind {
			case msgStateReq:
				msg = append([]byte{msgStateReq}, m.cfg.Name...)
			case msgState:
				m.mu.Lock()
				own := m.docs[m.id]
				m.mu.Unlock()
				b, err := encodeState(own)
				if err != nil {
					continue
				}
				msg = append([]byte{msgState}, b...)
			case msgEntry:
				msg = j.payload
			case msgBuckets:
				msg = m.bucketsPayload()
			case msgBucketEntries:
				msg = m.entriesPayload(j.buckets, j.reply)
			}
			if msg == nil {
				continue
			}
			send := m.ml.SendReliable
			if j.packet {
				send = m.ml.SendBestEffort
			}
			if err := send(node, msg); err != nil {
				m.log.Debug("send to peer failed", "peer", j.to, "err", err)
			}
		}
	}
}

// publishMeta gossips the local meta digest after each Update.
func (m *Mesh) publishMeta() {
	for {
		select {
		case <-m.stop:
			return
		case <-m.metaDirty:
			m.updateMeta()
		}
	}
}

// memberNode builds the address of a member from what its last event
// said. memberlist's own Node values are shared with its state machine and
// may not be read outside its lock.
// updateMeta gossips the meta digest. memberlist's UpdateNode dereferences
// the local node's entry, which memberlist itself may have reaped after
// peers wrongly declared this node dead under heavy load; that panic is
// contained here and the next update retries.
func (m *Mesh) updateMeta() {
	defer func() {
		if r := recover(); r != nil {
			m.log.Warn("meta update failed inside memberlist", "panic", r)
		}
	}()
	// A short wait: the broadcast stays queued after a timeout (a newer
	// digest replaces it), and Close, after Leave when nothing is gossiped
	// any more, waits for this call. (memberlist waits forever on 0.)
	if err := m.ml.UpdateNode(metaUpdateWait); err != nil {
		m.log.Debug("meta update not gossiped yet", "err", err)
	}
}

// metaUpdateWait bounds how long a meta update waits for its broadcast.
const metaUpdateWait = 250 * time.Millisecond

func (m *Mesh) memberNode(name string) *memberlist.Node {
	m.mu.RLock()
	defer m.mu.RUnlock()
	mi := m.members[name]
	if mi == nil || mi.status != StatusAlive || mi.ip == nil {
		return nil
	}
	return &memberlist.Node{Name: name, Addr: mi.ip, Port: mi.port}
}

// watchSuspects reads memberlist's own state of every member each period
// (half a probe interval by default): memberlist has no event for a member
// turning suspect or being cleared of suspicion, only for joining, updating
// and failing or leaving.
func (m *Mesh) watchSuspects(every time.Duration) {
	if every <= 0 {
		every = 500 * time.Millisecond
	}
	if !m.memberStatesReadable() {
		m.log.Warn("cannot read memberlist's member states; members are never reported suspect")
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.scanSuspects()
		}
	}
}

// memberlist (v0.7.0) keeps each member's state in its unexported
// nodeState, whose first field is the Node that Members hands out pointers
// to, and guards it with its unexported nodeLock; the exported Node.State is
// never set. The offsets of nodeLock and nodeState.State are found by
// reflection, with their types checked, so a memberlist whose layout
// differs turns the suspect scan off (with a warning) instead of reading
// garbage; the states are read under memberlist's own lock.
var mlLayout = func() (l struct {
	ok                      bool
	lockOffset, stateOffset uintptr
	changeOffset            uintptr
}) {
	mt := reflect.TypeOf(memberlist.Memberlist{})
	lock, ok1 := mt.FieldByName("nodeLock")
	nodes, ok2 := mt.FieldByName("nodes")
	if !ok1 || !ok2 || lock.Type != reflect.TypeOf(sync.RWMutex{}) || nodes.Type.Kind() != reflect.Slice ||
		nodes.Type.Elem().Kind() != reflect.Pointer || nodes.Type.Elem().Elem().Kind() != reflect.Struct {
		return l
	}
	ns := nodes.Type.Elem().Elem()
	first := ns.Field(0)
	state, ok3 := ns.FieldByName("State")
	change, ok4 := ns.FieldByName("StateChange")
	if !first.Anonymous || first.Type != reflect.TypeOf(memberlist.Node{}) || first.Offset != 0 ||
		!ok3 || state.Type != reflect.TypeOf(memberlist.NodeStateType(0)) || len(state.Index) != 1 ||
		!ok4 || change.Type != reflect.TypeOf(time.Time{}) || len(change.Index) != 1 {
		return l
	}
	l.ok, l.lockOffset, l.stateOffset, l.changeOffset = true, lock.Offset, state.Offset, change.Offset
	return l
}()

// nodeLock is memberlist's lock over its member table.
func (m *Mesh) nodeLock() *sync.RWMutex {
	return (*sync.RWMutex)(unsafe.Add(unsafe.Pointer(m.ml), mlLayout.lockOffset))
}

// memberStates reads the state (and when it changed) of each node, which
// must be pointers Members or LocalNode returned, under memberlist's lock.
func (m *Mesh) memberStates(nodes []*memberlist.Node) ([]memberlist.NodeStateType, []time.Time) {
	states, changed := make([]memberlist.NodeStateType, len(nodes)), make([]time.Time, len(nodes))
	mu := m.nodeLock()
	mu.RLock()
	defer mu.RUnlock()
	for i, n := range nodes {
		p := unsafe.Pointer(n)
		states[i] = *(*memberlist.NodeStateType)(unsafe.Add(p, mlLayout.stateOffset))
		changed[i] = *(*time.Time)(unsafe.Add(p, mlLayout.changeOffset))
	}
	return states, changed
}

// memberStatesReadable reports whether memberlist's layout is the one
// expected and the local node reads as alive since about when it started.
func (m *Mesh) memberStatesReadable() bool {
	if !mlLayout.ok {
		return false
	}
	ln := m.ml.LocalNode()
	if ln == nil || ln.Name != m.cfg.Name {
		return false
	}
	st, at := m.memberStates([]*memberlist.Node{ln})
	return st[0] == memberlist.StateAlive && !at[0].Before(m.started.Add(-time.Minute)) && !at[0].After(time.Now().Add(time.Minute))
}

// scanSuspects marks suspect exactly the members memberlist holds in
// StateSuspect.
func (m *Mesh) scanSuspects() {
	nodes := m.ml.Members()
	states, _ := m.memberStates(nodes)
	suspect := make(map[string]bool, len(nodes))
	for i, n := range nodes {
		if states[i] == memberlist.StateSuspect {
			suspect[n.Name] = true
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	changed := false
	for name, mi := range m.members {
		if mi.suspect != suspect[name] {
			mi.suspect = suspect[name]
			changed = true
			if mi.status == StatusAlive {
				st := StatusAlive // it answered again
				if mi.suspect {
					st = StatusSuspect
				}
				m.log.Info("member status", "node", name, "status", st)
			}
		}
	}
	if changed {
		m.notifyLocked()
	}
}

// conflictDelegate reports name conflicts: memberlist keeps the member it
// knew and ignores the other, which is most likely a second agent started
// with the same name (a copied data dir, a reused host name). A conflict on
// this node's own name is settled by nameTaken.
type conflictDelegate struct {
	m *Mesh
	// names limits the log to a line per second per name: memberlist
	// reports the conflict at each alive message of the other node.
	names sourceLimiter
}

var _ memberlist.ConflictDelegate = (*conflictDelegate)(nil)

// NotifyConflict logs and counts the conflict (and the other node's meta
// when it does not decode). memberlist calls it with its node table
// locked: it must not call back into memberlist.
func (c *conflictDelegate) NotifyConflict(existing, other *memberlist.Node) {
	c.m.metrics.conflicts.Inc()
	var meta metaDigest
	if len(other.Meta) > 0 && json.Unmarshal(other.Meta, &meta) != nil {
		// Counted as observe counts it; the conflict is still handled,
		// as one with a node of no known ID.
		c.m.metrics.malformed.WithLabelValues("meta").Inc()
	}
	otherAddr := net.JoinHostPort(other.Addr.String(), strconv.Itoa(int(other.Port)))
	if existing.Name == c.m.cfg.Name && meta.ID != c.m.id {
		c.m.nameTaken(meta.ID, otherAddr, meta.Started)
	}
	ok, n := c.names.allow(existing.Name, time.Now())
	if !ok {
		c.m.metrics.logSuppressed.Inc()
		return
	}
	c.m.log.Error("gossip name conflict: another node claims a name already in the mesh; it is refused",
		"name", existing.Name,
		"existing_addr", net.JoinHostPort(existing.Addr.String(), strconv.Itoa(int(existing.Port))),
		"other_addr", otherAddr, "other_id", meta.ID, "suppressed_since_last", n)
}

func (m *Mesh) enqueue(j job) {
	select {
	case m.work <- j:
	default:
		m.metrics.dropped.Inc()
	}
}

// maintain publishes the coordinate when it moves, flushes peers' documents
// to the store, and reaps nodes that failed or left long ago.
func (m *Mesh) maintain() {
	coordTick := time.NewTicker(m.cfg.CoordinatePublishInterval)
	persistTick := time.NewTicker(m.cfg.PersistInterval)
	defer coordTick.Stop()
	defer persistTick.Stop()
	graceOver := time.After(m.cfg.RejoinGrace)
	refetchTick := time.NewTicker(refetchAfter)
	defer refetchTick.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-refetchTick.C:
			m.refetch()
		case <-graceOver:
			// Peers known only from the store turn from unknown to failed.
			m.mu.Lock()
			m.notifyLocked()
			m.mu.Unlock()
		case <-coordTick.C:
			m.publishCoordinate()
			m.reap()
			m.collectTombstones(time.Now())
			m.spillSettled(time.Now())
		case <-persistTick.C:
			if err := m.flush(); err != nil {
				m.log.Warn("persisting mesh state failed", "err", err)
			}
		}
	}
}

// refetchAfter is how long an ask for a document may go unanswered before
// it is asked again (the owner may not have known the asker yet, or the
// answer was lost).
const refetchAfter = time.Second

// refetch asks again for every document whose known version (from the
// node's meta or its probe answers) is newer than the one held and whose
// last ask went unanswered.
func (m *Mesh) refetch() {
	var ask []string
	m.mu.Lock()
	for name, mi := range m.members {
		if mi.status != StatusAlive || mi.meta.ID == "" {
			continue
		}
		if held := m.docs[mi.meta.ID]; held != nil && held.Version >= mi.meta.Version {
			continue
		}
		if t, ok := m.fetching[name]; ok && time.Since(t) < refetchAfter {
			continue
		}
		m.fetching[name] = time.Now()
		ask = append(ask, name)
	}
	m.mu.Unlock()
	for _, name := range ask {
		m.enqueue(job{kind: msgStateReq, to: name})
	}
}

func (m *Mesh) publishCoordinate() {
	cur := m.coord.GetCoordinate()
	m.mu.Lock()
	pub, last := m.local.Coord, m.coordPublished
	m.mu.Unlock()
	if pub != nil && cur.DistanceTo(pub) < 500*time.Microsecond {
		return
	}
	// Every publication is a new document version that every member
	// learns (and may fetch), so a large mesh publishes less often: the
	// whole mesh makes about coordPublishesPerInterval per interval. On a
	// loaded machine RTT samples are noisy and coordinates move often;
	// without this, 256 agents in one process spent their CPU spreading
	// each other's coordinates and took minutes to converge.
	if n := m.ml.NumMembers(); pub != nil && n > coordPublishesPerInterval {
		gap := m.cfg.CoordinatePublishInterval * time.Duration(n/coordPublishesPerInterval)
		if time.Since(last) < gap {
			return
		}
	}
	if m.Update(func(s *NodeState) { s.Coord = cur }) == nil {
		m.mu.Lock()
		m.coordPublished = time.Now()
		m.mu.Unlock()
	}
}

// coordPublishesPerInterval bounds the coordinate publications of the
// whole mesh per CoordinatePublishInterval.
const coordPublishesPerInterval = 25

func (m *Mesh) reap() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, s := range m.docs {
		if id == m.id {
			continue
		}
		st := m.statusLocked(s)
		mi := m.members[s.Name]
		if (st == StatusFailed || st == StatusLeft) && mi != nil && time.Since(mi.changed) > m.cfg.ReapAfter {
			delete(m.docs, id)
			delete(m.members, s.Name)
			m.deleted[id] = true
			m.metrics.setMembers(m.members)
			m.notifyLocked()
		}
	}
}

// delayTransport sends each packet after an emulated one-way delay.
type delayTransport struct {
	*memberlist.NetTransport
	delay func(toAddr string) time.Duration
}

func (t *delayTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress shadows NetTransport's, which memberlist prefers.
func (t *delayTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	d := t.delay(a.Addr)
	if d <= 0 {
		return t.NetTransport.WriteToAddress(b, a)
	}
	buf := append([]byte(nil), b...)
	time.AfterFunc(d, func() { _, _ = t.NetTransport.WriteToAddress(buf, a) })
	return time.Now(), nil
}

// stateBroadcast is a queued gossip broadcast of one node's document; a newer
// one for the same node replaces it in the queue.
type stateBroadcast struct {
	id  string
	msg []byte
}

var _ memberlist.NamedBroadcast = (*stateBroadcast)(nil)

func (b *stateBroadcast) Invalidates(o memberlist.Broadcast) bool {
	ob, ok := o.(*stateBroadcast)
	return ok && ob.id == b.id
}
func (b *stateBroadcast) Name() string    { return "state/" + b.id }
func (b *stateBroadcast) Message() []byte { return b.msg }
func (b *stateBroadcast) Finished()       {}

func compareStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func encodeMeta(d metaDigest) []byte {
	b, _ := json.Marshal(d)
	return b
}
