// Package sim generates synthetic strata estates for tests, benchmarks and
// strategy comparisons: seeded topologies of edge sites, on-prem GPU racks
// and cloud regions, with network coordinates, resources, load and data
// locality, returned as a placement.Snapshot.
//
// # Latency model
//
// Ground truth puts every node on a plane, in milliseconds of round trip:
// regions are spread over a 150 × 100 ms world, sites lie within 5 ms of
// their region's centre, nodes within 0.1 ms of their site. Each node also
// has an access-link height (edge 0.3–1 ms, data centre 0.05–0.2 ms). The
// true RTT between two nodes is
//
//	(|pa - pb| + ha + hb) × (1 + ε_ab),  |ε_ab| ≤ Options.Noise
//
// where ε is a symmetric per-pair perturbation for everything a plane does
// not capture (routing detours, congestion). This gives intra-site RTTs of
// about 0.5–2 ms, intra-region 2–12 ms and cross-region 15–180 ms.
//
// Coordinates are computed directly by default: the Vivaldi model of serf
// (a Euclidean vector plus a height) represents the plane part exactly, so
// a node's coordinate is its position and height in seconds, and the only
// prediction error is the noise term. That is cheap at 100k nodes and
// bit-for-bit reproducible. Options.Vivaldi instead runs real
// coordinate.Client updates against the ground truth for a seeded sample
// of pairs, which is what agents do; it costs O(nodes × rounds) and is
// meant for small topologies. The tests assert an error bound for both.
//
// Everything is drawn from Options.Seed: the same options give the same
// topology.
//
// # Serving load
//
// Topology.LoadTrace generates a day (LoadOptions.Duration) of requests
// for InferenceServices in time steps (LoadOptions.Step, default 5
// minutes), and Serve replays it once per serving strategy.
//
// Each service has a model of 2, 4, 8 or 14 GB, a replica capacity of
// 40–120 requests/s, a p99 service time of 8–15 ms and a p99 SLO of 50 ms
// (two in three) or 100 ms, and one to three client sites in one
// region. A client site's time zone follows its x coordinate: the 150 ms
// wide world spans 12 time zones centred on UTC, in quarter hours. Its
// rate in a step is
//
//	peak × (0.15 + 0.85 × (½ + ½ cos(2π (h − 16) / 24))) × (1 + 0.1 N(0,1))
//
// at local hour h (busiest at 16:00, 15% of the peak at 04:00), with
// about one spike every two days per client site that multiplies the rate
// by 2–3 for 15–45 minutes. The peak is 0.5–5 replicas' capacity.
// Failures fall uniformly after the first hour: edge site failures (a
// site fails once, its nodes stay down; its clients keep sending requests
// from where they are, as clients of a failed point of presence re-home)
// and node failures. A node failure names a (service, client site) pair
// and strikes the node of its oldest replica, so every strategy loses a
// replica of the same pair at the same moment wherever it placed it.
//
// Replicas serve one client site each and need one GPU, a core and
// 4 GiB (ServeOptions.Replica). The load of a client site is spread
// evenly over its ready replicas; at utilisation ρ a request takes the
// true round trip to its replica plus ServiceTime/(1−ρ) (the growth of
// M/M/1's time in system), and meets the SLO when that is within the
// p99. ρ ≥ 1, or no ready replica, misses every request. SLO attainment
// is the share of requests (rate × time) that meet it.
//
// Placement is strata's engine, asked for the replicas to add with the
// client site as its client and an RTT bound of P99 − ServiceTime/(1−t),
// the round trip at which a replica at the target utilisation t (0.6)
// still meets the SLO; on burst tiers the bound is at most
// BurstMaxExtraLatency (30 ms). The engine's data-gravity term is not
// used: what sites hold changes during the replay. The strategies:
//
//   - fixed: ⌈peak / (t × capacity)⌉ replicas per client site (the expected
//     peak, without noise or spikes), placed once over the edge, on-prem
//     and cloud tiers and placed again when they fail.
//   - autoscale: each step wants ⌈rate of the last step / (t × capacity)⌉
//     replicas, between 1 and 3 × the fixed count, on the edge tier; it
//     adds at once and removes (loading, then burst, then farthest ones
//     first) when fewer have been wanted for ScaleDownAfter (15 minutes).
//   - autoscale+burst: what the edge cannot hold goes to on-prem, then
//     cloud; a burst replica comes back to the edge (a new edge replica
//     starts, the burst one stops when it is ready) once the edge has had
//     room for ScaleDownAfter.
//   - autoscale+burst+prestage: each client site keeps an N−1 plan: where
//     its replicas would go if the site holding most of them were cut (its
//     standbys, which also take a single node's replica). The model is
//     pulled to each standby ahead of time within PrestageBudget (32 GB) a
//     node. The plan is redone when a standby dies or serves, when there
//     are more replicas to cover, and hourly, keeping standbys that still
//     fit. A failed replica restarts on a standby with room first.
//
// Every strategy starts with the first step's replicas running. A new
// replica is ready after its model is on the node and loaded: nothing to
// fetch if the node holds it (it served or was staged with it), a LAN copy
// at 1.25 GB/s if another alive node of its site holds it, else a WAN pull
// of bytes / SiteLink (125 MB/s) from outside the site, counted as bytes
// moved (or pre-staged); loading takes 2 s per GB. A replacement for a
// failed replica also waits Detect (10 s) for the controller to notice.
//
// A failure disrupts when some client site it took a replica from is
// served within its SLO less than before it (below the smaller of its
// share then and 95%); its time to recover is until every such client site
// is back at that level (to the end of the replay if never). Its time to
// restore is until every replica it took down has a ready replacement.
package sim
