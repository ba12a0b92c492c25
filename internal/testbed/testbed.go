// Package testbed builds a network of several sites and hosts on one Linux
// machine, for tests of the mesh across real sockets and real routes: each
// host is a network namespace, each site a bridge its hosts plug into, and
// a userspace router between the sites delays, drops, cuts and limits the
// rate of packets per pair of sites (this kernel has no netem). A site's
// hosts may be bounded to a share of the machine's CPU (Site.CPU). Root and
// iproute2 are needed; New returns an error wrapping ErrUnsupported where
// namespaces or a TUN device cannot be made, and Start skips the test with
// it.
//
//	bed := testbed.Start(t, testbed.Site{Name: "edge-a", Hosts: 2}, testbed.Site{Name: "cloud", Hosts: 1})
//	bed.SetLink("edge-a", "cloud", 20*time.Millisecond, 0) // one way
//	bed.SetRate("edge-a", "cloud", 40_000_000)             // bits/s, each way
//	cmd := bed.Host("edge-a", 0).Command("strata", "agent", ...)
//	bed.Cut("edge-a", "cloud") ... bed.Heal("edge-a", "cloud")
//
// Addresses: site k (from 1, in the order given) is 10.78.k.0/24, its hosts
// 10.78.k.1, .2, …, and the router 10.78.k.254, every host's default
// route. Hosts of one site reach each other through their bridge with no
// delay; packets between sites go through the router. A site behind a NAT
// (Site.NAT) has the public address 11.79.k.1, translated in the router.
// That address is outside every private and reserved range, as a real
// NAT's is: libp2p punches holes only between addresses it takes for
// public. No packet to it leaves the testbed's namespaces.
package testbed

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// ErrUnsupported says the machine cannot host a testbed (not root, no
// iproute2, no namespaces or TUN).
var ErrUnsupported = errors.New("testbed: not supported here")

// Site is one site: its name and how many hosts it has (1 to 250).
type Site struct {
	Name  string
	Hosts int
	// NAT puts the site behind a NAT in the router (see PublicIP): its
	// hosts reach the other sites from the site's one public address, and
	// nothing outside reaches them unless they sent to it first.
	NAT bool
	// CPU, when set, bounds what each host's processes (those started
	// with Host.Command or in Host.CPUGroup) use together to this many
	// CPUs, as a small edge box's cores would: a control group's CPU
	// quota. New fails with ErrUnsupported where none can be made.
	CPU float64
}

// Host is one host of the testbed.
type Host struct {
	// Name is "site-N" (N from 1); Site its site.
	Name, Site string
	// NS is its network namespace's name (ip netns).
	NS string
	// IP is its address on its site's network.
	IP net.IP
	// CPUGroup is the control group directory that bounds the host's CPU
	// (Site.CPU), "" for none: a process whose ID is written to its
	// cgroup.procs, and what it starts, share the bound.
	CPUGroup string
}

// Command returns a command that runs name with args in the host's
// namespace, within its CPU bound if it has one.
func (h Host) Command(name string, args ...string) *exec.Cmd {
	return InGroup(h.CPUGroup, "ip", append([]string{"netns", "exec", h.NS, name}, args...)...)
}

// Do runs fn on a thread in the host's namespace: the sockets fn opens
// belong to the host, and keep working after fn returns.
func (h Host) Do(fn func() error) error { return inNS(h.NS, fn) }

// Bed is a running testbed. Close tears it down.
type Bed struct {
	tag    string
	router string // the router's namespace
	sites  []Site
	hosts  map[string][]Host
	r      *router

	mu     sync.Mutex
	closed bool
}

