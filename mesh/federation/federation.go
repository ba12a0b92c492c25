package federation

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	lpmetrics "github.com/libp2p/go-libp2p/core/metrics"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
	relayv2 "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/dataplane"
)

// Topics and protocols. A new major version of either gets a new name.
const (
	topicRecords   = "strata/federation/records/1"
	topicSummaries = "strata/federation/summaries/1"
	protoSync      = "/strata/federation/sync/1.0.0"
	protoSync2     = "/strata/federation/sync/2.0.0"
	protoGateways  = "/strata/federation/gateways/1.0.0"
)

// Config configures an agent's part in the federation.
type Config struct {
	// Mesh is the agent's site pool.
	Mesh *mesh.Mesh
	// Identity is the node's key: its libp2p peer ID.
	Identity mesh.Identity
	// Listen are the multiaddrs a gateway listens at
	// (default /ip4/0.0.0.0/tcp/7950).
	Listen []string
	// Peers are agents of other sites to dial first ("multiaddr/p2p/ID");
	// after the first summary, gateways find each other from summaries.
	Peers []string
	// Gateways is how many gateways a site has (default 2).
	Gateways int
	// Reachability says whether other sites can dial this agent's libp2p
	// addresses: ReachabilityAuto (the default) lets AutoNAT find out,
	// which needs public addresses on both sides. ReachabilityPublic
	// makes the agent a circuit relay for agents behind NATs;
	// ReachabilityPrivate (behind a NAT) makes it reserve a relay slot on
	// its Peers at once and advertise the circuit address through them.
	Reachability Reachability
	// PSK, when set (32 bytes), makes the federation a libp2p private
	// network over TCP: a host without the key cannot connect.
	PSK []byte
	// SummaryInterval is how often the publishing gateway sends its
	// site's summary when it changed (every summaryQuiet otherwise) and
	// checks for new records (default 5s; records also go out as soon as
	// the pool changes).
	SummaryInterval time.Duration
	// SyncInterval is how often a gateway exchanges its global catalog
	// with one other site's gateway as anti-entropy (default 30s).
	SyncInterval time.Duration
	// Logger and Registerer default to slog's default logger and none.
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// Data, when set, is the agent's data plane: the host serves its
	// blobs to other sites' nodes and carries its pulls from holders whose
	// QUIC address does not answer.
	Data *dataplane.Node
	// NewHost makes a gateway's libp2p host; tests and benchmarks pass
	// hosts on an in-memory network. Default: a host with the options above.
	NewHost func(priv crypto.PrivKey) (host.Host, error)
}

// Federation runs this agent's part in joining its site to the others: a
// libp2p host that tells whoever dials it where its site's gateways are,
// and, while the agent is one of them, the gateway's GossipSub topics.
type Federation struct {
	cfg     Config
	priv    crypto.PrivKey
	peers   []peer.AddrInfo
	metrics *metrics
	bw      *lpmetrics.BandwidthCounter

	// h is the agent's libp2p host, up while Run runs (Run's goroutine
	// starts and closes it); wg tracks the syncs it runs.
	h  host.Host
	wg sync.WaitGroup

	mu sync.Mutex
	gw *gateway
	// out counts the steps in a row this agent was not among the
	// gateways (Run's goroutine only).
	out int
}

// demoteAfter is how many steps (seconds) in a row an agent must be out
// of its site's gateways before its gateway stops: a member that is
// briefly suspected, or joins, does not make gateways restart.
const demoteAfter = 5

// Reachability is whether other sites can dial an agent's libp2p
// addresses; see Config.Reachability.
type Reachability string

// Reachabilities.
const (
	ReachabilityAuto    Reachability = "auto"
	ReachabilityPublic  Reachability = "public"
	ReachabilityPrivate Reachability = "private"
)

