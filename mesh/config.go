package mesh

import (
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-mesh/strata/storage"
)

// Config configures a Mesh. Zero values mean the documented defaults; a Config
// is not mutated after New.
type Config struct {
	// Name is the node's unique name in the mesh. Required.
	Name string
	// Identity is the node's key pair. Required; its ID names the node.
	Identity Identity
	// BindAddr is the gossip address (host:port), UDP and TCP. Default
	// "0.0.0.0:7946". Port 0 picks a free port (tests, the dev mesh).
	BindAddr string
	// AdvertiseAddr is the address peers reach this node at. Default: the
	// bind address, or memberlist's pick of a private IP when bound to all
	// interfaces.
	AdvertiseAddr string
	// GossipKey encrypts gossip with AES-GCM (16, 24 or 32 bytes). Empty
	// means unencrypted, and such a node cannot join an encrypted mesh.
	GossipKey []byte
	// Local is the node's own document as discovered at start. New sets ID,
	// Name, Version, Addrs.Gossip, Started and Updated.
	Local NodeState
	// DB persists the node's own document, its version and the last known
	// state of every peer; nil keeps nothing (tests, benchmarks).
	DB *storage.DB
	// Spill names catalog tables (the keys up to their first "/") whose
	// settled entries keep their value and signature in DB alone, read
	// back when asked for (see ListMeta): for large tables whose readers
	// keep what they decoded. Ignored without DB.
	Spill []string
	// Logger receives the mesh's logs; nil discards them.
	Logger *slog.Logger
	// Registerer receives the mesh's Prometheus collectors; nil registers
	// none.
	Registerer prometheus.Registerer
	// Transport carries gossip; nil means real UDP and TCP sockets. Tests and
	// the benchmarks at hundreds of nodes pass an in-memory transport.
	Transport memberlist.Transport
	// PacketDelay, when set, delays every outgoing gossip packet by the
	// returned one-way time to its destination address, so a mesh on one
	// host measures WAN-like RTTs (the dev mesh). Nil sends at once. Only
	// used with the default (socket) transport.
	PacketDelay func(toAddr string) time.Duration
	// Compress compresses gossip (memberlist's LZW). Off, messages go as
	// they are: within a site's pool bandwidth is cheap and CPU is not
	// (an agent shares its host). At 10,000 policies on 7 agents,
	// compressing and decompressing catalog repairs and documents was a
	// fifth of the agents' CPU. A receiver reads either, so members may
	// differ.
	Compress bool
	// Memberlist, when set, adjusts the memberlist configuration (derived from
	// DefaultLANConfig) just before it is used: timings for tests, benchmarks.
	Memberlist func(*memberlist.Config)
	// CoordinatePublishInterval is how often the node checks whether its
	// Vivaldi coordinate moved enough to publish it in its document. Default
	// 5s. Shorter gives fresher RTT estimates at the cost of more versions.
	CoordinatePublishInterval time.Duration
	// PersistInterval is how often peers' documents are flushed to DB.
	// Default 1s. The node's own document is written synchronously.
	PersistInterval time.Duration
	// RejoinGrace is how long a peer known only from DB keeps status
	// "unknown" after start before it is counted as failed. Default 30s.
	RejoinGrace time.Duration
	// ReconnectInterval is how often the reconnect loop tries the seeds
	// that are not alive members and a few failed members. Default 10s.
	// It is what merges the two sides of a healed partition.
	ReconnectInterval time.Duration
	// ReconnectTimeout is how long a failed member is tried again.
	// Default 24h. Seeds are tried for as long as the node runs.
	ReconnectTimeout time.Duration
	// ReapAfter is how long a failed or left node stays listed. Default 72h.
	ReapAfter time.Duration
	// CatalogSyncInterval is the least time between two state exchanges
	// this node runs because a peer's catalog digest differed from its
	// own (see sync.go). Default 5s; negative turns them off, leaving
	// memberlist's periodic push/pull as the only repair.
	CatalogSyncInterval time.Duration
	// TombstoneTTL is how long a deleted catalog entry's tombstone is kept
	// and exchanged before it is collected. Default 10m. It must outlast the
	// longest partition after which members should still agree that the
	// entry is gone: a member cut off for longer may bring it back. A
	// member that only missed the deletion's broadcast is repaired by a
	// catalog sync, so the TTL must also outlast a sync by a margin:
	// Validate refuses one shorter than MinTombstoneTTL. With syncs turned
	// off, memberlist's push/pull is the repair and the TTL should outlast
	// several of its intervals.
	TombstoneTTL time.Duration
	// Trust signs what this node writes and verifies what peers send
	// (node identity certificates from the mesh CA, authorization by
	// record kind); nil turns both off, for a mesh without a CA on one
	// host (tests, benchmarks). See Trust.
	Trust *Trust
	// Prefer, when set, orders two live versions of one key before their
	// versions do: > 0 when a should replace b, < 0 when b should stay, 0
	// to leave it to the versions. It lets a table keep one value
	// whatever order writes arrive in (artifact manifests: the one signed
	// first). It must be a total order, or members may disagree.
	Prefer func(a, b Entry) int
	// MaxClockSkew is how far ahead of this node's clock a record's
	// version may be: one from further in the future is refused and
	// counted, so no writer can take a key or a node's document out of
	// reach of later writes. Default DefaultMaxClockSkew (2m); hosts whose
	// clocks drift further apart need NTP.
	MaxClockSkew time.Duration

	// rttWindow is how many RTT samples per peer the filter keeps (see
	// rttFilter); 0 means defaultRTTWindow, 1 feeds every sample as it
	// is. Only the benchmarks change it (export_test.go).
	rttWindow int
}

