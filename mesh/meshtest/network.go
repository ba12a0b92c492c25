package meshtest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Network is an in-memory network for many memberlist nodes in one process.
// Unlike memberlist's MockNetwork it queues each node's packets in a
// buffered channel (a full queue drops the packet, as a full UDP socket
// buffer would), so hundreds of nodes do not deadlock on each other, and it
// can delay packets to emulate WAN latency. Safe for concurrent use.
type Network struct {
	// Latency, when set, gives the one-way delay of a packet from one node
	// name to another. Streams are not delayed.
	Latency func(from, to string) time.Duration
	// Loss, when set, gives the probability that a packet from one node
	// name to another is lost. Streams are not affected.
	Loss func(from, to string) float64
	// Sent, when set, is told the size of every packet sent and of every
	// write to a stream, with the node names it goes from and to (to
	// measure traffic between groups of nodes). It must be fast and safe
	// for concurrent use.
	Sent func(from, to string, n int)

	mu     sync.Mutex
	byAddr map[string]*Transport
	byName map[string]*Transport
	port   int
	group  map[string]int // node name → partition; nil: one network
	stall  map[string]time.Time

	// Dropped counts packets dropped because a queue was full or the
	// destination was down.
	Dropped atomic.Int64
}

// packetQueue is each node's packet queue length.
const packetQueue = 4096

// NewTransport makes the transport of the node called name, with a fresh
// loopback-looking address.
func (n *Network) NewTransport(name string) *Transport {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.byAddr == nil {
		n.byAddr, n.byName = map[string]*Transport{}, map[string]*Transport{}
	}
	n.port++
	t := &Transport{
		net:      n,
		name:     name,
		addr:     fmt.Sprintf("127.0.0.1:%d", 10000+n.port),
		packetCh: make(chan *memberlist.Packet, packetQueue),
		streamCh: make(chan net.Conn, 64),
	}
	n.byAddr[t.addr] = t
	n.byName[name] = t
	return t
}

// Partition splits the network: nodes in different groups can no longer
// reach each other (packets are dropped, dials fail, packets in flight are
// lost at delivery); nodes in no group stay in one group of their own with
// each other. Partition with no groups, or Heal, joins them again.
func (n *Network) Partition(groups ...[]string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.group = nil
	if len(groups) == 0 {
		return
	}
	n.group = map[string]int{}
	for i, g := range groups {
		for _, name := range g {
			n.group[name] = i + 1
		}
	}
}

// Stall freezes a node's network for d, as near to SIGSTOP as a node whose
// goroutines keep running can be: packets it sends and packets sent to it
// are held and delivered when it resumes (socket buffers), and streams to
// and from it fail. Unlike a stopped process its timers still fire, so it
// may suspect others while it hears nothing.
func (n *Network) Stall(name string, d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stall == nil {
		n.stall = map[string]time.Time{}
	}
	n.stall[name] = time.Now().Add(d)
}

// stalledFor returns how much longer name is stalled, or 0.
func (n *Network) stalledFor(name string) time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	return max(0, time.Until(n.stall[name]))
}

// Heal ends a partition.
func (n *Network) Heal() { n.Partition() }

// reachable reports whether from can reach to under the current partition.
func (n *Network) reachable(from, to string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.group == nil || n.group[from] == n.group[to]
}

// Transport is one node's end of a Network. It implements memberlist's
// NodeAwareTransport.
type Transport struct {
	net      *Network
	name     string
	addr     string
	packetCh chan *memberlist.Packet
	streamCh chan net.Conn
	down     atomic.Bool
}

var _ memberlist.NodeAwareTransport = (*Transport)(nil)

type addr string

func (a addr) Network() string { return "mem" }
func (a addr) String() string  { return string(a) }

// Addr returns the node's address on the network.
func (t *Transport) Addr() string { return t.addr }

// FinalAdvertiseAddr returns the node's address.
func (t *Transport) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	host, port, _ := net.SplitHostPort(t.addr)
	p, _ := strconv.Atoi(port)
	return net.ParseIP(host), p, nil
}

// WriteTo sends a packet to addr.
func (t *Transport) WriteTo(b []byte, a string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: a})
}

