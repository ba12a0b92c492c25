package dataplane

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
)

// Stream is one request's bidirectional stream over another transport than
// the data plane's own QUIC: a libp2p stream between sites, where a
// holder's QUIC address cannot be dialled (it is behind a NAT, or a
// firewall passes only the federation's port). A libp2p network.Stream is
// one.
type Stream interface {
	io.ReadWriteCloser
	// CloseWrite ends the sending side; the answer can still be read.
	CloseWrite() error
	// Reset abandons the stream in both directions.
	Reset() error
}

// A relayed stream starts with the dialler's node certificate (DER, after
// its 2-byte length), so that the holder admits exactly the peers the QUIC
// data plane admits: those with a certificate from the mesh CA. The
// transport has already proved that the dialler holds the certificate's
// key (libp2p's Noise handshake, with the node's identity as its peer ID).
const maxRelayCert = 8 << 10

// relayFor is how long a holder whose QUIC address did not answer is
// reached through the relay before the direct path is tried again.
const relayFor = 5 * time.Minute

// errDial marks a failure to reach a holder's QUIC address at all (as
// opposed to a failure of a request on an open connection).
var errDial = errors.New("dataplane: no direct path")

// answer is the reading side of one request: the caller reads the
// response and then calls done, or abort to give up on it.
type answer interface {
	io.Reader
	done()
	abort()
}

type quicAnswer struct{ *quic.Stream }

func (a quicAnswer) done()  { a.CancelRead(codeNone) }
func (a quicAnswer) abort() { a.CancelRead(codeCanceled) }

type relayAnswer struct{ Stream }

func (a relayAnswer) done()  { a.Close() }
func (a relayAnswer) abort() { a.Reset() }

// relayRoutes remembers the holders reached through the relay.
type relayRoutes struct {
	mu    sync.Mutex
	until map[string]time.Time // holder ID → when to try its QUIC address again
}

func (r *relayRoutes) use(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Now().Before(r.until[id])
}

func (r *relayRoutes) note(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.until == nil {
		r.until = map[string]time.Time{}
	}
	r.until[id] = time.Now().Add(relayFor)
}

// RelayFunc opens a stream to holder h over another transport.
type RelayFunc func(ctx context.Context, h Holder) (Stream, error)

// SetRelay sets how this node reaches a holder whose QUIC address cannot
// be dialled, or that has none: the holders with a Peer. The federation
// sets it to a libp2p stream to the holder. Without it such holders are
// unreachable.
func (n *Node) SetRelay(relay RelayFunc) { n.relay.Store(&relay) }

// request sends req to holder h and returns the answer to read: over the
// k-th pooled QUIC connection to its address, or, where that cannot be
// dialled (or h has no address) and h has a Peer and this node a relay
// (SetRelay), over a relayed stream.
func (n *Node) request(ctx context.Context, h Holder, k int, req []byte) (answer, error) {
	var relay RelayFunc
	if p := n.relay.Load(); p != nil {
		relay = *p
	}
	canRelay := h.Peer != "" && relay != nil
	if h.Addr != "" && !(canRelay && n.relayed.use(h.ID)) {
		s, _, err := n.requestQUIC(ctx, h.Addr, k, req)
		if err == nil {
			return quicAnswer{s}, nil
		}
		if !canRelay || !errors.Is(err, errDial) {
			return nil, err
		}
		n.log.Info("holder's data address does not answer; reaching it through the federation", "holder", h.ID, "addr", h.Addr, "err", err)
		n.relayed.note(h.ID)
	}
	if !canRelay {
		return nil, fmt.Errorf("dataplane: holder %s has no data address", h.ID)
	}
	s, err := relay(ctx, h)
	if err != nil {
		return nil, fmt.Errorf("dataplane: relay to %s: %w", h.ID, err)
	}
	cert := n.relayCert()
	msg := make([]byte, 0, 2+len(cert)+len(req))
	msg = binary.BigEndian.AppendUint16(msg, uint16(len(cert)))
	msg = append(append(msg, cert...), req...)
	if _, err := s.Write(msg); err != nil {
		s.Reset()
		return nil, fmt.Errorf("dataplane: request to %s through the relay: %w", h.ID, err)
	}
	if err := s.CloseWrite(); err != nil {
		s.Reset()
		return nil, fmt.Errorf("dataplane: request to %s through the relay: %w", h.ID, err)
	}
	n.stats.relayed.Add(1)
	return relayAnswer{s}, nil
}

// relayCert is this node's certificate (DER), as its QUIC client presents it.
func (n *Node) relayCert() []byte {
	// The current one when it can be replaced (a renewed certificate).
	if get := n.cfg.ClientTLS.GetClientCertificate; get != nil {
		if c, err := get(nil); err == nil && c != nil && len(c.Certificate) > 0 {
			return c.Certificate[0]
		}
	}
	if c := n.cfg.ClientTLS.Certificates; len(c) > 0 && len(c[0].Certificate) > 0 {
		return c[0].Certificate[0]
	}
	return nil
}

// ServeRelayed answers one request that came over another transport (see
// Stream and SetRelay). peer is the key the transport authenticated the
// dialler by; the stream's certificate must name that key and chain to the
// mesh CA, else the stream is reset unanswered. Proxied HTTP requests are
// not served this way. ServeRelayed returns when the answer is sent.
func (n *Node) ServeRelayed(s Stream, peer ed25519.PublicKey) {
	n.mu.Lock()
	closed := n.closed
	if !closed {
		n.wg.Add(1)
	}
	n.mu.Unlock()
	if closed {
		s.Reset()
		return
	}
	defer n.wg.Done()
	name, err := n.admit(s, peer)
	if err == nil {
		n.stats.relayServed.Add(1)
		err = n.serveStream(s, nil, name)
	}
	if err != nil {
		n.log.Debug("relayed request failed", "peer", name, "err", err)
		s.Reset()
		return
	}
	s.Close()
}

// admit reads a relayed stream's certificate and checks it: issued by the
// mesh CA for a client, and for the key the transport authenticated. It
// returns the node name the certificate gives.
func (n *Node) admit(s io.Reader, peer ed25519.PublicKey) (string, error) {
	var l [2]byte
	if _, err := io.ReadFull(s, l[:]); err != nil {
		return "", err
	}
	size := int(binary.BigEndian.Uint16(l[:]))
	if size == 0 || size > maxRelayCert {
		return "", fmt.Errorf("dataplane: relayed request with a certificate of %d bytes", size)
	}
	der := make([]byte, size)
	if _, err := io.ReadFull(s, der); err != nil {
		return "", err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return "", fmt.Errorf("dataplane: relayed request: %w", err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: n.cfg.ServerTLS.ClientCAs, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return "", fmt.Errorf("dataplane: relayed request: certificate not from the mesh CA: %w", err)
	}
	key, ok := cert.PublicKey.(ed25519.PublicKey)
	if !ok || !key.Equal(peer) {
		return "", errors.New("dataplane: relayed request: the certificate is not the dialler's")
	}
	return cert.Subject.CommonName, nil
}
