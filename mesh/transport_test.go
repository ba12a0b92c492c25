package mesh

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-mesh/strata/mesh/meshtest"
)

// hostileInputs are inputs that crash memberlist v0.7.0 when it decodes
// them itself. A holder of the gossip key can make any of them; anyone who
// captured one packet can make the relabelled one: the version byte is not
// authenticated, so a version-1 packet relabelled 0 still decrypts, and its
// last plaintext byte is taken for a pad length.
var hostileInputs = []struct {
	name   string
	stream bool
	make   func(testing.TB) []byte
	panics string // what memberlist's panic says
}{
	{"packet-version-0", false, func(tb testing.TB) []byte { return versionZeroPacket(tb, fuzzKey) }, "slice bounds out of range"},
	{"packet-version-1-relabelled-0", false, func(tb testing.TB) []byte {
		p := seal(tb, fuzzKey, 1, ackPacket, nil) // as a member sends it
		p[0] = 0                                  // no key needed for this
		return p
	}, "slice bounds out of range"},
	{"stream-version-0", true, func(tb testing.TB) []byte {
		return streamFrame(tb, fuzzKey, 0, append(bytes.Repeat([]byte{0}, 19), 0xff))
	}, "slice bounds out of range"},
	{"stream-empty-plaintext", true, func(tb testing.TB) []byte { return streamFrame(tb, fuzzKey, 1, nil) }, "index out of range"},
}

// TestHostileInputCrashesUnguardedMemberlist shows, each in a child
// process, that memberlist on its own panics on the hostile inputs: what
// the guard transport is for.
func TestHostileInputCrashesUnguardedMemberlist(t *testing.T) {
	if name := os.Getenv("STRATA_UNGUARDED_INPUT"); name != "" {
		unguarded(t, name)
		return
	}
	if testing.Short() {
		t.Skip("starts child processes")
	}
	for _, in := range hostileInputs {
		t.Run(in.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestHostileInputCrashesUnguardedMemberlist$", "-test.v")
			cmd.Env = append(os.Environ(), "STRATA_UNGUARDED_INPUT="+in.name)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("memberlist survived %s unguarded; output:\n%s", in.name, out)
			}
			if !strings.Contains(string(out), "panic: runtime error: "+in.panics) {
				t.Fatalf("child failed without the expected panic (%q): %v\n%s", in.panics, err, out)
			}
		})
	}
}

// unguarded runs a bare memberlist with the key and hands it one input.
func unguarded(t *testing.T, name string) {
	tr := &chanTransport{packets: make(chan *memberlist.Packet), streams: make(chan net.Conn), port: 17960}
	c := memberlist.DefaultLANConfig()
	c.Name, c.SecretKey, c.Transport = "unguarded", fuzzKey, tr
	c.BindAddr, c.BindPort, c.AdvertisePort = "127.0.0.1", tr.port, tr.port
	c.Logger = log.New(os.Stderr, "", 0)
	ml, err := memberlist.Create(c)
	if err != nil {
		t.Fatal(err)
	}
	defer ml.Shutdown()
	for _, in := range hostileInputs {
		if in.name != name {
			continue
		}
		buf := in.make(t)
		if in.stream {
			conn := &bytesConn{r: bytes.NewReader(buf), closed: make(chan struct{})}
			tr.streams <- conn
			<-conn.closed
			// memberlist's deferred Close runs while a panic unwinds, so
			// closed can come just before the process dies: give the
			// panic a moment to end it before this child reports success.
			time.Sleep(100 * time.Millisecond)
		} else {
			// The channel is unbuffered and memberlist ingests packets
			// one at a time: the second send returns only after the
			// first was handled (or the process died of it).
			tr.packets <- &memberlist.Packet{Buf: buf, From: fuzzFrom, Timestamp: time.Now()}
			tr.packets <- &memberlist.Packet{Buf: seal(t, fuzzKey, 1, ackPacket, nil), From: fuzzFrom, Timestamp: time.Now()}
		}
		return
	}
	t.Fatalf("unknown input %q", name)
}

