package mesh

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Wire constants of memberlist v0.7.0 (net.go, security.go, label.go). They
// are part of its protocol, so they do not change under us.
const (
	mlEncryptMsg   byte = 10  // stream frame: [10][len uint32][encrypted payload]
	mlHasLabelMsg  byte = 244 // packet or stream label header: [244][size][label]
	mlNonceSize         = 12
	mlTagSize           = 16
	mlMinEncrypted      = 1 + mlNonceSize + mlTagSize // version, nonce, tag
	// mlMaxPushState is memberlist's own limit on an encrypted stream frame.
	mlMaxPushState = 20 * 1024 * 1024
)

// Reasons a packet or stream is dropped before memberlist decodes it; the
// reason label of strata_gossip_invalid_total, or "key" and "unencrypted"
// for strata_gossip_refused_total.
const (
	dropEmpty     = "empty"     // no bytes, or nothing after decryption
	dropLabel     = "label"     // label header missing, malformed or not ours
	dropVersion   = "version"   // encryption version byte other than the one we send
	dropShort     = "short"     // shorter than version, nonce and tag
	dropOversize  = "oversize"  // stream frame over memberlist's limit
	dropPadding   = "padding"   // bad PKCS7 padding (encryption version 0 only)
	dropTruncated = "truncated" // stream ended inside its first frame
	// dropClosed: the peer closed the stream before sending a byte, as a
	// busy peer does when its own deadline passed between dialling and
	// writing (memberlist's TCP ping). Counted, logged at debug level only.
	dropClosed = "closed"
	// dropTimeout: the first frame was not whole by the deadline. A busy
	// peer, not bad input (a TCP ping's ack past the probe deadline): it is
	// counted but logged at debug level only.
	dropTimeout     = "timeout"
	dropKey         = "key"         // does not decrypt under any gossip key
	dropUnencrypted = "unencrypted" // plaintext stream while a key is set
)

// errDropped is what a guarded stream's Read returns once its first frame
// failed validation.
var errDropped = errors.New("mesh: gossip stream dropped: invalid first frame")

// guardTransport wraps the transport memberlist uses and validates every
// inbound packet and stream before memberlist decodes it. memberlist trusts
// the unauthenticated encryption version byte (version 0 makes it strip
// PKCS7 padding it never checks, which panics on a crafted length) and
// indexes the first byte of a decrypted stream without checking that there
// is one; both crash the whole process from a goroutine nothing recovers.
// So, when a gossip key is set, a packet or the first frame of a stream
// reaches memberlist only if it carries our label, the encryption version
// this node sends, is long enough, decrypts under a key, and is not empty
// after decryption. Without a key, empty packets and packets with a wrong
// label header are dropped. Every drop is counted and logged at most once a
// second per source address.
//
// Memberlist reads packets from PacketCh in one goroutine and each stream
// in its own; the guard adds one goroutine for packets and one per inbound
// stream while its first frame is read (bounded by the TCP timeout).
type guardTransport struct {
	memberlist.NodeAwareTransport
	// keys returns the gossip keys; none means gossip is not encrypted.
	keys func() [][]byte
	// label is the memberlist label (empty: none).
	label string
	// version is the encryption version byte this node sends.
	version byte
	// timeout bounds reading an inbound stream's first frame.
	timeout time.Duration
	// drop is told about each dropped packet or stream.
	drop func(path, reason string, from net.Addr)

	packetCh chan *memberlist.Packet
	streamCh chan net.Conn
	done     chan struct{}
	stopOnce sync.Once

	// handled counts packets the guard is done with (handed to memberlist
	// or dropped); tests wait on it.
	handled atomic.Uint64
}

// newGuardTransport wraps inner for a memberlist configured by c (keys,
// label, protocol version and TCP timeout are read from it) and starts
// reading inner's packets and streams.
func newGuardTransport(inner memberlist.Transport, c *memberlist.Config, drop func(path, reason string, from net.Addr)) *guardTransport {
	na, ok := inner.(memberlist.NodeAwareTransport)
	if !ok {
		na = shimTransport{inner}
	}
	t := &guardTransport{
		NodeAwareTransport: na,
		label:              c.Label,
		version:            1,
		timeout:            c.TCPTimeout,
		drop:               drop,
		packetCh:           make(chan *memberlist.Packet),
		streamCh:           make(chan net.Conn),
		done:               make(chan struct{}),
	}
	// memberlist speaks encryption version 0 only at protocol version 1.
	if c.ProtocolVersion == 1 {
		t.version = 0
	}
	if t.timeout <= 0 {
		t.timeout = 10 * time.Second
	}
	switch {
	case c.Keyring != nil:
		t.keys = c.Keyring.GetKeys
	case len(c.SecretKey) > 0:
		keys := [][]byte{bytes.Clone(c.SecretKey)}
		t.keys = func() [][]byte { return keys }
	default:
		t.keys = func() [][]byte { return nil }
	}
	go t.pumpPackets()
	go t.pumpStreams()
	return t
}

