// Package mesh owns what agents know about each other: membership of a site
// (a hashicorp/memberlist pool over real UDP/TCP, encrypted with the gossip
// key), the replicated node state (one versioned document per node, written
// only by that node), and Vivaldi network coordinates (serf's coordinate
// package fed by memberlist's ping acks) that estimate the RTT between any
// two nodes without probing them.
//
// A Mesh is made by New, joins peers with Join (retried with backoff), and is
// changed only through Update, which bumps the local document's version,
// persists it and gossips it:
//
//	m, err := mesh.New(mesh.Config{Name: "edge-1", Identity: id, BindAddr: "0.0.0.0:7946", GossipKey: key, Local: st})
//	if err != nil { ... }
//	defer m.Close()
//	go m.Join(ctx, []string{"10.0.0.2:7946"})
//	m.Update(func(s *mesh.NodeState) { s.Labels["zone"] = "b" })
//	for _, n := range m.Nodes() { ... }
//
// How state travels: a change is broadcast as gossip (each node that learns a
// newer version passes it on, so it spreads in about log₃N gossip rounds)
// when the document fits a packet; NodeMeta carries only {id, version}, so a
// peer that sees a newer version than it holds asks the owner for the whole
// document over TCP; and memberlist's periodic push/pull exchanges every
// document as anti-entropy. Merging keeps the higher version, so it is
// idempotent and commutative. A catalog write may also name the members that
// act on it next (PutOptions.Notify): they get it, and the entries it depends
// on, in one packet each at once, a round trip instead of a few gossip rounds.
package mesh
