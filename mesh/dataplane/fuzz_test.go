package dataplane

import (
	"context"
	"io"
	"testing"
	"time"
)

// FuzzServeStream sends arbitrary request bytes to a real data-plane node
// over QUIC with mutual TLS (a holder of one blob): every stream is answered
// or closed, the node never panics, and it still serves a good request
// afterwards.
func FuzzServeStream(f *testing.F) {
	ca := newTestCA(f)
	srv := startNode(f, ca, "srv", "", nodeOpts{})
	cli := startNode(f, ca, "cli", "", nodeOpts{})
	m := publish(f, srv, "m", randomBlob(100<<10, 1), signer)
	digest := make([]byte, 32)
	_ = putDigest(digest, m.Digest)
	chunk := append([]byte{opChunk}, digest...)
	chunk = append(chunk, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80, 0, 0)
	f.Add(chunk)
	f.Add(append([]byte{opHave}, append(digest, 0, 0, 0, 4)...))
	f.Add(append([]byte{opDone}, digest...))
	f.Add([]byte{opManifest, 0, 5, 'm', 'o', 'd', 'e', 'l', 0, 1, 'm', 0, 0})
	f.Add([]byte{opManifest, 0xff, 0xff})
	f.Add(append([]byte{opHTTP}, "GET /v2/models HTTP/1.1\r\nHost: x\r\n\r\n"...))
	f.Add(append([]byte{opChunk}, make([]byte, 45)...))
	f.Add([]byte{0x7f})
	f.Add([]byte{})
	addr := srv.Addr().String()
	f.Fuzz(func(t *testing.T, req []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, _, err := cli.requestQUIC(ctx, addr, 0, req)
		if err != nil {
			t.Fatalf("open a stream to the node: %v", err)
		}
		s.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.Copy(io.Discard, s) // an answer, or the stream closed
		s.CancelRead(codeCanceled)
		// The node still answers a good request.
		good, err := cli.FetchManifest(ctx, []Holder{srv.holder()}, m.Kind, m.Name, m.Version)
		if err != nil || good.Digest != m.Digest {
			t.Fatalf("after the fuzzed stream the node does not serve its manifest: %v", err)
		}
	})
}
