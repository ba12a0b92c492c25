package federation

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	published prometheus.Counter
	received  prometheus.Counter
	merged    prometheus.Counter
	malformed prometheus.Counter
	syncs     prometheus.Counter
	summaries *prometheus.CounterVec
	errors    *prometheus.CounterVec
	// dataStreams counts data-plane streams opened to other sites' nodes,
	// by path: "direct" (a libp2p connection of its own, punched through
	// a NAT included) or "relayed" (through another agent's circuit relay).
	dataStreams *prometheus.CounterVec
	// direct counts what gateway.direct did for gateways reached only
	// through a relay: "dialed" (a direct connection) or "repunched" (a
	// new relayed connection, for the other to punch a hole).
	direct *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		published: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_federation_records_published_total", Help: "Global catalog records this agent published to the other sites as a gateway."}),
		received:  prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_federation_records_received_total", Help: "Global catalog records received from other sites (GossipSub and syncs)."}),
		merged:    prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_federation_records_merged_total", Help: "Received records that were newer than the site held."}),
		malformed: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_federation_malformed_total", Help: "Federation messages dropped because they did not decode."}),
		syncs:     prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_federation_syncs_total", Help: "Global catalog exchanges with another site's gateway."}),
		summaries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_federation_summaries_total", Help: "Site summaries sent and received."}, []string{"dir"}),
		errors:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_federation_errors_total", Help: "Federation operations that failed, by operation."}, []string{"op"}),
		dataStreams: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_federation_data_streams_total",
			Help: "Data-plane streams opened over libp2p to other sites' nodes, by path: direct (hole punching included) or relayed (through another agent's circuit relay)."}, []string{"path"}),
		direct: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_federation_relayed_upgrades_total",
			Help: "Other sites' gateways this gateway reached only through a relay, a while after the relayed connection opened: dialed (a direct connection dialed) or repunched (both behind NATs: the relayed connection opened again, for the other to punch a hole)."}, []string{"how"}),
	}
	if reg != nil {
		reg.MustRegister(m.published, m.received, m.merged, m.malformed, m.syncs, m.summaries, m.errors, m.dataStreams, m.direct)
	}
	return m
}
