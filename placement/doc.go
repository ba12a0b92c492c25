// Package placement is strata's placement engine: given an immutable
// Snapshot of the mesh and a Request derived from a policy, Place returns a
// Decision that names the chosen nodes, each one's score breakdown, and for
// every other node the first reason it was rejected.
//
// The engine is a pure function: it does no I/O, starts no goroutines and
// draws every tie-break from the request's Seed, so the same snapshot and
// request always give the same decision.
//
// # Pipeline
//
// A decision runs the Nomad/Kubernetes scheduler shape:
//
//  1. index pre-filter: the snapshot is indexed once, by tier → region →
//     site → (GPU model signature, RDMA fabric), and carries a bounding
//     ball of network coordinates per region and per site. A whole region
//     or site whose closest possible node is predicted farther than the
//     latency SLO is rejected without looking at its nodes, so the cost
//     of a decision does not grow with nodes that cannot qualify;
//  2. filters, cheapest first; the first one that fails is the node's
//     Reason (see the Reason constants for the order);
//  3. scorers, each mapping a raw measure (predicted RTT, headroom,
//     seconds to move data, CEL affinities) onto [0, 1] with a fixed
//     scale — so a node's score never depends on which other nodes were
//     feasible and explanations stay stable — combined by weight;
//  4. select: the highest total wins; ties break by a hash of the request
//     seed and the node ID. The best C candidates are kept in a bounded
//     heap, so selecting C replicas among F feasible nodes costs
//     O(F · log C), not O(C × F); with spread, the best node of every site
//     (or region) is kept instead. Options.MaxCandidates (off by default)
//     scores only that many feasible nodes, drawn by the seed, after
//     Nomad's LimitIterator; BenchmarkMaxCandidates measures what it costs
//     in placement quality.
//
// # Node classes
//
// Build partitions the nodes into classes, after Nomad's computed node
// class: nodes whose every CEL-readable attribute is equal, identity (name,
// ID) and load (free CPU, memory and GPUs, RTT) aside. A decision answers
// each constraint and affinity once per class, not once per node, and
// each expression is parsed to find the fields it reads, so its answers
// are shared by every class that agrees on those fields: `node.tier ==
// "edge"` runs once per tier. An expression that reads identity or load,
// or that the analysis cannot follow, runs on every node, as does a
// Constraint or Scorer that is neither a *policy.Expr nor a FieldReader.
// Gang passes answer the GPU checks (model, memory, health) per class of
// GPUs the same way. Classes change no decision: the tests compare every
// decision and every node's reason with Options.Exhaustive, which
// evaluates every expression on every node.
//
// Decision.Metrics says what a decision cost, after Nomad's AllocMetric:
// nodes evaluated, nodes filtered per reason, feasible and scored nodes,
// classes, class evaluations and the time taken.
//
// Inference requests walk the request's tiers in preference order and fall
// back to the next tier only for the replicas the preferred tier cannot
// hold, recording why ("edge: 0 of 4 nodes meet p99 20ms from site
// edge-b"). With PerClientSite every client site gets its own replicas,
// each the best node for that site alone. Training gangs are placed on one
// RDMA fabric, all or nothing, reserving every member on a cloned
// snapshot; among fabrics that fit, the engine prefers the one closest to
// the job's data (bytes to move ÷ link bandwidth, nothing for data already
// on the fabric) and the fullest (bin-packing leaves whole fabrics free for
// later gangs).
//
// # Explanations
//
// Decision.String renders the plan; Decision.Explain answers "why not node
// X"; Decision.Rejected counts every other node by its first Reason. To
// stay fast, the engine records reasons only for the nodes it looked at
// and counts the rest in bulk; Rejection and Explain recompute a single
// node's reason on demand, and Rejections lists them all. The tests check
// every count and every reason against Options.Exhaustive, a reference
// engine with no index.
//
// # Latency
//
// The latency SLO (Request.Latency.P99) is compared against the round-trip
// time predicted by Vivaldi network coordinates (github.com/hashicorp/serf/coordinate)
// between each client site and the node. A client site's coordinate is the
// component-wise median of its nodes' coordinates (ClientCoordinate) unless
// the snapshot was given one. The engine does not model serving time or
// queueing: a policy that needs headroom for them sets a tighter p99.
// Vivaldi predicts a typical RTT, not a tail: the check is "the network
// alone does not already break the SLO".
//
// # Use
//
//	var b placement.Builder
//	b.Add(nodes...)
//	snap, err := b.Build()
//	...
//	d, err := placement.Place(snap, &placement.Request{
//		Kind:      placement.Inference,
//		Key:       "fraud-scorer",
//		Replicas:  2,
//		Resources: placement.Resources{CPU: 1000, Memory: 2 << 30},
//		Latency:   placement.Latency{P99: 20 * time.Millisecond, Clients: []string{"shop-17"}},
//		Tiers:     []string{"edge", "onprem", "cloud"},
//	})
//	fmt.Print(d)                 // the plan, with fallbacks and counts
//	fmt.Print(d.Explain("n-42")) // why not node n-42
//
// To plan several requests in a row, place the next one on d.Apply(), a
// clone of the snapshot with d's placements reserved.
//
// Node-local admission (Ledger) and policy ownership (Owner, rendezvous
// hashing) live here too: both are pure and used by the agent.
package placement
