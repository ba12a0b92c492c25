package federation

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/multiformats/go-multiaddr"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/dataplane"
)

// protoData carries one data-plane request between sites, where the
// holder's QUIC address does not answer (see dataplane.Stream).
const protoData = "/strata/data/1.0.0"

// relayedStreamLimit bounds how long one relayed data-plane request may
// take, so that a peer that stops reading cannot hold a stream for good.
// A request is one chunk, or one long-polled "have".
const relayedStreamLimit = 5 * time.Minute

// RemoteHolders lists the nodes of other sites, reachable now, that hold
// the blob digest whole, as their sites' summaries say: each with its QUIC
// data address and its peer ID, through which the data plane reaches it
// where that address does not answer.
func RemoteHolders(m *mesh.Mesh, digest string, now time.Time) []dataplane.Holder {
	var out []dataplane.Holder
	for _, r := range Remotes(m, now) {
		if r.Status != mesh.SiteReachable {
			continue
		}
		for _, name := range r.Summary.Holders[digest] {
			c, ok := r.Summary.Contacts[name]
			if !ok {
				continue
			}
			h := dataplane.Holder{ID: name, Addr: c.Data}
			if ai, err := contactPeer(c); err == nil {
				h.Peer = ai.ID.String()
			}
			if h.Addr != "" || h.Peer != "" {
				out = append(out, h)
			}
		}
	}
	return out
}

// RemoteServer is a node of another site that serves a model, as its
// site's summary says.
type RemoteServer struct {
	// Site is its site, RTT the estimated round trip from this agent's
	// site to it (0 when not known yet).
	Site string
	RTT  time.Duration
	// Name is its node name (its data-plane certificate's), Data its
	// data-plane address.
	Name, Data string
}

// RemoteServers lists the nodes of other sites, reachable now, that serve
// model (at version, or any version when ""), nearest site first (sites of
// unknown distance last).
func RemoteServers(m *mesh.Mesh, model, version string, now time.Time) []RemoteServer {
	rtts := map[string]time.Duration{}
	for _, s := range Sites(m, now) {
		if s.RTTMillis != nil && *s.RTTMillis > 0 {
			rtts[s.Name] = time.Duration(*s.RTTMillis * float64(time.Millisecond))
		}
	}
	var out []RemoteServer
	for _, r := range Remotes(m, now) {
		if r.Status != mesh.SiteReachable {
			continue
		}
		rtt := rtts[r.Summary.Site]
		for ref, names := range r.Summary.Serving {
			name, ver, _ := strings.Cut(ref, "@")
			if name != model || (version != "" && ver != version) {
				continue
			}
			for _, n := range names {
				if c, ok := r.Summary.Contacts[n]; ok && c.Data != "" {
					out = append(out, RemoteServer{Site: r.Summary.Site, RTT: rtt, Name: n, Data: c.Data})
				}
			}
		}
	}
	slices.SortStableFunc(out, func(a, b RemoteServer) int {
		switch {
		case (a.RTT == 0) != (b.RTT == 0):
			if a.RTT == 0 {
				return 1
			}
			return -1
		case a.RTT != b.RTT:
			return cmp.Compare(a.RTT, b.RTT)
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// contactPeer reads a contact's libp2p addresses as one peer's.
func contactPeer(c Contact) (*peer.AddrInfo, error) {
	var addrs []multiaddr.Multiaddr
	var id peer.ID
	for _, s := range c.Federation {
		ai, err := peer.AddrInfoFromString(s)
		if err != nil {
			continue
		}
		if id != "" && ai.ID != id {
			return nil, errors.New("federation: a contact with two peer IDs")
		}
		id = ai.ID
		addrs = append(addrs, ai.Addrs...)
	}
	if id == "" {
		return nil, errors.New("federation: a contact with no libp2p address")
	}
	return &peer.AddrInfo{ID: id, Addrs: addrs}, nil
}

// openData opens a data-plane stream to holder h over libp2p: the data
// plane's relay (dataplane.Node.SetRelay). The holder's addresses come from
// its site's summary; libp2p may reach it through a relay or a punched
// hole where it is behind a NAT.
func (f *Federation) openData(ctx context.Context, h dataplane.Holder) (dataplane.Stream, error) {
	host := f.Host()
	if host == nil {
		return nil, errors.New("federation: the libp2p host is not running")
	}
	id, err := peer.Decode(h.Peer)
	if err != nil {
		return nil, fmt.Errorf("federation: holder %s: %w", h.ID, err)
	}
	// A pull sends many requests to one holder: its addresses are looked
	// up in the summaries only while no connection to it is open.
	if host.Network().Connectedness(id) != network.Connected {
		for _, r := range Remotes(f.cfg.Mesh, time.Now()) {
			for _, c := range r.Summary.Contacts {
				if ai, err := contactPeer(c); err == nil && ai.ID == id {
					host.Peerstore().AddAddrs(id, ai.Addrs, peerstore.TempAddrTTL)
				}
			}
		}
	}
	s, err := host.NewStream(ctx, id, protoData)
	if err != nil {
		f.metrics.errors.WithLabelValues("data").Inc()
		return nil, err
	}
	path := "direct"
	if isCircuit(s.Conn().RemoteMultiaddr()) {
		path = "relayed"
	}
	f.metrics.dataStreams.WithLabelValues(path).Inc()
	_ = s.SetDeadline(time.Now().Add(relayedStreamLimit))
	return s, nil
}

// serveData answers one data-plane request from another site's node.
func (f *Federation) serveData(s network.Stream) {
	key := s.Conn().RemotePublicKey()
	raw, err := key.Raw()
	if key.Type() != crypto.Ed25519 || err != nil || len(raw) != ed25519.PublicKeySize {
		_ = s.Reset()
		return
	}
	_ = s.SetDeadline(time.Now().Add(relayedStreamLimit))
	f.cfg.Data.ServeRelayed(s, ed25519.PublicKey(raw))
}
