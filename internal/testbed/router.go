package testbed

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// tunName is the router's TUN device, in the router's namespace.
const tunName = "tbtun"

// link is what the router does to packets between two sites.
type link struct {
	delay     time.Duration
	loss      float64
	cut       bool
	rate      int64 // bits per second, each way; 0: unlimited
	forwarded int64
	dropped   int64 // lost, cut, or over the rate's buffer
	overflow  int64 // of dropped: over the rate's buffer
	// dirs are the two directions: [0] from the lesser site's name to
	// the greater, [1] back.
	dirs [2]direction
}

// direction is one direction of a link: a serialiser and the line of
// packets on their way, in the order they came.
type direction struct {
	next    time.Time // when the serialiser is free: the last departure
	last    time.Time // when the last packet queued is due out
	q       []held    // due times never decrease
	running bool      // a drain goroutine owns q (it may be writing)
}

// held is a packet on its way and when it is due out of the router.
type held struct {
	pkt []byte
	due time.Time
}

// minBuffer is the least a shaped link's buffer holds; see buffer.
const minBuffer = 64 << 10

// buffer returns how many bytes waiting to be serialised a link at rate
// (bits per second) holds before it drops what comes (drop-tail): 100ms at
// the rate, and at least 64 KiB. TCP then fills the link without a queue
// that holds its packets for seconds.
func buffer(rate int64) int64 { return max(minBuffer, rate/8/10) }

// router reads every packet that leaves a site from the TUN device,
// serialises it at its link's rate, holds it for the link's delay (or
// drops it) and writes it back, for the kernel to forward to the
// destination site. Each direction of a link has one queue, in arrival
// order, drained by one goroutine while it holds packets.
type router struct {
	tun    *os.File
	siteOf func([4]byte) (string, bool)
	nats   map[string]*nat // by site: the sites behind a NAT

	mu     sync.Mutex
	links  map[[2]string]*link
	closed bool
	quit   chan struct{}  // closed by close: drains stop
	drains sync.WaitGroup // the drain goroutines
	done   chan struct{}  // closed when run returns
}

// startRouter opens the TUN device in namespace ns and starts routing.
func startRouter(ns string, siteOf func([4]byte) (string, bool), nats map[string]*nat) (*router, error) {
	tun, err := openTUN(ns)
	if err != nil {
		return nil, err
	}
	r := &router{tun: tun, siteOf: siteOf, nats: nats, links: map[[2]string]*link{}, quit: make(chan struct{}), done: make(chan struct{})}
	go r.run()
	return r, nil
}

// openTUN makes the TUN device in namespace ns: a device belongs to the
// namespace of the thread that makes it.
func openTUN(ns string) (*os.File, error) {
	var f *os.File
	err := inNS(ns, func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("%w: /dev/net/tun: %v", ErrUnsupported, err)
		}
		ifr, err := unix.NewIfreq(tunName)
		if err == nil {
			ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
			err = unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
		}
		if err == nil {
			err = unix.SetNonblock(fd, true) // reads go through the poller; Close ends them
		}
		if err != nil {
			unix.Close(fd)
			return fmt.Errorf("%w: TUN device: %v", ErrUnsupported, err)
		}
		f = os.NewFile(uintptr(fd), "/dev/net/tun")
		return nil
	})
	return f, err
}

