package mesh

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	refused prometheus.Counter
	// invalid counts packets and streams the guard transport dropped
	// before memberlist decoded them, by path and reason.
	invalid *prometheus.CounterVec
	// peerWarnings counts memberlist warnings about a source address and
	// the guard's drops, logged or not; logSuppressed those not logged.
	peerWarnings  prometheus.Counter
	logSuppressed prometheus.Counter
	// conflicts counts name conflicts: another node claiming our name or
	// a known member's name from a different address.
	conflicts prometheus.Counter
	malformed *prometheus.CounterVec
	// recordsRefused counts node documents and catalog entries refused
	// by validation, verification or authorization (see Trust).
	recordsRefused *prometheus.CounterVec
	dropped        prometheus.Counter
	stateUpdates   prometheus.Counter
	// stateDuplicates counts gossiped documents dropped unread (heldAlready).
	stateDuplicates prometheus.Counter
	members         *prometheus.GaugeVec
	// reconnects counts addresses tried by the reconnect loop.
	reconnects prometheus.Counter
	// tombstonesCollected counts catalog tombstones forgotten after their TTL.
	tombstonesCollected prometheus.Counter
	// catalogSyncs counts push/pulls run because a peer's catalog digest
	// differed from ours.
	catalogSyncs prometheus.Counter
	// catalogSyncSeconds is how long each of those that succeeded took.
	catalogSyncSeconds prometheus.Histogram
	// bucketRepairs counts peers' bucket digests answered with the
	// entries of the buckets that differed (see buckets.go).
	bucketRepairs prometheus.Counter
	// broadcastsPruned counts broadcasts dropped from a queue longer
	// than maxQueuedBroadcasts.
	broadcastsPruned prometheus.Counter
	// spilled counts catalog entries whose value is kept in the store
	// alone (see spill.go).
	spilled prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_gossip_refused_total",
			Help: "Gossip packets and streams refused because they could not be decrypted with the gossip key (wrong, missing or unexpected key).",
		}),
		invalid: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_gossip_invalid_total",
			Help: "Gossip packets and streams dropped before decoding, by path (packet, stream) and reason (empty, label, version, short, oversize, padding, truncated; timeout: a peer too slow to send a whole first frame before the deadline, and closed: a peer that closed a stream before sending a byte, as one does when its own deadline passed, both logged at debug level only).",
		}, []string{"path", "reason"}),
		peerWarnings: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_gossip_peer_warnings_total",
			Help: "Warnings about a gossip source address (memberlist's, and invalid gossip dropped), whether logged or suppressed by the per-source rate limit.",
		}),
		logSuppressed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_gossip_log_suppressed_total",
			Help: "Gossip warnings and refusals not logged because of the rate limits (one line per second per source address; one refusal line per 10s).",
		}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_gossip_name_conflicts_total",
			Help: "Name conflicts seen by memberlist: a node claiming the name of another from a different address.",
		}),
		malformed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_gossip_malformed_total",
			Help: "Gossip messages dropped because they could not be decoded, by kind.",
		}, []string{"kind"}),
		recordsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_gossip_records_refused_total",
			Help: "Node documents (kind state) and catalog entries (kind entry) refused and not relayed, by reason: unsigned, bad_certificate, certificate_mismatch, bad_signature, unknown_writer, invalid, future_version, forbidden.",
		}, []string{"kind", "reason"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_gossip_work_dropped_total",
			Help: "State fetches or answers dropped because the send queue was full.",
		}),
		stateUpdates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_mesh_state_updates_total",
			Help: "Peer node documents merged because they were newer than the one held.",
		}),
		stateDuplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_mesh_state_duplicates_total",
			Help: "Gossiped node documents dropped without decoding them, because this agent held that version or a newer one already.",
		}),
		members: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "strata_mesh_members",
			Help: "Peers by membership status, as this agent sees them.",
		}, []string{"status"}),
		reconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_gossip_reconnect_attempts_total",
			Help: "Addresses the reconnect loop tried: seeds that are not alive members and members that failed within the reconnect timeout.",
		}),
		catalogSyncSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "strata_catalog_sync_seconds",
			Help:    "How long each catalog sync this node started and completed took (a whole-state exchange with one peer). The next waits at least 20 times as long, so syncs take at most a twentieth of the node's time.",
			Buckets: []float64{.005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		catalogSyncs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_catalog_syncs_total",
			Help: "State exchanges with a peer run because its catalog digest (carried on probe acks) kept differing from this node's: a broadcast lost on the way, repaired before the next periodic push/pull.",
		}),
		bucketRepairs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_catalog_bucket_repairs_total",
			Help: "Peers' per-bucket catalog digests this node answered with its entries of the buckets that differed: a lost broadcast repaired at the cost of its bucket, a 256th of the catalog, before a whole-state sync.",
		}),
		spilled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_catalog_entries_spilled_total",
			Help: "Settled catalog entries whose value and signature this agent now keeps in its store alone, read back when asked for (the tables of the mesh's Spill setting).",
		}),
		broadcastsPruned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_gossip_broadcasts_pruned_total",
			Help: "Gossip broadcasts dropped, most sent first, from a queue of more than 1024: the bucket repair carries what they would have.",
		}),
		tombstonesCollected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_catalog_tombstones_collected_total",
			Help: "Deleted catalog entries whose tombstone was forgotten after the tombstone TTL.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.tombstonesCollected, m.reconnects, m.catalogSyncs, m.catalogSyncSeconds, m.bucketRepairs, m.broadcastsPruned, m.spilled)
		reg.MustRegister(m.invalid, m.peerWarnings, m.logSuppressed, m.conflicts)
		reg.MustRegister(m.refused, m.malformed, m.recordsRefused, m.dropped, m.stateUpdates, m.stateDuplicates, m.members)
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
