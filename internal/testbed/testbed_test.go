package testbed

import (
	"net"
	"slices"
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
	rtt := func(to net.IP) (time.Duration, bool) {
		start := time.Now()
		client.WriteTo([]byte("ping"), &net.UDPAddr{IP: to, Port: 9000})
		client.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		buf := make([]byte, 64)
		if _, _, err := client.ReadFrom(buf); err != nil {
			return 0, false
		}
		return time.Since(start), true
	}
	median := func(to net.IP) time.Duration {
		var ds []time.Duration
		for range 9 {
			if d, ok := rtt(to); ok {
				ds = append(ds, d)
			}
		}
		if len(ds) < 5 {
			t.Fatalf("%d of 9 echoes from %s answered", len(ds), to)
		}
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
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