// inNS runs fn on a thread moved into namespace ns. The thread stays
// locked and ends with its goroutine, so no other goroutine runs there.
func inNS(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked
		nsfd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(nsfd)
		if err := unix.Setns(nsfd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

func (r *router) linkLocked(a, b string) *link {
	if b < a {
		a, b = b, a
	}
	l := r.links[[2]string{a, b}]
	if l == nil {
		l = &link{}
		r.links[[2]string{a, b}] = l
	}
	return l
}

func (r *router) setLink(a, b string, fn func(*link)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fn(r.linkLocked(a, b))
}

func (r *router) stats(a, b string) (forwarded, dropped, overflow int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.linkLocked(a, b)
	return l.forwarded, l.dropped, l.overflow
}

func (r *router) run() {
	defer close(r.done)
	buf := make([]byte, 65536)
	for {
		n, err := r.tun.Read(buf)
		if err != nil {
			return // closed
		}
		pkt := buf[:n]
		if n < 20 || pkt[0]>>4 != 4 {
			continue // not IPv4 (IPv6 router solicitations and the like)
		}
		from, ok1 := r.siteOf([4]byte(pkt[12:16]))
		to, ok2 := r.siteOf([4]byte(pkt[16:20]))
		if !ok1 || !ok2 {
			continue
		}
		r.mu.Lock()
		l := r.linkLocked(from, to)
		if l.cut || (l.loss > 0 && rand.Float64() < l.loss) {
			l.dropped++
			r.mu.Unlock()
			continue
		}
		r.mu.Unlock()
		out := append([]byte(nil), pkt...)
		if n := r.nats[from]; n != nil && from != to && !n.outbound(out) {
			continue
		}
		if n := r.nats[to]; n != nil && from != to {
			if [4]byte(out[16:20]) != n.public {
				n.refuse() // a private address of the site, from outside
				continue
			}
			if !n.inbound(out) {
				continue
			}
		}
		if r.send(l, from > to, out) {
			_, _ = r.tun.Write(out)
		}
	}
}

// send puts a packet on direction back (from the greater site's name to
// the lesser) or forth of link l, or drops it when the link's buffer is
// full. It reports true where the packet is to be written now: the link
// has neither rate nor delay and nothing of that direction is on its way.
func (r *router) send(l *link, back bool, pkt []byte) (now bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	d := &l.dirs[0]
	if back {
		d = &l.dirs[1]
	}
	t := time.Now()
	if l.rate <= 0 && l.delay <= 0 && !d.running {
		l.forwarded++
		return true
	}
	depart := t
	if l.rate > 0 {
		start := t
		if d.next.After(t) {
			// The bytes still to serialise before this packet starts.
			if backlog := int64(d.next.Sub(t)) * l.rate / 8 / int64(time.Second); backlog+int64(len(pkt)) > buffer(l.rate) {
				l.dropped++
				l.overflow++
				return false
			}
			start = d.next
		}
		depart = start.Add(time.Duration(int64(len(pkt)) * 8 * int64(time.Second) / l.rate))
		d.next = depart
	}
	due := depart.Add(l.delay)
	if due.Before(d.last) {
		due = d.last // the delay went down: no overtaking what is queued
	}
	d.last = due
	d.q = append(d.q, held{pkt, due})
	l.forwarded++
	if !d.running {
		d.running = true
		r.drains.Add(1)
		go r.drain(d)
	}
	return false
}

// drain writes direction d's packets as they fall due, in order, until
// its queue is empty or the router closes. Timers wake late (a
// millisecond or so), so it writes every packet due by the time it wakes:
// the rate holds, packets just leave in short bursts.
func (r *router) drain(d *direction) {
	defer r.drains.Done()
	var timer *time.Timer
	var batch [][]byte
	for {
		r.mu.Lock()
		if r.closed || len(d.q) == 0 {
			d.running = false
			r.mu.Unlock()
			return
		}
		now := time.Now()
		batch = batch[:0]
		i := 0
		for ; i < len(d.q) && !d.q[i].due.After(now); i++ {
			batch = append(batch, d.q[i].pkt)
			d.q[i] = held{}
		}
		d.q = d.q[i:]
		var wait time.Duration
		if i == 0 {
			wait = d.q[0].due.Sub(now)
		}
		r.mu.Unlock()
		for _, p := range batch {
			_, _ = r.tun.Write(p)
		}
		clear(batch) // let the packets go
		if wait <= 0 {
			continue
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-timer.C:
		case <-r.quit:
			timer.Stop()
		}
	}
}

// close stops the router: packets still held are dropped.
func (r *router) close() error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	close(r.quit)
	err := r.tun.Close()
	<-r.done
	r.drains.Wait()
	if errors.Is(err, os.ErrClosed) {
		err = nil
	}
	return err
}
