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
	}
	if reg != nil {
		reg.MustRegister(m.published, m.received, m.merged, m.malformed, m.syncs, m.summaries, m.errors, m.dataStreams)
	}
	return m
}
