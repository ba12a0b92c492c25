package federation

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
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
