package federation

import (
	"context"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
)

// SetNewPublisher sets how long a new publisher sends its summary every
// interval, and returns a function that restores it. Only for tests that
// do not run in parallel.
func SetNewPublisher(d time.Duration) (restore func()) {
	old := newPublisher
	newPublisher = d
	return func() { newPublisher = old }
}

// TrafficByProtocol returns f's libp2p bytes since start, in plus out, per
// protocol ("" for what libp2p counts under none; default hosts only).
func TrafficByProtocol(f *Federation) map[string]int64 {
	out := map[string]int64{}
	for p, s := range f.bw.GetBandwidthByProtocol() {
		out[string(p)] += s.TotalIn + s.TotalOut
	}
	return out
}

// LookForDirect has f's gateway look for a direct path to the peers it
// reaches only through a relay (gateway.direct) as if their connections
// were older than the grace given to hole punching. It reports false when
// f runs no gateway. The dials go on in the background.
func LookForDirect(ctx context.Context, f *Federation, peers []peer.AddrInfo) bool {
	f.mu.Lock()
	g := f.gw
	f.mu.Unlock()
	if g == nil {
		return false
	}
	g.direct(ctx, peers, time.Now().Add(time.Hour))
	return true
}

// Subscribed reports whether f's gateway subscribes to the federation's
// topics (only its site's publisher should).
func Subscribed(f *Federation) bool {
	f.mu.Lock()
	g := f.gw
	f.mu.Unlock()
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.unsubscribe != nil
}

// SetConnLimits sets the watermarks and grace period of the connection
// manager of hosts made from here on, and returns a function that restores
// them. Only for tests that do not run in parallel.
func SetConnLimits(low, high int, grace time.Duration) (restore func()) {
	old := connLimits
	connLimits.low, connLimits.high, connLimits.grace = low, high, grace
	return func() { connLimits = old }
}

// SetGossipSubDefaults has gateways made from here on use GossipSub's
// default parameters, and returns a function that restores the
// federation's. Only for benchmarks and tests that do not run in parallel.
func SetGossipSubDefaults() (restore func()) {
	old := gossipParams
	gossipParams = pubsub.DefaultGossipSubParams
	return func() { gossipParams = old }
}
