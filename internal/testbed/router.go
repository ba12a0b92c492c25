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
	forwarded int64
	dropped   int64
}

// router reads every packet that leaves a site from the TUN device,
// holds it for its link's delay (or drops it) and writes it back, for the
// kernel to forward to the destination site.
type router struct {
	tun    *os.File
	siteOf func([4]byte) (string, bool)
	nats   map[string]*nat // by site: the sites behind a NAT

	mu     sync.Mutex
	links  map[[2]string]*link
	timers map[*time.Timer]bool
	closed bool
	done   chan struct{}
}

// startRouter opens the TUN device in namespace ns and starts routing.
func startRouter(ns string, siteOf func([4]byte) (string, bool), nats map[string]*nat) (*router, error) {
	tun, err := openTUN(ns)
	if err != nil {
		return nil, err
	}
	r := &router{tun: tun, siteOf: siteOf, nats: nats, links: map[[2]string]*link{}, timers: map[*time.Timer]bool{}, done: make(chan struct{})}
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

func (r *router) stats(a, b string) (forwarded, dropped int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.linkLocked(a, b)
	return l.forwarded, l.dropped
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
		delay := l.delay
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
		r.mu.Lock()
		l.forwarded++
		if delay <= 0 {
			r.mu.Unlock()
			_, _ = r.tun.Write(out)
			continue
		}
		var t *time.Timer
		t = time.AfterFunc(delay, func() {
			r.mu.Lock()
			delete(r.timers, t)
			closed := r.closed
			r.mu.Unlock()
			if !closed {
				_, _ = r.tun.Write(out)
			}
		})
		r.timers[t] = true
		r.mu.Unlock()
	}
}

// close stops the router: packets still held are dropped.
func (r *router) close() error {
	r.mu.Lock()
	r.closed = true
	for t := range r.timers {
		t.Stop()
	}
	r.mu.Unlock()
	err := r.tun.Close()
	<-r.done
	if errors.Is(err, os.ErrClosed) {
		err = nil
	}
	return err
}
