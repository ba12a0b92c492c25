// Package federation joins the sites of a mesh over go-libp2p. Each site is
// one memberlist pool (package mesh). Every agent runs a libp2p host whose
// peer ID is the node's ed25519 identity; it answers where its site's
// gateways are, so any agent can be another site's bootstrap peer. A few
// agents, the gateways, chosen by rendezvous hashing over the site's live
// members and replaced when they fail, attach GossipSub to their host and
// carry:
//
//   - the site's summary (nodes per tier, CPU, memory, GPUs and fabrics,
//     models and datasets held, a few holders of each blob and where to
//     reach them, gateways' addresses), which every other site keeps as the
//     site-scoped catalog entry "federation/sites/NAME";
//   - the global catalog records written in the site (policies,
//     placements, jobs, artifacts), which the other sites' gateways fold
//     into their pools by version.
//
// The first gateway publishes, and is the only one of its site that
// subscribes: the others stay connected to the other sites' gateways,
// subscribed to nothing, and the next takes over when it fails, syncing at
// once what it missed (a second subscriber per site made the WAN bytes 2.5
// times as many). A gateway that connects
// to another site's gateway, and every SyncInterval one connected gateway,
// exchange what differs in their global catalogs over a libp2p stream
// (bucket digests, then versions, then records: see sync.go): a site cut off
// catches up by version when the link heals, and a record whose GossipSub
// copy was lost is repaired. WAN traffic grows with sites, not nodes: an
// agent that is not a gateway only answers lookups and syncs.
//
// NAT: hosts enable circuit relay v2 (as clients, and as relays when
// public), hole punching (DCUtR) and AutoNAT, so a gateway behind NAT needs
// no inbound port as long as it can reach one public gateway. AutoNAT
// decides only between public addresses; Config.Reachability tells an
// agent in private address space which side of a NAT it is on. A private
// one holds a relay slot on each of its Peers and advertises a circuit
// address through each, which libp2p itself advertises only for relays at
// public addresses; so an agent of another site behind its own NAT reaches
// it through that peer. With a PSK the relay has no data or time limit.
//
// Blobs: an agent pulls a blob no agent of its site holds from the holders
// other sites name (RemoteHolders), over QUIC where their data address
// answers, else over a libp2p stream that carries the same data-plane
// requests (protoData; see dataplane.Stream).
//
// Placement: agents see other sites only as summaries, so a policy is
// placed within the site it was applied in, unless no node there can take
// it: HandOff then picks a site whose summary shows room, and that site
// places it. A latency-bound service goes only to a site within its bound
// of every client site, by the sites' WAN coordinates (below); a site's
// placement counts another site's clients as that far from the middle of
// its own (placement.RemoteClient).
//
// Distance: Vivaldi coordinates of two pools are not comparable, so the
// publishing gateways keep a second, WAN coordinate among themselves from
// pings to other sites' gateways (probeWAN), as Consul's WAN pool does.
// The publisher's is the site's, in its summary and in the site's catalog
// with the medians of its pings to each site (wanKey); Sites gives each
// other site's RTT from them, measured where the publisher pinged it
// lately, else estimated.
package federation
