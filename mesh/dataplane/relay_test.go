package dataplane

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-mesh/strata/storage"
)

// pipeStream is one end of an in-memory Stream pair: what one end writes
// the other reads, and CloseWrite ends only this end's direction.
type pipeStream struct {
	r *io.PipeReader
	w *io.PipeWriter
}

func streamPair() (a, b *pipeStream) {
	ar, bw := io.Pipe()
	br, aw := io.Pipe()
	return &pipeStream{r: ar, w: aw}, &pipeStream{r: br, w: bw}
}

func (s *pipeStream) Read(p []byte) (int, error)  { return s.r.Read(p) }
func (s *pipeStream) Write(p []byte) (int, error) { return s.w.Write(p) }
func (s *pipeStream) CloseWrite() error           { return s.w.Close() }
func (s *pipeStream) Close() error                { s.w.Close(); return s.r.Close() }
func (s *pipeStream) Reset() error {
	err := errors.New("stream reset")
	s.w.CloseWithError(err)
	return s.r.CloseWithError(err)
}

// relayTo returns a relay that carries each stream to the node a peer
// names, as the federation's libp2p host does, authenticated as key.
func relayTo(nodes map[string]*testNode, key ed25519.PublicKey, opened *atomic.Int64) RelayFunc {
	return func(ctx context.Context, h Holder) (Stream, error) {
		tn, ok := nodes[h.Peer]
		if !ok {
			return nil, errors.New("no route to peer")
		}
		opened.Add(1)
		a, b := streamPair()
		go tn.ServeRelayed(b, key)
		return a, nil
	}
}

// TestPullThroughRelay: a holder whose QUIC address does not answer (or
// that has none) is reached through the relay, with the same checks of
// the puller's certificate as over QUIC.
func TestPullThroughRelay(t *testing.T) {
	ca := newTestCA(t)
	a := startNode(t, ca, "a", "", nodeOpts{})
	b := startNode(t, ca, "b", "", nodeOpts{})
	data := randomBlob(1<<20+77, 9)
	m := publish(t, a, "scorer", data, signer)
	var opened atomic.Int64
	b.SetRelay(relayTo(map[string]*testNode{"peer-a": a}, b.key.Public().(ed25519.PublicKey), &opened))

	// A UDP port nobody answers on: the QUIC dial fails, the relay is used.
	dead, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	res, err := b.Pull(testCtx(t), PullRequest{Kind: storage.KindModel, Name: "scorer",
		Holders: []Holder{{ID: "a", Addr: dead.LocalAddr().String(), Peer: "peer-a"}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Manifest.Digest != m.Digest || !bytes.Equal(readModel(t, b, "scorer"), data) {
		t.Fatal("the blob pulled through the relay differs from the published one")
	}
	if got := b.Stats().Relayed; got == 0 || got != opened.Load() {
		t.Errorf("puller relayed %d requests over %d streams, want as many, more than 0", got, opened.Load())
	}
	if got := a.Stats(); got.RelayServed == 0 || got.BytesSent != m.Size {
		t.Errorf("holder: %d relayed requests, %d bytes sent, want some and %d", got.RelayServed, got.BytesSent, m.Size)
	}

	// A holder with no data address at all.
	c := startNode(t, ca, "c", "", nodeOpts{})
	c.SetRelay(relayTo(map[string]*testNode{"peer-a": a}, c.key.Public().(ed25519.PublicKey), new(atomic.Int64)))
	if _, err := c.Pull(testCtx(t), PullRequest{Manifest: m, Holders: []Holder{{ID: "a", Peer: "peer-a"}}}); err != nil {
		t.Fatalf("pull from a holder reachable only through the relay: %v", err)
	}

	// A dialler whose certificate is not for the key the transport
	// authenticated, or not from the mesh CA, is refused.
	other := newTestCA(t)
	for name, tc := range map[string]struct {
		ca  testCA
		key ed25519.PublicKey
	}{
		"someone else's certificate": {ca, a.key.Public().(ed25519.PublicKey)},
		"another CA":                 {other, nil},
	} {
		t.Run(name, func(t *testing.T) {
			rogue := startNode(t, tc.ca, "rogue", "", nodeOpts{rootCA: &ca, mutate: func(c *Config) { c.RetryTimeout = 300 * time.Millisecond }})
			key := tc.key
			if key == nil {
				key = rogue.key.Public().(ed25519.PublicKey)
			}
			rogue.SetRelay(relayTo(map[string]*testNode{"peer-a": a}, key, new(atomic.Int64)))
			before := a.Stats().BytesSent
			if _, err := rogue.Pull(testCtx(t), PullRequest{Manifest: m, Holders: []Holder{{ID: "a", Peer: "peer-a"}}}); err == nil {
				t.Fatal("pull succeeded")
			}
			if got := a.Stats().BytesSent; got != before {
				t.Errorf("holder sent %d bytes to the rogue", got-before)
			}
		})
	}
}
