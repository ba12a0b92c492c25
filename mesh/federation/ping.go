package federation

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"fmt"
	"io"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
)

// protoPing carries the pings between gateways that keep the WAN
// coordinates: a stream per peer kept open, 8 bytes echoed per ping.
// libp2p's ping protocol negotiates a stream for each ping (its answering
// side closes a stream after 30 s), which cost several times the ping.
const protoPing = "/strata/federation/ping/1.0.0"

// pingIdle is how long the answering side keeps a ping stream with no
// ping; the pinging side opens a new one after pingIdle/2 unused, so that
// a ping never meets a stream the other side is closing.
const pingIdle = time.Minute

// pingTimeout bounds one ping.
const pingTimeout = 5 * time.Second

// servePing echoes a gateway's pings until it stops for pingIdle.
func (f *Federation) servePing(s network.Stream) {
	defer s.Close()
	var buf [8]byte
	for {
		_ = s.SetReadDeadline(time.Now().Add(pingIdle))
		if _, err := io.ReadFull(s, buf[:]); err != nil {
			return
		}
		_ = s.SetWriteDeadline(time.Now().Add(pingTimeout))
		if _, err := s.Write(buf[:]); err != nil {
			s.Reset()
			return
		}
	}
}

// pinger keeps a ping stream to each gateway it pings. It is used by one
// goroutine (probeWAN).
type pinger struct {
	h       host.Host
	streams map[peer.ID]*pingStream
}

type pingStream struct {
	s    network.Stream
	used time.Time
}

func newPinger(h host.Host) *pinger { return &pinger{h: h, streams: map[peer.ID]*pingStream{}} }

// ping measures one round trip to p over its stream, opened when there is
// none or it was idle too long. An agent from before protoPing is pinged
// with libp2p's ping protocol.
func (pg *pinger) ping(ctx context.Context, p peer.ID) (time.Duration, error) {
	ps := pg.streams[p]
	if ps != nil && time.Since(ps.used) > pingIdle/2 {
		pg.drop(p)
		ps = nil
	}
	if ps == nil {
		octx, cancel := context.WithTimeout(ctx, pingTimeout)
		s, err := pg.h.NewStream(network.WithAllowLimitedConn(octx, "ping"), p, protoPing)
		cancel()
		if err != nil {
			if pg.h.Network().Connectedness(p) != network.Connected && pg.h.Network().Connectedness(p) != network.Limited {
				return 0, err
			}
			pctx, cancel := context.WithTimeout(ctx, pingTimeout)
			defer cancel()
			res := <-ping.Ping(pctx, pg.h, p)
			return res.RTT, res.Error
		}
		ps = &pingStream{s: s}
		pg.streams[p] = ps
	}
	ps.used = time.Now()
	var out, in [8]byte
	_, _ = crand.Read(out[:])
	_ = ps.s.SetDeadline(time.Now().Add(pingTimeout))
	start := time.Now()
	if _, err := ps.s.Write(out[:]); err != nil {
		pg.drop(p)
		return 0, err
	}
	if _, err := io.ReadFull(ps.s, in[:]); err != nil {
		pg.drop(p)
		return 0, err
	}
	rtt := time.Since(start)
	if !bytes.Equal(in[:], out[:]) {
		pg.drop(p)
		return 0, fmt.Errorf("ping to %s: the echo differs", p)
	}
	return rtt, nil
}

// drop resets p's stream.
func (pg *pinger) drop(p peer.ID) {
	if ps := pg.streams[p]; ps != nil {
		ps.s.Reset()
		delete(pg.streams, p)
	}
}

// keep drops the streams to peers not in live.
func (pg *pinger) keep(live map[peer.ID]bool) {
	for p := range pg.streams {
		if !live[p] {
			pg.drop(p)
		}
	}
}
