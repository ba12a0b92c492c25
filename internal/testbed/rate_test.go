package testbed

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"
)

// TestRate: a TCP transfer across a link limited to 16 Mbit/s takes at
// least its size at that rate; an echo across the idle shaped link still
// answers after twice the delay; with the rate back to 0 the same transfer
// goes much faster.
func TestRate(t *testing.T) {
	const (
		rate = 16_000_000 // bits per second
		size = 4 << 20    // bytes
	)
	bed := Start(t, Site{Name: "a", Hosts: 1}, Site{Name: "b", Hosts: 1})
	a, b := bed.Host("a", 0), bed.Host("b", 0)
	transfer := tcpSink(t, b)
	// The least time the payload alone takes through the serialiser:
	// headers only add to it.
	least := time.Duration(size * 8 * int64(time.Second) / rate)

	bed.SetRate("a", "b", rate)
	took := transfer(a, size)
	t.Logf("%d MiB at %d Mbit/s: %s, %.1f Mbit/s (payload; at most %.1f)", size>>20, rate/1_000_000, took.Round(time.Millisecond), mbits(size, took), float64(rate)/1e6)
	if took < least {
		t.Errorf("%d MiB at %d Mbit/s took %s, faster than the rate allows (%s)", size>>20, rate/1_000_000, took, least)
	}
	if took > 4*least { // a loose bound: the router keeping up at all
		t.Errorf("%d MiB at %d Mbit/s took %s, over 4 times the %s the rate needs", size>>20, rate/1_000_000, took, least)
	}
	fwd, dropped := bed.Stats("a", "b")
	t.Logf("router: %d packets forwarded, %d dropped, %d of them over the buffer", fwd, dropped, bed.QueueDrops("a", "b"))

	// Delay and rate: an idle shaped link adds the serialisation of a
	// small datagram (a few microseconds) to the delay.
	var echo, client net.PacketConn
	if err := b.Do(func() (err error) { echo, err = net.ListenPacket("udp4", ":9000"); return }); err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go serveEcho(echo)
	if err := a.Do(func() (err error) { client, err = net.ListenPacket("udp4", ":0"); return }); err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	bed.SetLink("a", "b", 15*time.Millisecond, 0)
	d := medianRTT(t, client, b.IP)
	t.Logf("RTT across a 15ms link at %d Mbit/s: median %s", rate/1_000_000, d)
	if d < 30*time.Millisecond || d > 45*time.Millisecond {
		t.Errorf("RTT across a 15ms link at %d Mbit/s: median %s, want 30ms and a little", rate/1_000_000, d)
	}

	bed.SetLink("a", "b", 0, 0)
	bed.SetRate("a", "b", 0)
	took = transfer(a, size)
	t.Logf("%d MiB unlimited: %s, %.1f Mbit/s", size>>20, took.Round(time.Millisecond), mbits(size, took))
	if took > least/2 {
		t.Errorf("%d MiB with the rate back to 0 took %s, not much faster than at %d Mbit/s (%s)", size>>20, took, rate/1_000_000, least)
	}
}

