package httpapi

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Connection defaults for the API's http.Server.
const (
	// DefaultMaxConns is ConnLimits.Max when zero.
	DefaultMaxConns = 1024
	// DefaultMaxConnsPerClient is ConnLimits.PerClient when zero: well
	// under DefaultMaxConns, so that 16 clients at their cap still leave
	// room for everybody else.
	DefaultMaxConnsPerClient = 64
	// IdleTimeout is how long the API keeps an idle keep-alive connection
	// (http.Server.IdleTimeout). Short, since an idle connection costs a
	// slot of ConnLimits; a client that comes back later dials again,
	// which on the API's networks costs well under a millisecond.
	IdleTimeout = 15 * time.Second
)

// ConnLimits caps the API server's connections. The zero value means the
// defaults.
type ConnLimits struct {
	// Max caps the open connections. At the cap, a new connection closes
	// the one idle longest (or, failing that, the oldest that has not
	// sent a whole request yet); when every one is busy with a request,
	// it waits (in Accept) until one closes or goes idle. Default
	// DefaultMaxConns.
	Max int
	// PerClient caps the open connections of one client: one IPv4
	// address, one IPv6 /64, or all of loopback together (a local process
	// can bind any 127.x.y.z address). At the cap, a new connection of
	// that client closes the client's own idle (or not yet started)
	// connection, as for Max; when every one is busy, the new connection
	// is closed at once and counted in
	// strata_api_connections_refused_total. A client thus cannot fill
	// Max by itself, and nobody can block others with idle connections.
	// On loopback every local client shares this cap: raise it for a
	// local proxy that keeps more requests than this in flight. Default
	// DefaultMaxConnsPerClient.
	PerClient int
}

// Reasons a connection was evicted or refused, as the reason label of
// strata_api_connections_evicted_total and ..._refused_total.
const (
	// ConnPerClient: the client was at ConnLimits.PerClient.
	ConnPerClient = "per_client"
	// ConnMax: the server was at ConnLimits.Max.
	ConnMax = "max"
)

// ConnLimiter is a listener that enforces ConnLimits on an http.Server,
// whose ConnState hook tells it which connections are idle. Make it with
// NewConnLimiter and serve from it. Safe for concurrent use; it is also
// a prometheus.Collector of its metrics.
type ConnLimiter struct {
	net.Listener
	limits ConnLimits

	refused, evicted *prometheus.CounterVec
	open             prometheus.GaugeFunc

	mu sync.Mutex
	// changed is signalled when a connection closes or goes idle, and at
	// Close: an Accept waiting for room looks again.
	changed *sync.Cond
	closed  bool
	// clients holds the open connections by client key.
	clients map[string]map[*limitedConn]struct{}
	total   int
	// tick orders state changes: a connection's since is the tick of
	// its last one.
	tick uint64
}

var (
	_ net.Listener         = (*ConnLimiter)(nil)
	_ prometheus.Collector = (*ConnLimiter)(nil)
)

// NewConnLimiter wraps ln so that srv, served from the returned listener,
// keeps to limits. It sets srv.ConnState, calling any hook already set
// after its own; call it before serving and do not change the hook
// afterwards.
func NewConnLimiter(srv *http.Server, ln net.Listener, limits ConnLimits) *ConnLimiter {
	if limits.Max <= 0 {
		limits.Max = DefaultMaxConns
	}
	if limits.PerClient <= 0 {
		limits.PerClient = DefaultMaxConnsPerClient
	}
	l := &ConnLimiter{
		Listener: ln,
		limits:   limits,
		clients:  map[string]map[*limitedConn]struct{}{},
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_api_connections_refused_total",
			Help: "API connections closed at once: their client (IP, IPv6 /64, or loopback) had its maximum open, each busy with a request.",
		}, []string{"reason"}),
		evicted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_api_connections_evicted_total",
			Help: "Idle (or not yet started) API connections closed to make room for a new one, because their client (per_client) or the server (max) had its maximum open.",
		}, []string{"reason"}),
	}
	l.open = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "strata_api_connections_open",
		Help: "Open connections to the API.",
	}, func() float64 {
		l.mu.Lock()
		defer l.mu.Unlock()
		return float64(l.total)
	})
	l.refused.WithLabelValues(ConnPerClient)
	l.evicted.WithLabelValues(ConnPerClient)
	l.evicted.WithLabelValues(ConnMax)
	l.changed = sync.NewCond(&l.mu)
	hook := srv.ConnState
	srv.ConnState = func(c net.Conn, s http.ConnState) {
		l.connState(c, s)
		if hook != nil {
			hook(c, s)
		}
	}
	return l
}

// Describe implements prometheus.Collector.
func (l *ConnLimiter) Describe(ch chan<- *prometheus.Desc) {
	l.refused.Describe(ch)
	l.evicted.Describe(ch)
	l.open.Describe(ch)
}

