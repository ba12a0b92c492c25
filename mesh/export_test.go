package mesh

import (
	"fmt"
	"slices"
)

// BenchRecords has m write n catalog entries and returns m's own
// document and them, each as gossip carries it (type byte first).
func BenchRecords(m *Mesh, n int) [][]byte {
	m.mu.Lock()
	doc, _ := encodeState(m.docs[m.id])
	m.mu.Unlock()
	out := [][]byte{append([]byte{msgState}, doc...)}
	for i := range n {
		e, err := m.Put(fmt.Sprintf("bench/%d", i), []byte(`{"replicas":3,"model":"fraud@7","note":"a record of typical size"}`))
		if err != nil {
			panic(err)
		}
		m.mu.Lock()
		b, _ := encodeEntry(m.kv[e.Key])
		out = append(out, append([]byte{msgEntry}, b...))
		m.mu.Unlock()
	}
	return out
}

// BenchMerge decodes and merges one message as a peer's gossip,
// verification included: the record is forgotten first, so it is new
// each time.
func BenchMerge(m *Mesh, msg []byte) {
	if msg[0] == msgState {
		s, err := decodeState(slices.Clone(msg[1:]))
		if err != nil {
			panic(err)
		}
		m.mu.Lock()
		delete(m.docs, s.ID)
		m.mu.Unlock()
		if !m.merge(s, false) {
			panic("document not merged")
		}
		return
	}
	e, err := decodeEntry(msg[1:])
	if err != nil {
		panic(err)
	}
	m.mu.Lock()
	m.deleteEntryLocked(e.Key)
	m.mu.Unlock()
	(&delegate{m: m}).NotifyMsg(msg)
	if _, ok := m.Lookup(e.Key); !ok {
		panic("entry not merged")
	}
}

// CertDER is the certificate m signs with now, and PeerCertDER the one m
// holds for node id.
func CertDER(m *Mesh) []byte {
	m.trust.mu.Lock()
	defer m.trust.mu.Unlock()
	return m.trust.selfDER
}

func PeerCertDER(m *Mesh, id string) []byte {
	_, der := m.trust.writer(id)
	return der
}

// UnfilteredRTT makes a mesh configured by c feed every RTT sample to
// Vivaldi as measured, as before the RTT filter (benchmarks compare).
func UnfilteredRTT(c *Config) { c.rttWindow = 1 }
