package mesh

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
)

// fuzzKey is the gossip key of the keyed meshes below.
var fuzzKey = bytes.Repeat([]byte{7}, 32)

// seal encrypts plain as memberlist does (security.go encryptPayload), with
// any version byte: [version][nonce][AES-GCM(plain, ad)]. Version 0 gets no
// padding here; callers add what they want checked.
func seal(tb testing.TB, key []byte, version byte, plain, ad []byte) []byte {
	tb.Helper()
	block, err := aes.NewCipher(key)
	if err != nil {
		tb.Fatal(err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		tb.Fatal(err)
	}
	nonce := make([]byte, mlNonceSize)
	if _, err := rand.Read(nonce); err != nil {
		tb.Fatal(err)
	}
	out := append([]byte{version}, nonce...)
	return gcm.Seal(out, nonce, plain, ad)
}

// versionZeroPacket is the packet that crashed memberlist v0.7.0: valid
// AES-GCM under the key, version byte 0, and a last plaintext byte (the
// PKCS7 pad length memberlist strips without checking) past the plaintext.
// 1 version + 12 nonce + 20 plaintext + 16 tag = 49 bytes.
func versionZeroPacket(tb testing.TB, key []byte) []byte {
	plain := append(bytes.Repeat([]byte{0}, 19), 0xff)
	return seal(tb, key, 0, plain, nil)
}

// streamFrame frames an encrypted stream message as memberlist does:
// [10][len uint32][sealed], the type and length authenticated.
func streamFrame(tb testing.TB, key []byte, version byte, plain []byte) []byte {
	n := 1 + mlNonceSize + len(plain) + mlTagSize
	hdr := []byte{mlEncryptMsg, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(hdr[1:], uint32(n))
	return append(hdr, seal(tb, key, version, plain, hdr)...)
}

// ackPacket is a harmless packet memberlist decodes at once: an ack for a
// probe nobody sent (msgpack of ackResp{SeqNo: 0, Payload: nil}).
var ackPacket = []byte("\x02\x82\xa5SeqNo\x00\xa7Payload\xc0")

// chanTransport is an in-process memberlist transport whose inbound packets
// and streams the test hands in; everything sent is dropped.
type chanTransport struct {
	packets chan *memberlist.Packet
	streams chan net.Conn
	port    int
}

var _ memberlist.NodeAwareTransport = (*chanTransport)(nil)

func (t *chanTransport) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	return net.IPv4(127, 0, 0, 1), t.port, nil
}
func (t *chanTransport) WriteTo(b []byte, a string) (time.Time, error) { return time.Now(), nil }
func (t *chanTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return time.Now(), nil
}
func (t *chanTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }
func (t *chanTransport) DialTimeout(a string, d time.Duration) (net.Conn, error) {
	return nil, errors.New("no route")
}
func (t *chanTransport) DialAddressTimeout(a memberlist.Address, d time.Duration) (net.Conn, error) {
	return nil, errors.New("no route")
}
func (t *chanTransport) StreamCh() <-chan net.Conn { return t.streams }
func (t *chanTransport) Shutdown() error           { return nil }

var fuzzFrom = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 7946}

// target is a running Mesh on a chanTransport.
type target struct {
	m   *Mesh
	tr  *chanTransport
	key []byte
	reg *prometheus.Registry
}

func newTarget(tb testing.TB, name string, key []byte, port int) *target {
	tb.Helper()
	id, err := NewIdentity()
	if err != nil {
		tb.Fatal(err)
	}
	tr := &chanTransport{packets: make(chan *memberlist.Packet), streams: make(chan net.Conn), port: port}
	reg := prometheus.NewRegistry()
	m, err := New(Config{
		Name:       name,
		Identity:   id,
		BindAddr:   "127.0.0.1:" + strconv.Itoa(port),
		GossipKey:  key,
		Transport:  tr,
		Registerer: reg,
		Memberlist: func(c *memberlist.Config) { c.TCPTimeout = 2 * time.Second },
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close() })
	return &target{m: m, tr: tr, key: key, reg: reg}
}