func TestHostileInputIsDroppedAndCounted(t *testing.T) {
	keyed := newTarget(t, "keyed", fuzzKey, 17961)
	keyless := newTarget(t, "keyless", nil, 17962)
	for _, in := range hostileInputs {
		t.Run(in.name, func(t *testing.T) {
			path, reason := "packet", dropVersion
			if in.stream {
				path = "stream"
				reason = map[bool]string{true: dropVersion, false: dropEmpty}[strings.Contains(in.name, "version")]
			}
			before := invalidCount(t, keyed.reg, path, reason)
			feed(t, keyed, in.stream, in.make(t))
			if got := invalidCount(t, keyed.reg, path, reason); got != before+1 {
				t.Errorf("invalid{%s,%s} = %v, want %v", path, reason, got, before+1)
			}
		})
	}
	longLen := []byte{mlEncryptMsg, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(longLen[1:], mlMaxPushState+1)
	for _, tc := range []struct {
		name   string
		t      *target
		stream bool
		buf    []byte
		reason string // "" for a refusal
	}{
		{"empty-packet", keyed, false, nil, dropEmpty},
		{"empty-packet-no-key", keyless, false, nil, dropEmpty},
		{"foreign-label", keyed, false, []byte{mlHasLabelMsg, 3, 'o', 't', 'h', 2}, dropLabel},
		{"foreign-label-no-key", keyless, false, []byte{mlHasLabelMsg, 3, 'o', 't', 'h', 2}, dropLabel},
		{"truncated-label", keyless, false, []byte{mlHasLabelMsg, 9, 'x'}, dropLabel},
		{"short", keyed, false, append([]byte{1}, make([]byte, 20)...), dropShort},
		{"empty-plaintext", keyed, false, seal(t, fuzzKey, 1, nil, nil), dropEmpty},
		{"version-2", keyed, false, append([]byte{2}, make([]byte, 40)...), dropVersion},
		{"wrong-key", keyed, false, seal(t, bytes.Repeat([]byte{9}, 32), 1, ackPacket, nil), ""},
		{"plaintext-to-keyed", keyed, false, ackPacket, dropVersion},
		{"stream-plaintext", keyed, true, []byte{6, 0x80}, ""},
		{"stream-truncated", keyed, true, []byte{mlEncryptMsg, 0, 0}, dropTruncated},
		{"stream-closed", keyed, true, []byte{}, dropClosed},
		{"stream-oversize", keyed, true, longLen, dropOversize},
		{"stream-wrong-key", keyed, true, streamFrame(t, bytes.Repeat([]byte{9}, 32), 1, ackPacket), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := map[bool]string{true: "stream", false: "packet"}[tc.stream]
			count := func() float64 {
				if tc.reason == "" {
					return counter(t, tc.t.reg, "strata_gossip_refused_total")
				}
				return invalidCount(t, tc.t.reg, path, tc.reason)
			}
			before := count()
			feed(t, tc.t, tc.stream, tc.buf)
			if got := count(); got != before+1 {
				t.Errorf("count = %v, want %v", got, before+1)
			}
		})
	}
	// Still serving: a valid packet and stream go through.
	keyed.ingest(t, seal(t, fuzzKey, 1, ackPacket, nil))
	keyed.stream(t, streamFrame(t, fuzzKey, 1, []byte{0x0b})) // an unknown message type
}

func feed(t *testing.T, tg *target, stream bool, buf []byte) {
	t.Helper()
	if stream {
		tg.stream(t, buf)
	} else {
		tg.ingest(t, buf)
	}
}

