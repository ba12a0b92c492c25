package testbed

import (
	"encoding/binary"
	"sync"
)

// natKey is one private endpoint's mapping: protocol, address and port.
type natKey struct {
	proto byte
	ip    [4]byte
	port  uint16
}

// natPeer is a remote endpoint a mapping sent to, which may answer.
type natPeer struct {
	proto  byte
	public uint16
	ip     [4]byte
	port   uint16
}

// nat is a site's NAT, as most home and carrier NATs behave:
// endpoint-independent mapping (a private address and port keep their
// public port whoever they talk to) and address-and-port-dependent
// filtering (only an endpoint the mapping sent to may send back). The site
// has one public address; nothing from outside reaches its private ones,
// and nothing reaches the public one unasked. TCP and UDP only.
type nat struct {
	public [4]byte

	mu       sync.Mutex
	next     uint16
	out      map[natKey]uint16
	in       map[[2]uint16]natKey // {proto, public port}
	allowed  map[natPeer]bool
	mapped   int64 // packets translated on the way out
	answered int64 // packets translated on the way in
	refused  int64 // packets from outside dropped: unasked, or to a private address
}

func newNAT(public [4]byte) *nat {
	return &nat{public: public, next: 20000, out: map[natKey]uint16{}, in: map[[2]uint16]natKey{}, allowed: map[natPeer]bool{}}
}

// ports returns the packet's IPv4 header length and whether it is TCP or
// UDP with its ports in this fragment.
func ports(pkt []byte) (ihl int, ok bool) {
	ihl = int(pkt[0]&0x0f) * 4
	proto := pkt[9]
	fragOff := binary.BigEndian.Uint16(pkt[6:8]) & 0x1fff
	total := int(binary.BigEndian.Uint16(pkt[2:4]))
	if (proto != 6 && proto != 17) || fragOff != 0 || ihl < 20 || total > len(pkt) || total < ihl+8 {
		return 0, false
	}
	return ihl, true
}

// outbound rewrites a packet leaving the site: its source becomes the
// public address and the mapping's port. It reports false to drop it.
func (n *nat) outbound(pkt []byte) bool {
	ihl, ok := ports(pkt)
	if !ok {
		return false
	}
	k := natKey{proto: pkt[9], ip: [4]byte(pkt[12:16]), port: binary.BigEndian.Uint16(pkt[ihl : ihl+2])}
	n.mu.Lock()
	pub, have := n.out[k]
	if !have {
		if n.next == 0 {
			n.mu.Unlock()
			return false // out of ports: a test that needs 45,000 mappings is wrong
		}
		pub = n.next
		n.next++
		n.out[k] = pub
		n.in[[2]uint16{uint16(k.proto), pub}] = k
	}
	n.allowed[natPeer{proto: k.proto, public: pub, ip: [4]byte(pkt[16:20]), port: binary.BigEndian.Uint16(pkt[ihl+2 : ihl+4])}] = true
	n.mapped++
	n.mu.Unlock()
	copy(pkt[12:16], n.public[:])
	binary.BigEndian.PutUint16(pkt[ihl:ihl+2], pub)
	fixChecksums(pkt, ihl)
	return true
}

// inbound rewrites a packet to the public address back to the private
// endpoint it answers; it reports false to drop one nobody asked for.
func (n *nat) inbound(pkt []byte) bool {
	ihl, ok := ports(pkt)
	n.mu.Lock()
	defer n.mu.Unlock()
	if !ok {
		n.refused++
		return false
	}
	proto, pub := pkt[9], binary.BigEndian.Uint16(pkt[ihl+2:ihl+4])
	k, have := n.in[[2]uint16{uint16(proto), pub}]
	if !have || !n.allowed[natPeer{proto: proto, public: pub, ip: [4]byte(pkt[12:16]), port: binary.BigEndian.Uint16(pkt[ihl : ihl+2])}] {
		n.refused++
		return false
	}
	n.answered++
	copy(pkt[16:20], k.ip[:])
	binary.BigEndian.PutUint16(pkt[ihl+2:ihl+4], k.port)
	fixChecksums(pkt, ihl)
	return true
}

func (n *nat) refuse() {
	n.mu.Lock()
	n.refused++
	n.mu.Unlock()
}

// fixChecksums recomputes the IPv4 header's checksum and the TCP or UDP
// one (over the pseudo-header) after addresses or ports changed.
func fixChecksums(pkt []byte, ihl int) {
	pkt[10], pkt[11] = 0, 0
	binary.BigEndian.PutUint16(pkt[10:12], checksum(pkt[:ihl], 0))
	total := int(binary.BigEndian.Uint16(pkt[2:4]))
	seg := pkt[ihl:total]
	var pseudo uint32
	for i := 12; i < 20; i += 2 {
		pseudo += uint32(binary.BigEndian.Uint16(pkt[i : i+2]))
	}
	pseudo += uint32(pkt[9]) + uint32(len(seg))
	off := 16 // TCP
	if pkt[9] == 17 {
		off = 6
		if seg[6] == 0 && seg[7] == 0 {
			return // UDP without a checksum
		}
	}
	seg[off], seg[off+1] = 0, 0
	c := checksum(seg, pseudo)
	if c == 0 && pkt[9] == 17 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(seg[off:off+2], c)
}

// checksum is the Internet checksum of b, starting from sum.
func checksum(b []byte, sum uint32) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i : i+2]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