// sentinel is a packet that passes the guard, sealed when t has a key.
func (t *target) sentinel(tb testing.TB) []byte {
	if t.key == nil {
		return ackPacket
	}
	return seal(tb, t.key, 1, ackPacket, nil)
}

// ingest hands a copy of buf to the mesh as a packet from fuzzFrom and
// returns once memberlist has taken it in: the guard and memberlist each
// read packets one at a time from unbuffered channels, so the second
// sentinel is taken only after memberlist took the first, which it does
// only after it is done ingesting buf. What it queued (a user message is
// handed to the delegate later, by another goroutine) may still point into
// the packet, as it may into a real transport's: each packet is its own
// buffer, never the fuzzer's input, which it changes for the next run.
func (t *target) ingest(tb testing.TB, buf []byte) {
	tb.Helper()
	for _, b := range [][]byte{bytes.Clone(buf), t.sentinel(tb), t.sentinel(tb)} {
		select {
		case t.tr.packets <- &memberlist.Packet{Buf: b, From: fuzzFrom, Timestamp: time.Now()}:
		case <-time.After(10 * time.Second):
			tb.Fatal("mesh stopped reading packets")
		}
	}
}

// stream hands buf to the mesh as an inbound stream and returns once the
// guard or memberlist closed it.
func (t *target) stream(tb testing.TB, buf []byte) {
	tb.Helper()
	c := &bytesConn{r: bytes.NewReader(bytes.Clone(buf)), closed: make(chan struct{})}
	select {
	case t.tr.streams <- c:
	case <-time.After(10 * time.Second):
		tb.Fatal("mesh stopped accepting streams")
	}
	select {
	case <-c.closed:
	case <-time.After(20 * time.Second):
		tb.Fatal("stream not closed")
	}
}

// bytesConn is an inbound stream that reads buf then EOF and discards
// what is written to it.
type bytesConn struct {
	r         *bytes.Reader
	closeOnce sync.Once
	closed    chan struct{}
}

func (c *bytesConn) Read(p []byte) (int, error) {
	select {
	case <-c.closed:
		return 0, io.EOF
	default:
	}
	return c.r.Read(p)
}
func (c *bytesConn) Write(p []byte) (int, error) { return len(p), nil }
func (c *bytesConn) Close() error                { c.closeOnce.Do(func() { close(c.closed) }); return nil }
func (c *bytesConn) LocalAddr() net.Addr         { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }
func (c *bytesConn) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 7946}
}
func (c *bytesConn) SetDeadline(time.Time) error      { return nil }
func (c *bytesConn) SetReadDeadline(time.Time) error  { return nil }
func (c *bytesConn) SetWriteDeadline(time.Time) error { return nil }

// fuzzTargets are shared by every input of one fuzzing process.
var (
	fuzzOnce               sync.Once
	fuzzKeyless, fuzzKeyed *target
)

func fuzzTargets(tb testing.TB) (keyless, keyed *target) {
	fuzzOnce.Do(func() {
		// Not tied to tb's cleanup: they outlive one input.
		fuzzKeyless = newTarget(&noCleanup{tb}, "fuzz-plain", nil, 17946)
		fuzzKeyed = newTarget(&noCleanup{tb}, "fuzz-keyed", fuzzKey, 17947)
	})
	if fuzzKeyless == nil || fuzzKeyed == nil {
		tb.Fatal("fuzz targets not started")
	}
	return fuzzKeyless, fuzzKeyed
}

// noCleanup drops cleanups: the shared targets run until the process ends.
type noCleanup struct{ testing.TB }

func (noCleanup) Cleanup(func()) {}

