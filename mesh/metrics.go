package mesh

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	refused      prometheus.Counter
	malformed    *prometheus.CounterVec
	dropped      prometheus.Counter
	stateUpdates prometheus.Counter
	members      *prometheus.GaugeVec
	// tombstonesCollected counts catalog tombstones forgotten after their TTL.
	tombstonesCollected prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_gossip_refused_total",
			Help: "Gossip packets and streams refused because they could not be decrypted with the gossip key (wrong, missing or unexpected key).",
		}),
		malformed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_gossip_malformed_total",
			Help: "Gossip messages dropped because they could not be decoded, by kind.",
		}, []string{"kind"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_gossip_work_dropped_total",
			Help: "State fetches or answers dropped because the send queue was full.",
		}),
		stateUpdates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_mesh_state_updates_total",
			Help: "Peer node documents merged because they were newer than the one held.",
		}),
		members: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "strata_mesh_members",
			Help: "Peers by membership status, as this agent sees them.",
		}, []string{"status"}),
		tombstonesCollected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_catalog_tombstones_collected_total",
			Help: "Deleted catalog entries whose tombstone was forgotten after the tombstone TTL.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.tombstonesCollected)
		reg.MustRegister(m.refused, m.malformed, m.dropped, m.stateUpdates, m.members)
	}
	return m
}

func (m *metrics) setMembers(members map[string]*memberInfo) {
	counts := map[Status]float64{StatusAlive: 0, StatusSuspect: 0, StatusFailed: 0, StatusLeft: 0}
	for _, mi := range members {
		counts[mi.status]++
	}
	for st, n := range counts {
		m.members.WithLabelValues(string(st)).Set(n)
	}
}