// counter is the sum of counter name over its series.
func counter(tb testing.TB, reg *prometheus.Registry, name string) float64 {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestVersionZeroPacketOverUDP sends the crafted packet to a mesh on real
// sockets: it is dropped and counted, and the mesh goes on answering.
func TestVersionZeroPacketOverUDP(t *testing.T) {
	a, regA := socketMesh(t, "udp-a")
	b, _ := socketMesh(t, "udp-b")
	conn, err := net.Dial("udp", a.GossipAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pkt := versionZeroPacket(t, fuzzKey)
	if len(pkt) != 49 {
		t.Fatalf("packet is %d bytes, want 49", len(pkt))
	}
	meshtest.WaitFor(t, 10*time.Second, "the version-0 packet to be dropped and counted", func() bool {
		_, _ = conn.Write(pkt) // UDP: resend until one arrives
		return invalidCount(t, regA, "packet", dropVersion) > 0
	})
	if _, err := b.ml.Join([]string{a.GossipAddr()}); err != nil {
		t.Fatal(err)
	}
	meshtest.WaitFor(t, 10*time.Second, "the mesh to keep working", func() bool { return a.NumAlive() == 2 })
}

func socketMesh(t *testing.T, name string) (*Mesh, *prometheus.Registry) {
	t.Helper()
	id, err := NewIdentity()
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := New(Config{Name: name, Identity: id, BindAddr: "127.0.0.1:0", GossipKey: fuzzKey, Registerer: reg, Memberlist: meshtest.FastTimings})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, reg
}

func TestSourceLimiter(t *testing.T) {
	var l sourceLimiter
	t0 := time.Unix(1000, 0)
	if ok, n := l.allow("a", t0); !ok || n != 0 {
		t.Fatalf("first = %v, %d", ok, n)
	}
	for i := range 5 {
		if ok, _ := l.allow("a", t0.Add(time.Duration(i)*100*time.Millisecond)); ok {
			t.Fatalf("event %d within a second allowed", i)
		}
	}
	if ok, _ := l.allow("b", t0); !ok {
		t.Fatal("another source held back")
	}
	if ok, n := l.allow("a", t0.Add(time.Second)); !ok || n != 5 {
		t.Fatalf("after a second = %v, %d; want true, 5 suppressed", ok, n)
	}
	// Many sources: the table stays bounded.
	for i := range 3 * maxLogSources {
		l.allow("s"+strconv.Itoa(i), t0.Add(2*time.Second))
	}
	if len(l.sources) > maxLogSources+1 {
		t.Fatalf("limiter remembers %d sources", len(l.sources))
	}
}

// TestMemberlistWarningsAreRateLimitedPerSource floods the log writer
// with one peer's warnings: one line a second per source, every warning
// counted.
func TestMemberlistWarningsAreRateLimitedPerSource(t *testing.T) {
	var buf bytes.Buffer
	reg := prometheus.NewRegistry()
	w := &logWriter{log: slog.New(slog.NewTextHandler(&buf, nil)), metrics: newMetrics(reg)}
	lg := log.New(w, "", 0)
	for range 1000 {
		lg.Printf("[ERR] memberlist: discarding packet with unacceptable label %q: from=10.0.0.9:7946", "x")
		lg.Printf("[ERR] memberlist: UDP packet too short (0 bytes) from=10.0.0.8:7946")
	}
	if n := strings.Count(buf.String(), "\n"); n > 4 {
		t.Errorf("2000 warnings from 2 sources wrote %d lines:\n%s", n, buf.String())
	}
	if got := counter(t, reg, "strata_gossip_peer_warnings_total"); got != 2000 {
		t.Errorf("peer warnings = %v, want 2000", got)
	}
	if got := counter(t, reg, "strata_gossip_log_suppressed_total"); got < 1996 {
		t.Errorf("suppressed = %v, want ≥ 1996", got)
	}
	if !strings.Contains(buf.String(), "peer=10.0.0.9:7946") || !strings.Contains(buf.String(), "peer=10.0.0.8:7946") {
		t.Errorf("sources not named:\n%s", buf.String())
	}
}

// TestDialedStreamReplyIsChecked: memberlist reads a push/pull answer or a
// TCP ping ack from a stream it opened; a hostile reply fails the read
// instead of reaching memberlist, and a valid one arrives byte for byte.
func TestDialedStreamReplyIsChecked(t *testing.T) {
	var drops []string
	g := newGuardTransport(&chanTransport{packets: make(chan *memberlist.Packet), streams: make(chan net.Conn)},
		&memberlist.Config{SecretKey: fuzzKey, TCPTimeout: time.Second},
		func(path, reason string, _ net.Addr) { drops = append(drops, path+"/"+reason) })
	defer g.Shutdown()
	for _, tc := range []struct {
		name  string
		reply []byte
		drop  string // "" when the reply is valid
	}{
		{"version-0", streamFrame(t, fuzzKey, 0, append(bytes.Repeat([]byte{0}, 19), 0xff)), "stream/version"},
		{"empty-plaintext", streamFrame(t, fuzzKey, 1, nil), "stream/empty"},
		{"unencrypted", []byte{13, 0x80}, "stream/unencrypted"},
		{"valid", streamFrame(t, fuzzKey, 1, ackPacket), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			drops = nil
			ours, peer := net.Pipe()
			defer ours.Close()
			go func() {
				_, _ = peer.Write(tc.reply)
				peer.Close()
			}()
			rc := &replyConn{Conn: ours, t: g}
			got, err := io.ReadAll(rc)
			if tc.drop == "" {
				if err != nil || !bytes.Equal(got, tc.reply) {
					t.Fatalf("valid reply: read %x, %v; want %x", got, err, tc.reply)
				}
				return
			}
			if !errors.Is(err, errDropped) || len(got) != 0 {
				t.Fatalf("read %x, %v; want nothing and errDropped", got, err)
			}
			if len(drops) != 1 || drops[0] != tc.drop {
				t.Fatalf("drops = %v, want [%s]", drops, tc.drop)
			}
		})
	}
}

// TestSlowReplyIsATimeoutNotInvalidGossip: a peer that has not sent its
// whole reply by the deadline (a TCP ping to a busy host) fails the read
// with a timeout, as it would without the guard, and is counted as a
// timeout, not as truncated gossip; on a loaded host these were hundreds
// of warnings an hour about healthy peers.
func TestSlowReplyIsATimeoutNotInvalidGossip(t *testing.T) {
	var drops []string
	g := newGuardTransport(&chanTransport{packets: make(chan *memberlist.Packet), streams: make(chan net.Conn)},
		&memberlist.Config{SecretKey: fuzzKey, TCPTimeout: time.Second},
		func(path, reason string, _ net.Addr) { drops = append(drops, path+"/"+reason) })
	defer g.Shutdown()
	full := streamFrame(t, fuzzKey, 1, ackPacket)
	for _, tc := range []struct {
		name string
		sent []byte // what the peer sends before it stalls
	}{
		{"nothing", nil},
		{"half a frame", full[:len(full)/2]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			drops = nil
			ours, peer := net.Pipe()
			defer ours.Close()
			defer peer.Close()
			go func() {
				// A pipe's Write returns once the reader has read it all:
				// the deadline passes with the reader waiting for more.
				if len(tc.sent) > 0 {
					_, _ = peer.Write(tc.sent)
				}
				_ = ours.SetReadDeadline(time.Now())
			}()
			rc := &replyConn{Conn: ours, t: g}
			_, err := rc.Read(make([]byte, 64))
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() || errors.Is(err, errDropped) {
				t.Fatalf("read error %v, want a net.Error timeout, not errDropped", err)
			}
			if len(drops) != 1 || drops[0] != "stream/"+dropTimeout {
				t.Fatalf("drops = %v, want [stream/%s]", drops, dropTimeout)
			}
		})
	}
}

