package dataplane

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/quic-go/quic-go"

	"github.com/strata-mesh/strata/mesh/pki"
)

// Requests between agents (a forwarded inference request, a job's log
// fetched from the node that ran it) travel over the data plane too: one
// HTTP/1.1 request and its response per QUIC stream, on a connection of
// their own so that a bulk transfer's flow control never holds them up.
// Both ends are authenticated by the mesh CA's certificates.

// rpcConn is the pool index of the connection that carries proxied
// requests; pulls use indexes from 0.
const rpcConn = -1

// maxProxyBody bounds a proxied request's and response's body, as an
// agent's API bounds a request's.
const maxProxyBody = 64 << 20

// HeaderPeer is set on a request served through the data plane to the
// authenticated name of the agent that sent it (from its certificate; a
// value the sender put there is replaced).
const HeaderPeer = "Strata-Peer"

// Peer is the agent a proxied request is addressed to. The server's
// certificate, verified against the mesh CA in the handshake, must name
// it: an address learnt from gossip may be held by another node, or a
// forged document may point at one, and a request (with what it carries)
// must reach only the node it was meant for.
type Peer struct {
	// Addr is its data-plane address, host:port.
	Addr string
	// Name is its node name, the common name its certificate must carry.
	// Required.
	Name string
	// ID, when set, is its node ID: the key of its certificate must
	// derive to it (Config.NodeID).
	ID string
}

// ErrWrongPeer is returned by RoundTrip when the agent at the address
// presents a certificate for another node than the one addressed.
var ErrWrongPeer = errors.New("dataplane: the agent at that address is not the one addressed")

// checkPeer returns ErrWrongPeer (wrapped, with what the certificate
// says) unless the server of c is the agent to names.
func (n *Node) checkPeer(c *quic.Conn, to Peer) error {
	cs := c.ConnectionState().TLS
	if to.Name == "" {
		return fmt.Errorf("%w: no node name given for %s to check its certificate against", ErrWrongPeer, to.Addr)
	}
	if got := pki.PeerName(cs); got != to.Name {
		return fmt.Errorf("%w: %s presents a certificate for %q, not %q", ErrWrongPeer, to.Addr, got, to.Name)
	}
	if to.ID == "" {
		return nil
	}
	if n.cfg.NodeID == nil {
		return fmt.Errorf("%w: cannot check node ID %s of %s: Config.NodeID is not set", ErrWrongPeer, to.ID, to.Name)
	}
	key := pki.PeerKey(cs)
	if key == nil {
		return fmt.Errorf("%w: %s presents no ed25519 key", ErrWrongPeer, to.Addr)
	}
	if got := n.cfg.NodeID(key); got != to.ID {
		return fmt.Errorf("%w: %s presents the key of node ID %s, not %s's %s", ErrWrongPeer, to.Addr, got, to.Name, to.ID)
	}
	return nil
}

// Connect opens the connection RoundTrip uses to reach to, or finds it
// open, and checks that to's certificate names it (ErrWrongPeer); it
// sends nothing. A caller that bounds how long a peer may take to answer
// connects first: a handshake on a busy host (a TLS handshake at each
// end) is not the peer's slowness in answering.
func (n *Node) Connect(ctx context.Context, to Peer) error {
	c, err := n.conn(ctx, to.Addr, rpcConn)
	if err != nil {
		return err
	}
	return n.checkPeer(c, to)
}

// RoundTrip sends req to the agent to and returns its response. It fails
// with ErrWrongPeer, before anything of req is sent, unless the server's
// certificate names to (Peer). The request, body included, is sent
// whole; the response body streams and must be closed. The peer serves
// it with the Handler of its Config; without one it answers 501.
func (n *Node) RoundTrip(ctx context.Context, to Peer, req *http.Request) (*http.Response, error) {
	addr := to.Addr
	var buf bytes.Buffer
	buf.WriteByte(opHTTP)
	// Write sends the request in HTTP/1.1 form, chunked if its length is
	// unknown; ReadRequest at the other end reads either.
	if err := req.Write(&buf); err != nil {
		return nil, fmt.Errorf("dataplane: proxy request: %w", err)
	}
	c, err := n.conn(ctx, addr, rpcConn)
	if err != nil {
		return nil, err
	}
	if err := n.checkPeer(c, to); err != nil {
		return nil, err
	}
	s, err := n.send(ctx, addr, rpcConn, c, buf.Bytes())
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { s.CancelRead(codeCanceled) })
	resp, err := http.ReadResponse(bufio.NewReader(s), req)
	if err != nil {
		stop()
		s.CancelRead(codeCanceled)
		return nil, fmt.Errorf("dataplane: proxy response from %s: %w", addr, err)
	}
	n.stats.proxied.Add(1)
	resp.Body = &streamBody{ReadCloser: resp.Body, s: s, stop: stop}
	return resp, nil
}

// streamBody releases the stream when the response body is closed.
type streamBody struct {
	io.ReadCloser
	s    *quic.Stream
	stop func() bool
}

func (b *streamBody) Close() error {
	b.stop()
	b.s.CancelRead(codeNone)
	return b.ReadCloser.Close()
}

// serveHTTP answers one proxied request with cfg.Handler. The response is
// buffered and sent with its length once the handler returns.
func (n *Node) serveHTTP(s io.ReadWriter, gone context.Context, peer string) error {
	req, err := http.ReadRequest(bufio.NewReader(io.LimitReader(s, maxProxyBody+64<<10)))
	if err != nil {
		return fmt.Errorf("dataplane: proxied request from %s: %w", peer, err)
	}
	ctx, cancel := context.WithCancel(n.ctx)
	defer cancel()
	// The stream's context ends when the peer resets its reading side (it
	// gave up on the answer).
	stop := context.AfterFunc(gone, cancel)
	defer stop()
	req = req.WithContext(ctx)
	req.RemoteAddr = peer
	req.Header.Set(HeaderPeer, peer)
	w := &responseBuffer{header: http.Header{}}
	if n.cfg.Handler == nil {
		http.Error(w, "this agent does not serve requests over its data plane", http.StatusNotImplemented)
	} else {
		n.cfg.Handler.ServeHTTP(w, req)
	}
	if w.overflow {
		w = &responseBuffer{header: http.Header{}}
		http.Error(w, fmt.Sprintf("response over %d bytes", maxProxyBody), http.StatusBadGateway)
	}
	resp := &http.Response{
		ProtoMajor: 1, ProtoMinor: 1,
		StatusCode:    w.status(),
		Header:        w.header,
		ContentLength: int64(w.body.Len()),
		Body:          io.NopCloser(&w.body),
	}
	resp.Header.Set("Content-Length", strconv.Itoa(w.body.Len()))
	bw := bufio.NewWriterSize(s, 64<<10)
	if err := resp.Write(bw); err != nil {
		return err
	}
	return bw.Flush()
}

// responseBuffer is the http.ResponseWriter of a proxied request.
type responseBuffer struct {
	header   http.Header
	code     int
	body     bytes.Buffer
	overflow bool
}

func (w *responseBuffer) Header() http.Header { return w.header }

func (w *responseBuffer) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *responseBuffer) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	if w.body.Len()+len(p) > maxProxyBody {
		w.overflow = true
		return 0, errResponseTooLarge
	}
	return w.body.Write(p)
}

func (w *responseBuffer) status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}

var errResponseTooLarge = errors.New("dataplane: proxied response too large")