// PacketCh delivers the packets that passed validation.
func (t *guardTransport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }

// StreamCh delivers the inbound streams whose first frame passed validation.
func (t *guardTransport) StreamCh() <-chan net.Conn { return t.streamCh }

// DialTimeout opens a stream whose replies are validated like inbound ones.
func (t *guardTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout opens a stream whose replies are validated like
// inbound ones: memberlist reads a push/pull answer or a ping ack from it.
func (t *guardTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	c, err := t.NodeAwareTransport.DialAddressTimeout(a, timeout)
	if err != nil || len(t.keys()) == 0 {
		return c, err
	}
	return &replyConn{Conn: c, t: t}, nil
}

// Shutdown stops the wrapped transport, then the guard. The guard goes on
// passing packets and streams on until the wrapped transport is down: a
// NetTransport waits for its listeners, which may be blocked handing one
// over (memberlist reads until its own shutdown, which comes after).
func (t *guardTransport) Shutdown() error {
	err := t.NodeAwareTransport.Shutdown()
	t.stopOnce.Do(func() { close(t.done) })
	return err
}

func (t *guardTransport) pumpPackets() {
	in := t.NodeAwareTransport.PacketCh()
	for {
		select {
		case <-t.done:
			return
		case p, ok := <-in:
			if !ok {
				return
			}
			if reason := t.checkPacket(p.Buf); reason != "" {
				t.drop("packet", reason, p.From)
				t.handled.Add(1)
				continue
			}
			select {
			case t.packetCh <- p:
				t.handled.Add(1)
			case <-t.done:
				return
			}
		}
	}
}

func (t *guardTransport) pumpStreams() {
	in := t.NodeAwareTransport.StreamCh()
	for {
		select {
		case <-t.done:
			return
		case c, ok := <-in:
			if !ok {
				return
			}
			go t.admit(c)
		}
	}
}

// admit reads an inbound stream's first frame and hands the stream to
// memberlist (the frame replayed first) only if the frame is valid.
func (t *guardTransport) admit(c net.Conn) {
	if len(t.keys()) > 0 {
		_ = c.SetReadDeadline(time.Now().Add(t.timeout))
		head, reason, _ := t.readFrame(c, true)
		_ = c.SetReadDeadline(time.Time{})
		if reason != "" {
			t.drop("stream", reason, c.RemoteAddr())
			_ = c.Close()
			return
		}
		c = &prefixConn{Conn: c, r: io.MultiReader(bytes.NewReader(head), c)}
	}
	select {
	case t.streamCh <- c:
	case <-t.done:
		_ = c.Close()
	}
}

// checkPacket returns why a packet must be dropped, or "" to accept it.
func (t *guardTransport) checkPacket(buf []byte) string {
	if len(buf) == 0 {
		return dropEmpty
	}
	buf, reason := t.stripLabel(buf)
	if reason != "" {
		return reason
	}
	keys := t.keys()
	if len(keys) == 0 {
		if len(buf) == 0 {
			return dropEmpty
		}
		return ""
	}
	return t.checkSealed(keys, buf, []byte(t.label))
}

// stripLabel removes and checks a packet's label header.
func (t *guardTransport) stripLabel(buf []byte) ([]byte, string) {
	if buf[0] != mlHasLabelMsg {
		if t.label != "" {
			return nil, dropLabel
		}
		return buf, ""
	}
	if len(buf) < 2 || buf[1] == 0 || len(buf) < 2+int(buf[1]) {
		return nil, dropLabel
	}
	if string(buf[2:2+int(buf[1])]) != t.label {
		return nil, dropLabel
	}
	return buf[2+int(buf[1]):], ""
}

// checkSealed checks an encrypted payload ([version][nonce][ciphertext+tag])
// exactly as memberlist will decrypt it, with additional data ad.
func (t *guardTransport) checkSealed(keys [][]byte, msg, ad []byte) string {
	if len(msg) == 0 {
		return dropEmpty
	}
	if msg[0] != t.version {
		return dropVersion
	}
	min := mlMinEncrypted
	if t.version == 0 {
		min += aes.BlockSize // at least one block of padding
	}
	if len(msg) < min {
		return dropShort
	}
	plain, ok := open(keys, msg, ad)
	if !ok {
		return dropKey
	}
	if t.version == 0 {
		pad := int(plain[len(plain)-1])
		if pad == 0 || pad > aes.BlockSize || pad > len(plain) {
			return dropPadding
		}
		plain = plain[:len(plain)-pad]
	}
	if len(plain) == 0 {
		return dropEmpty
	}
	return ""
}

// open decrypts msg under the first key that authenticates it.
func open(keys [][]byte, msg, ad []byte) ([]byte, bool) {
	nonce, sealed := msg[1:1+mlNonceSize], msg[1+mlNonceSize:]
	for _, k := range keys {
		block, err := aes.NewCipher(k)
		if err != nil {
			continue
		}
		gcm, err := cipher.NewGCM(block)
		if err != nil {
			continue
		}
		if plain, err := gcm.Open(nil, nonce, sealed, ad); err == nil {
			return plain, true
		}
	}
	return nil, false
}

// readFrame reads and checks a stream's first frame ([label header] when
// inbound, then [10][len][payload]); it returns the bytes read, or why the
// stream is dropped and, for dropTimeout, the read's timeout error.
func (t *guardTransport) readFrame(r io.Reader, inbound bool) ([]byte, string, error) {
	head, reason, err := t.readFrameBytes(r, inbound)
	var ne net.Error
	if reason != "" && errors.As(err, &ne) && ne.Timeout() {
		return nil, dropTimeout, err
	}
	return head, reason, nil
}

// readFrameBytes is readFrame without telling a timeout from a truncated
// or malformed frame; err is the error of the read that failed, if any.
func (t *guardTransport) readFrameBytes(r io.Reader, inbound bool) (_ []byte, _ string, err error) {
	var head bytes.Buffer
	read := func(n int) ([]byte, bool) {
		off := head.Len()
		if _, err = io.CopyN(&head, r, int64(n)); err != nil {
			return nil, false
		}
		return head.Bytes()[off:], true
	}
	b, ok := read(1)
	if !ok {
		return nil, dropClosed, err
	}
	typ := b[0]
	if inbound {
		if typ == mlHasLabelMsg {
			b, ok := read(1)
			if !ok || b[0] == 0 {
				return nil, dropLabel, err
			}
			lb, ok := read(int(b[0]))
			if !ok || string(lb) != t.label {
				return nil, dropLabel, err
			}
			b, ok = read(1)
			if !ok {
				return nil, dropTruncated, err
			}
			typ = b[0]
		} else if t.label != "" {
			return nil, dropLabel, err
		}
	}
	if typ != mlEncryptMsg {
		return nil, dropUnencrypted, err
	}
	lenb, ok := read(4)
	if !ok {
		return nil, dropTruncated, err
	}
	n := binary.BigEndian.Uint32(lenb)
	if n > mlMaxPushState {
		return nil, dropOversize, err
	}
	ad := append([]byte{mlEncryptMsg}, lenb...)
	ad = append(ad, t.label...)
	payload, ok := read(int(n))
	if !ok {
		return nil, dropTruncated, err
	}
	if reason := t.checkSealed(t.keys(), payload, ad); reason != "" {
		return nil, reason, nil
	}
	return head.Bytes(), "", nil
}

// prefixConn replays the bytes the guard read before the rest of the stream.
type prefixConn struct {
	net.Conn
	r io.Reader
}

func (c *prefixConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// replyConn is a dialed stream: memberlist writes a request to it and reads
// one reply frame, which is checked before memberlist sees any of it.
type replyConn struct {
	net.Conn
	t *guardTransport

	once sync.Once
	r    io.Reader
	err  error
}

func (c *replyConn) Read(p []byte) (int, error) {
	c.once.Do(func() {
		head, reason, err := c.t.readFrame(c.Conn, false)
		switch {
		case reason == dropTimeout:
			// The peer did not answer in time: memberlist is told so by
			// the read's own timeout error, as without the guard.
			c.t.drop("stream", reason, c.Conn.RemoteAddr())
			c.err = err
			return
		case reason != "":
			c.t.drop("stream", reason, c.Conn.RemoteAddr())
			c.err = fmt.Errorf("%w (%s)", errDropped, reason)
			return
		}
		c.r = io.MultiReader(bytes.NewReader(head), c.Conn)
	})
	if c.err != nil {
		return 0, c.err
	}
	return c.r.Read(p)
}

// shimTransport adapts a plain Transport as memberlist itself does.
type shimTransport struct{ memberlist.Transport }

func (s shimTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return s.WriteTo(b, a.Addr)
}

func (s shimTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return s.DialTimeout(a.Addr, timeout)
}