// New checks cfg and makes a Federation; Run starts it.
func New(cfg Config) (*Federation, error) {
	if cfg.Mesh == nil {
		return nil, errors.New("federation: no mesh")
	}
	if cfg.Gateways <= 0 {
		cfg.Gateways = 2
	}
	if len(cfg.Listen) == 0 {
		cfg.Listen = []string{"/ip4/0.0.0.0/tcp/7950"}
	}
	if cfg.SummaryInterval <= 0 {
		cfg.SummaryInterval = 5 * time.Second
	}
	if cfg.SyncInterval <= 0 {
		cfg.SyncInterval = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	switch cfg.Reachability {
	case "":
		cfg.Reachability = ReachabilityAuto
	case ReachabilityAuto, ReachabilityPublic, ReachabilityPrivate:
	default:
		return nil, fmt.Errorf("federation: reachability %q: want auto, public or private", cfg.Reachability)
	}
	if cfg.Reachability == ReachabilityPrivate && len(cfg.Peers) == 0 {
		return nil, errors.New("federation: reachability private needs peers: an agent behind a NAT is reached through a relay slot on one of them")
	}
	if cfg.PSK != nil && len(cfg.PSK) != 32 {
		return nil, fmt.Errorf("federation: the private network key is %d bytes, want 32", len(cfg.PSK))
	}
	priv, err := crypto.UnmarshalEd25519PrivateKey(cfg.Identity.Key)
	if err != nil {
		return nil, fmt.Errorf("federation: identity: %w", err)
	}
	f := &Federation{cfg: cfg, priv: priv, metrics: newMetrics(cfg.Registerer), bw: lpmetrics.NewBandwidthCounter()}
	for _, s := range cfg.Peers {
		ai, err := peer.AddrInfoFromString(s)
		if err != nil {
			return nil, fmt.Errorf("federation: peer %q: %w (want a multiaddr ending in /p2p/PEER-ID, as 'strata members -o json' shows in addrs.federation)", s, err)
		}
		f.peers = append(f.peers, *ai)
	}
	if cfg.NewHost == nil {
		f.cfg.NewHost = f.newHost
	}
	if cfg.Data != nil {
		cfg.Data.SetRelay(f.openData)
	}
	return f, nil
}

// PeerID returns the node's libp2p peer ID.
func PeerID(id mesh.Identity) (peer.ID, error) {
	priv, err := crypto.UnmarshalEd25519PrivateKey(id.Key)
	if err != nil {
		return "", err
	}
	return peer.IDFromPrivateKey(priv)
}

// PSKFromGossipKey derives the federation's private network key from the
// mesh's gossip key, so that one secret admits an agent to both.
func PSKFromGossipKey(key []byte) []byte {
	if len(key) == 0 {
		return nil
	}
	sum := sha256.Sum256(append([]byte("strata federation psk\x00"), key...))
	return sum[:]
}

// connLimits are the connection manager's watermarks and grace period:
// libp2p's defaults, named here because the federation depends on them. A
// gateway holds a connection to a gateway of every other site, and is
// dialed by gateways of other sites: at 100 sites of two gateways, about
// 200 connections, over the high watermark. Past it the manager closes
// the least valued connections every 10 s (those to peers in no GossipSub
// mesh first), and the gateways would dial them again, losing what was
// under way; so gateways protect their connections to other sites'
// gateways (gateway.connect). A variable for tests.
var connLimits = struct {
	low, high int
	grace     time.Duration
}{160, 192, time.Minute}

func (f *Federation) newHost(priv crypto.PrivKey) (host.Host, error) {
	cm, err := connmgr.NewConnManager(connLimits.low, connLimits.high, connmgr.WithGracePeriod(connLimits.grace))
	if err != nil {
		return nil, err
	}
	opts := []libp2p.Option{
		libp2p.Identity(priv),
		libp2p.ConnectionManager(cm),
		libp2p.ListenAddrStrings(f.cfg.Listen...),
		libp2p.DisableMetrics(),
		libp2p.BandwidthReporter(f.bw),
		libp2p.EnableRelay(),
		libp2p.EnableHolePunching(),
		libp2p.EnableNATService(),
	}
	if f.cfg.PSK != nil {
		// Only holders of the key reach this host at all: it relays their
		// connections without libp2p's default limits (128 KiB and 2
		// minutes a connection), which would cut a blob pulled between
		// two sites behind NATs short.
		opts = append(opts, libp2p.EnableRelayService(relayv2.WithInfiniteLimits()))
	} else {
		opts = append(opts, libp2p.EnableRelayService())
	}
	if len(f.peers) > 0 {
		opts = append(opts, libp2p.EnableAutoRelayWithStaticRelays(f.peers))
	}
	// AutoNAT decides only between public addresses: in private address
	// space (10/8 and the like, common between on-prem sites) the agent
	// is told which side of a NAT it is on.
	switch f.cfg.Reachability {
	case ReachabilityPublic:
		opts = append(opts, libp2p.ForceReachabilityPublic())
	case ReachabilityPrivate:
		opts = append(opts, libp2p.ForceReachabilityPrivate())
	}
	if f.cfg.PSK != nil {
		// A private network runs over TCP only: QUIC has its own
		// handshake, which libp2p's pre-shared key cannot wrap.
		opts = append(opts, libp2p.PrivateNetwork(pnet.PSK(f.cfg.PSK)), libp2p.Transport(tcp.NewTCPTransport))
	}
	return libp2p.New(opts...)
}

// Run starts the agent's host and follows the site's gateways until ctx
// ends: it starts this agent's gateway when the agent becomes one and
// stops it when it no longer is.
func (f *Federation) Run(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	defer func() {
		f.stopGateway()
		f.mu.Lock()
		h := f.h
		f.mu.Unlock()
		if h != nil {
			h.Close()
		}
		f.wg.Wait()
	}()
	for {
		if f.Host() == nil {
			if err := f.startHost(ctx); err != nil {
				f.cfg.Logger.Warn("federation host did not start; trying again", "err", err)
				f.metrics.errors.WithLabelValues("start").Inc()
			}
		}
		if f.Host() != nil {
			f.step(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (f *Federation) step(ctx context.Context) {
	m := f.cfg.Mesh
	gws := Gateways(m.Nodes(), m.Site(), f.cfg.Gateways)
	rank := -1
	for i, g := range gws {
		if g == m.Name() {
			rank = i
		}
	}
	f.mu.Lock()
	gw := f.gw
	f.mu.Unlock()
	if rank >= 0 {
		f.out = 0
	} else {
		f.out++
	}
	switch {
	case rank < 0 && gw != nil && f.out >= demoteAfter:
		f.cfg.Logger.Info("no longer a federation gateway", "gateways", gws)
		f.stopGateway()
		gw = nil
	case rank >= 0 && gw == nil:
		g, err := f.startGateway(ctx)
		if err != nil {
			f.cfg.Logger.Warn("federation gateway did not start", "err", err)
			f.metrics.errors.WithLabelValues("start").Inc()
			return
		}
		f.cfg.Logger.Info("federation gateway started", "rank", rank)
		gw = g
	}
	if gw != nil {
		gw.setRank(rank, gws)
	}
}

func (f *Federation) stopGateway() {
	f.mu.Lock()
	gw := f.gw
	f.gw = nil
	f.mu.Unlock()
	if gw != nil {
		gw.close()
	}
}

// Host returns the agent's libp2p host, or nil before Run started it.
func (f *Federation) Host() host.Host {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.h
}

// startHost starts the agent's libp2p host, serves the sync and gateway
// lookup protocols on it, and advertises its addresses in the node's
// document.
func (f *Federation) startHost(ctx context.Context) error {
	h, err := f.cfg.NewHost(f.priv)
	if err != nil {
		return err
	}
	h.SetStreamHandler(protoSync, f.serveSync)
	h.SetStreamHandler(protoSync2, f.serveSync)
	h.SetStreamHandler(protoGateways, f.serveGateways)
	if f.cfg.Data != nil {
		h.SetStreamHandler(protoData, f.serveData)
	}
	h.Network().Notify(&network.NotifyBundle{ConnectedF: func(_ network.Network, c network.Conn) {
		// A gateway that dialled another exchanges catalogs with it.
		if gw, _ := f.IsGateway(); gw && c.Stat().Direction == network.DirOutbound {
			f.goSync(ctx, c.RemotePeer())
		}
	}})
	// The host's addresses change after start: a relay reservation adds
	// a circuit address (the one through which a host behind a NAT is
	// reached), and identify adds the address peers observe.
	sub, err := h.EventBus().Subscribe(new(event.EvtLocalAddressesUpdated))
	if err != nil {
		h.Close()
		return err
	}
	addrs, err := f.advertise(h, nil)
	if err != nil {
		sub.Close()
		h.Close()
		return err
	}
	f.mu.Lock()
	f.h = h
	f.mu.Unlock()
	f.cfg.Logger.Info("federation host started", "addrs", addrs)
	f.wg.Go(func() {
		defer sub.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case <-sub.Out():
				now, err := f.advertise(h, addrs)
				if err != nil {
					f.cfg.Logger.Warn("advertising federation addresses", "err", err)
				}
				addrs = now
			}
		}
	})
	return nil
}

// advertise puts the host's addresses in the node's document when they
// differ from those advertised before (prev), and returns them.
func (f *Federation) advertise(h host.Host, prev []string) ([]string, error) {
	var addrs []string
	for _, a := range h.Addrs() {
		addrs = append(addrs, a.String()+"/p2p/"+h.ID().String())
	}
	if f.cfg.Reachability == ReachabilityPrivate {
		// Behind a NAT the agent is reached through the relay slot it
		// holds on its peers. libp2p advertises such circuit addresses
		// only for relays at public addresses; peers in private address
		// space are relays too.
		for _, p := range f.peers {
			for _, a := range p.Addrs {
				addrs = append(addrs, a.String()+"/p2p/"+p.ID.String()+"/p2p-circuit/p2p/"+h.ID().String())
			}
		}
	}
	slices.Sort(addrs)
	addrs = slices.Compact(addrs)
	if prev != nil && slices.Equal(addrs, prev) {
		return prev, nil
	}
	if err := f.cfg.Mesh.Update(func(s *mesh.NodeState) { s.Addrs.Federation = addrs }); err != nil {
		return prev, err
	}
	if prev != nil {
		f.cfg.Logger.Info("federation addresses changed", "addrs", addrs)
	}
	return addrs, nil
}

// IsGateway reports whether this agent is a gateway now, and whether the
// publishing one.
func (f *Federation) IsGateway() (gateway, publisher bool) {
	f.mu.Lock()
	gw := f.gw
	f.mu.Unlock()
	if gw == nil {
		return false, false
	}
	gw.mu.Lock()
	defer gw.mu.Unlock()
	return true, gw.rank == 0
}

func encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only our own types, which always encode
	}
	return b
}