// Collect implements prometheus.Collector.
func (l *ConnLimiter) Collect(ch chan<- prometheus.Metric) {
	l.refused.Collect(ch)
	l.evicted.Collect(ch)
	l.open.Collect(ch)
}

// Accept returns the next connection that fits the limits, closing the
// idle connections that make room for it and the connections that do not
// fit.
func (l *ConnLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc, err := l.admit(c)
		if err != nil {
			_ = c.Close()
			return nil, err
		}
		if lc == nil {
			_ = c.Close()
			continue
		}
		return lc, nil
	}
}

// errLimiterClosed is what Accept returns once Close was called while it
// waited for room.
var errLimiterClosed = errors.New("httpapi: listener closed")

// admit counts c in, closing the connections that must go to make room;
// it returns nil when c is refused.
func (l *ConnLimiter) admit(c net.Conn) (*limitedConn, error) {
	key := clientKey(c.RemoteAddr())
	l.mu.Lock()
	defer l.mu.Unlock()
	if own := l.clients[key]; len(own) >= l.limits.PerClient {
		v := evictable(own, nil)
		if v == nil {
			l.refused.WithLabelValues(ConnPerClient).Inc()
			return nil, nil
		}
		l.evict(v, ConnPerClient)
	}
	for l.total >= l.limits.Max {
		if l.closed {
			return nil, errLimiterClosed
		}
		var v *limitedConn
		for _, own := range l.clients {
			v = evictable(own, v)
		}
		if v == nil {
			l.changed.Wait()
			continue
		}
		l.evict(v, ConnMax)
	}
	lc := &limitedConn{Conn: c, l: l, key: key, state: http.StateNew, since: l.next()}
	if l.clients[key] == nil {
		l.clients[key] = map[*limitedConn]struct{}{}
	}
	l.clients[key][lc] = struct{}{}
	l.total++
	return lc, nil
}

// evict closes v to make room; the caller holds l.mu. The server's
// goroutine for v sees its read fail and ends; closing the socket does
// not block.
func (l *ConnLimiter) evict(v *limitedConn, reason string) {
	l.remove(v)
	l.evicted.WithLabelValues(reason).Inc()
	_ = v.Conn.Close()
}

// evictable returns whichever of best and the connections of conns is
// the better to close: idle before not yet started (StateNew), and
// longest in that state first; nil when none is either.
func evictable(conns map[*limitedConn]struct{}, best *limitedConn) *limitedConn {
	rank := func(c *limitedConn) int {
		switch c.state {
		case http.StateIdle:
			return 2
		case http.StateNew:
			return 1
		}
		return 0
	}
	for c := range conns {
		r := rank(c)
		if r == 0 {
			continue
		}
		if best == nil || r > rank(best) || r == rank(best) && c.since < best.since {
			best = c
		}
	}
	return best
}

func (l *ConnLimiter) next() uint64 {
	l.tick++
	return l.tick
}

// remove stops counting c; the caller holds l.mu. Removing twice is a
// no-op.
func (l *ConnLimiter) remove(c *limitedConn) {
	if c.gone {
		return
	}
	c.gone = true
	own := l.clients[c.key]
	delete(own, c)
	if len(own) == 0 {
		delete(l.clients, c.key)
	}
	l.total--
	l.changed.Signal()
}

// connState is the server's ConnState hook.
func (l *ConnLimiter) connState(c net.Conn, s http.ConnState) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	lc, ok := c.(*limitedConn)
	if !ok || lc.l != l {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if s == http.StateClosed {
		l.remove(lc)
		return
	}
	lc.state, lc.since = s, l.next()
	if s == http.StateIdle {
		l.changed.Signal()
	}
}

// Close closes the listener; an Accept waiting for room returns.
func (l *ConnLimiter) Close() error {
	l.mu.Lock()
	l.closed = true
	l.changed.Broadcast()
	l.mu.Unlock()
	return l.Listener.Close()
}

// limitedConn is a connection ConnLimiter counts until it is closed.
type limitedConn struct {
	net.Conn
	l   *ConnLimiter
	key string
	// Guarded by l.mu.
	state http.ConnState
	since uint64
	gone  bool
}

func (c *limitedConn) Close() error {
	c.l.mu.Lock()
	c.l.remove(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// clientKey is the client a connection counts against: its IPv4 address,
// its IPv6 /64 (one host usually holds a whole /64), or "loopback" for
// every loopback address.
func clientKey(a net.Addr) string {
	if a == nil {
		return ""
	}
	var ip netip.Addr
	switch a := a.(type) {
	case *net.TCPAddr:
		ip = a.AddrPort().Addr()
	default:
		ap, err := netip.ParseAddrPort(a.String())
		if err != nil {
			return a.String()
		}
		ip = ap.Addr()
	}
	ip = ip.Unmap().WithZone("")
	switch {
	case ip.IsLoopback():
		return "loopback"
	case ip.Is6():
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}
