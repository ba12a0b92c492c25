package federation

import (
	"context"
	"testing"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
)

// TestPinger: pings to a gateway go over one stream kept open; one whose
// stream the other side reset is measured over a new one; an agent from
// before protoPing is pinged with libp2p's ping protocol.
func TestPinger(t *testing.T) {
	t.Parallel()
	newHost := func() host.Host {
		h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		return h
	}
	a, b, old := newHost(), newHost(), newHost()
	b.SetStreamHandler(protoPing, (&Federation{}).servePing)
	ping.NewPingService(old)
	ctx := context.Background()
	for _, h := range []host.Host{b, old} {
		if err := a.Connect(ctx, peer.AddrInfo{ID: h.ID(), Addrs: h.Addrs()}); err != nil {
			t.Fatal(err)
		}
	}
	pg := newPinger(a)
	streams := func() int {
		n := 0
		for _, c := range a.Network().ConnsToPeer(b.ID()) {
			n += len(c.GetStreams())
		}
		return n
	}
	var first *pingStream
	for i := range 5 {
		rtt, err := pg.ping(ctx, b.ID())
		if err != nil || rtt <= 0 {
			t.Fatalf("ping %d: %v, %v", i, rtt, err)
		}
		if first == nil {
			first = pg.streams[b.ID()]
		}
		if pg.streams[b.ID()] != first || streams() != 1 {
			t.Fatalf("ping %d: a new stream (%d open), want the first one kept", i, streams())
		}
	}
	// The other side goes away mid-stream: the ping fails, the next one
	// opens a new stream.
	first.s.Reset()
	if _, err := pg.ping(ctx, b.ID()); err == nil {
		t.Error("a ping over a reset stream succeeded")
	}
	if rtt, err := pg.ping(ctx, b.ID()); err != nil || pg.streams[b.ID()] == first {
		t.Errorf("after a reset: %v, %v; want a ping over a new stream", rtt, err)
	}
	if rtt, err := pg.ping(ctx, old.ID()); err != nil || rtt <= 0 || pg.streams[old.ID()] != nil {
		t.Errorf("an agent without protoPing: %v, %v, stream kept %v; want libp2p's ping", rtt, err, pg.streams[old.ID()] != nil)
	}
	pg.keep(nil)
	if len(pg.streams) != 0 {
		t.Errorf("%d streams kept after keep(nil)", len(pg.streams))
	}
}