// TestTimeoutsAreCountedNotWarned: a stream timing out, a stream its
// peer closed before sending a byte, and memberlist's failed TCP ping
// after them are counted and logged at debug level only; a truncated
// stream is still a warning.
func TestTimeoutsAreCountedNotWarned(t *testing.T) {
	var buf bytes.Buffer
	reg := prometheus.NewRegistry()
	w := &logWriter{log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})), metrics: newMetrics(reg)}
	from := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 9), Port: 7946}
	w.drop("stream", dropTimeout, from)
	w.drop("stream", dropClosed, from)
	log.New(w, "", 0).Printf("[ERR] memberlist: Failed fallback TCP ping: timeout 1s: read tcp 10.0.0.8:41234->10.0.0.9:7946: i/o timeout")
	if buf.Len() != 0 {
		t.Errorf("timeouts logged above debug level:\n%s", buf.String())
	}
	if got := counter(t, reg, "strata_gossip_invalid_total"); got != 2 {
		t.Errorf("invalid_total = %v, want 2 (the timeout, the closed stream)", got)
	}
	if got := counter(t, reg, "strata_gossip_peer_warnings_total"); got != 0 {
		t.Errorf("peer warnings = %v, want 0", got)
	}
	w.drop("stream", dropTruncated, from)
	if !strings.Contains(buf.String(), "level=WARN") || !strings.Contains(buf.String(), "reason=truncated") {
		t.Errorf("a truncated stream is not a warning:\n%s", buf.String())
	}
}