// WriteToAddress sends a packet; it never blocks.
func (t *Transport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	now := time.Now()
	dest := t.net.peer(a)
	if dest == nil || t.down.Load() || !t.net.reachable(t.name, dest.name) {
		t.net.Dropped.Add(1)
		return now, nil // like UDP: the sender does not learn of the loss
	}
	if t.net.Loss != nil && rand.Float64() < t.net.Loss(t.name, dest.name) {
		t.net.Dropped.Add(1)
		return now, nil
	}
	if t.net.Sent != nil {
		t.net.Sent(t.name, dest.name, len(b))
	}
	p := &memberlist.Packet{Buf: append([]byte(nil), b...), From: addr(t.addr), Timestamp: now}
	deliver := func() {
		if dest.down.Load() || !t.net.reachable(t.name, dest.name) {
			t.net.Dropped.Add(1)
			return
		}
		p.Timestamp = time.Now()
		select {
		case dest.packetCh <- p:
		default:
			t.net.Dropped.Add(1)
		}
	}
	var d time.Duration
	if t.net.Latency != nil {
		d = t.net.Latency(t.name, dest.name)
	}
	d = max(d, t.net.stalledFor(t.name), t.net.stalledFor(dest.name))
	if d > 0 {
		time.AfterFunc(d, deliver)
		return now, nil
	}
	deliver()
	return now, nil
}

// PacketCh delivers incoming packets.
func (t *Transport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }

// DialTimeout opens a stream to addr.
func (t *Transport) DialTimeout(a string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: a}, timeout)
}

// DialAddressTimeout opens a stream (an in-memory pipe).
func (t *Transport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	dest := t.net.peer(a)
	if dest == nil || dest.down.Load() || t.down.Load() || !t.net.reachable(t.name, dest.name) {
		return nil, fmt.Errorf("meshtest: no route to %s", a.Addr)
	}
	if t.net.stalledFor(t.name) > 0 || t.net.stalledFor(dest.name) > 0 {
		return nil, fmt.Errorf("meshtest: %s does not answer (stalled)", a.Addr)
	}
	c1, c2 := net.Pipe()
	// A pipe's write waits for the reader, unlike a socket's, which the
	// kernel buffers: bound both ends, so that a sender to a peer that
	// stopped reading (closed, or busy) gets an error, as it would from a
	// real peer that never answers, instead of waiting for good.
	// memberlist sets tighter deadlines where it waits for an answer.
	deadline := time.Now().Add(streamDeadline)
	_ = c1.SetDeadline(deadline)
	_ = c2.SetDeadline(deadline)
	var in, out net.Conn = c1, c2
	if t.net.Sent != nil {
		in, out = &countedConn{Conn: c1, sent: t.net.Sent, from: dest.name, to: t.name}, &countedConn{Conn: c2, sent: t.net.Sent, from: t.name, to: dest.name}
	}
	select {
	case dest.streamCh <- in:
		return out, nil
	case <-time.After(timeout):
		c1.Close()
		c2.Close()
		return nil, errors.New("meshtest: dial timeout")
	}
}

// countedConn tells Network.Sent of each write.
type countedConn struct {
	net.Conn
	sent     func(from, to string, n int)
	from, to string
}

func (c *countedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.sent(c.from, c.to, n)
	return n, err
}

// streamDeadline bounds an in-memory stream's life (see
// DialAddressTimeout): longer than any push/pull.
const streamDeadline = 30 * time.Second

// StreamCh delivers incoming streams.
func (t *Transport) StreamCh() <-chan net.Conn { return t.streamCh }

// Shutdown takes the node off the network: what it sends and what is sent
// to it is dropped from now on.
func (t *Transport) Shutdown() error {
	t.down.Store(true)
	// Streams dialled to it and not yet accepted end now: their senders
	// get an error at once.
	for {
		select {
		case c := <-t.streamCh:
			c.Close()
		default:
			return nil
		}
	}
}

func (n *Network) peer(a memberlist.Address) *Transport {
	n.mu.Lock()
	defer n.mu.Unlock()
	if a.Name != "" {
		if t, ok := n.byName[a.Name]; ok {
			return t
		}
	}
	return n.byAddr[a.Addr]
}