// Start builds a testbed for a test and tears it down when the test ends;
// it skips the test, saying why, where a testbed cannot be built.
func Start(t testing.TB, sites ...Site) *Bed {
	t.Helper()
	b, err := New(sites...)
	if errors.Is(err, ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	return b
}

// New builds a testbed: a namespace per host and one for the router, a
// bridge per site in the router's namespace, and the router running. Every
// link starts with no delay, no loss and no rate limit.
func New(sites ...Site) (*Bed, error) {
	if len(sites) == 0 || len(sites) > 200 {
		return nil, fmt.Errorf("testbed: %d sites, want 1 to 200", len(sites))
	}
	seen := map[string]bool{}
	for _, s := range sites {
		if s.Name == "" || seen[s.Name] || s.Hosts < 1 || s.Hosts > 250 {
			return nil, fmt.Errorf("testbed: site %q with %d hosts: want a unique name and 1 to 250 hosts", s.Name, s.Hosts)
		}
		seen[s.Name] = true
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: needs root to make network namespaces", ErrUnsupported)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, fmt.Errorf("%w: needs iproute2's ip", ErrUnsupported)
	}
	var r [3]byte
	_, _ = rand.Read(r[:])
	b := &Bed{tag: hex.EncodeToString(r[:]), sites: sites, hosts: map[string][]Host{}}
	b.router = "tb-" + b.tag + "-router"
	if err := ipCmd("netns", "add", b.router); err != nil {
		return nil, fmt.Errorf("%w: cannot make network namespaces: %v", ErrUnsupported, err)
	}
	if err := b.build(); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

func (b *Bed) build() error {
	rt := b.router
	cmds := [][]string{
		{"-n", rt, "link", "set", "lo", "up"},
		// Leave a site's bridge for the router's TUN device (policy
		// routing below), come back from it, and go out to the other
		// site's bridge: the kernel forwards, and must not drop what
		// comes back from the TUN device for arriving on the "wrong"
		// interface.
		{"netns", "exec", rt, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward && echo 0 > /proc/sys/net/ipv4/conf/all/rp_filter && echo 0 > /proc/sys/net/ipv4/conf/default/rp_filter"},
	}
	for k, s := range b.sites {
		br := fmt.Sprintf("br%d", k+1)
		cmds = append(cmds,
			[]string{"-n", rt, "link", "add", br, "type", "bridge"},
			[]string{"-n", rt, "addr", "add", fmt.Sprintf("10.78.%d.254/24", k+1), "dev", br},
			[]string{"-n", rt, "link", "set", br, "up"},
			// What arrives from a site's hosts and is not for the router
			// itself goes to the userspace router.
			[]string{"-n", rt, "rule", "add", "iif", br, "priority", "100", "lookup", "100"},
		)
		for i := range s.Hosts {
			h := Host{Name: fmt.Sprintf("%s-%d", s.Name, i+1), Site: s.Name, NS: fmt.Sprintf("tb-%s-%d-%d", b.tag, k+1, i+1), IP: net.IPv4(10, 78, byte(k+1), byte(i+1)).To4()}
			if s.CPU > 0 {
				dir, err := makeCPUGroup(h.NS, s.CPU)
				if err != nil {
					return err
				}
				h.CPUGroup = dir
			}
			if err := ipCmd("netns", "add", h.NS); err != nil {
				if h.CPUGroup != "" {
					os.Remove(h.CPUGroup)
				}
				return err
			}
			b.hosts[s.Name] = append(b.hosts[s.Name], h)
			in, out := fmt.Sprintf("h%s%d.%d", b.tag, k+1, i+1), fmt.Sprintf("r%s%d.%d", b.tag, k+1, i+1)
			cmds = append(cmds,
				[]string{"link", "add", in, "netns", h.NS, "type", "veth", "peer", "name", out, "netns", rt},
				[]string{"-n", h.NS, "link", "set", in, "name", "eth0"},
				[]string{"-n", h.NS, "addr", "add", h.IP.String() + "/24", "dev", "eth0"},
				[]string{"-n", h.NS, "link", "set", "eth0", "up"},
				[]string{"-n", h.NS, "link", "set", "lo", "up"},
				[]string{"-n", h.NS, "route", "add", "default", "via", fmt.Sprintf("10.78.%d.254", k+1)},
				[]string{"-n", rt, "link", "set", out, "master", br},
				[]string{"-n", rt, "link", "set", out, "up"},
			)
		}
	}
	for _, c := range cmds {
		if err := ipCmd(c...); err != nil {
			return err
		}
	}
	nats := map[string]*nat{}
	for k, s := range b.sites {
		if s.NAT {
			nats[s.Name] = newNAT([4]byte{11, 79, byte(k + 1), 1})
		}
	}
	r, err := startRouter(b.router, b.siteOf, nats)
	if err != nil {
		return err
	}
	b.r = r
	for _, c := range [][]string{
		{"-n", rt, "link", "set", tunName, "up"},
		{"-n", rt, "route", "add", "default", "dev", tunName, "table", "100"},
	} {
		if err := ipCmd(c...); err != nil {
			return err
		}
	}
	return nil
}

// siteOf maps an address of the testbed to its site's name: a host's, or
// the public address of a site behind a NAT.
func (b *Bed) siteOf(ip [4]byte) (string, bool) {
	if ip[2] == 0 || int(ip[2]) > len(b.sites) {
		return "", false
	}
	s := b.sites[ip[2]-1]
	if (ip[0] == 10 && ip[1] == 78) || (ip[0] == 11 && ip[1] == 79 && ip[3] == 1 && s.NAT) {
		return s.Name, true
	}
	return "", false
}

// PublicIP returns the public address of a site behind a NAT, 11.79.k.1
// (site k): what the other sites see its hosts' packets come from. It
// returns nil for a site without a NAT.
func (b *Bed) PublicIP(site string) net.IP {
	if b.r.nats[site] == nil {
		return nil
	}
	p := b.r.nats[site].public
	return net.IPv4(p[0], p[1], p[2], p[3]).To4()
}

// NATStats returns, for a site behind a NAT, how many packets its NAT
// translated on the way out and back in, and how many from outside it
// refused (unasked, or sent to a private address).
func (b *Bed) NATStats(site string) (out, in, refused int64) {
	n := b.r.nats[site]
	if n == nil {
		return 0, 0, 0
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mapped, n.answered, n.refused
}

// Hosts lists a site's hosts.
func (b *Bed) Hosts(site string) []Host { return b.hosts[site] }

// Host returns a site's i-th host (from 0); it panics on a bad index, as a
// test's typo should.
func (b *Bed) Host(site string, i int) Host { return b.hosts[site][i] }

// SetLink sets the one-way delay and the loss (0 to 1) of packets between
// two sites, both ways. Packets are not reordered: where the delay goes
// down, those that come after wait for those already on their way.
func (b *Bed) SetLink(a, c string, delay time.Duration, loss float64) {
	b.r.setLink(a, c, func(l *link) { l.delay, l.loss = delay, loss })
}

// SetRate limits the link between two sites to bitsPerSecond each way
// (0, as at first: unlimited), counting IPv4 packets whole, headers and
// all. Each direction serialises its packets in the order they come: a
// packet leaves when the packets before it have, plus its size × 8 / rate,
// and then takes the link's delay. A direction holds at most
// max(64 KiB, 100ms at the rate) waiting to be serialised (500 KB at
// 40 Mbit/s) and drops what comes over that (drop-tail; see Stats).
// Packets already queued keep their times when the rate changes.
func (b *Bed) SetRate(a, c string, bitsPerSecond int64) {
	b.r.setLink(a, c, func(l *link) { l.rate = max(0, bitsPerSecond) })
}

// Cut drops every packet between two sites, both ways, until Heal.
func (b *Bed) Cut(a, c string) { b.r.setLink(a, c, func(l *link) { l.cut = true }) }

// Heal ends a Cut.
func (b *Bed) Heal(a, c string) { b.r.setLink(a, c, func(l *link) { l.cut = false }) }

// Stats returns how many packets the router forwarded and dropped (lost,
// cut, or over a rate's buffer: see QueueDrops) between two sites, both
// ways.
func (b *Bed) Stats(a, c string) (forwarded, dropped int64) {
	forwarded, dropped, _ = b.r.stats(a, c)
	return forwarded, dropped
}

// QueueDrops returns how many of the packets Stats counts dropped between
// two sites, both ways, came while their direction's buffer was full
// (SetRate).
func (b *Bed) QueueDrops(a, c string) int64 {
	_, _, overflow := b.r.stats(a, c)
	return overflow
}

// Close stops the router and deletes every namespace (and with them the
// links and bridges). Calling it twice is safe.
func (b *Bed) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	var errs []error
	if b.r != nil {
		errs = append(errs, b.r.close())
	}
	for _, hs := range b.hosts {
		for _, h := range hs {
			errs = append(errs, ipCmd("netns", "del", h.NS))
			if h.CPUGroup != "" {
				// Empty once the host's processes have ended.
				errs = append(errs, os.Remove(h.CPUGroup))
			}
		}
	}
	errs = append(errs, ipCmd("netns", "del", b.router))
	return errors.Join(errs...)
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("testbed: ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