// FuzzPacket drives arbitrary bytes through the real packet path (guard
// transport, then memberlist's ingestion and the mesh's delegates) of a
// running mesh without a key and one with a key, raw, sealed under the key
// with the version byte we send (so the plaintext reaches memberlist's
// decoders), and sealed with version 0 (the unauthenticated version byte
// that crashed memberlist). Nothing may panic.
func FuzzPacket(f *testing.F) {
	f.Add(uint8(0), []byte{})
	f.Add(uint8(1), []byte{})
	f.Add(uint8(0), []byte{mlHasLabelMsg, 3, 'f', 'o', 'o', 2})
	f.Add(uint8(1), []byte{mlHasLabelMsg, 3, 'f', 'o', 'o', 2})
	f.Add(uint8(0), ackPacket)
	f.Add(uint8(2), ackPacket)
	f.Add(uint8(3), append(bytes.Repeat([]byte{0}, 19), 0xff))
	f.Add(uint8(1), versionZeroPacket(f, fuzzKey))
	f.Add(uint8(2), []byte{8, 1, '{'})                       // user message: a broken document
	f.Add(uint8(2), []byte{7, 2, 0, 3, 0, 3, 2, 0x82, 1, 2}) // compound, truncated
	f.Add(uint8(2), []byte{})
	f.Fuzz(func(t *testing.T, mode uint8, data []byte) {
		keyless, keyed := fuzzTargets(t)
		switch mode % 4 {
		case 0:
			keyless.ingest(t, data)
		case 1:
			keyed.ingest(t, data)
		case 2:
			keyed.ingest(t, seal(t, fuzzKey, 1, data, nil))
		case 3:
			keyed.ingest(t, seal(t, fuzzKey, 0, data, nil))
		}
	})
}

// FuzzStream drives arbitrary bytes through the real inbound stream path
// (push/pull, reliable user messages, TCP pings): raw to a mesh without a
// key and one with a key, framed and sealed with the version we send, and
// with version 0. Nothing may panic.
func FuzzStream(f *testing.F) {
	f.Add(uint8(0), []byte{})
	f.Add(uint8(1), []byte{})
	f.Add(uint8(2), []byte{})     // a frame with an empty plaintext
	f.Add(uint8(2), []byte{6})    // push/pull with no header
	f.Add(uint8(0), []byte{6})    // the same, unencrypted
	f.Add(uint8(3), []byte{0xff}) // version 0, pad length past the plaintext
	f.Add(uint8(1), []byte{mlEncryptMsg, 0xff, 0xff, 0xff, 0xff})
	f.Add(uint8(0), []byte{9, 0x82, 0xa4, 'A', 'l', 'g', 'o', 0, 0xa3, 'B', 'u', 'f', 0xc4, 0})
	f.Fuzz(func(t *testing.T, mode uint8, data []byte) {
		keyless, keyed := fuzzTargets(t)
		switch mode % 4 {
		case 0:
			keyless.stream(t, data)
		case 1:
			keyed.stream(t, data)
		case 2:
			keyed.stream(t, streamFrame(t, fuzzKey, 1, data))
		case 3:
			keyed.stream(t, streamFrame(t, fuzzKey, 0, data))
		}
	})
}

// FuzzDecoders feeds arbitrary bytes to the mesh's own decoders as
// memberlist hands them over: a gossiped or fetched node document, a
// catalog entry, any user message, and a push/pull state. A malformed one
// is dropped and counted; nothing may panic.
func FuzzDecoders(f *testing.F) {
	f.Add(uint8(0), []byte(`{"id":"x","name":"y","version":1}`))
	f.Add(uint8(0), []byte(`{"id":"x"`))
	f.Add(uint8(1), []byte(`{"key":"a","value":"b"}`))
	f.Add(uint8(1), []byte(`[`))
	f.Add(uint8(2), []byte(`{"nodes":[null,{"id":"a","name":"b"}],"entries":[null]}`))
	f.Add(uint8(2), []byte(`{"nodes":1}`))
	f.Add(uint8(3), []byte{})
	f.Add(uint8(3), []byte{2})
	f.Add(uint8(3), append([]byte{msgBuckets}, `{"from":"a","digests":[1,2]}`...))
	f.Add(uint8(3), append([]byte{msgBucketEntries}, `{"from":"a","buckets":[300],"entries":[null,"x"],"reply":true}`...))
	f.Add(uint8(3), append([]byte{msgBucketEntries}, `{"from":"a","buckets":[1],"entries":[{"key":"policies/x","version":1}]}`...))
	f.Fuzz(func(t *testing.T, kind uint8, data []byte) {
		keyless, _ := fuzzTargets(t)
		d := &delegate{m: keyless.m}
		switch kind % 4 {
		case 0:
			d.NotifyMsg(append([]byte{msgState}, data...))
		case 1:
			d.NotifyMsg(append([]byte{msgEntry}, data...))
		case 2:
			d.MergeRemoteState(data, kind&4 != 0)
		case 3:
			d.NotifyMsg(data)
		}
	})
}