// DecodeGossipKey parses a base64 gossip key as `strata keygen` prints it.
func DecodeGossipKey(s string) ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("mesh: gossip key is not base64: %w", err)
	}
	switch len(k) {
	case 16, 24, 32:
		return k, nil
	}
	return nil, fmt.Errorf("mesh: gossip key must be 16, 24 or 32 bytes, got %d", len(k))
}

func (c *Config) ensureDefaults() {
	if c.BindAddr == "" {
		c.BindAddr = "0.0.0.0:7946"
	}
	if c.CoordinatePublishInterval == 0 {
		c.CoordinatePublishInterval = 5 * time.Second
	}
	if c.PersistInterval == 0 {
		c.PersistInterval = time.Second
	}
	if c.RejoinGrace == 0 {
		c.RejoinGrace = 30 * time.Second
	}
	if c.ReconnectInterval == 0 {
		c.ReconnectInterval = 10 * time.Second
	}
	if c.ReconnectTimeout == 0 {
		c.ReconnectTimeout = 24 * time.Hour
	}
	if c.ReapAfter == 0 {
		c.ReapAfter = 72 * time.Hour
	}
	if c.CatalogSyncInterval == 0 {
		c.CatalogSyncInterval = 5 * time.Second
	}
	if c.TombstoneTTL == 0 {
		c.TombstoneTTL = 10 * time.Minute
	}
	if c.rttWindow == 0 {
		c.rttWindow = defaultRTTWindow
	}
	if c.MaxClockSkew == 0 {
		c.MaxClockSkew = DefaultMaxClockSkew
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports every problem with the configuration at once.
func (c *Config) Validate() error {
	var errs []error
	if c.Name == "" {
		errs = append(errs, errors.New("mesh: Name is required"))
	}
	if len(c.Identity.Key) == 0 {
		errs = append(errs, errors.New("mesh: Identity is required"))
	}
	if _, _, err := splitHostPort(c.BindAddr); c.BindAddr != "" && err != nil {
		errs = append(errs, fmt.Errorf("mesh: bind address %q: %w", c.BindAddr, err))
	}
	if _, _, err := splitHostPort(c.AdvertiseAddr); c.AdvertiseAddr != "" && err != nil {
		errs = append(errs, fmt.Errorf("mesh: advertise address %q: %w", c.AdvertiseAddr, err))
	}
	switch len(c.GossipKey) {
	case 0, 16, 24, 32:
	default:
		errs = append(errs, fmt.Errorf("mesh: gossip key must be 16, 24 or 32 bytes, got %d", len(c.GossipKey)))
	}
	if min := c.MinTombstoneTTL(); c.TombstoneTTL != 0 && c.TombstoneTTL < min {
		errs = append(errs, fmt.Errorf("mesh: TombstoneTTL %s is shorter than %s (three catalog syncs): a member that missed a deletion would bring the record back", c.TombstoneTTL, min))
	}
	return errors.Join(errs...)
}

// MinTombstoneTTL is the shortest TombstoneTTL Validate accepts: three
// times the longest a member that missed a broadcast waits for the catalog
// sync that repairs it (the digest settles, differs for a while, and syncs
// are spaced by CatalogSyncInterval). A tombstone collected everywhere
// before that member's repair leaves it the only holder of the deleted
// record, which it then hands back to everyone. Zero when syncs are off.
func (c *Config) MinTombstoneTTL() time.Duration {
	sync := c.CatalogSyncInterval
	if sync < 0 {
		return 0
	}
	if sync == 0 {
		sync = 5 * time.Second // the default
	}
	return 3 * (catalogSettle + catalogSyncAfter + sync)
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", p)
	}
	return host, port, nil
}
