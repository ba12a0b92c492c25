package mesh

import (
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
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
		b, _ := encodeEntry(m.kv[e.Key].full)
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

// NoFullSyncs has m wait an hour before its next full catalog sync, as if
// its last had taken three minutes: repairs are left to the buckets.
func NoFullSyncs(m *Mesh) {
	m.mu.Lock()
	m.lastCatalogSync, m.lastSyncTook = time.Now(), 3*time.Minute
	m.mu.Unlock()
}

// CatalogRepairs returns how many full syncs m ran and how many bucket
// repairs it answered.
func CatalogRepairs(m *Mesh) (full, buckets float64) {
	return counterValue(m.metrics.catalogSyncs), counterValue(m.metrics.bucketRepairs)
}

func counterValue(c prometheus.Counter) float64 {
	var d dto.Metric
	if err := c.Write(&d); err != nil {
		panic(err)
	}
	return d.GetCounter().GetValue()
}

// QueuedBroadcasts is how many broadcasts m has yet to send.
func QueuedBroadcasts(m *Mesh) int { return m.bq.NumQueued() }

// SpillDue spills what m would spill once every entry it holds has been
// held for spillAfter, and returns how many it spilled.
func SpillDue(m *Mesh) int {
	n := 0
	for {
		k := m.spillSettled(time.Now().Add(spillAfter))
		if k == 0 {
			return n
		}
		n += k
	}
}