// malformedTotal sums strata_gossip_malformed_total over its kinds.
func malformedTotal(tb testing.TB, reg *prometheus.Registry) float64 {
	tb.Helper()
	return metricTotal(tb, reg, "strata_gossip_malformed_total")
}

// metricTotal sums a counter over its labels.
func metricTotal(tb testing.TB, reg *prometheus.Registry, name string) float64 {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

func TestMalformedDocumentsAreDroppedAndCounted(t *testing.T) {
	tg := newTarget(t, "decoders", nil, 17950)
	d := &delegate{m: tg.m}
	for _, msg := range [][]byte{
		{},
		{msgState},
		append([]byte{msgState}, `{"id":`...),
		append([]byte{msgState}, `{"id":"","name":""}`...),
		append([]byte{msgEntry}, `[1]`...),
		{0xee, 1, 2},
	} {
		before := malformedTotal(t, tg.reg)
		d.NotifyMsg(msg)
		if after := malformedTotal(t, tg.reg); after != before+1 {
			t.Errorf("NotifyMsg(%q): malformed count %v → %v, want +1", msg, before, after)
		}
	}
	before := malformedTotal(t, tg.reg)
	d.MergeRemoteState([]byte(`{"nodes":`), false)
	if after := malformedTotal(t, tg.reg); after != before+1 {
		t.Errorf("MergeRemoteState: malformed count %v → %v, want +1", before, after)
	}
	if n := len(tg.m.Nodes()); n != 1 {
		t.Errorf("nodes = %d, want only the local one", n)
	}
}

// TestConflictWithMalformedMetaIsCounted: a name conflict whose other node
// sends a meta that does not decode is still handled, and the meta is
// counted as malformed.
func TestConflictWithMalformedMetaIsCounted(t *testing.T) {
	tg := newTarget(t, "conflicts", nil, 17952)
	c := &conflictDelegate{m: tg.m}
	node := func(meta string) *memberlist.Node {
		return &memberlist.Node{Name: "elsewhere", Addr: net.IPv4(127, 0, 0, 1), Port: 7946, Meta: []byte(meta)}
	}
	for _, tc := range []struct {
		meta string
		want float64
	}{
		{`{"id":`, 1},
		{`[1]`, 1},
		{`{"id":"abc","started":1}`, 0},
		{``, 0},
	} {
		before := metricTotal(t, tg.reg, "strata_gossip_malformed_total")
		c.NotifyConflict(node(`{}`), node(tc.meta))
		if got := metricTotal(t, tg.reg, "strata_gossip_malformed_total") - before; got != tc.want {
			t.Errorf("meta %q: malformed +%v, want +%v", tc.meta, got, tc.want)
		}
	}
}

// invalidCount reads strata_gossip_invalid_total{path, reason}.
func invalidCount(tb testing.TB, reg *prometheus.Registry, path, reason string) float64 {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "strata_gossip_invalid_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if got["path"] == path && got["reason"] == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestDuplicateDocumentsAreNotDecoded: a gossiped node document of the
// version held, or older, is dropped unread and counted; a newer one is
// merged, and one whose first keys are not its ID and version is decoded
// as before.
func TestDuplicateDocumentsAreNotDecoded(t *testing.T) {
	tg := newTarget(t, "duplicates", nil, 17951)
	d := &delegate{m: tg.m}
	doc := func(version uint64) []byte {
		b, err := encodeState(&NodeState{ID: "peer-id", Name: "peer", Version: version, Schema: CurrentSchema.String(), Site: "s", Tier: "edge"})
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte{msgState}, b...)
	}
	duplicates := func() float64 { return metricTotal(t, tg.reg, "strata_mesh_state_duplicates_total") }
	for _, tc := range []struct {
		name    string
		msg     []byte
		dropped bool
		version uint64 // held after
	}{
		{"first", doc(3), false, 3},
		{"the same", doc(3), true, 3},
		{"older", doc(2), true, 3},
		{"newer", doc(4), false, 4},
		{"its own order of the first keys", append([]byte{msgState}, `{"version":4,"name":"peer","id":"peer-id","schema":"1.1"}`...), true, 4},
		{"another key first", append([]byte{msgState}, `{"site":"s","id":"peer-id","name":"peer","version":5,"schema":"1.1"}`...), false, 5},
	} {
		before := duplicates()
		d.NotifyMsg(tc.msg)
		if got := duplicates() - before; (got == 1) != tc.dropped {
			t.Errorf("%s: %v dropped unread, want %v", tc.name, got, tc.dropped)
		}
		if n, err := tg.m.Node("peer"); err != nil || n.Version != tc.version {
			t.Errorf("%s: held version %d (%v), want %d", tc.name, n.Version, err, tc.version)
		}
	}
	// A push/pull carries every document: one held already is not
	// decoded either, a newer one is merged.
	for _, tc := range []struct {
		name    string
		version uint64
		dropped bool
	}{
		{"push/pull of the held version", 5, true},
		{"push/pull of a newer one", 6, false},
	} {
		pp, err := json.Marshal(pushPull{Nodes: []json.RawMessage{doc(tc.version)[1:]}})
		if err != nil {
			t.Fatal(err)
		}
		before := duplicates()
		d.MergeRemoteState(pp, false)
		if got := duplicates() - before; (got == 1) != tc.dropped {
			t.Errorf("%s: %v dropped unread, want %v", tc.name, got, tc.dropped)
		}
		if n, err := tg.m.Node("peer"); err != nil || n.Version != tc.version {
			t.Errorf("%s: held version %d (%v), want %d", tc.name, n.Version, err, tc.version)
		}
	}
	if id, v, ok := peekState([]byte(`{"id":"a","name":{"x":1},"version":2}`)); ok {
		t.Errorf("peekState of a document with an object for its name: %q %d, want not ok", id, v)
	}
}

// BenchmarkDuplicateDocument: what a node spends on a gossiped copy of a
// document it holds already: impl=strata peeks at its ID and version
// (heldAlready), impl=decode-every-copy reads it whole, as agents did
// before.
func BenchmarkDuplicateDocument(b *testing.B) {
	s := &NodeState{ID: "0123456789abcdef0123456789abcdef", Name: "edge-a-17", Version: 912, Schema: CurrentSchema.String(), Site: "edge-a", Tier: "edge",
		Labels: map[string]string{"city": "lyon", "rack": "r2"}}
	s.Capabilities.CPU.Millicores, s.Capabilities.Memory.Total = 16000, 64<<30
	for i := range 8 {
		s.Capabilities.GPUs = append(s.Capabilities.GPUs, GPU{Index: i, Model: "NVIDIA H100 80GB HBM3", Memory: 80 << 30, Healthy: true})
		s.Assignments = append(s.Assignments, Assignment{Key: fmt.Sprintf("InferenceService/svc-%d", i), Epoch: 3, Accepted: true, CPU: 500, Memory: 1 << 30})
	}
	raw, err := encodeState(s)
	if err != nil {
		b.Fatal(err)
	}
	// A thousand copies per op, so that make bench's single op is a
	// figure, not a timer tick.
	const copies = 1000
	for _, impl := range []struct {
		name string
		read func() error
	}{
		{"decode-every-copy", func() error { _, err := decodeState(raw); return err }},
		{"strata", func() error {
			if _, _, ok := peekState(raw); !ok {
				return errors.New("not peeked")
			}
			return nil
		}},
	} {
		b.Run("impl="+impl.name, func(b *testing.B) {
			start := time.Now()
			for b.Loop() {
				for range copies {
					if err := impl.read(); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N*copies), "ns/doc")
			b.ReportMetric(float64(len(raw)), "doc-bytes")
		})
	}
}