// TestRateBuffer: a burst of datagrams far over a link's rate fills its
// buffer and the rest is dropped (QueueDrops), what gets through comes in
// the order sent, also where the delay went down on the way, and no more
// gets through than the buffer and the rate allow.
func TestRateBuffer(t *testing.T) {
	const (
		rate    = 8_000_000 // bits per second: a 100 KB buffer
		payload = 1000
		ipSize  = payload + 28 // IPv4 and UDP headers
		burst   = 1000
	)
	bed := Start(t, Site{Name: "a", Hosts: 1}, Site{Name: "b", Hosts: 1})
	a, b := bed.Host("a", 0), bed.Host("b", 0)
	bed.SetRate("a", "b", rate)
	bed.SetLink("a", "b", 50*time.Millisecond, 0)
	var srv, cl net.PacketConn
	if err := b.Do(func() (err error) { srv, err = net.ListenPacket("udp4", ":9000"); return }); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := a.Do(func() (err error) { cl, err = net.ListenPacket("udp4", ":0"); return }); err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := make(chan []uint32)
	go func() {
		var seqs []uint32
		buf := make([]byte, 2*payload)
		for {
			srv.SetReadDeadline(time.Now().Add(time.Second))
			n, _, err := srv.ReadFrom(buf)
			if err != nil {
				got <- seqs
				return
			}
			if n >= 4 {
				seqs = append(seqs, binary.BigEndian.Uint32(buf))
			}
		}
	}()
	to := &net.UDPAddr{IP: b.IP, Port: 9000}
	msg := make([]byte, payload)
	start := time.Now()
	for i := range burst {
		if i == burst/2 {
			bed.SetLink("a", "b", 0, 0) // later datagrams must not overtake
		}
		binary.BigEndian.PutUint32(msg, uint32(i))
		if _, err := cl.WriteTo(msg, to); err != nil {
			t.Fatal(err)
		}
	}
	sending := time.Since(start)
	seqs := <-got
	overflow := bed.QueueDrops("a", "b")
	_, dropped := bed.Stats("a", "b")
	t.Logf("%d datagrams of %d bytes sent in %s at %d Mbit/s: %d arrived, %d dropped over the buffer", burst, ipSize, sending.Round(time.Microsecond), rate/1_000_000, len(seqs), overflow)
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] {
			t.Fatalf("datagram %d arrived after %d", seqs[i], seqs[i-1])
		}
	}
	if overflow == 0 || dropped < overflow || len(seqs) >= burst {
		t.Errorf("%d arrived of %d, %d dropped (%d over the buffer): want drops over the buffer", len(seqs), burst, dropped, overflow)
	}
	buf := buffer(rate)
	if least := buf/ipSize - 1; int64(len(seqs)) < least {
		t.Errorf("%d datagrams arrived, want at least the %d the buffer holds", len(seqs), least)
	}
	// What the buffer holds and what the link serialised while they came
	// (with 50ms to spare), and no more.
	most := (buf + rate/8*int64(sending+50*time.Millisecond)/int64(time.Second)) / ipSize
	if int64(len(seqs)) > most+1 {
		t.Errorf("%d datagrams arrived, over the %d that the buffer and the rate let through", len(seqs), most+1)
	}
}

// tcpSink listens on h, port 9100, and returns a function that sends size
// bytes there from host from and returns how long they took to arrive,
// from before the dial to the receiver's end of stream.
func tcpSink(t *testing.T, h Host) func(from Host, size int) time.Duration {
	t.Helper()
	var ln net.Listener
	if err := h.Do(func() (err error) { ln, err = net.Listen("tcp4", ":9100"); return }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	type result struct {
		n   int64
		at  time.Time
		err error
	}
	results := make(chan result, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n, err := io.Copy(io.Discard, c)
			results <- result{n, time.Now(), err}
			c.Close()
		}
	}()
	return func(from Host, size int) time.Duration {
		t.Helper()
		start := time.Now()
		err := from.Do(func() error {
			c, err := net.DialTimeout("tcp4", h.IP.String()+":9100", 5*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(time.Minute))
			if _, err := c.Write(make([]byte, size)); err != nil {
				return err
			}
			return c.(*net.TCPConn).CloseWrite()
		})
		if err != nil {
			t.Fatalf("sending %d bytes: %v", size, err)
		}
		select {
		case r := <-results:
			if r.err != nil || r.n != int64(size) {
				t.Fatalf("received %d of %d bytes: %v", r.n, size, r.err)
			}
			return r.at.Sub(start)
		case <-time.After(time.Minute):
			t.Fatalf("%d bytes did not arrive in a minute", size)
			return 0
		}
	}
}

// mbits returns size bytes in d as megabits per second.
func mbits(size int, d time.Duration) float64 { return float64(size) * 8 / d.Seconds() / 1e6 }
