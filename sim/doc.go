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
package sim
