package testbed

import (
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestDelayLossCut: a UDP echo between two sites answers after twice the
// link's one-way delay, not at all while the link is cut, and again once
// it heals; hosts of one site reach each other with no delay.
func TestDelayLossCut(t *testing.T) {
	bed := Start(t, Site{Name: "a", Hosts: 2}, Site{Name: "b", Hosts: 1})
	bed.SetLink("a", "b", 15*time.Millisecond, 0)
	var echo, client net.PacketConn
	if err := bed.Host("b", 0).Do(func() (err error) { echo, err = net.ListenPacket("udp4", ":9000"); return }); err != nil {
		t.Fatal(err)
	}
	go serveEcho(echo)
	if err := bed.Host("a", 0).Do(func() (err error) { client, err = net.ListenPacket("udp4", ":0"); return }); err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	rtt := func(to net.IP) (time.Duration, bool) { return echoRTT(client, to) }
	median := func(to net.IP) time.Duration { return medianRTT(t, client, to) }
	b := bed.Host("b", 0).IP
	d := median(b)
	t.Logf("RTT across a 15ms link: median %s", d)
	if d < 30*time.Millisecond || d > 45*time.Millisecond {
		t.Errorf("RTT across a 15ms link: median %s, want 30ms and a little", d)
	}
	bed.Cut("a", "b")
	if _, ok := rtt(b); ok {
		t.Error("an echo answered across a cut link")
	}
	bed.Heal("a", "b")
	bed.SetLink("a", "b", 0, 0)
	if d := median(b); d > 10*time.Millisecond {
		t.Errorf("RTT with no delay: median %s", d)
	}
	fwd, dropped := bed.Stats("a", "b")
	if fwd == 0 || dropped == 0 {
		t.Errorf("router stats: %d forwarded, %d dropped; want both", fwd, dropped)
	}
	// The same site: through the bridge, not the router.
	echo.Close()
	if err := bed.Host("a", 1).Do(func() (err error) { echo, err = net.ListenPacket("udp4", ":9000"); return }); err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go serveEcho(echo)
	bed.SetLink("a", "b", 50*time.Millisecond, 0)
	if d := median(bed.Host("a", 1).IP); d > 10*time.Millisecond {
		t.Errorf("RTT within a site: median %s, want no delay", d)
	}
}

// echoRTT sends a datagram from c to an echo server (serveEcho) at to,
// port 9000, and returns how long the answer took, or false after 500ms.
func echoRTT(c net.PacketConn, to net.IP) (time.Duration, bool) {
	start := time.Now()
	c.WriteTo([]byte("ping"), &net.UDPAddr{IP: to, Port: 9000})
	c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	buf := make([]byte, 64)
	if _, _, err := c.ReadFrom(buf); err != nil {
		return 0, false
	}
	return time.Since(start), true
}

// medianRTT returns the median of 9 echoRTTs; it fails the test if fewer
// than 5 answered.
func medianRTT(t *testing.T, c net.PacketConn, to net.IP) time.Duration {
	t.Helper()
	var ds []time.Duration
	for range 9 {
		if d, ok := echoRTT(c, to); ok {
			ds = append(ds, d)
		}
	}
	if len(ds) < 5 {
		t.Fatalf("%d of 9 echoes from %s answered", len(ds), to)
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// serveEcho answers every datagram with itself until c is closed.
func serveEcho(c net.PacketConn) {
	buf := make([]byte, 64)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return
		}
		c.WriteTo(buf[:n], from)
	}
}

// TestNAT: a host behind the NAT reaches another site over UDP and TCP,
// seen there from the site's public address; nothing from outside reaches
// it unasked, neither at its private address nor at the public one, and
// only the endpoint it sent to may answer through its mapping.
func TestNAT(t *testing.T) {
	bed := Start(t, Site{Name: "home", Hosts: 1, NAT: true}, Site{Name: "pub", Hosts: 2})
	bed.SetLink("home", "pub", 2*time.Millisecond, 0)
	home, pub, other := bed.Host("home", 0), bed.Host("pub", 0), bed.Host("pub", 1)
	public := bed.PublicIP("home")
	if public.String() != "11.79.1.1" || bed.PublicIP("pub") != nil {
		t.Fatalf("public addresses: home %v, pub %v", public, bed.PublicIP("pub"))
	}
	listen := func(h Host, addr string) (c net.PacketConn) {
		t.Helper()
		if err := h.Do(func() (err error) { c, err = net.ListenPacket("udp4", addr); return }); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	read := func(c net.PacketConn) (net.Addr, bool) {
		c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		buf := make([]byte, 64)
		_, from, err := c.ReadFrom(buf)
		return from, err == nil
	}
	srv, cl := listen(pub, ":9000"), listen(home, ":5000")
	cl.WriteTo([]byte("hi"), &net.UDPAddr{IP: pub.IP, Port: 9000})
	from, ok := read(srv)
	if !ok {
		t.Fatal("the NAT'd host's datagram did not arrive")
	}
	mapped := from.(*net.UDPAddr)
	if !mapped.IP.Equal(public) {
		t.Fatalf("it came from %v, want the public address %v", from, public)
	}
	srv.WriteTo([]byte("back"), mapped)
	if _, ok := read(cl); !ok {
		t.Fatal("the answer through the mapping did not arrive")
	}
	// Unasked: another endpoint to the mapping, anything to the private
	// address, and an unmapped public port.
	stranger := listen(other, ":9001")
	stranger.WriteTo([]byte("x"), mapped)
	srv.WriteTo([]byte("x"), &net.UDPAddr{IP: home.IP, Port: 5000})
	srv.WriteTo([]byte("x"), &net.UDPAddr{IP: public, Port: 5000})
	if from, ok := read(cl); ok {
		t.Fatalf("an unasked datagram from %v arrived", from)
	}
	// TCP out works (checksums rewritten right), TCP in does not.
	var ln net.Listener
	if err := pub.Do(func() (err error) { ln, err = net.Listen("tcp4", ":9100"); return }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte(c.RemoteAddr().String()))
			c.Close()
		}
	}()
	var seen string
	if err := home.Do(func() error {
		c, err := net.DialTimeout("tcp4", pub.IP.String()+":9100", 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		buf := make([]byte, 64)
		n, _ := c.Read(buf)
		seen = string(buf[:n])
		return nil
	}); err != nil {
		t.Fatalf("TCP from behind the NAT: %v", err)
	}
	if host, _, _ := net.SplitHostPort(seen); host != public.String() {
		t.Errorf("TCP peer seen as %q, want the public address", seen)
	}
	var hl net.Listener
	if err := home.Do(func() (err error) { hl, err = net.Listen("tcp4", ":9200"); return }); err != nil {
		t.Fatal(err)
	}
	defer hl.Close()
	for _, ip := range []net.IP{home.IP, public} {
		if err := pub.Do(func() error {
			c, err := net.DialTimeout("tcp4", ip.String()+":9200", 300*time.Millisecond)
			if err == nil {
				c.Close()
			}
			return err
		}); err == nil {
			t.Errorf("TCP into the NAT'd site at %v connected", ip)
		}
	}
	out, in, refused := bed.NATStats("home")
	t.Logf("NAT: %d packets out, %d back in, %d refused", out, in, refused)
	if out == 0 || in == 0 || refused < 3 {
		t.Errorf("NAT stats: %d out, %d in, %d refused", out, in, refused)
	}
}

// TestCPUBound: a busy loop started in a host of a site with a CPU bound
// runs in the host's group and is throttled to it; a host of a site
// without one has no group.
func TestCPUBound(t *testing.T) {
	bed := Start(t, Site{Name: "small", Hosts: 1, CPU: 0.2}, Site{Name: "big", Hosts: 1})
	if g := bed.Host("big", 0).CPUGroup; g != "" {
		t.Errorf("a site without a bound has group %s", g)
	}
	h := bed.Host("small", 0)
	// One to two seconds of spinning: under a fifth of a CPU, the quota
	// runs out in most of its periods.
	out, err := h.Command("sh", "-c", `cat /proc/self/cgroup; end=$(($(date +%s) + 2)); while [ $(date +%s) -lt $end ]; do :; done`).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !strings.Contains(string(out), filepath.Base(h.CPUGroup)) {
		t.Errorf("the command ran outside %s:\n%s", h.CPUGroup, out)
	}
	periods, throttled, err := h.Throttled()
	if err != nil {
		t.Fatal(err)
	}
	if throttled <= 0 {
		t.Errorf("a busy loop under 0.2 CPU was throttled in %d of %d periods", throttled, periods)
	}
}
